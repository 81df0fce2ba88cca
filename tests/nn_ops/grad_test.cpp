// Backward passes against central finite differences (tests/common/gradcheck.hpp), one test per
// op family, at small sizes.

#include <gtest/gtest.h>

#include "benchhost/nn/ops.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::GradcheckOptions;
using benchhost::testing::random_tensor;
using V = std::vector<Tensor>;

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape()); }
Tensor scalar(float v) { return Tensor::from_vector({v}, {1}); }

TEST(Grad, Activations) {
  for (Activation a : {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh, Activation::sigmoid, Activation::tanh}) {
    SCOPED_TRACE(activation_name(a));
    Tensor x = random_tensor({4, 9}, 1, -3.0f, 3.0f);
    if (a == Activation::relu)  // keep away from the kink
      for (std::int64_t i = 0; i < x.numel(); ++i)
        if (std::fabs(x.data<float>()[i]) < 0.05f) x.data<float>()[i] = 0.5f;
    EXPECT_GRADCHECK([&](const V& in) { return V{activation_forward(in[0], a)}; },
                     [&](const V& in, const V& d) { return V{activation_backward(d[0], in[0], a)}; }, {x});
  }
}

TEST(Grad, MatmulBatchedAndTransposed) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Tensor a = random_tensor({2, 3, 4}, 2), b = random_tensor(variant == 2 ? Shape{4, 5} : Shape{2, 4, 5}, 3);
    EXPECT_GRADCHECK([&](const V& in) { return V{matmul(in[0], in[1])}; },
                     [&](const V& in, const V& d) {
                       Tensor da = zeros_like(in[0]), db = zeros_like(in[1]);
                       matmul_backward(d[0], in[0], in[1], da, db);
                       return V{da, db};
                     },
                     {a, b});
  }
  // transposed operands through views
  Tensor a = random_tensor({4, 3}, 4), b = random_tensor({5, 4}, 5);
  EXPECT_GRADCHECK([&](const V& in) { return V{matmul(in[0], in[1], true, true)}; },
                   [&](const V& in, const V& d) {
                     // c = a^T b^T: da = (d b)^T = b^T d^T, db = (a d)^T
                     Tensor at = in[0].transpose(0, 1), bt = in[1].transpose(0, 1);
                     Tensor dat = Tensor::zeros({3, 4}), dbt = Tensor::zeros({4, 5});
                     matmul_backward(d[0], at, bt, dat, dbt);
                     return V{dat.transpose(0, 1).contiguous(), dbt.transpose(0, 1).contiguous()};
                   },
                   {a, b});
}

TEST(Grad, LinearWithBiasAndFusedActivation) {
  for (Activation act : {Activation::none, Activation::gelu_erf, Activation::tanh}) {
    SCOPED_TRACE(activation_name(act));
    Tensor x = random_tensor({2, 3, 6}, 6), w = random_tensor({5, 6}, 7), b = random_tensor({5}, 8);
    EXPECT_GRADCHECK([&](const V& in) { return V{linear_forward(in[0], in[1], in[2], act)}; },
                     [&](const V& in, const V& d) {
                       Tensor z;
                       linear_forward(in[0], in[1], in[2], act, &z);
                       Tensor dw = zeros_like(in[1]), db = zeros_like(in[2]);
                       Tensor dx = linear_backward(d[0], in[0], in[1], z, act, dw, db);
                       return V{dx, dw, db};
                     },
                     {x, w, b});
  }
}

TEST(Grad, FusedLinearEqualsSplitLinear) {
  Tensor x = random_tensor({7, 16}, 9), w = random_tensor({12, 16}, 10), b = random_tensor({12}, 11);
  Tensor z;
  Tensor fused = linear_forward(x, w, b, Activation::gelu_erf);
  Tensor split = linear_forward(x, w, b, Activation::gelu_erf, &z);
  EXPECT_TRUE(benchhost::testing::tensors_close(fused, split, 1e-5, 1e-5));
}

TEST(Grad, LayerNorm) {
  Tensor x = random_tensor({3, 4, 10}, 12, -2.0f, 2.0f), g = random_tensor({10}, 13, 0.5f, 1.5f), b = random_tensor({10}, 14);
  EXPECT_GRADCHECK([&](const V& in) { return V{layernorm_forward(in[0], in[1], in[2], 1e-5f)}; },
                   [&](const V& in, const V& d) {
                     LayerNormSaved s;
                     layernorm_forward(in[0], in[1], in[2], 1e-5f, &s);
                     Tensor dg = zeros_like(in[1]), db = zeros_like(in[2]);
                     Tensor dx = layernorm_backward(d[0], in[0], in[1], s, dg, db);
                     return V{dx, dg, db};
                   },
                   {x, g, b});
}

TEST(Grad, SoftmaxAndLogSoftmax) {
  Tensor x = random_tensor({5, 11}, 15, -3.0f, 3.0f);
  EXPECT_GRADCHECK([&](const V& in) { return V{softmax_forward(in[0])}; },
                   [&](const V& in, const V& d) { return V{softmax_backward(d[0], softmax_forward(in[0]))}; }, {x});
  EXPECT_GRADCHECK([&](const V& in) { return V{log_softmax_forward(in[0])}; },
                   [&](const V& in, const V& d) { return V{log_softmax_backward(d[0], log_softmax_forward(in[0]))}; }, {x});
}

TEST(Grad, DropoutWithFixedSeedAndStep) {
  Tensor x = random_tensor({6, 50}, 16);
  EXPECT_GRADCHECK([&](const V& in) { return V{dropout_forward(in[0], 0.3f, 42, 7, 1, nullptr)}; },
                   [&](const V& in, const V& d) {
                     DropoutSaved s;
                     dropout_forward(in[0], 0.3f, 42, 7, 1, &s);
                     return V{dropout_backward(d[0], s)};
                   },
                   {x});
}

TEST(Grad, EmbeddingDenseAndSparse) {
  Tensor ids = Tensor::from_vector_i64({3, 0, 3, 7, 1, 3}, {2, 3});
  Tensor table = random_tensor({8, 5}, 17);
  EXPECT_GRADCHECK([&](const V& in) { return V{embedding_forward(ids, in[0])}; },
                   [&](const V& in, const V& d) {
                     Tensor dt = zeros_like(in[0]);
                     embedding_backward(d[0], ids, dt);
                     return V{dt};
                   },
                   {table});
  // the sparse rows agree with the dense gradient and cover exactly the used ids
  Tensor dy = random_tensor({2, 3, 5}, 18);
  Tensor dense = zeros_like(table);
  embedding_backward(dy, ids, dense);
  SparseRows sr = embedding_backward_sparse(dy, ids, 8);
  ASSERT_EQ(sr.rows.numel(), 4);
  const std::int64_t want_rows[] = {0, 1, 3, 7};
  for (std::int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(sr.rows.data<std::int64_t>()[r], want_rows[r]);
    for (std::int64_t d = 0; d < 5; ++d)
      EXPECT_NEAR(sr.grad.item({r, d}), dense.item({want_rows[r], d}), 1e-6);
  }
  EXPECT_THROW(embedding_forward(Tensor::from_vector_i64({8}, {1}), table), InvalidArgument);
}

TEST(Grad, AttentionWithMasksAndDropout) {
  const std::int64_t B = 2, H = 2, T = 4, D = 3;
  Tensor q = random_tensor({B, H, T, D}, 19), k = random_tensor({B, H, T, D}, 20), v = random_tensor({B, H, T, D}, 21);
  struct Variant {
    const char* name;
    AttentionMask mask;
    float p;
  };
  AttentionMask causal_pad;
  causal_pad.causal = true;
  causal_pad.key_padding = Tensor::from_vector_i64({4, 3}, {2});
  AttentionMask additive;
  additive.mask = random_tensor({B, T, T}, 22, -1.0f, 0.0f);
  for (const Variant& var : {Variant{"none", AttentionMask{}, 0.0f}, Variant{"causal+padding", causal_pad, 0.0f},
                             Variant{"additive", additive, 0.0f}, Variant{"causal+dropout", causal_pad, 0.2f}}) {
    SCOPED_TRACE(var.name);
    EXPECT_GRADCHECK([&](const V& in) { return V{sdpa_forward(in[0], in[1], in[2], var.mask, 0.0f, nullptr, var.p, 5, 6, 7)}; },
                     [&](const V& in, const V& d) {
                       AttentionSaved s;
                       sdpa_forward(in[0], in[1], in[2], var.mask, 0.0f, &s, var.p, 5, 6, 7);
                       AttentionGrads g = sdpa_backward(d[0], in[0], in[1], in[2], s, 0.0f);
                       return V{g.dq, g.dk, g.dv};
                     },
                     {q, k, v});
  }
}

TEST(Grad, AddBroadcastConcatSplitPermute) {
  Tensor a = random_tensor({3, 4, 5}, 23), b = random_tensor({4, 5}, 24);
  EXPECT_GRADCHECK([&](const V& in) { return V{add(in[0], in[1])}; },
                   [&](const V& in, const V& d) { return V{d[0], sum_to_shape(d[0], in[1].shape())}; }, {a, b});
  Tensor c = random_tensor({3, 2, 5}, 25);
  EXPECT_GRADCHECK([&](const V& in) { return V{concat({in[0], in[1]}, 1)}; },
                   [&](const V& in, const V& d) { return split(d[0], {4, 2}, 1); }, {a, c});
  const std::vector<std::int64_t> order = {2, 0, 1};
  EXPECT_GRADCHECK([&](const V& in) { return V{permute_copy(in[0], order)}; },
                   [&](const V& in, const V& d) { return V{permute_copy(d[0], inverse_permutation(order))}; }, {a});
}

TEST(Grad, Reductions) {
  Tensor x = random_tensor({3, 4, 5}, 26);
  for (bool keep : {false, true}) {
    EXPECT_GRADCHECK([&](const V& in) { return V{sum(in[0], {0, 2}, keep)}; },
                     [&](const V& in, const V& d) { return V{sum_backward(d[0], in[0].shape(), {0, 2}, keep)}; }, {x});
    EXPECT_GRADCHECK([&](const V& in) { return V{mean(in[0], {-1}, keep)}; },
                     [&](const V& in, const V& d) { return V{mean_backward(d[0], in[0].shape(), {-1}, keep)}; }, {x});
    EXPECT_GRADCHECK([&](const V& in) { return V{amax(in[0], 1, keep).values}; },
                     [&](const V& in, const V& d) {
                       MaxResult m = amax(in[0], 1, keep);
                       return V{amax_backward(d[0], m.indices, in[0].shape(), 1, keep)};
                     },
                     {x}, GradcheckOptions{.eps = 1e-3});
  }
}

TEST(Grad, CrossEntropyWithSmoothingAndIgnoreIndex) {
  Tensor logits = random_tensor({6, 7}, 27, -3.0f, 3.0f);
  Tensor targets = Tensor::from_vector_i64({1, -100, 6, 0, 3, 3}, {6});
  for (float e : {0.0f, 0.1f}) {
    EXPECT_GRADCHECK([&](const V& in) { return V{scalar(softmax_cross_entropy_forward(in[0], targets, e).loss)}; },
                     [&](const V& in, const V& d) {
                       auto f = softmax_cross_entropy_forward(in[0], targets, e);
                       return V{softmax_cross_entropy_backward(f, targets, e, -100, d[0].data<float>()[0])};
                     },
                     {logits}, GradcheckOptions{.eps = 1e-2, .atol = 1e-3});
  }
}

TEST(Grad, BinaryCrossEntropyWithLogits) {
  Tensor x = random_tensor({4, 6}, 28, -4.0f, 4.0f), t = random_tensor({4, 6}, 29, 0.0f, 1.0f);
  EXPECT_GRADCHECK([&](const V& in) { return V{scalar(bce_with_logits_forward(in[0], t))}; },
                   [&](const V& in, const V& d) { return V{bce_with_logits_backward(in[0], t, d[0].data<float>()[0])}; },
                   {x}, GradcheckOptions{.eps = 1e-2, .atol = 1e-3});
}

}  // namespace
}  // namespace benchhost::nn
