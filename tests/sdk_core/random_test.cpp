#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "benchhost/random.hpp"

using namespace benchhost;

TEST(Rng, DeterministicPerSeedAndStream) {
  Rng a(42, 7), b(42, 7), c(42, 8), d(43, 7);
  for (int i = 0; i < 100; ++i) {
    auto x = a.next_u32();
    EXPECT_EQ(x, b.next_u32());
    (void)c;
  }
  EXPECT_NE(Rng(42, 7).next_u64(), Rng(42, 8).next_u64());
  EXPECT_NE(Rng(42, 7).next_u64(), d.next_u64());
}

TEST(Rng, UniformAtMatchesSequentialStream) {
  Rng seq(5, 3);
  Rng ra(5, 3);
  for (std::uint64_t i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(seq.uniform(), ra.uniform_at(i)) << i;
}

TEST(Rng, MomentsAreRight) {
  Rng r(1);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  std::vector<int> bins(10, 0);
  for (int i = 0; i < n; ++i) {
    float u = r.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += u;
    float z = r.normal();
    sn += z;
    sn2 += double(z) * z;
    bins[r.below(10)]++;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
  for (int b : bins) EXPECT_NEAR(b, n / 10, n / 100);
}
