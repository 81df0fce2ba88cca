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
