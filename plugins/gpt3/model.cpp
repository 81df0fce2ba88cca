#include "model.hpp"

#include <cmath>

#include <fmt/format.h>

#include "benchhost/nn/init.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/precision.hpp"

namespace benchhost::gpt3 {

GptModel::GptModel(const GptConfig& config, std::uint64_t seed) : nn::Module("gpt3"), cfg_(config) {
  const auto& s = cfg_.shape;
  BH_CHECK_AS(InvalidArgument, s.layers >= 1 && s.hidden >= 1 && s.heads >= 1 && s.hidden % s.heads == 0 &&
                                   s.ffn >= 1 && s.vocab >= 2 && s.max_positions >= s.seq_len && s.seq_len >= 1,
              "GPT-3 shape: layers {} hidden {} heads {} (must divide hidden) ffn {} vocab {} max_positions {} >= seq_len {}",
              s.layers, s.hidden, s.heads, s.ffn, s.vocab, s.max_positions, s.seq_len);
  rng_.seed = seed;
  wte_ = &register_module("wte", std::make_unique<nn::Embedding>(s.vocab, s.hidden));
  wpe_ = &register_module("wpe", std::make_unique<nn::Embedding>(s.max_positions, s.hidden));
  drop_ = &register_module("drop", std::make_unique<nn::Dropout>(cfg_.hidden_dropout, &rng_, 1));
  for (std::int64_t l = 0; l < s.layers; ++l) {
    nn::TransformerBlockConfig bc;
    bc.hidden = s.hidden;
    bc.heads = s.heads;
    bc.ffn = s.ffn;
    bc.hidden_dropout = cfg_.hidden_dropout;
    bc.attention_dropout = cfg_.attention_dropout;
    bc.pre_ln = true;
    bc.activation = nn::Activation::gelu_tanh;
    bc.layernorm_eps = 1e-5f;
    bc.layer_index = l;
    layers_.push_back(&register_module(fmt::format("layer.{}", l), std::make_unique<nn::TransformerBlock>(bc, &rng_)));
  }
  ln_f_ = &register_module("ln_f", std::make_unique<nn::LayerNorm>(s.hidden, 1e-5f));
  initialize(seed);
}

void GptModel::initialize(std::uint64_t seed) {
  const float scaled = cfg_.init_std / std::sqrt(2.0f * static_cast<float>(cfg_.shape.layers));
  for (nn::Parameter* p : parameters()) {
    const std::string& n = p->name;
    auto ends_with = [&](const std::string& suffix) {
      return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const bool is_norm = n.find(".ln") != std::string::npos || n.rfind("ln_f.", 0) == 0;
    if (is_norm) {
      ends_with(".weight") ? nn::init::ones_(p->value) : nn::init::zeros_(p->value);
    } else if (ends_with(".bias")) {
      nn::init::zeros_(p->value);
    } else {
      Rng rng = nn::init::rng_for(seed, n);
      const bool output_projection = ends_with("attn.out.weight") || ends_with("fc2.weight");
      nn::init::normal_(p->value, rng, 0.0f, output_projection ? scaled : cfg_.init_std);
    }
  }
}

double GptModel::forward(const Tensor& tokens, const Tensor& targets, std::uint64_t step) {
  const auto& s = cfg_.shape;
  rng_.step = step;
  BH_CHECK_AS(InvalidArgument, tokens.dim() == 2 && targets.shape() == tokens.shape(),
              "GPT-3 forward: tokens {} and targets {} must both be [B, T]", shape_str(tokens.shape()),
              shape_str(targets.shape()));
  const std::int64_t B = tokens.size(0), T = tokens.size(1);
  BH_CHECK_AS(InvalidArgument, T <= s.max_positions, "GPT-3: {} tokens exceed the {} learned positions", T, s.max_positions);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) pos[t] = static_cast<std::int32_t>(t);
  Tensor x = wte_->forward(tokens);
  nn::add_(x, wpe_->forward(Tensor::from_vector_i32(pos, {T}, tokens.device())));  // broadcast over B
  x = drop_->forward(x);
  nn::AttentionMask mask;
  mask.causal = true;
  for (auto* layer : layers_) x = layer->forward(x, mask);
  hidden_shape_ = x.shape();
  // The tied output projection is a matmul like any other: in the policy's matmul type, on a
  // copy of the fp32 table (Note [Layers under a precision policy]); the loss reads it in f32.
  const DType mm = precision().storage_dtype(OpClass::matmul);
  final_ = nn::cast(ln_f_->forward(x).view({B * T, s.hidden}), mm);
  wte_cast_ = nn::cast(wte_->weight().value, mm);
  Tensor logits = nn::linear_forward(final_, wte_cast_, Tensor());
  // i32 or i64 targets, as the loader gives them: the cross entropy takes either on every device.
  targets_ = targets.reshape({B * T});
  ce_ = nn::softmax_cross_entropy_forward(logits, targets_);
  last_loss_ = ce_.loss;
  last_count_ = ce_.count;
  if (!std::isfinite(last_loss_)) BH_THROW(Diverged, "GPT-3 loss is {} at step {}", last_loss_, step);
  return last_loss_;
}

void GptModel::backward(float loss_scale) {
  Tensor dlogits = nn::cast(nn::softmax_cross_entropy_backward(ce_, targets_, 0.0f, -100, loss_scale), final_.dtype());
  Tensor no_bias, no_preact;
  Tensor dfinal = nn::linear_backward(dlogits, final_, wte_cast_, no_preact, nn::Activation::none,
                                      wte_->weight().grad, no_bias);
  wte_cast_ = Tensor();
  Tensor dx = ln_f_->backward(dfinal.view(hidden_shape_));
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) dx = (*it)->backward(dx);
  dx = drop_->backward(dx);
  wpe_->backward(nn::sum(dx, {0}));  // positions 0..T-1 shared by every row
  wte_->backward(dx);               // after the tied projection's contribution
}

}  // namespace benchhost::gpt3
