// The shared transformer block: finite-difference gradients (post-LN BERT and pre-LN GPT
// flavours, with masks and dropout) at small sizes, and no future leakage through a GPT block.

#include <gtest/gtest.h>

#include "benchhost/nn/transformer.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::GradcheckOptions;
using benchhost::testing::random_tensor;
using V = std::vector<Tensor>;

TransformerBlockConfig small(bool pre_ln, float dropout) {
  TransformerBlockConfig c;
  c.hidden = 8;
  c.heads = 2;
  c.ffn = 16;
  c.hidden_dropout = dropout;
  c.attention_dropout = dropout;
  c.pre_ln = pre_ln;
  c.activation = pre_ln ? Activation::gelu_tanh : Activation::gelu_erf;
  c.layernorm_eps = 1e-5f;
  c.layer_index = 1;
  c.init_seed = 99;
  return c;
}

// Gradcheck of the input and of every parameter. Parameters are perturbed through the block's
// own Parameter::value (the block is the function); inputs[0] is x.
void check_block(bool pre_ln, float dropout, const AttentionMask& mask) {
  DropoutRng rng{7, 3};
  TransformerBlock block(small(pre_ln, dropout), &rng);
  auto params = block.parameters();
  // Larger weights than the 0.02 init make the check sensitive to every term.
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i]->name.find("weight") != std::string::npos && params[i]->value.dim() == 2)
      params[i]->value.copy_(random_tensor(params[i]->value.shape(), 300 + i, -0.5f, 0.5f));
  V inputs = {random_tensor({2, 5, 8}, 1)};
  for (auto* p : params) inputs.push_back(p->value);  // shared storage: perturbing it perturbs the block
  auto fwd = [&](const V& in) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i]->value.copy_(in[i + 1]);
    return V{block.forward(in[0], mask)};
  };
  auto bwd = [&](const V& in, const V& d) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i]->value.copy_(in[i + 1]);
    block.zero_grad();
    block.forward(in[0], mask);
    V g = {block.backward(d[0])};
    for (auto* p : params) g.push_back(p->grad.clone());
    return g;
  };
  EXPECT_GRADCHECK(fwd, bwd, inputs, GradcheckOptions{.eps = 1e-2, .atol = 3e-3, .rtol = 3e-2, .max_checks_per_input = 12});
}

TEST(TransformerBlock, PostLnGradcheckWithPaddingMask) {
  AttentionMask m;
  m.key_padding = Tensor::from_vector_i64({5, 3}, {2});
  check_block(false, 0.0f, m);
}

TEST(TransformerBlock, PreLnGradcheckWithCausalMaskAndDropout) {
  AttentionMask m;
  m.causal = true;
  check_block(true, 0.1f, m);
}

TEST(TransformerBlock, GptBlockDoesNotLeakTheFuture) {
  DropoutRng rng{1, 0};
  TransformerBlock block(small(true, 0.0f), &rng);
  AttentionMask m;
  m.causal = true;
  Tensor x = random_tensor({1, 6, 8}, 2);
  Tensor y1 = block.forward(x, m);
  Tensor x2 = x.clone();
  for (std::int64_t e = 0; e < 8; ++e) x2.data<float>()[4 * 8 + e] += 0.3f * static_cast<float>(e % 3);  // token 4 (not a constant shift: LN would remove it)
  Tensor y2 = block.forward(x2, m);
  for (std::int64_t t = 0; t < 6; ++t) {
    double diff = 0;
    for (std::int64_t e = 0; e < 8; ++e) diff += std::fabs(y1.item({0, t, e}) - y2.item({0, t, e}));
    if (t < 4) EXPECT_EQ(diff, 0.0) << "token " << t << " saw token 4";
    else EXPECT_GT(diff, 1e-4);
  }
}

TEST(TransformerBlock, ParameterNamesAndCount) {
  DropoutRng rng;
  TransformerBlock block(small(false, 0.0f), &rng);
  std::vector<std::string> names;
  for (auto* p : block.parameters()) names.push_back(p->name);
  EXPECT_NE(std::find(names.begin(), names.end(), "attn.qkv.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "ln2.bias"), names.end());
  // qkv 8*24+24, out 8*8+8, ln1 16, fc1 8*16+16, fc2 16*8+8, ln2 16
  EXPECT_EQ(block.num_parameters(), 216 + 72 + 16 + 144 + 136 + 16);
}

}  // namespace
}  // namespace benchhost::nn
