// The DICE metric: hand-computed cases and the merge across ranks.
#include <gtest/gtest.h>

#include <thread>

#include "benchhost/error.hpp"
#include "benchhost/metrics/dice.hpp"
#include "benchhost/random.hpp"
#include "common/thread_comm.hpp"

using namespace benchhost;
using benchhost::metrics::DiceScore;

namespace {

Tensor classes(const std::vector<int>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(v.size())};
  Tensor t = Tensor::empty(shape, DType::u8);
  for (std::size_t i = 0; i < v.size(); ++i) t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v[i]);
  return t;
}

constexpr double kEps = 1e-6;

}  // namespace

TEST(Kits19Dice, HandComputed) {
  DiceScore d(3);
  // Identical, both classes present: 1 and 1.
  d.add(classes({0, 1, 1, 2}), classes({0, 1, 1, 2}));
  auto pc = d.per_class();
  EXPECT_DOUBLE_EQ(pc[0], 1.0);
  EXPECT_DOUBLE_EQ(pc[1], 1.0);
  d.reset();
  // Class 2 absent from both: (0 + eps) / (0 + eps) = 1. Class 1: P = {1,2}, T = {2,3}: (2*1 + eps) / (4 + eps).
  d.add(classes({0, 1, 1, 0}), classes({0, 0, 1, 1}));
  pc = d.per_class();
  EXPECT_DOUBLE_EQ(pc[0], (2.0 + kEps) / (4.0 + kEps));
  EXPECT_DOUBLE_EQ(pc[1], 1.0);
  d.reset();
  // Disjoint: class 1 only predicted, class 2 only labelled: eps / (n + eps) ~ 0.
  d.add(classes({1, 1, 0}), classes({2, 0, 0}));
  pc = d.per_class();
  EXPECT_DOUBLE_EQ(pc[0], kEps / (2.0 + kEps));
  EXPECT_DOUBLE_EQ(pc[1], kEps / (1.0 + kEps));
  EXPECT_NEAR(d.mean(), 0.0, 1e-6);
  // Mean over cases, then over classes; any rank.
  d.reset();
  d.add(classes({1, 2, 0, 0}, {2, 2}), classes({1, 2, 0, 0}, {2, 2}));  // 1, 1
  d.add(classes({1, 1, 1, 2}, {1, 2, 2}), classes({1, 0, 0, 0}, {1, 2, 2}));  // class 1: 2/4; class 2: eps/(1+eps)
  EXPECT_EQ(d.cases(), 2);
  pc = d.per_class();
  EXPECT_NEAR(pc[0], (1.0 + (2.0 + kEps) / (4.0 + kEps)) / 2, 1e-15);
  EXPECT_NEAR(pc[1], (1.0 + kEps / (1.0 + kEps)) / 2, 1e-15);
  EXPECT_NEAR(d.mean(), (pc[0] + pc[1]) / 2, 1e-15);
}

TEST(Kits19Dice, AllBackgroundPredictionScoresZero) {
  DiceScore d;
  d.add(classes({0, 0, 0, 0, 0}), classes({0, 1, 1, 2, 0}));
  EXPECT_NEAR(d.mean(), 0.0, 1e-6);
}

TEST(Kits19Dice, Errors) {
  DiceScore d;
  EXPECT_THROW(d.add(classes({0, 1}), classes({0, 1, 2})), InvalidArgument);
  EXPECT_THROW(d.add(classes({0, 3}), classes({0, 1})), InvalidArgument);
  EXPECT_THROW(d.add(Tensor::zeros({2}, DType::f32), classes({0, 1})), InvalidArgument);
  EXPECT_THROW(DiceScore(1), InvalidArgument);
  EXPECT_TRUE(std::isnan(d.mean()));
}

// Two ranks with 3 and 2 cases give the mean over all 5 cases (not the mean of rank means).
TEST(Kits19Dice, MergesAcrossRanks) {
  Rng rng(5);
  std::vector<std::pair<Tensor, Tensor>> cases;
  for (int i = 0; i < 5; ++i) {
    std::vector<int> p(64), t(64);
    for (int k = 0; k < 64; ++k) {
      t[k] = static_cast<int>(rng.below(3));
      p[k] = rng.uniform() < 0.6f ? t[k] : static_cast<int>(rng.below(3));
    }
    if (i == 4) std::fill(t.begin(), t.end(), 0), std::fill(p.begin(), p.end(), 0);  // all-absent case: 1, 1
    cases.emplace_back(classes(p, {4, 4, 4}), classes(t, {4, 4, 4}));
  }
  DiceScore all;
  for (const auto& [p, t] : cases) all.add(p, t);
  const auto want = all.per_class();

  test_support::Group group(2);
  std::vector<std::vector<double>> got(2);
  std::vector<double> means(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      test_support::ThreadComm comm(group, r);
      DiceScore mine;
      for (std::size_t i = 0; i < cases.size(); ++i)
        if ((i < 3) == (r == 0)) mine.add(cases[i].first, cases[i].second);
      got[static_cast<std::size_t>(r)] = mine.per_class(&comm);
      means[static_cast<std::size_t>(r)] = mine.mean(&comm);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[static_cast<std::size_t>(r)].size(), 2u);
    for (int c = 0; c < 2; ++c) EXPECT_NEAR(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)], want[static_cast<std::size_t>(c)], 1e-12);
    EXPECT_NEAR(means[static_cast<std::size_t>(r)], all.mean(), 1e-12);
  }
}
