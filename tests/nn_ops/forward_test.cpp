// Forward values that the references themselves must get right (hand-computed), dropout
// determinism, attention masks (no leakage), and bad-input errors.

#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/threading.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;

TEST(Forward, HandComputedValues) {
  Tensor x = Tensor::from_vector({-1.0f, 0.0f, 1.0f, 2.0f}, {4});
  auto v = gelu(x).to_float_vector();  // exact erf GELU: x Phi(x)
  EXPECT_NEAR(v[0], -0.15865525f, 1e-6);
  EXPECT_NEAR(v[1], 0.0f, 1e-7);
  EXPECT_NEAR(v[2], 0.84134475f, 1e-6);
  EXPECT_NEAR(v[3], 1.95449974f, 1e-6);
  auto t = gelu(x, /*tanh_approx=*/true).to_float_vector();
  EXPECT_NEAR(t[2], 0.84119199f, 1e-6);
  auto s = softmax_forward(Tensor::from_vector({1.0f, 2.0f, 3.0f}, {1, 3})).to_float_vector();
  EXPECT_NEAR(s[0], 0.09003057f, 1e-6);
  EXPECT_NEAR(s[2], 0.66524096f, 1e-6);
  // layer norm of [1, 2, 3]: mean 2, var 2/3
  auto ln = layernorm_forward(Tensor::from_vector({1, 2, 3}, {1, 3}), Tensor::full({3}, 1.0), Tensor{}, 0.0f).to_float_vector();
  EXPECT_NEAR(ln[0], -1.22474487f, 1e-5);
  // cross entropy: logits [0, 0] target 0 -> log 2; smoothing 0.2 changes nothing for uniform logits
  Tensor logits = Tensor::zeros({1, 2});
  Tensor tgt = Tensor::from_vector_i64({0}, {1});
  EXPECT_NEAR(softmax_cross_entropy_forward(logits, tgt).loss, std::log(2.0f), 1e-6);
  EXPECT_NEAR(softmax_cross_entropy_forward(logits, tgt, 0.2f).loss, std::log(2.0f), 1e-6);
  // all rows ignored: loss 0, count 0, gradient 0
  auto ign = softmax_cross_entropy_forward(logits, Tensor::from_vector_i64({-100}, {1}));
  EXPECT_EQ(ign.count, 0);
  EXPECT_EQ(ign.loss, 0.0f);
  // bce: x = 0 -> log 2 for any target
  EXPECT_NEAR(bce_with_logits_forward(Tensor::zeros({3}), Tensor::from_vector({0, 1, 0.5f}, {3})), std::log(2.0f), 1e-6);
  // stable for huge logits
  EXPECT_NEAR(bce_with_logits_forward(Tensor::from_vector({100.0f}, {1}), Tensor::from_vector({0.0f}, {1})), 100.0f, 1e-4);
  // matmul
  auto m = matmul(Tensor::from_vector({1, 2, 3, 4}, {2, 2}), Tensor::from_vector({5, 6, 7, 8}, {2, 2})).to_float_vector();
  EXPECT_EQ(m, (std::vector<float>{19, 22, 43, 50}));
  // reductions
  Tensor r = Tensor::from_vector({1, 5, 3, 2, 2, 9}, {2, 3});
  EXPECT_EQ(sum(r, {1}).to_float_vector(), (std::vector<float>{9, 13}));
  EXPECT_EQ(mean(r, {0}).to_float_vector(), (std::vector<float>{1.5f, 3.5f, 6.0f}));
  auto mx = amax(r, 1);
  EXPECT_EQ(mx.values.to_float_vector(), (std::vector<float>{5, 9}));
  EXPECT_EQ(mx.indices.to_float_vector(), (std::vector<float>{1, 2}));
  // cast rounds to nearest even
  EXPECT_EQ(cast(Tensor::from_vector({1.0f + 1.0f / 512}, {1}), DType::bf16).to_float_vector()[0], 1.0f);
}

TEST(Dropout, DeterministicPerSeedAndStepAndIndependentOfThreads) {
  Tensor x = Tensor::full({64, 513}, 1.0);
  DropoutSaved a, b, c, d;
  set_num_threads(1);
  Tensor y1 = dropout_forward(x, 0.25f, 1234, 10, 3, &a);
  set_num_threads(0);
  Tensor y2 = dropout_forward(x, 0.25f, 1234, 10, 3, &b);
  set_num_threads(0);
  EXPECT_EQ(y1.to_float_vector(), y2.to_float_vector()) << "mask depends on the thread count";
  EXPECT_EQ(a.mask.to_float_vector(), b.mask.to_float_vector());
  dropout_forward(x, 0.25f, 1234, 11, 3, &c);  // next step
  dropout_forward(x, 0.25f, 1234, 10, 4, &d);  // another site
  EXPECT_NE(a.mask.to_float_vector(), c.mask.to_float_vector());
  EXPECT_NE(a.mask.to_float_vector(), d.mask.to_float_vector());
  // keep rate close to 1 - p (n = 32832; 5 sigma ~ 1.2%), kept values scaled by 1/(1-p)
  double kept = 0;
  for (float m : a.mask.to_float_vector()) kept += m;
  EXPECT_NEAR(kept / x.numel(), 0.75, 0.012);
  for (float v : y1.to_float_vector()) EXPECT_TRUE(v == 0.0f || std::fabs(v - 1.0f / 0.75f) < 1e-6);
  EXPECT_THROW(dropout_forward(x, 1.0f, 1, 1, 1, nullptr), InvalidArgument);
}

// Attention output rows that may not see a perturbed key/value must not change at all.
TEST(AttentionMasks, CausalMaskDoesNotLeakTheFuture) {
  const std::int64_t B = 1, H = 2, T = 6, D = 4;
  Tensor q = random_tensor({B, H, T, D}, 1), k = random_tensor({B, H, T, D}, 2), v = random_tensor({B, H, T, D}, 3);
  AttentionMask m;
  m.causal = true;
  Tensor o1 = sdpa_forward(q, k, v, m, 0.0f, nullptr);
  const std::int64_t t = 3;  // perturb token 3's key and value in every head
  Tensor k2 = k.clone(), v2 = v.clone();
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t e = 0; e < D; ++e) {
      k2.data<float>()[(h * T + t) * D + e] += 5.0f;
      v2.data<float>()[(h * T + t) * D + e] -= 3.0f;
    }
  Tensor o2 = sdpa_forward(q, k2, v2, m, 0.0f, nullptr);
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t i = 0; i < T; ++i) {
      double diff = 0;
      for (std::int64_t e = 0; e < D; ++e) diff += std::fabs(o1.item({0, h, i, e}) - o2.item({0, h, i, e}));
      if (i < t) EXPECT_EQ(diff, 0.0) << "query " << i << " saw token " << t;
      else EXPECT_GT(diff, 1e-3) << "query " << i << " should see token " << t;
    }
}

TEST(AttentionMasks, PaddingAndPackedBlockDiagonalIsolateSequences) {
  const std::int64_t B = 2, H = 1, T = 5, D = 3;
  Tensor q = random_tensor({B, H, T, D}, 4), k = random_tensor({B, H, T, D}, 5), v = random_tensor({B, H, T, D}, 6);
  // padding: batch 0 has 3 valid keys; perturbing keys 3, 4 of batch 0 changes nothing
  AttentionMask pad;
  pad.key_padding = Tensor::from_vector_i32({3, 5}, {2});
  Tensor o1 = sdpa_forward(q, k, v, pad, 0.0f, nullptr);
  Tensor k2 = k.clone(), v2 = v.clone();
  for (std::int64_t j = 3; j < 5; ++j)
    for (std::int64_t e = 0; e < D; ++e) {
      k2.data<float>()[j * D + e] = 9.0f;
      v2.data<float>()[j * D + e] = -9.0f;
    }
  EXPECT_EQ(sdpa_forward(q, k2, v2, pad, 0.0f, nullptr).to_float_vector(), o1.to_float_vector());
  // the same with keep flags [B, S]
  AttentionMask flags;
  Tensor keep = Tensor::full({B, T}, 1.0, DType::u8);
  keep.data<std::uint8_t>()[3] = keep.data<std::uint8_t>()[4] = 0;
  flags.key_padding = keep;
  EXPECT_TRUE(tensors_close(sdpa_forward(q, k, v, flags, 0.0f, nullptr), o1, 0, 0));
  // packed: two sequences [0, 2) and [2, 5) in one row, block-diagonal keep mask + causal
  AttentionMask packed;
  packed.causal = true;
  Tensor bd = Tensor::zeros({B, T, T}, DType::u8);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < T; ++i)
      for (std::int64_t j = 0; j < T; ++j) bd.data<std::uint8_t>()[(b * T + i) * T + j] = (i < 2) == (j < 2);
  packed.mask = bd;
  Tensor p1 = sdpa_forward(q, k, v, packed, 0.0f, nullptr);
  Tensor k3 = k.clone();
  Tensor v3 = v.clone();
  for (std::int64_t e = 0; e < D; ++e) {  // first token of sequence 2
    k3.data<float>()[2 * D + e] += 4.0f;
    v3.data<float>()[2 * D + e] -= 2.0f;
  }
  Tensor p2 = sdpa_forward(q, k3, v3, packed, 0.0f, nullptr);
  for (std::int64_t i = 0; i < T; ++i) {
    double diff = 0;
    for (std::int64_t e = 0; e < D; ++e) diff += std::fabs(p1.item({0, 0, i, e}) - p2.item({0, 0, i, e}));
    if (i < 2) EXPECT_EQ(diff, 0.0) << "sequence 1 token " << i << " saw sequence 2";
    else EXPECT_GT(diff, 1e-4);
  }
  // a query with no visible key yields zeros, not NaN
  AttentionMask none;
  none.key_padding = Tensor::from_vector_i64({0, 5}, {2});
  auto z = sdpa_forward(q, k, v, none, 0.0f, nullptr).to_float_vector();
  for (std::int64_t i = 0; i < T * D; ++i) EXPECT_EQ(z[i], 0.0f);
}

TEST(BadInput, ClearErrors) {
  EXPECT_THROW(matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})), InvalidArgument);
  EXPECT_THROW(linear_forward(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}), Tensor{}), InvalidArgument);
  EXPECT_THROW(layernorm_forward(Tensor::zeros({2, 3}), Tensor::zeros({4}), Tensor{}, 1e-5f), InvalidArgument);
  EXPECT_THROW(softmax_cross_entropy_forward(Tensor::zeros({2, 3}), Tensor::from_vector_i64({0, 3}, {2})), InvalidArgument);
  EXPECT_THROW(split(Tensor::zeros({4}), {1, 2}, 0), InvalidArgument);
  EXPECT_THROW(permute_copy(Tensor::zeros({2, 3}), {0, 0}), InvalidArgument);
  EXPECT_THROW(add(Tensor::zeros({2, 3}), Tensor::zeros({2})), InvalidArgument);
}

}  // namespace
}  // namespace benchhost::nn
