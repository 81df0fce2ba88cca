#pragma once
// An in-process communicator for tests: ranks are threads of one process; collectives
// meet at a std::barrier and copy through each other's tensors.
#include <barrier>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "benchhost/comm/communicator.hpp"

namespace benchhost::test_support {

struct Group {
  explicit Group(int n) : size(n), sync(n), slots(n), counts(n) {}
  int size;
  std::barrier<> sync;
  std::vector<const Tensor*> slots;
  std::vector<const std::vector<std::int64_t>*> counts;  // alltoall: each rank's send counts
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(Group& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size; }
  std::string backend_name() const override { return "test-threads"; }
  Device device() const override { return Device::cpu(); }
  Work allgather(const Tensor& in, Tensor& out) override {
    g_.slots[rank_] = &in;
    g_.sync.arrive_and_wait();
    const std::int64_t n = out.numel();
    auto* dst = static_cast<char*>(out.raw_data());
    for (int r = 0; r < g_.size; ++r) {
      const std::int64_t count = chunk_count(n, g_.size, r);
      EXPECT_EQ(g_.slots[r]->numel(), count);
      std::memcpy(dst + chunk_offset(n, g_.size, r) * out.element_size(), g_.slots[r]->raw_data(),
                  static_cast<std::size_t>(count) * out.element_size());
    }
    g_.sync.arrive_and_wait();
    return Work();
  }
  /// f32/f64 sum/avg and i64 sum, summed in rank order on every rank (identical results).
  Work allreduce(Tensor& t, ReduceOp op) override {
    EXPECT_TRUE(t.dtype() == DType::f32 || t.dtype() == DType::f64 || t.dtype() == DType::i64);
    auto get = [](const Tensor& x, std::int64_t i) {
      return x.dtype() == DType::f32 ? x.data<float>()[i]
             : x.dtype() == DType::f64 ? x.data<double>()[i]
                                       : static_cast<double>(x.data<std::int64_t>()[i]);
    };
    g_.slots[rank_] = &t;
    g_.sync.arrive_and_wait();
    const std::int64_t n = t.numel();
    std::vector<double> acc(static_cast<std::size_t>(n), 0.0);
    for (int r = 0; r < g_.size; ++r)
      for (std::int64_t i = 0; i < n; ++i) acc[i] += get(*g_.slots[r], i);
    g_.sync.arrive_and_wait();
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = op == ReduceOp::avg ? acc[i] / g_.size : acc[i];
      if (t.dtype() == DType::f32) t.data<float>()[i] = static_cast<float>(v);
      else if (t.dtype() == DType::f64) t.data<double>()[i] = v;
      else t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v);
    }
    g_.sync.arrive_and_wait();
    return Work();
  }
  /// Rank q's block for this rank sits after q's blocks for the lower ranks.
  Work alltoall(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& send_counts,
                const std::vector<std::int64_t>& recv_counts) override {
    g_.slots[rank_] = &in;
    g_.counts[rank_] = &send_counts;
    g_.sync.arrive_and_wait();
    auto* dst = static_cast<char*>(out.raw_data());
    const std::size_t es = out.element_size();
    std::int64_t at = 0;
    for (int q = 0; q < g_.size; ++q) {
      const auto& theirs = *g_.counts[q];
      std::int64_t from = 0;
      for (int r = 0; r < rank_; ++r) from += theirs[r];
      EXPECT_EQ(theirs[rank_], recv_counts[q]) << "rank " << q << " sends " << theirs[rank_]
                                               << " to rank " << rank_ << " which expects " << recv_counts[q];
      std::memcpy(dst + at * es, static_cast<const char*>(g_.slots[q]->raw_data()) + from * es,
                  static_cast<std::size_t>(recv_counts[q]) * es);
      at += recv_counts[q];
    }
    EXPECT_EQ(at, out.numel());
    g_.sync.arrive_and_wait();
    return Work();
  }
  using Communicator::alltoall;
  /// Every rank's tensor becomes a copy of the root's.
  Work broadcast(Tensor& t, int root) override {
    g_.slots[rank_] = &t;
    g_.sync.arrive_and_wait();
    const Tensor& src = *g_.slots[root];
    EXPECT_EQ(src.numel(), t.numel());
    EXPECT_EQ(src.dtype(), t.dtype());
    if (rank_ != root)
      std::memcpy(t.raw_data(), src.raw_data(), static_cast<std::size_t>(t.numel()) * t.element_size());
    g_.sync.arrive_and_wait();
    return Work();
  }
  Work reduce_scatter(const Tensor&, Tensor&, ReduceOp) override {
    BH_THROW(Unsupported, "not used by the tests");
  }
  void barrier() override { g_.sync.arrive_and_wait(); }
  [[noreturn]] void abort(int code) noexcept override { std::abort(); }
  bool failed() const override { return false; }

 private:
  Group& g_;
  int rank_;
};

}  // namespace benchhost::test_support
