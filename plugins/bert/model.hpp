#pragma once
/// @file plugins/bert/model.hpp  BERT for pre-training (masked LM + next-sentence prediction),
/// built from the SDK's layers and its one TransformerBlock (post-LN).
///
/// Note [BERT forward]
///   x = LN(word[ids] + position[pos] + segment[seg]); x = Dropout(x)
///   x = TransformerBlock_l(x, mask)  for l = 0..L-1     (post-LN, GELU(erf) FFN)
///   MLM: h = x at the masked positions only (a gather, as MLPerf's reference does);
///        logits = LN(GELU(h W_t + b_t)) E^T + b_out   (E = the word embedding, tied)
///   NSP: logits = (tanh(x[CLS] W_p + b_p)) W_nsp + b_nsp
///   loss = mean CE over masked tokens + mean CE over NSP labels.
/// Padding is a key-padding mask; packed rows (several sequences per row) use a block-diagonal
/// mask, positions restarting at 0 per sequence and one [CLS] per sequence (Note [Packing] in
/// data.hpp). Gathers and their scatter-add backward are the embedding ops applied to the
/// flattened hidden states [B*T, H], so they run on whatever device the ops support.
/// Parameter names (the weight file and tools/peers/bert_peer.py rely on them):
///   embeddings.{word,position,segment}.weight, embeddings.ln.{weight,bias},
///   encoder.layer.<l>.<TransformerBlock names>, pooler.{weight,bias},
///   mlm.dense.{weight,bias}, mlm.ln.{weight,bias}, mlm.bias, nsp.{weight,bias}.

#include <cstdint>
#include <vector>

#include "benchhost/nn/layers.hpp"
#include "benchhost/nn/transformer.hpp"
#include "model_costs.hpp"

namespace benchhost::bert {

struct BertConfig {
  lm::ModelShape shape;  ///< layers, hidden, heads, ffn, vocab, max_positions, seq_len
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float layernorm_eps = 1e-12f;
  float init_std = 0.02f;  ///< truncated normal (+-2 sigma), BERT's initializer_range
};

/// One batch, CPU or device tensors. B rows of T tokens; M masked positions and K sequences
/// (K = B without packing) over the whole batch.
struct BertBatch {
  Tensor input_ids;      ///< i32 [B, T]
  Tensor segment_ids;    ///< i32 [B, T]
  Tensor position_ids;   ///< i32 [B, T]
  Tensor key_padding;    ///< u8 [B, T] 1 = real token (unpacked batches)
  Tensor packed_mask;    ///< u8 [B, T, T] block-diagonal (packed batches; then key_padding unused)
  Tensor mlm_index;      ///< i32 [M] flat index b*T + position of each masked token
  Tensor mlm_labels;     ///< i64 [M] original token id, -100 for padding entries
  Tensor cls_index;      ///< i32 [K] flat index of each sequence's [CLS]
  Tensor nsp_labels;     ///< i64 [K] 0 = IsNext, 1 = random, -100 = padding entry
  std::int64_t sequences = 0;  ///< real sequences (samples) in the batch
};

struct BertOutput {
  double loss = 0, mlm_loss = 0, nsp_loss = 0;
  std::int64_t mlm_count = 0, nsp_count = 0;  ///< labelled masked positions and sequences
  /// Log-probabilities, f32 on the model's device, for the accuracies (metrics::MaskedLmAccuracy
  /// with the batch's mlm_labels / nsp_labels): masked LM [M, V], next sentence [K, 2].
  Tensor mlm_scores, nsp_scores;
};

class BertModel : public nn::Module {
 public:
  BertModel(const BertConfig& config, std::uint64_t seed);
  /// Forward pass and losses; keeps what backward() needs. In eval mode (train(false)) dropout
  /// is off. `step` selects the dropout masks (Note [Dropout randomness]).
  BertOutput forward(const BertBatch& batch, std::uint64_t step);
  /// Gradients of the last forward's total loss, accumulated into every parameter's grad.
  /// Gradients of the last forward's loss (masked LM + NSP) times `loss_scale` (dynamic loss
  /// scaling under fp16; 1 otherwise) into every parameter's grad.
  void backward(float loss_scale = 1.0f);
  const BertConfig& config() const { return cfg_; }
  /// Re-draw every weight: truncated normal(0, init_std) for matrices and embeddings, zero
  /// biases, LayerNorm 1/0. Per-parameter streams from (seed, name) (nn/init.hpp).
  void initialize(std::uint64_t seed);

 private:
  // The steps of forward(): embeddings and encoder, [B*T, H] hidden states; then each head's
  // loss (and what its backward needs) into `out`.
  Tensor encode(const BertBatch& batch);
  void masked_lm_head(const Tensor& flat, const BertBatch& batch, BertOutput& out);
  void next_sentence_head(const Tensor& flat, const BertBatch& batch, BertOutput& out);

  BertConfig cfg_;
  nn::DropoutRng rng_;
  nn::Embedding* word_ = nullptr;
  nn::Embedding* position_ = nullptr;
  nn::Embedding* segment_ = nullptr;
  nn::LayerNorm* emb_ln_ = nullptr;
  nn::Dropout* emb_drop_ = nullptr;
  std::vector<nn::TransformerBlock*> layers_;
  nn::Linear* pooler_ = nullptr;
  nn::Linear* mlm_dense_ = nullptr;
  nn::LayerNorm* mlm_ln_ = nullptr;
  nn::Parameter* mlm_bias_ = nullptr;
  nn::Linear* nsp_ = nullptr;

  // Saved by forward for backward.
  Shape hidden_shape_;
  Tensor mlm_index_, mlm_labels_, cls_index_, nsp_labels_, mlm_transformed_;
  Tensor word_cast_;  // the tied decoder weight in the matmul's type, from forward to backward
  nn::CrossEntropyResult mlm_ce_, nsp_ce_;
};

}  // namespace benchhost::bert
