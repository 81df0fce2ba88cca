// CPU embedding bags: gather + pool forward, sorted scatter backward. Registered as ops
// "embedding_bag_forward" / "embedding_bag_backward" (cpu.tbb, and the cpu.ref plain loops the
// parity test compares against), and "zero_rows". The public functions of nn/embedding_bag.hpp
// and the EmbeddingBag layer are in nn/embedding_bag.cpp.
//
// Layout: weight rows are contiguous f32 [R, D]; out / dout are f32 [B, D]. Forward runs one
// oneTBB task per block of bags; each bag's rows are summed in index order in f32 (the same order
// PyTorch's CPU EmbeddingBag uses), then scaled for mean pooling.
//
// Backward groups the N looked-up positions by row: a stable counting sort (O(N + R)) when the
// table is not much larger than N, else a parallel sort of packed (row, position) keys. Each
// unique row is then owned by exactly one task, which adds the gradients of its bags in position
// order: no atomics, and the sums are bitwise independent of the thread count.
#include "benchhost/nn/embedding_bag.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/random.hpp"
#include "nn/cpu/cpu_common.hpp"
#include "nn/embedding_bag_common.hpp"

namespace benchhost::nn {

using namespace embedding_bag_detail;

namespace {

void check_f32_matrix(const Tensor& t, const char* what) {
  BH_CHECK_AS(InvalidArgument,
              t.defined() && t.dtype() == DType::f32 && t.dim() == 2 && t.is_contiguous() &&
                  t.device().is_cpu(),
              "embedding bag (cpu): {} must be a contiguous CPU f32 matrix, got {}", what,
              t.defined() ? t.describe() : std::string("undefined"));
}

// ---- forward: oneTBB over bags, and the plain reference ----

void forward_tbb(Tensor& out, const Tensor& weight, const BagView& v, BagPooling pooling) {
  const std::int64_t rows = weight.size(0), dim = weight.size(1);
  const float* w = weight.data<float>();
  float* o = out.data<float>();
  std::atomic<std::int64_t> bad_pos{-1};
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, v.bags, 16),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t b = r.begin(); b != r.end(); ++b) {
      float* dst = o + b * dim;
      std::fill(dst, dst + dim, 0.0f);
      const std::int64_t lo = v.begin(b), hi = v.end(b);
      for (std::int64_t p = lo; p < hi; ++p) {
        const std::int64_t row = v.row(p);
        if (row < 0 || row >= rows) [[unlikely]] {
          std::int64_t expected = -1;
          bad_pos.compare_exchange_strong(expected, p);
          continue;
        }
        const float* src = w + row * dim;
        for (std::int64_t d = 0; d < dim; ++d) dst[d] += src[d];
      }
      if (pooling == BagPooling::mean && hi > lo) {
        const float s = 1.0f / static_cast<float>(hi - lo);
        for (std::int64_t d = 0; d < dim; ++d) dst[d] *= s;
      }
    }
  });
  if (const std::int64_t p = bad_pos.load(); p >= 0)
    BH_THROW(InvalidArgument, "embedding bag: row id {} at position {} is outside the table [0, {})",
             v.row(p), p, rows);
}

void forward_ref(Tensor& out, const Tensor& weight, const BagView& v, BagPooling pooling) {
  const std::int64_t rows = weight.size(0), dim = weight.size(1);
  for (std::int64_t b = 0; b < v.bags; ++b)
    for (std::int64_t d = 0; d < dim; ++d) {
      double acc = 0;
      for (std::int64_t p = v.begin(b); p < v.end(b); ++p) {
        const std::int64_t row = v.row(p);
        BH_CHECK_AS(InvalidArgument, row >= 0 && row < rows,
                    "embedding bag: row id {} at position {} is outside the table [0, {})", row, p,
                    rows);
        acc += weight.data<float>()[row * dim + d];
      }
      if (pooling == BagPooling::mean && v.end(b) > v.begin(b)) acc /= double(v.end(b) - v.begin(b));
      out.data<float>()[b * dim + d] = static_cast<float>(acc);
    }
}

// ---- backward: outputs grad_weight (+=), rows i64 [N] (U ascending ids, then -1), count [1] ----

void check_rows_in_table(const BagView& v, std::int64_t rows) {
  for (std::int64_t p = 0; p < v.total; ++p) {
    const std::int64_t row = v.row(p);
    BH_CHECK_AS(InvalidArgument, row >= 0 && row < rows,
                "embedding bag backward: row id {} at position {} is outside the table [0, {})",
                row, p, rows);
  }
}

void write_rows(const std::vector<std::int64_t>& unique_rows, const BagView& v, Tensor& rows_out,
                Tensor& count_out) {
  std::int64_t* r = rows_out.data<std::int64_t>();
  std::fill(r, r + v.total, std::int64_t{-1});
  std::copy(unique_rows.begin(), unique_rows.end(), r);
  count_out.data<std::int64_t>()[0] = static_cast<std::int64_t>(unique_rows.size());
}

void backward_tbb(const Tensor& dout, const BagView& v, BagPooling pooling, Tensor& grad_weight,
                  Tensor& rows_out, Tensor& count_out) {
  const std::int64_t rows = grad_weight.size(0), dim = grad_weight.size(1);
  const std::int64_t n = v.total;
  check_rows_in_table(v, rows);

  std::vector<std::int32_t> bag_of;  // bag of each position (ragged layout only)
  if (v.offsets) {
    bag_of.resize(static_cast<std::size_t>(n));
    for (std::int64_t b = 0; b < v.bags; ++b)
      for (std::int64_t p = v.begin(b); p < v.end(b); ++p) bag_of[p] = static_cast<std::int32_t>(b);
  }
  auto bag_at = [&](std::int64_t pos) -> std::int64_t {
    return v.offsets ? bag_of[pos] : pos / v.hotness;
  };

  // Group positions by row (ascending row, ascending position within a row).
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::vector<std::int64_t> seg_start;  // U + 1 boundaries into order
  std::vector<std::int64_t> unique_rows;
  if (rows <= 4 * n + 4096) {
    std::vector<std::int64_t> count(static_cast<std::size_t>(rows) + 1, 0);
    for (std::int64_t p = 0; p < n; ++p) ++count[v.row(p) + 1];
    for (std::int64_t r = 0; r < rows; ++r) {
      if (count[r + 1] > 0) unique_rows.push_back(r);
      count[r + 1] += count[r];
    }
    seg_start.reserve(unique_rows.size() + 1);
    for (std::int64_t r : unique_rows) seg_start.push_back(count[r]);
    seg_start.push_back(n);
    for (std::int64_t p = 0; p < n; ++p) order[count[v.row(p)]++] = p;
  } else {
    std::vector<std::pair<std::int64_t, std::int64_t>> keys(static_cast<std::size_t>(n));
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 4096),
                      [&](const tbb::blocked_range<std::int64_t>& r) {
      for (std::int64_t p = r.begin(); p != r.end(); ++p) keys[p] = {v.row(p), p};
    });
    tbb::parallel_sort(keys.begin(), keys.end());
    for (std::int64_t i = 0; i < n; ++i) {
      order[i] = keys[i].second;
      if (i == 0 || keys[i].first != keys[i - 1].first) {
        unique_rows.push_back(keys[i].first);
        seg_start.push_back(i);
      }
    }
    seg_start.push_back(n);
  }

  const float* g = dout.data<float>();
  float* gw = grad_weight.data<float>();
  const auto num_unique = static_cast<std::int64_t>(unique_rows.size());
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, num_unique, 8),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t u = r.begin(); u != r.end(); ++u) {
      float* dst = gw + unique_rows[u] * dim;
      for (std::int64_t i = seg_start[u]; i < seg_start[u + 1]; ++i) {
        const std::int64_t b = bag_at(order[i]);
        const float* src = g + b * dim;
        if (pooling == BagPooling::mean) {
          const float s = 1.0f / static_cast<float>(v.end(b) - v.begin(b));
          for (std::int64_t d = 0; d < dim; ++d) dst[d] += s * src[d];
        } else {
          for (std::int64_t d = 0; d < dim; ++d) dst[d] += src[d];
        }
      }
    }
  });
  write_rows(unique_rows, v, rows_out, count_out);
}

void backward_ref(const Tensor& dout, const BagView& v, BagPooling pooling, Tensor& grad_weight,
                  Tensor& rows_out, Tensor& count_out) {
  const std::int64_t rows = grad_weight.size(0), dim = grad_weight.size(1);
  check_rows_in_table(v, rows);
  std::vector<char> touched(static_cast<std::size_t>(rows), 0);
  for (std::int64_t b = 0; b < v.bags; ++b) {
    const std::int64_t len = v.end(b) - v.begin(b);
    for (std::int64_t p = v.begin(b); p < v.end(b); ++p) {
      const std::int64_t row = v.row(p);
      touched[row] = 1;
      for (std::int64_t d = 0; d < dim; ++d) {
        float gv = dout.data<float>()[b * dim + d];
        if (pooling == BagPooling::mean) gv *= 1.0f / static_cast<float>(len);
        grad_weight.data<float>()[row * dim + d] += gv;
      }
    }
  }
  std::vector<std::int64_t> unique_rows;
  for (std::int64_t r = 0; r < rows; ++r)
    if (touched[r]) unique_rows.push_back(r);
  write_rows(unique_rows, v, rows_out, count_out);
}

BagPooling pooling_attr(const OpCall& c) {
  return c.attrs.get_int("pooling", 0) == 0 ? BagPooling::sum : BagPooling::mean;
}

void run_forward(OpCall& c, bool reference) {
  const BagView v = make_view(c.inputs.at(1), c.inputs.at(2));
  const Tensor& weight = c.inputs.at(0);
  Tensor& out = c.outputs.at(0);
  check_f32_matrix(weight, "weight");
  check_f32_matrix(out, "out");
  BH_CHECK_AS(InvalidArgument, out.size(0) == v.bags && out.size(1) == weight.size(1),
              "embedding bag: out must be [{}, {}], got {}", v.bags, weight.size(1), out.describe());
  (reference ? forward_ref : forward_tbb)(out, weight, v, pooling_attr(c));
}

void run_backward(OpCall& c, bool reference) {
  const BagView v = make_view(c.inputs.at(1), c.inputs.at(2));
  const Tensor& dout = c.inputs.at(0);
  Tensor& grad_weight = c.outputs.at(0);
  check_f32_matrix(dout, "dout");
  check_f32_matrix(grad_weight, "grad_weight");
  BH_CHECK_AS(InvalidArgument, dout.size(0) == v.bags && dout.size(1) == grad_weight.size(1),
              "embedding bag backward: dout must be [{}, {}], got {}", v.bags, grad_weight.size(1),
              dout.describe());
  Tensor& rows_out = c.outputs.at(1);
  Tensor& count_out = c.outputs.at(2);
  BH_CHECK_AS(InvalidArgument,
              rows_out.dtype() == DType::i64 && rows_out.numel() == v.total &&
                  count_out.dtype() == DType::i64 && count_out.numel() == 1,
              "embedding bag backward: rows must be i64 [{}] and count i64 [1], got {} and {}",
              v.total, rows_out.describe(), count_out.describe());
  (reference ? backward_ref : backward_tbb)(dout, v, pooling_attr(c), grad_weight, rows_out,
                                            count_out);
}

// Parity cases: fixed hotness (i32 ids, sum) and ragged bags (i64 ids, mean, an empty bag and a
// row repeated inside one bag).
std::vector<OpCall> make_cases(std::uint64_t seed, bool backward) {
  Rng rng(seed, 0xEB);
  auto uniform = [&](const Shape& s) {
    Tensor t = Tensor::empty(s, DType::f32);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(-1.0f, 1.0f);
    return t;
  };
  std::vector<OpCall> calls;
  const std::int64_t rows = 37, dim = 12;
  {  // fixed hotness [5, 3], i32
    std::vector<std::int32_t> ids(15);
    for (auto& x : ids) x = static_cast<std::int32_t>(rng.below(rows));
    OpCall c;
    Tensor idx = Tensor::from_vector_i32(ids, {5, 3});
    if (backward)
      c.inputs = {uniform({5, dim}), idx, Tensor()},
      c.outputs = {Tensor::zeros({rows, dim}), Tensor::empty({15}, DType::i64),
                   Tensor::empty({1}, DType::i64)};
    else
      c.inputs = {uniform({rows, dim}), idx, Tensor()}, c.outputs = {Tensor::empty({5, dim})};
    c.attrs.set("pooling", 0);
    calls.push_back(std::move(c));
  }
  {  // ragged: bags of 2, 0, 4 (with a repeat) and 1, i64
    std::vector<std::int64_t> ids = {3, 30, 7, 7, 11, 36, 0};
    Tensor idx = Tensor::from_vector_i64(ids, {7});
    Tensor off = Tensor::from_vector_i64({0, 2, 2, 6, 7}, {5});
    OpCall c;
    if (backward)
      c.inputs = {uniform({4, dim}), idx, off},
      c.outputs = {Tensor::zeros({rows, dim}), Tensor::empty({7}, DType::i64),
                   Tensor::empty({1}, DType::i64)};
    else
      c.inputs = {uniform({rows, dim}), idx, off}, c.outputs = {Tensor::empty({4, dim})};
    c.attrs.set("pooling", 1);
    calls.push_back(std::move(c));
  }
  return calls;
}

// zero_rows: rows of grad listed in `rows` (i64, unique, in range) set to zero.
void run_zero_rows(OpCall& c) {
  const Tensor& rows_t = c.inputs.at(0);
  Tensor& grad = c.outputs.at(0);
  check_f32_matrix(grad, "grad");
  BH_CHECK_AS(InvalidArgument, rows_t.dtype() == DType::i64 && rows_t.dim() == 1 &&
              rows_t.is_contiguous() && rows_t.device().is_cpu(),
              "zero_rows: rows must be a contiguous CPU i64 vector, got {}", rows_t.describe());
  const std::int64_t dim = grad.size(1), n = rows_t.numel(), num_rows = grad.size(0);
  const std::int64_t* rows = rows_t.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i)
    BH_CHECK_AS(InvalidArgument, rows[i] >= 0 && rows[i] < num_rows,
                "zero_rows: row {} is outside [0, {})", rows[i], num_rows);
  float* g = grad.data<float>();
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 64),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t i = r.begin(); i != r.end(); ++i)
      std::memset(g + rows[i] * dim, 0, static_cast<std::size_t>(dim) * sizeof(float));
  });
}

std::vector<OpCall> zero_rows_cases(std::uint64_t seed) {
  Rng rng(seed, 0x2E);
  OpCall c;
  Tensor g = Tensor::empty({9, 5});
  for (std::int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = rng.uniform(-1.0f, 1.0f);
  c.inputs = {Tensor::from_vector_i64({0, 3, 4, 8}, {4})};
  c.outputs = {g};
  return {c};
}

const bool registered = [] {
  register_op({"zero_rows",
               "inputs rows i64 [n] (unique, in range; on the CPU or the gradient's device); "
               "output grad f32 [R, D] with those rows set to zero (the others untouched)",
               zero_rows_cases, 0.0, 0.0, {}});
  register_op_impl("zero_rows", {"cpu.ref", DeviceType::cpu, 0, nullptr, run_zero_rows, true});
  auto cpu_only = [](const OpCall& c) -> std::string {
    for (const auto& t : c.inputs)
      if (t.defined() && !t.device().is_cpu()) return "needs CPU tensors";
    return cpu::require_floating_f32(c);
  };
  register_op({"embedding_bag_forward",
               "inputs weight f32 [R, D], indices i32/i64 [B, H] or [N], offsets i64 [B + 1] or "
               "none; output out f32 [B, D]; attr pooling (0 sum, 1 mean)",
               [](std::uint64_t s) { return make_cases(s, false); }, 1e-5, 1e-5, {}});
  register_op_impl("embedding_bag_forward",
                   {"cpu.tbb", DeviceType::cpu, 50, cpu_only,
                    [](OpCall& c) { run_forward(c, false); }, false});
  register_op_impl("embedding_bag_forward",
                   {"cpu.ref", DeviceType::cpu, 0, nullptr,
                    [](OpCall& c) { run_forward(c, true); }, true});
  register_op({"embedding_bag_backward",
               "inputs dout f32 [B, D], indices, offsets or none; outputs grad_weight f32 [R, D] "
               "(+=), rows i64 [N] (the U touched rows ascending, then -1), count i64 [1] (U); "
               "attr pooling",
               [](std::uint64_t s) { return make_cases(s, true); }, 1e-5, 1e-5, {}});
  register_op_impl("embedding_bag_backward",
                   {"cpu.tbb", DeviceType::cpu, 50, cpu_only,
                    [](OpCall& c) { run_backward(c, false); }, false});
  register_op_impl("embedding_bag_backward",
                   {"cpu.ref", DeviceType::cpu, 0, nullptr,
                    [](OpCall& c) { run_backward(c, true); }, true});
  return true;
}();

}  // namespace
}  // namespace benchhost::nn
