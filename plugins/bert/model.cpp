#include "model.hpp"

#include <cmath>

#include <fmt/format.h>

#include "benchhost/nn/init.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/precision.hpp"

namespace benchhost::bert {

BertModel::BertModel(const BertConfig& config, std::uint64_t seed) : nn::Module("bert"), cfg_(config) {
  const auto& s = cfg_.shape;
  BH_CHECK_AS(InvalidArgument, s.layers >= 1 && s.hidden >= 1 && s.heads >= 1 && s.hidden % s.heads == 0 &&
                                   s.ffn >= 1 && s.vocab > 5 && s.max_positions >= s.seq_len && s.seq_len >= 2,
              "BERT shape: layers {} hidden {} heads {} (must divide hidden) ffn {} vocab {} max_positions {} "
              ">= seq_len {}", s.layers, s.hidden, s.heads, s.ffn, s.vocab, s.max_positions, s.seq_len);
  rng_.seed = seed;
  auto& emb = register_module("embeddings", std::make_unique<nn::Module>("embeddings"));
  word_ = &emb.register_module("word", std::make_unique<nn::Embedding>(s.vocab, s.hidden));
  position_ = &emb.register_module("position", std::make_unique<nn::Embedding>(s.max_positions, s.hidden));
  segment_ = &emb.register_module("segment", std::make_unique<nn::Embedding>(2, s.hidden));
  emb_ln_ = &emb.register_module("ln", std::make_unique<nn::LayerNorm>(s.hidden, cfg_.layernorm_eps));
  emb_drop_ = &emb.register_module("drop", std::make_unique<nn::Dropout>(cfg_.hidden_dropout, &rng_, 1));
  auto& encoder = register_module("encoder", std::make_unique<nn::Module>("encoder"));
  for (std::int64_t l = 0; l < s.layers; ++l) {
    nn::TransformerBlockConfig bc;
    bc.hidden = s.hidden;
    bc.heads = s.heads;
    bc.ffn = s.ffn;
    bc.hidden_dropout = cfg_.hidden_dropout;
    bc.attention_dropout = cfg_.attention_dropout;
    bc.pre_ln = false;
    bc.activation = nn::Activation::gelu_erf;
    bc.layernorm_eps = cfg_.layernorm_eps;
    bc.layer_index = l;
    layers_.push_back(&encoder.register_module(fmt::format("layer.{}", l),
                                               std::make_unique<nn::TransformerBlock>(bc, &rng_)));
  }
  pooler_ = &register_module("pooler", std::make_unique<nn::Linear>(s.hidden, s.hidden, true, nn::Activation::tanh));
  auto& mlm = register_module("mlm", std::make_unique<nn::Module>("mlm"));
  mlm_dense_ = &mlm.register_module("dense", std::make_unique<nn::Linear>(s.hidden, s.hidden, true, nn::Activation::gelu_erf));
  mlm_ln_ = &mlm.register_module("ln", std::make_unique<nn::LayerNorm>(s.hidden, cfg_.layernorm_eps));
  mlm_bias_ = &mlm.register_parameter("bias", Tensor::zeros({s.vocab}), false);
  nsp_ = &register_module("nsp", std::make_unique<nn::Linear>(s.hidden, 2));
  initialize(seed);
}

void BertModel::initialize(std::uint64_t seed) {
  for (nn::Parameter* p : parameters()) {
    const std::string& n = p->name;
    auto ends_with = [&](const char* suffix) {
      const std::string s(suffix);
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    const bool is_norm = n.find(".ln") != std::string::npos;
    if (is_norm && ends_with(".weight")) {
      nn::init::ones_(p->value);
    } else if (ends_with(".bias") || ends_with("mlm.bias") || is_norm) {
      nn::init::zeros_(p->value);
    } else {
      Rng rng = nn::init::rng_for(seed, n);
      nn::init::trunc_normal_(p->value, rng, 0.0f, cfg_.init_std);
    }
  }
}

BertOutput BertModel::forward(const BertBatch& b, std::uint64_t step) {
  rng_.step = step;
  const Tensor flat = encode(b);
  BertOutput out;
  masked_lm_head(flat, b, out);
  next_sentence_head(flat, b, out);
  out.loss = out.mlm_loss + out.nsp_loss;
  if (!std::isfinite(out.loss)) BH_THROW(Diverged, "BERT loss is {} at step {} (masked LM {}, NSP {})", out.loss, step, out.mlm_loss, out.nsp_loss);
  return out;
}

Tensor BertModel::encode(const BertBatch& b) {
  const auto& s = cfg_.shape;
  const std::int64_t B = b.input_ids.size(0), T = b.input_ids.size(1);
  BH_CHECK_AS(InvalidArgument, T <= s.max_positions, "BERT batch of {} tokens exceeds max positions {}", T, s.max_positions);
  Tensor x = word_->forward(b.input_ids);
  nn::add_(x, position_->forward(b.position_ids));
  nn::add_(x, segment_->forward(b.segment_ids));
  x = emb_drop_->forward(emb_ln_->forward(x));
  nn::AttentionMask mask;
  if (b.packed_mask.defined()) mask.mask = b.packed_mask;
  else mask.key_padding = b.key_padding;
  for (auto* layer : layers_) x = layer->forward(x, mask);
  hidden_shape_ = x.shape();
  return x.view({B * T, s.hidden});
}

void BertModel::masked_lm_head(const Tensor& flat, const BertBatch& b, BertOutput& out) {
  // Masked LM on the masked positions only.
  mlm_index_ = b.mlm_index;
  mlm_labels_ = b.mlm_labels;
  Tensor h = nn::embedding_forward(b.mlm_index, flat);
  // The tied decoder is a matmul like any other: in the policy's matmul type, on a copy of the
  // fp32 word table (Note [Layers under a precision policy]); the loss reads the logits in f32.
  const DType mm = precision().storage_dtype(OpClass::matmul);
  mlm_transformed_ = nn::cast(mlm_ln_->forward(mlm_dense_->forward(h)), mm);
  word_cast_ = nn::cast(word_->weight().value, mm);
  Tensor logits = nn::linear_forward(mlm_transformed_, word_cast_, mlm_bias_->value);
  mlm_ce_ = nn::softmax_cross_entropy_forward(logits, b.mlm_labels);
  out.mlm_loss = mlm_ce_.loss;
  out.mlm_count = mlm_ce_.count;
  out.mlm_scores = mlm_ce_.log_probs;
}

void BertModel::next_sentence_head(const Tensor& flat, const BertBatch& b, BertOutput& out) {
  // Next-sentence prediction on each sequence's [CLS].
  cls_index_ = b.cls_index;
  nsp_labels_ = b.nsp_labels;
  Tensor pooled = pooler_->forward(nn::embedding_forward(b.cls_index, flat));
  nsp_ce_ = nn::softmax_cross_entropy_forward(nsp_->forward(pooled), b.nsp_labels);
  out.nsp_loss = nsp_ce_.loss;
  out.nsp_count = nsp_ce_.count;
  out.nsp_scores = nsp_ce_.log_probs;
}

void BertModel::backward(float loss_scale) {
  const auto& s = cfg_.shape;
  const std::int64_t rows = hidden_shape_[0] * hidden_shape_[1];
  Tensor dflat = Tensor::zeros({rows, s.hidden}, DType::f32, mlm_transformed_.device());

  Tensor dlogits = nn::cast(nn::softmax_cross_entropy_backward(mlm_ce_, mlm_labels_, 0.0f, -100, loss_scale),
                            mlm_transformed_.dtype());
  Tensor no_preact;
  Tensor dt = nn::linear_backward(dlogits, mlm_transformed_, word_cast_, no_preact, nn::Activation::none,
                                  word_->weight().grad, mlm_bias_->grad);
  word_cast_ = Tensor();
  mlm_bias_->mark_grad_ready();
  Tensor dh = mlm_dense_->backward(mlm_ln_->backward(dt));
  nn::embedding_backward(dh, mlm_index_, dflat);

  Tensor dnsp = nn::softmax_cross_entropy_backward(nsp_ce_, nsp_labels_, 0.0f, -100, loss_scale);
  Tensor dcls = pooler_->backward(nsp_->backward(dnsp));
  nn::embedding_backward(dcls, cls_index_, dflat);

  Tensor dx = dflat.view(hidden_shape_);
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) dx = (*it)->backward(dx);
  dx = emb_ln_->backward(emb_drop_->backward(dx));
  segment_->backward(dx);
  position_->backward(dx);
  word_->backward(dx);  // after the tied decoder's contribution: the word table's grad is now final
}

}  // namespace benchhost::bert
