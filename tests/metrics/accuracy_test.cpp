// Top-k, masked-LM accuracy and log perplexity against hand-computed values, and merged across
// ranks (threads over an in-process communicator) equal to the value over the union.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/metrics/accuracy.hpp"
#include "benchhost/metrics/perplexity.hpp"
#include "common/thread_comm.hpp"

using namespace benchhost;
using metrics::LogPerplexity;
using metrics::MaskedLmAccuracy;
using metrics::TopKAccuracy;

namespace {

Tensor rows(std::vector<float> v, std::int64_t n, std::int64_t c) { return Tensor::from_vector(v, {n, c}); }

}  // namespace

TEST(TopKAccuracy, CountsTheLabelAmongTheKHighestScores) {
  // Row 0: label 2 has the highest score. Row 1: label 0 is second. Row 2: label 3 is last.
  // Row 3: label 1 ties with class 0 for the top (class 0 ranks first) and with nothing else.
  const Tensor s = rows({0.1f, 0.2f, 0.9f, 0.0f,   //
                         0.5f, 0.7f, 0.1f, 0.2f,   //
                         0.4f, 0.3f, 0.2f, 0.1f,   //
                         0.8f, 0.8f, 0.1f, 0.1f},  //
                        4, 4);
  const Tensor labels = Tensor::from_vector_i64({2, 0, 3, 1}, {4});
  TopKAccuracy top1(1), top2(2), top4(4);
  top1.add(s, labels);
  top2.add(s, labels);
  top4.add(s, labels);
  EXPECT_EQ(top1.correct(), 1);  // row 0 only
  EXPECT_EQ(top2.correct(), 3);  // rows 0, 1, 3
  EXPECT_EQ(top4.correct(), 4);
  EXPECT_DOUBLE_EQ(top1.compute(), 0.25);
  EXPECT_DOUBLE_EQ(top2.compute(), 0.75);
  EXPECT_EQ(top1.counted(), 4);
}

TEST(TopKAccuracy, TakesI32LabelsAndRefusesBadInput) {
  TopKAccuracy top1;
  top1.add(rows({1, 0, 0, 1}, 2, 2), Tensor::from_vector_i32({0, 1}, {2}));
  EXPECT_DOUBLE_EQ(top1.compute(), 1.0);
  EXPECT_THROW(top1.add(rows({1, 0}, 1, 2), Tensor::from_vector_i64({2}, {1})), InvalidArgument);  // label >= C
  EXPECT_THROW(top1.add(rows({1, 0}, 1, 2), Tensor::from_vector_i64({0, 1}, {2})), InvalidArgument);  // N differs
  EXPECT_THROW(TopKAccuracy(0), InvalidArgument);
  TopKAccuracy nan_row;
  nan_row.add(rows({NAN, 0.0f}, 1, 2), Tensor::from_vector_i64({0}, {1}));
  EXPECT_EQ(nan_row.correct(), 0) << "a NaN score at the label is never correct";
  EXPECT_TRUE(std::isnan(TopKAccuracy().compute())) << "nothing counted";
}

TEST(MaskedLmAccuracy, CountsMaskedPositionsOnly) {
  // Arg-max per row: 1, 0, 2, 2. Labels: 1 (right), -1 (padding: not counted), 0 (wrong), 2 (right).
  const Tensor s = rows({0.0f, 3.0f, 1.0f,   //
                         5.0f, 1.0f, 1.0f,   //
                         0.0f, 0.0f, 9.0f,   //
                         0.1f, 0.2f, 0.3f},  //
                        4, 3);
  MaskedLmAccuracy acc;
  acc.add(s, Tensor::from_vector_i64({1, -1, 0, 2}, {4}));
  EXPECT_EQ(acc.counted(), 3);
  EXPECT_EQ(acc.correct(), 2);
  EXPECT_DOUBLE_EQ(acc.compute(), 2.0 / 3.0);
  acc.add_counts(1, 1);
  EXPECT_DOUBLE_EQ(acc.compute(), 3.0 / 4.0);
  EXPECT_THROW(acc.add_counts(2, 1), InvalidArgument);
}

TEST(LogPerplexity, IsTheMeanTokenNll) {
  LogPerplexity p;
  p.add(-std::log(0.5) * 2, 2);  // two tokens at p = 0.5
  p.add(-std::log(0.25), 1);     // one at 0.25
  const double want = (2 * std::log(2.0) + std::log(4.0)) / 3.0;
  EXPECT_NEAR(p.compute(), want, 1e-12);
  EXPECT_NEAR(p.perplexity(), std::exp(want), 1e-12);
  EXPECT_THROW(p.add(NAN, 1), Diverged);
  EXPECT_THROW(p.add(1.0, -1), InvalidArgument);
  EXPECT_TRUE(std::isnan(LogPerplexity().compute()));
}

// Each rank holds a different share (rank 2 nothing at all): the merged value is the value over
// the union, not a mean of per-rank values.
TEST(MetricsAcrossRanks, MergeToTheValueOfTheUnion) {
  const int ranks = 3;
  test_support::Group g(ranks);
  std::vector<double> top1(ranks), mlm(ranks), ppl(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      test_support::ThreadComm comm(g, r);
      TopKAccuracy t;
      MaskedLmAccuracy m;
      LogPerplexity l;
      if (r == 0) {
        t.add(rows({1, 0, 0, 1, 1, 0}, 3, 2), Tensor::from_vector_i64({0, 1, 1}, {3}));  // 2 of 3
        m.add_counts(1, 4);
        l.add(10.0, 4);
      } else if (r == 1) {
        t.add(rows({0, 1}, 1, 2), Tensor::from_vector_i64({0}, {1}));  // 0 of 1
        m.add_counts(3, 4);
        l.add(2.0, 1);
      }
      top1[r] = t.compute(&comm);
      mlm[r] = m.compute(&comm);
      ppl[r] = l.compute(&comm);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    EXPECT_DOUBLE_EQ(top1[r], 2.0 / 4.0);
    EXPECT_DOUBLE_EQ(mlm[r], 4.0 / 8.0);
    EXPECT_DOUBLE_EQ(ppl[r], 12.0 / 5.0);
  }
}

// docs/multi-process.md writes allreduce_values(comm, {correct, total}, ReduceOp::sum): a braced
// list of integers (or of doubles) picks its overload.
TEST(AllreduceValues, ABracedListOfOneTypeIsUnambiguous) {
  test_support::Group g(2);
  std::vector<std::vector<std::int64_t>> counts(2);
  std::vector<std::vector<double>> sums(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      test_support::ThreadComm comm(g, r);
      const std::int64_t correct = 3 + r, total = 10;
      counts[r] = allreduce_values(comm, {correct, total}, ReduceOp::sum);
      sums[r] = allreduce_values(comm, {0.5, 1.0 * r}, ReduceOp::sum);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(counts[r], (std::vector<std::int64_t>{7, 20}));
    EXPECT_EQ(sums[r], (std::vector<double>{1.0, 1.0}));
  }
}
