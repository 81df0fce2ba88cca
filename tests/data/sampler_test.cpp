// Sharding, deterministic shuffling and resume (Note [Sharding and tails]).
#include <algorithm>
#include <map>
#include <numeric>

#include <gtest/gtest.h>

#include "benchhost/data/sampler.hpp"
#include "benchhost/error.hpp"

using namespace benchhost;
using namespace benchhost::data;

namespace {

struct Case {
  std::int64_t n;
  int ranks;
};
const Case kCases[] = {{10, 1}, {10, 2}, {10, 3}, {7, 4}, {100, 8}, {3, 5}, {0, 2}, {1001, 7}, {64, 64}, {65, 64}};

std::map<std::int64_t, int> counts(std::int64_t n, int ranks, TailPolicy tail, std::int64_t epoch,
                                   std::vector<std::int64_t>* per_rank = nullptr) {
  std::map<std::int64_t, int> c;
  for (int r = 0; r < ranks; ++r) {
    Sampler s({n, r, ranks, true, 42, tail});
    auto idx = s.indices(epoch);
    EXPECT_EQ(static_cast<std::int64_t>(idx.size()), s.num_samples());
    if (per_rank) per_rank->push_back(s.num_samples());
    for (auto i : idx) {
      EXPECT_GE(i, 0);
      EXPECT_LT(i, n);
      c[i]++;
    }
  }
  return c;
}

}  // namespace

TEST(Sampler, UnevenCoversEveryIndexExactlyOnce) {
  for (const auto& k : kCases) {
    for (std::int64_t epoch : {0, 3}) {
      std::vector<std::int64_t> sizes;
      auto c = counts(k.n, k.ranks, TailPolicy::uneven, epoch, &sizes);
      EXPECT_EQ(static_cast<std::int64_t>(c.size()), k.n) << "n=" << k.n << " ranks=" << k.ranks;
      for (auto& [i, cnt] : c) EXPECT_EQ(cnt, 1) << "index " << i << " n=" << k.n << " ranks=" << k.ranks;
      const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
      EXPECT_LE(*hi - *lo, 1);
    }
  }
}

TEST(Sampler, DropGivesEqualShardsAndNoDuplicates) {
  for (const auto& k : kCases) {
    std::vector<std::int64_t> sizes;
    auto c = counts(k.n, k.ranks, TailPolicy::drop, 1, &sizes);
    EXPECT_EQ(static_cast<std::int64_t>(c.size()), k.n - k.n % k.ranks);
    for (auto& [i, cnt] : c) EXPECT_EQ(cnt, 1);
    for (auto s : sizes) EXPECT_EQ(s, k.n / k.ranks);
  }
}

TEST(Sampler, PadGivesEqualShardsCoveringEverything) {
  for (const auto& k : kCases) {
    std::vector<std::int64_t> sizes;
    auto c = counts(k.n, k.ranks, TailPolicy::pad, 2, &sizes);
    EXPECT_EQ(static_cast<std::int64_t>(c.size()), k.n);
    std::int64_t total = 0;
    for (auto& [i, cnt] : c) {
      EXPECT_GE(cnt, 1);
      total += cnt;
    }
    const std::int64_t per = k.n == 0 ? 0 : (k.n + k.ranks - 1) / k.ranks;
    for (auto s : sizes) EXPECT_EQ(s, per);
    EXPECT_EQ(total, per * k.ranks);
  }
}

TEST(Sampler, SameSeedSameOrderDifferentEpochDifferentOrder) {
  Sampler a({1000, 1, 4, true, 7, TailPolicy::uneven});
  Sampler b({1000, 1, 4, true, 7, TailPolicy::uneven});
  Sampler other_seed({1000, 1, 4, true, 8, TailPolicy::uneven});
  EXPECT_EQ(a.indices(0), b.indices(0));
  EXPECT_EQ(a.indices(5), b.indices(5));
  EXPECT_NE(a.indices(0), a.indices(1));
  EXPECT_NE(a.global_order(0), a.global_order(1));
  EXPECT_NE(a.indices(0), other_seed.indices(0));
  // A shuffle, not the identity, and a permutation.
  auto g = a.global_order(0);
  std::vector<std::int64_t> id(1000);
  std::iota(id.begin(), id.end(), 0);
  EXPECT_NE(g, id);
  std::sort(g.begin(), g.end());
  EXPECT_EQ(g, id);
}

TEST(Sampler, NoShuffleIsStrided) {
  Sampler s({10, 1, 3, false, 0, TailPolicy::uneven});
  EXPECT_EQ(s.indices(0), (std::vector<std::int64_t>{1, 4, 7}));
  EXPECT_EQ(s.indices(9), s.indices(0));
}

TEST(Sampler, ResumeFromPosition) {
  Sampler s({97, 2, 3, true, 11, TailPolicy::pad});
  const auto full = s.indices(4);
  for (std::int64_t p : {0, 1, 10, 32, 33}) {
    auto rest = s.indices(4, p);
    EXPECT_EQ(rest, std::vector<std::int64_t>(full.begin() + p, full.end())) << "position " << p;
  }
  EXPECT_THROW(s.indices(4, 34), InvalidArgument);
  EXPECT_THROW(s.indices(4, -1), InvalidArgument);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(Sampler({10, 3, 3}), InvalidArgument);
  EXPECT_THROW(Sampler({10, -1, 3}), InvalidArgument);
  EXPECT_THROW(Sampler({10, 0, 0}), InvalidArgument);
  EXPECT_THROW(Sampler({-1, 0, 1}), InvalidArgument);
}

namespace {

SamplerOptions grouped(std::vector<std::int32_t> groups, std::int64_t batch, int rank, int ranks, bool shuffle = true) {
  SamplerOptions o;
  o.dataset_size = static_cast<std::int64_t>(groups.size());
  o.rank = rank;
  o.world_size = ranks;
  o.shuffle = shuffle;
  o.seed = 42;
  o.group_ids = std::move(groups);
  o.group_batch_size = batch;
  return o;
}

}  // namespace

// Note [Grouped batches], on a hand-worked order: without shuffling, group 0 is 0 2 3 6 8 9 and
// group 1 is 1 4 5 7; cut in twos they give (0 2) (3 6) (8 9) and (1 4) (5 7), ordered by where
// each starts, as maskrcnn_benchmark's GroupedBatchSampler orders them.
TEST(Sampler, GroupedBatchesFollowTheReferenceOrder) {
  const std::vector<std::int32_t> g{0, 1, 0, 0, 1, 1, 0, 1, 0, 0};
  EXPECT_EQ(Sampler(grouped(g, 2, 0, 1, false)).indices(0), (std::vector<std::int64_t>{0, 2, 1, 4, 3, 6, 5, 7, 8, 9}));
  // Two ranks of one: the same global batches, each rank one element of each.
  EXPECT_EQ(Sampler(grouped(g, 1, 0, 2, false)).indices(0), (std::vector<std::int64_t>{0, 1, 3, 5, 8}));
  EXPECT_EQ(Sampler(grouped(g, 1, 1, 2, false)).indices(0), (std::vector<std::int64_t>{2, 4, 6, 7, 9}));
  // Batches of three: (0 2 3) (6 8 9) and (1 4 5); 7 is the dropped rest of group 1.
  EXPECT_EQ(Sampler(grouped(g, 3, 0, 1, false)).indices(0), (std::vector<std::int64_t>{0, 2, 3, 1, 4, 5, 6, 8, 9}));
}

TEST(Sampler, GroupedBatchesNeverMixGroupsAndGiveEveryRankTheSameCount) {
  std::vector<std::int32_t> g(1003);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<std::int32_t>((i * 7919) % 13 < 9 ? 0 : ((i % 5) == 0 ? 2 : 1));
  std::map<std::int32_t, std::int64_t> sizes;
  for (std::int32_t v : g) ++sizes[v];
  for (const int ranks : {1, 2, 3, 8})
    for (const std::int64_t b : {1, 2, 5}) {
      std::int64_t expected = 0;
      for (const auto& [k, n] : sizes) expected += n / (b * ranks) * b;
      for (const std::int64_t epoch : {0, 1, 7}) {
        std::vector<std::vector<std::int64_t>> per_rank;
        std::map<std::int64_t, int> seen;
        for (int r = 0; r < ranks; ++r) {
          const Sampler s(grouped(g, b, r, ranks));
          ASSERT_EQ(s.num_samples(), expected) << ranks << " ranks, batch " << b;
          per_rank.push_back(s.indices(epoch));
          ASSERT_EQ(static_cast<std::int64_t>(per_rank.back().size()), expected);
          for (std::int64_t i : per_rank.back()) ++seen[i];
        }
        for (const auto& [i, c] : seen) ASSERT_EQ(c, 1) << "index " << i << " twice in epoch " << epoch;
        // Batch k of every rank is one group, the same on every rank (one global batch).
        for (std::int64_t k = 0; k * b < expected; ++k) {
          const std::int32_t group = g[static_cast<std::size_t>(per_rank[0][static_cast<std::size_t>(k * b)])];
          for (int r = 0; r < ranks; ++r)
            for (std::int64_t j = 0; j < b; ++j)
              ASSERT_EQ(g[static_cast<std::size_t>(per_rank[static_cast<std::size_t>(r)][static_cast<std::size_t>(k * b + j)])], group)
                  << "batch " << k << " of rank " << r << " mixes groups";
        }
      }
    }
  // Shuffled: the order changes with the epoch, as ungrouped.
  const Sampler s(grouped(g, 4, 0, 1));
  EXPECT_NE(s.indices(0), s.indices(1));
  EXPECT_EQ(s.indices(3), Sampler(grouped(g, 4, 0, 1)).indices(3));
}

TEST(Sampler, GroupedResumeAndRefusals) {
  std::vector<std::int32_t> g(50);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<std::int32_t>(i % 3 == 0);
  const Sampler s(grouped(g, 4, 1, 2));
  const auto full = s.indices(2);
  for (std::int64_t p : {std::int64_t{0}, std::int64_t{4}, std::int64_t{5}, s.num_samples()})
    EXPECT_EQ(s.indices(2, p), std::vector<std::int64_t>(full.begin() + p, full.end())) << "position " << p;
  EXPECT_THROW(s.indices(2, s.num_samples() + 1), InvalidArgument);
  SamplerOptions o = grouped(g, 4, 0, 1);
  o.group_ids.pop_back();  // one short
  EXPECT_THROW(Sampler{o}, InvalidArgument);
  o = grouped(g, 0, 0, 1);
  EXPECT_THROW(Sampler{o}, InvalidArgument);
  o = grouped(g, 4, 0, 1);
  o.group_ids[7] = -1;
  EXPECT_THROW(Sampler{o}, InvalidArgument);
}
