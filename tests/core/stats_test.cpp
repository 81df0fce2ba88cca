// Percentiles and the MLPerf olympic mean against hand-computed values.
#include <gtest/gtest.h>

#include "benchhost/error.hpp"
#include "stats.hpp"

using namespace benchhost::host;

TEST(Percentile, LinearInterpolationBetweenClosestRanks) {
  // Sorted: 1 2 3 4 5 6 7 8 9 10. Position p/100 * 9.
  std::vector<double> v{10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 5.5);   // pos 4.5 -> 5 + 0.5*(6-5)
  EXPECT_DOUBLE_EQ(percentile(v, 90), 9.1);   // pos 8.1 -> 9 + 0.1*(10-9)
  EXPECT_NEAR(percentile(v, 99), 9.91, 1e-12);  // pos 8.91
  EXPECT_DOUBLE_EQ(percentile(v, 25), 3.25);  // pos 2.25 -> 3 + 0.25
}

TEST(Percentile, SmallSamples) {
  EXPECT_DOUBLE_EQ(percentile({42}, 99), 42.0);
  EXPECT_DOUBLE_EQ(percentile({1, 3}, 50), 2.0);
  EXPECT_DOUBLE_EQ(percentile({1, 3}, 90), 2.8);
  // Step-time shaped sample: one slow outlier only shows in the tail.
  std::vector<double> steps(100, 2.0);
  steps[37] = 50.0;
  EXPECT_DOUBLE_EQ(percentile(steps, 50), 2.0);
  EXPECT_DOUBLE_EQ(percentile(steps, 90), 2.0);
  EXPECT_NEAR(percentile(steps, 99), 2.0 + 0.01 * 48.0, 1e-12);  // pos 98.01 between 2 and 50
}

TEST(Percentile, RejectsBadInput) {
  EXPECT_THROW(percentile({}, 50), benchhost::InvalidArgument);
  EXPECT_THROW(percentile({1.0}, 101), benchhost::InvalidArgument);
  EXPECT_THROW(percentile({1.0}, -1), benchhost::InvalidArgument);
}

TEST(OlympicMean, DropsFastestAndSlowest) {
  std::vector<TttRun> runs{{10, true}, {12, true}, {11, true}, {30, true}, {5, true}};
  OlympicMean m = olympic_mean(runs, 1);
  ASSERT_TRUE(m.valid) << m.note;
  EXPECT_EQ(m.dropped_each_side, 1u);
  EXPECT_DOUBLE_EQ(m.seconds, (10.0 + 11.0 + 12.0) / 3.0);
  EXPECT_EQ(m.kept, (std::vector<std::size_t>{0, 1, 2}));
}

TEST(OlympicMean, OneNonConvergedRunCountsAsSlowest) {
  // The non-converged run has the smallest time but must be dropped as the slowest.
  std::vector<TttRun> runs{{10, true}, {1, false}, {11, true}, {12, true}, {9, true}};
  OlympicMean m = olympic_mean(runs, 1);
  ASSERT_TRUE(m.valid) << m.note;
  EXPECT_DOUBLE_EQ(m.seconds, (10.0 + 11.0 + 12.0) / 3.0);  // drops 9 (fastest) and the aborted run
  EXPECT_EQ(m.kept, (std::vector<std::size_t>{0, 2, 3}));
}

TEST(OlympicMean, TwoNonConvergedRunsAreInvalid) {
  std::vector<TttRun> runs{{10, true}, {1, false}, {11, true}, {12, false}, {9, true}};
  OlympicMean m = olympic_mean(runs, 1);
  EXPECT_FALSE(m.valid);
  EXPECT_NE(m.note.find("INVALID"), std::string::npos) << m.note;
}

TEST(OlympicMean, Unet3dDropsFourEachSide) {
  std::vector<TttRun> runs;
  for (int i = 1; i <= 10; ++i) runs.push_back({static_cast<double>(i * 10), true});  // 10..100
  OlympicMean m = olympic_mean(runs, 4);
  ASSERT_TRUE(m.valid) << m.note;
  EXPECT_EQ(m.dropped_each_side, 4u);
  EXPECT_DOUBLE_EQ(m.seconds, (50.0 + 60.0) / 2.0);
  EXPECT_EQ(m.kept, (std::vector<std::size_t>{4, 5}));
  // With one aborted run among them it is dropped in the slowest four.
  runs[0].converged = false;  // the 10 s run did not converge
  m = olympic_mean(runs, 4);
  ASSERT_TRUE(m.valid) << m.note;
  EXPECT_DOUBLE_EQ(m.seconds, (60.0 + 70.0) / 2.0);  // sorted: 20..100, aborted; keep 6th/7th
}

TEST(OlympicMean, TooFewRunsIsPlainMeanAndNeedsConvergence) {
  OlympicMean m = olympic_mean({{10, true}, {20, true}}, 1);
  ASSERT_TRUE(m.valid);
  EXPECT_DOUBLE_EQ(m.seconds, 15.0);
  EXPECT_EQ(m.dropped_each_side, 0u);
  EXPECT_FALSE(olympic_mean({{10, false}}, 1).valid);
  EXPECT_FALSE(olympic_mean({}, 1).valid);
}
