#pragma once
/// @file plugins/gpt3/model.hpp  GPT-3: a decoder-only pre-LN transformer with learned positions,
/// causal attention and the output projection tied to the token embedding, built from the SDK's
/// layers and its one TransformerBlock (pre-LN, GELU tanh, LayerNorm eps 1e-5).
///
/// Note [GPT-3 forward]
///   x = Dropout(wte[tokens] + wpe[0..T-1]);  x = Block_l(x, causal)  l = 0..L-1
///   logits = LN_f(x) wte^T;  loss = mean over tokens of CE(logits, next token)
/// Megatron-style initialisation: every weight matrix and embedding N(0, 0.02^2), the two
/// output projections of each block (attn.out.weight, fc2.weight) N(0, (0.02/sqrt(2 L))^2),
/// biases 0, LayerNorm 1/0.
/// Parameter names: wte.weight, wpe.weight, layer.<l>.<TransformerBlock names>, ln_f.{weight,bias}.

#include <cstdint>
#include <vector>

#include "benchhost/nn/layers.hpp"
#include "benchhost/nn/transformer.hpp"
#include "model_costs.hpp"

namespace benchhost::gpt3 {

struct GptConfig {
  lm::ModelShape shape;
  float hidden_dropout = 0.0f;     ///< MLPerf GPT-3 trains without dropout
  float attention_dropout = 0.0f;
  float init_std = 0.02f;
};

class GptModel : public nn::Module {
 public:
  GptModel(const GptConfig& config, std::uint64_t seed);
  /// tokens, targets: i32 [B, T] (targets i64 also accepted; -100 = ignored). Returns the mean
  /// cross-entropy (nats per token) and keeps what backward() needs.
  double forward(const Tensor& tokens, const Tensor& targets, std::uint64_t step);
  /// Sum of per-token losses and the token count of the last forward (for perplexity).
  double last_loss_sum() const { return last_loss_ * static_cast<double>(last_count_); }
  std::int64_t last_count() const { return last_count_; }
  /// Gradients of the last forward's loss times `loss_scale` (dynamic loss scaling under fp16;
  /// 1 otherwise) into every parameter's grad.
  void backward(float loss_scale = 1.0f);
  void initialize(std::uint64_t seed);
  const GptConfig& config() const { return cfg_; }

 private:
  GptConfig cfg_;
  nn::DropoutRng rng_;
  nn::Embedding* wte_ = nullptr;
  nn::Embedding* wpe_ = nullptr;
  nn::Dropout* drop_ = nullptr;
  std::vector<nn::TransformerBlock*> layers_;
  nn::LayerNorm* ln_f_ = nullptr;
  Shape hidden_shape_;
  Tensor final_, targets_;
  Tensor wte_cast_;  // the tied output weight in the matmul's type, from forward to backward
  nn::CrossEntropyResult ce_;
  double last_loss_ = 0;
  std::int64_t last_count_ = 0;
};

}  // namespace benchhost::gpt3
