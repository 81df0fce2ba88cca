// Layers (nn/layers.hpp): gradients through the Layer interface, parameter bookkeeping, eval
// mode, sparse embedding gradients.

#include <gtest/gtest.h>

#include "benchhost/nn/layers.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using V = std::vector<Tensor>;

TEST(Layers, LinearGradcheckAndGradAccumulation) {
  Linear lin(6, 4, true, Activation::gelu_tanh, 3);
  lin.weight().value.copy_(random_tensor({4, 6}, 1));
  lin.bias()->value.copy_(random_tensor({4}, 2));
  int ready = 0;
  for (auto* p : lin.parameters()) p->grad_ready_hook = [&](Parameter&) { ++ready; };
  V inputs = {random_tensor({3, 6}, 3), lin.weight().value, lin.bias()->value};
  // gradcheck perturbs clones of the inputs: load them into the layer on every call
  auto load = [&](const V& in) {
    lin.weight().value.copy_(in[1]);
    lin.bias()->value.copy_(in[2]);
  };
  EXPECT_GRADCHECK([&](const V& in) { load(in); return V{lin.forward(in[0])}; },
                   [&](const V& in, const V& d) {
                     load(in);
                     lin.zero_grad();
                     lin.forward(in[0]);
                     Tensor dx = lin.backward(d[0]);
                     return V{dx, lin.weight().grad.clone(), lin.bias()->grad.clone()};
                   },
                   inputs);
  EXPECT_GT(ready, 0) << "backward must mark parameter gradients ready";
  // a second backward without zero_grad accumulates
  lin.zero_grad();
  Tensor x = random_tensor({3, 6}, 4), dy = random_tensor({3, 4}, 5);
  lin.forward(x);
  lin.backward(dy);
  auto once = lin.weight().grad.to_float_vector();
  lin.forward(x);
  lin.backward(dy);
  auto twice = lin.weight().grad.to_float_vector();
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-5);
  EXPECT_FALSE(lin.bias()->weight_decay);
  EXPECT_EQ(lin.num_parameters(), 28);
}

// A first layer needs no input gradient: set_input_grad(false) skips it and leaves the parameter
// gradients as they were.
TEST(Layers, LinearWithoutInputGradientKeepsParameterGradients) {
  Linear a(6, 4, true, Activation::relu, 3), b(6, 4, true, Activation::relu, 3);
  b.set_input_grad(false);
  const Tensor x = random_tensor({5, 6}, 1), dy = random_tensor({5, 4}, 2);
  a.forward(x);
  b.forward(x);
  EXPECT_TRUE(a.backward(dy).defined());
  EXPECT_FALSE(b.backward(dy).defined());
  EXPECT_EQ(a.weight().grad.to_float_vector(), b.weight().grad.to_float_vector());
  EXPECT_EQ(a.bias()->grad.to_float_vector(), b.bias()->grad.to_float_vector());
}

// Sequential: the same outputs and gradients as its layers called by hand, parameters reached
// through the children, and a refusal when a middle layer withholds the input gradient.
TEST(Layers, SequentialChainsForwardAndBackward) {
  Sequential seq;
  seq.add(std::make_unique<Linear>(6, 5, true, Activation::relu, 7));
  seq.add(std::make_unique<Linear>(5, 3, true, Activation::none, 8));
  Linear l1(6, 5, true, Activation::relu, 7), l2(5, 3, true, Activation::none, 8);
  EXPECT_EQ(seq.size(), 2u);
  EXPECT_EQ(seq.num_parameters(), l1.num_parameters() + l2.num_parameters());
  const Tensor x = random_tensor({4, 6}, 3), dy = random_tensor({4, 3}, 4);
  const Tensor y = seq.forward(x);
  EXPECT_EQ(y.to_float_vector(), l2.forward(l1.forward(x)).to_float_vector());
  const Tensor dx = seq.backward(dy);
  EXPECT_EQ(dx.to_float_vector(), l1.backward(l2.backward(dy)).to_float_vector());
  EXPECT_EQ(static_cast<Linear&>(seq[0]).weight().grad.to_float_vector(), l1.weight().grad.to_float_vector());
  // The first layer may skip its input gradient; a later one may not.
  static_cast<Linear&>(seq[0]).set_input_grad(false);
  seq.forward(x);
  EXPECT_FALSE(seq.backward(dy).defined());
  static_cast<Linear&>(seq[0]).set_input_grad(true);
  static_cast<Linear&>(seq[1]).set_input_grad(false);
  seq.forward(x);
  EXPECT_THROW(seq.backward(dy), InvalidArgument);
}

TEST(Layers, DropoutIsIdentityInEvalMode) {
  DropoutRng rng{3, 0};
  Dropout d(0.5f, &rng, 0);
  Tensor x = random_tensor({10, 10}, 1);
  d.train(false);
  EXPECT_EQ(d.forward(x).to_float_vector(), x.to_float_vector());
  d.train(true);
  Tensor y = d.forward(x);
  EXPECT_NE(y.to_float_vector(), x.to_float_vector());
  rng.step = 1;
  EXPECT_NE(d.forward(x).to_float_vector(), y.to_float_vector()) << "a new step must draw a new mask";
}

TEST(Layers, EmbeddingSparseGradientMatchesDense) {
  Embedding dense(20, 4, false, 1), sparse(20, 4, true, 1);
  Tensor ids = Tensor::from_vector_i64({5, 2, 5, 19}, {2, 2});
  Tensor dy = random_tensor({2, 2, 4}, 2);
  EXPECT_EQ(dense.forward(ids).to_float_vector(), sparse.forward(ids).to_float_vector());
  dense.backward(dy);
  sparse.backward(dy);
  ASSERT_TRUE(sparse.weight().sparse_rows.defined());
  EXPECT_EQ(sparse.weight().sparse_rows.to_float_vector(), (std::vector<float>{2, 5, 19}));
  EXPECT_TRUE(benchhost::testing::tensors_close(sparse.weight().grad, dense.weight().grad, 1e-6, 0));
  // a second batch extends the row set
  sparse.forward(Tensor::from_vector_i64({7}, {1}));
  sparse.backward(random_tensor({1, 4}, 3));
  EXPECT_EQ(sparse.weight().sparse_rows.to_float_vector(), (std::vector<float>{2, 5, 7, 19}));
}

TEST(Layers, MultiHeadAttentionChecksShapes) {
  EXPECT_THROW(MultiHeadAttention(10, 3, 0.0f, nullptr, 0), InvalidArgument);
  MultiHeadAttention mha(8, 2, 0.0f, nullptr, 0);
  EXPECT_THROW(mha.forward(Tensor::zeros({2, 3, 6}), AttentionMask{}), InvalidArgument);
  EXPECT_EQ(mha.forward(Tensor::zeros({2, 3, 8}), AttentionMask{}).shape(), (Shape{2, 3, 8}));
}

}  // namespace
}  // namespace benchhost::nn
