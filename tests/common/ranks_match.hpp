#pragma once
// The data-parallel check every workload makes (WORKLOADS.md): `world` ranks as threads over an
// in-process communicator end a few steps with the weights one process reaches with the whole
// global batch.

#include <cmath>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/nn/module.hpp"
#include "benchhost/workload.hpp"
#include "common/thread_comm.hpp"

namespace benchhost::test_support {

using NamedWeights = std::map<std::string, std::vector<float>>;

/// Runs `rank_fn(rank, comm)` on `world` threads sharing one ThreadComm group and returns what each
/// rank returned; an exception on a rank is a test failure naming it (that rank's entry stays empty).
template <class F>
std::vector<NamedWeights> on_ranks(int world, F rank_fn) {
  Group g(world);
  std::vector<NamedWeights> got(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(g, r);
      try {
        got[static_cast<std::size_t>(r)] = rank_fn(r, static_cast<Communicator&>(comm));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : threads) t.join();
  return got;
}

/// The values of `params` by name (after some steps, to compare runs).
inline NamedWeights named_weights(const std::vector<nn::Parameter*>& params) {
  NamedWeights out;
  for (const nn::Parameter* p : params) out[p->name] = p->value.to_float_vector();
  return out;
}

/// A workload W on each of `world` ranks: `ctx` with the rank, world size and communicator set,
/// then setup, `body(w)` (what the rank returns) and teardown.
template <class W, class F>
std::vector<NamedWeights> on_rank_workloads(int world, const RunContext& ctx, F body) {
  return on_ranks(world, [&](int r, Communicator& comm) {
    RunContext mine = ctx;
    mine.rank = r;
    mine.world_size = world;
    mine.communicator = &comm;
    W w;
    w.setup(mine);
    NamedWeights out = body(w);
    w.teardown();
    return out;
  });
}

/// Every tensor of `want` is on every rank with the same size, within relative L2 distance `tol`.
inline void expect_ranks_match(const NamedWeights& want, const std::vector<NamedWeights>& got, double tol) {
  ASSERT_FALSE(want.empty());
  for (std::size_t r = 0; r < got.size(); ++r)
    for (const auto& [name, v] : want) {
      ASSERT_TRUE(got[r].count(name)) << name << " on rank " << r;
      const auto& mine = got[r].at(name);
      ASSERT_EQ(mine.size(), v.size()) << name;
      double diff = 0, norm = 0;
      for (std::size_t i = 0; i < v.size(); ++i) diff += (mine[i] - v[i]) * (mine[i] - v[i]), norm += v[i] * v[i];
      EXPECT_LE(std::sqrt(diff / std::max(norm, 1e-30)), tol) << name << " on rank " << r;
    }
}

}  // namespace benchhost::test_support
