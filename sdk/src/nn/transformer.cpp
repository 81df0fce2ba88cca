// TransformerBlock (nn/transformer.hpp): Note [One transformer block].

#include "benchhost/nn/transformer.hpp"

#include "benchhost/error.hpp"
#include "benchhost/random.hpp"

namespace benchhost::nn {

namespace {
// Dropout stream ids: 16 per layer, one per dropout site.
constexpr std::uint64_t kSiteAttentionProbs = 0, kSiteAttentionOut = 1, kSiteFfnOut = 2;
}  // namespace

TransformerBlock::TransformerBlock(const TransformerBlockConfig& config, const DropoutRng* rng)
    : cfg_(config) {
  BH_CHECK_AS(InvalidArgument, cfg_.hidden > 0 && cfg_.ffn > 0 && cfg_.heads > 0 && cfg_.hidden % cfg_.heads == 0,
              "TransformerBlock: hidden {} must be a positive multiple of heads {}; ffn {} must be positive",
              cfg_.hidden, cfg_.heads, cfg_.ffn);
  const std::uint64_t base = static_cast<std::uint64_t>(cfg_.layer_index) * 16;
  const std::uint64_t seed = mix64(cfg_.init_seed ^ mix64(static_cast<std::uint64_t>(cfg_.layer_index)));
  attn_ = &register_module("attn", std::make_unique<MultiHeadAttention>(
                                       cfg_.hidden, cfg_.heads, cfg_.attention_dropout, rng,
                                       base + kSiteAttentionProbs, seed ^ 1));
  ln1_ = &register_module("ln1", std::make_unique<LayerNorm>(cfg_.hidden, cfg_.layernorm_eps));
  fc1_ = &register_module("fc1", std::make_unique<Linear>(cfg_.hidden, cfg_.ffn, true, cfg_.activation, mix64(seed ^ 2)));
  fc2_ = &register_module("fc2", std::make_unique<Linear>(cfg_.ffn, cfg_.hidden, true, Activation::none, mix64(seed ^ 3)));
  ln2_ = &register_module("ln2", std::make_unique<LayerNorm>(cfg_.hidden, cfg_.layernorm_eps));
  drop_attn_ = &register_module("drop_attn", std::make_unique<Dropout>(cfg_.hidden_dropout, rng, base + kSiteAttentionOut));
  drop_ffn_ = &register_module("drop_ffn", std::make_unique<Dropout>(cfg_.hidden_dropout, rng, base + kSiteFfnOut));
}

Tensor TransformerBlock::forward(const Tensor& x, const AttentionMask& mask) {
  if (!cfg_.pre_ln) {
    Tensor h = add(x, drop_attn_->forward(attn_->forward(x, mask)));
    h = ln1_->forward(h);
    Tensor y = add(h, drop_ffn_->forward(fc2_->forward(fc1_->forward(h))));
    return ln2_->forward(y);
  }
  Tensor h = add(x, drop_attn_->forward(attn_->forward(ln1_->forward(x), mask)));
  return add(h, drop_ffn_->forward(fc2_->forward(fc1_->forward(ln2_->forward(h)))));
}

Tensor TransformerBlock::backward(const Tensor& dy) {
  if (!cfg_.pre_ln) {
    Tensor dy_in = ln2_->backward(dy);                                   // d(h + ffn)
    Tensor dh = fc1_->backward(fc2_->backward(drop_ffn_->backward(dy_in)));
    add_(dh, dy_in);                                                     // residual
    Tensor dh_in = ln1_->backward(dh);                                   // d(x + attn)
    Tensor dx = attn_->backward(drop_attn_->backward(dh_in));
    add_(dx, dh_in);                                                     // residual
    return dx;
  }
  Tensor dv = fc1_->backward(fc2_->backward(drop_ffn_->backward(dy)));
  Tensor dh = ln2_->backward(dv);
  add_(dh, dy);                                                          // residual
  Tensor dx = ln1_->backward(attn_->backward(drop_attn_->backward(dh)));
  add_(dx, dh);                                                          // residual
  return dx;
}

}  // namespace benchhost::nn
