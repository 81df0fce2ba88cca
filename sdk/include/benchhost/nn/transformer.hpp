#pragma once
/// @file nn/transformer.hpp  The transformer encoder/decoder block shared by BERT and GPT-3.
///
/// Note [One transformer block]
/// BERT is post-LN:  h = LN1(x + Drop(Attn(x)));  y = LN2(h + Drop(FFN(h)))
/// GPT-3 is pre-LN:  h = x + Drop(Attn(LN1(x)));  y = h + Drop(FFN(LN2(h)))
/// with FFN(u) = Linear2(GELU(Linear1(u))) (C -> ffn -> C). Attention masks: key padding (BERT),
/// causal (GPT-3), and an optional block-diagonal mask for packed sequences (BERT packing); see
/// AttentionMask in nn/ops.hpp. Dropout sites draw from the model's DropoutRng with stream ids
/// derived from `layer_index`, so runs are reproducible per (seed, step) whatever the threads.
/// Parameter names: attn.qkv.{weight,bias}, attn.out.{weight,bias}, ln1.{weight,bias},
/// fc1.{weight,bias}, fc2.{weight,bias}, ln2.{weight,bias}.

#include <cstdint>

#include "benchhost/nn/layers.hpp"

namespace benchhost::nn {

struct TransformerBlockConfig {
  std::int64_t hidden = 768;
  std::int64_t heads = 12;
  std::int64_t ffn = 3072;
  float hidden_dropout = 0.1f;     ///< after attention output and after FFN
  float attention_dropout = 0.1f;  ///< on attention probabilities
  bool pre_ln = false;             ///< false: BERT (post-LN); true: GPT (pre-LN)
  Activation activation = Activation::gelu_erf;  ///< gelu_tanh for GPT
  float layernorm_eps = 1e-12f;    ///< BERT 1e-12, GPT 1e-5
  std::int64_t layer_index = 0;    ///< derives the dropout stream ids
  std::uint64_t init_seed = 0;
};

/// x: [B, T, hidden] f32 -> [B, T, hidden]. One forward then one backward per step.
class TransformerBlock : public Module {
 public:
  TransformerBlock(const TransformerBlockConfig& config, const DropoutRng* rng);
  Tensor forward(const Tensor& x, const AttentionMask& mask);
  /// Returns dx; accumulates every parameter's gradient and marks it ready.
  Tensor backward(const Tensor& dy);
  const TransformerBlockConfig& config() const { return cfg_; }

  MultiHeadAttention& attention() { return *attn_; }
  LayerNorm& ln1() { return *ln1_; }
  LayerNorm& ln2() { return *ln2_; }
  Linear& fc1() { return *fc1_; }
  Linear& fc2() { return *fc2_; }

 private:
  TransformerBlockConfig cfg_;
  MultiHeadAttention* attn_ = nullptr;
  LayerNorm* ln1_ = nullptr;
  LayerNorm* ln2_ = nullptr;
  Linear* fc1_ = nullptr;  // with fused GELU (pre-activation saved)
  Linear* fc2_ = nullptr;
  Dropout* drop_attn_ = nullptr;
  Dropout* drop_ffn_ = nullptr;
};

}  // namespace benchhost::nn
