// Exact ROC AUC against the O(P N) pairwise definition, with ties and degenerate inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "benchhost/error.hpp"
#include "benchhost/metrics/auc.hpp"
#include "benchhost/random.hpp"

using namespace benchhost;
using benchhost::metrics::AucAccumulator;
using benchhost::metrics::roc_auc;

namespace {

// The definition: P(score of a positive > score of a negative) + 0.5 P(equal).
double brute_force_auc(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (std::size_t i = 0; i < s.size(); ++i)
    for (std::size_t j = 0; j < s.size(); ++j)
      if (y[i] == 1.0f && y[j] == 0.0f) {
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
      }
  return wins / pairs;
}

}  // namespace

TEST(Auc, SmallHandComputedCases) {
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{0.9f, 0.1f}, std::vector<float>{0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{0.5f, 0.5f}, std::vector<float>{0, 1}), 0.5);
  // 2 positives {0.8, 0.4}, 2 negatives {0.4, 0.2}: pairs 1 + 1 + 0.5 + 1 = 3.5 of 4.
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{0.8f, 0.4f, 0.4f, 0.2f},
                           std::vector<float>{1, 1, 0, 0}),
                   3.5 / 4.0);
  // -0 and +0 are the same score (a tie).
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{-0.0f, 0.0f}, std::vector<float>{1, 0}), 0.5);
}

TEST(Auc, MatchesBruteForceWithHeavyTiesAndNegativeScores) {
  for (std::uint64_t seed : {1, 2, 3, 4, 5}) {
    Rng rng(seed);
    const int n = 300 + static_cast<int>(seed) * 37;
    std::vector<float> s(n), y(n);
    for (int i = 0; i < n; ++i) {
      y[i] = rng.uniform() < 0.3f ? 1.0f : 0.0f;
      // Coarse scores (many ties) correlated with the label, some negative.
      s[i] = std::round((rng.normal() + (y[i] ? 0.7f : 0.0f)) * 3.0f) / 3.0f;
    }
    EXPECT_NEAR(roc_auc(s, y), brute_force_auc(s, y), 1e-12) << "seed " << seed;
  }
}

TEST(Auc, AccumulatorOverBatchesEqualsOneShot) {
  Rng rng(9);
  std::vector<float> s(1000), y(1000);
  for (int i = 0; i < 1000; ++i) {
    y[i] = rng.uniform() < 0.5f ? 1.0f : 0.0f;
    s[i] = rng.uniform() + 0.2f * y[i];
  }
  AucAccumulator acc;
  for (int b = 0; b < 1000; b += 128) {
    const int e = std::min(1000, b + 128);
    acc.add(std::span<const float>(s).subspan(b, e - b), std::span<const float>(y).subspan(b, e - b));
  }
  EXPECT_EQ(acc.size(), 1000);
  EXPECT_DOUBLE_EQ(acc.compute(), roc_auc(s, y));
  EXPECT_NEAR(acc.compute(), brute_force_auc(s, y), 1e-12);
  acc.reset();
  EXPECT_EQ(acc.size(), 0);
}

TEST(Auc, DegenerateInputsAreNaNAndBadInputsThrow) {
  EXPECT_TRUE(std::isnan(roc_auc(std::vector<float>{0.1f, 0.7f}, std::vector<float>{1, 1})));
  EXPECT_TRUE(std::isnan(roc_auc(std::vector<float>{0.1f, 0.7f}, std::vector<float>{0, 0})));
  EXPECT_TRUE(std::isnan(roc_auc(std::vector<float>{}, std::vector<float>{})));
  EXPECT_THROW(roc_auc(std::vector<float>{0.1f}, std::vector<float>{0, 1}), InvalidArgument);
  EXPECT_THROW(roc_auc(std::vector<float>{0.1f, NAN}, std::vector<float>{0, 1}), InvalidArgument);
  EXPECT_THROW(roc_auc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{0, 2}), InvalidArgument);
}
