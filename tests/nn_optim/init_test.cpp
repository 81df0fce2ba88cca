#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include "benchhost/nn/init.hpp"

using namespace benchhost;
namespace init = benchhost::nn::init;

namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats_of(const Tensor& t) {
  auto v = t.to_float_vector();
  Stats s;
  double sum = 0, sq = 0;
  for (float x : v) sum += x;
  s.mean = sum / v.size();
  for (float x : v) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / v.size());
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

}  // namespace

TEST(Init, Fans) {
  EXPECT_EQ(init::compute_fans({256, 128}).fan_in, 128);
  EXPECT_EQ(init::compute_fans({256, 128}).fan_out, 256);
  auto conv = init::compute_fans({64, 32, 3, 3});
  EXPECT_EQ(conv.fan_in, 288);
  EXPECT_EQ(conv.fan_out, 576);
  EXPECT_EQ(init::compute_fans({10}).fan_in, 10);
  EXPECT_THROW(init::compute_fans({}), InvalidArgument);
  EXPECT_FLOAT_EQ(init::gain(init::Nonlinearity::relu), std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(init::gain(init::Nonlinearity::tanh), 5.0f / 3.0f);
}

TEST(Init, NormalStatistics) {
  Tensor t = Tensor::empty({400, 500});
  Rng rng(1);
  init::normal_(t, rng, 0.5f, 2.0f);
  auto s = stats_of(t);
  // 200k samples: standard error of the mean 2/sqrt(2e5) = 0.0045
  EXPECT_NEAR(s.mean, 0.5, 0.02);
  EXPECT_NEAR(s.std, 2.0, 0.02);
}

TEST(Init, TruncatedNormalIsBoundedWithTheTruncatedStd) {
  Tensor t = Tensor::empty({200000});
  Rng rng(2);
  init::trunc_normal_(t, rng, 0.0f, 0.02f);  // BERT: std 0.02, cut at 2 sigma
  auto s = stats_of(t);
  EXPECT_GE(s.min, -0.04);
  EXPECT_LE(s.max, 0.04);
  EXPECT_LT(s.min, -0.039);  // the tails are actually reached
  // std of a standard normal truncated to [-2, 2] is 0.8796
  EXPECT_NEAR(s.std, 0.02 * 0.8796, 0.0003);
  EXPECT_NEAR(s.mean, 0.0, 0.0005);
}

TEST(Init, KaimingAndXavier) {
  Rng rng(3);
  Tensor w = Tensor::empty({256, 512});  // fan_in 512
  init::kaiming_normal_(w, rng);
  EXPECT_NEAR(stats_of(w).std, std::sqrt(2.0 / 512), 0.002);
  Tensor c = Tensor::empty({64, 32, 3, 3});  // fan_out 576
  init::kaiming_normal_(c, rng, init::FanMode::fan_out);
  EXPECT_NEAR(stats_of(c).std, std::sqrt(2.0 / 576), 0.002);
  Tensor u = Tensor::empty({512, 256});  // fan_in 256: bound sqrt(2)*sqrt(3/256)
  init::kaiming_uniform_(u, rng);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 256);
  auto su = stats_of(u);
  EXPECT_LE(su.max, bound);
  EXPECT_GE(su.min, -bound);
  EXPECT_NEAR(su.std, bound / std::sqrt(3.0), 0.002);
  Tensor x = Tensor::empty({300, 200});
  init::xavier_uniform_(x, rng);
  const double xb = std::sqrt(6.0 / 500);
  auto sx = stats_of(x);
  EXPECT_LE(sx.max, xb);
  EXPECT_GT(sx.max, 0.99 * xb);
  EXPECT_NEAR(sx.std, xb / std::sqrt(3.0), 0.002);
  Tensor xn = Tensor::empty({300, 200});
  init::xavier_normal_(xn, rng, 2.0f);
  EXPECT_NEAR(stats_of(xn).std, 2.0 * std::sqrt(2.0 / 500), 0.002);
}

TEST(Init, UniformAndConstants) {
  Rng rng(4);
  Tensor t = Tensor::empty({100000});
  init::uniform_(t, rng, -3.0f, 1.0f);
  auto s = stats_of(t);
  EXPECT_GE(s.min, -3.0);
  EXPECT_LT(s.max, 1.0);
  EXPECT_NEAR(s.mean, -1.0, 0.02);
  init::zeros_(t);
  EXPECT_EQ(stats_of(t).max, 0.0);
  init::ones_(t);
  EXPECT_EQ(stats_of(t).min, 1.0);
  init::constant_(t, -2.5f);
  EXPECT_EQ(stats_of(t).mean, -2.5);
}

TEST(Init, DeterministicPerSeedAndIndependentOfThreads) {
  auto fill = [](std::uint64_t seed, int threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    Tensor t = Tensor::empty({100000});  // several 16384-element chunks
    Rng rng(seed);
    init::trunc_normal_(t, rng, 0.0f, 1.0f);
    return t.to_float_vector();
  };
  EXPECT_EQ(fill(11, 1), fill(11, 4));
  EXPECT_NE(fill(11, 2), fill(12, 2));
  // rng_for: one stream per parameter name.
  Tensor a = Tensor::empty({16}), b = Tensor::empty({16}), a2 = Tensor::empty({16});
  auto ra = init::rng_for(5, "enc.0.weight"), rb = init::rng_for(5, "enc.1.weight"),
       ra2 = init::rng_for(5, "enc.0.weight");
  init::normal_(a, ra);
  init::normal_(b, rb);
  init::normal_(a2, ra2);
  EXPECT_EQ(a.to_float_vector(), a2.to_float_vector());
  EXPECT_NE(a.to_float_vector(), b.to_float_vector());
}

TEST(Init, RejectsTensorsItCannotFill) {
  Rng rng(1);
  Tensor h = Tensor::empty({4}, DType::f16);
  EXPECT_THROW(init::normal_(h, rng), InvalidArgument);
  Tensor nc = Tensor::empty({4, 4}).transpose(0, 1);
  EXPECT_THROW(init::uniform_(nc, rng), InvalidArgument);
  Tensor scalar = Tensor::empty({});
  EXPECT_THROW(init::kaiming_normal_(scalar, rng), InvalidArgument);
}

// A table whose rows are split over processes: each shard filled by uniform_slice_ from the same
// rng state holds exactly the rows of the whole table, for slices that start inside a chunk,
// span several chunks, or sit wholly inside one.
TEST(Init, UniformSliceEqualsTheSameRowsOfTheWholeTensor) {
  const std::int64_t rows = 5000, dim = 16;  // 80,000 elements: several 16,384-element chunks
  Tensor whole = Tensor::empty({rows, dim});
  Rng r1 = nn::init::rng_for(3, "emb.0.weight");
  nn::init::uniform_(whole, r1, -0.1f, 0.1f);
  const std::vector<float> all = whole.to_float_vector();
  for (auto [begin, end] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, rows}, {0, 1}, {1, 2}, {1023, 1025}, {777, 4321}, {4999, 5000}, {1666, 3333}}) {
    Tensor part = Tensor::empty({end - begin, dim});
    Rng r2 = nn::init::rng_for(3, "emb.0.weight");
    nn::init::uniform_slice_(part, r2, -0.1f, 0.1f, begin * dim);
    const std::vector<float> got = part.to_float_vector();
    for (std::int64_t i = 0; i < (end - begin) * dim; ++i)
      ASSERT_EQ(got[i], all[begin * dim + i]) << "rows [" << begin << ", " << end << "), element " << i;
  }
  Tensor t = Tensor::empty({2});
  Rng r3(1);
  EXPECT_THROW(nn::init::uniform_slice_(t, r3, 0.0f, 1.0f, -1), InvalidArgument);
}
