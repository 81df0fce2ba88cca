#pragma once
/// @file plugins/bert/data.hpp  BERT's data: the MLPerf-layout samples (read from the data
/// folder, built once from a corpus for the mini), synthetic samples of the same shapes, batches
/// for BertModel, and the masked-LM baselines a target must beat.
///
/// Note [Packing]
/// Without packing each row holds one sample padded to seq_len (key-padding mask). With
/// packing, samples are placed greedily, in sampler order, into rows of seq_len tokens, at most
/// `max_per_row` per row, each keeping its own [CLS]...[SEP] tokens and segment ids, with
/// positions restarting at 0; the attention mask is block-diagonal (a token sees only its own
/// sequence). Masked positions are shifted to the row offset, so the model computes exactly
/// the losses of the unpacked samples with fewer padding tokens. The number of samples in a
/// packed batch therefore varies; it is reported as the step's sample count.

#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/memory_budget.hpp"
#include "model.hpp"
#include "text/bert_hdf5.hpp"
#include "text/prepare.hpp"
#include "text/wordpiece.hpp"

namespace benchhost::bert {

/// The samples a run trains and evaluates on.
struct BertData {
  text::BertSamples train, eval;
  text::WordPiece vocab;  ///< empty for synthetic samples
};

/// The MLPerf layout in `dir` (part_*.hdf5 training shards, concatenated in file order;
/// eval.hdf5; vocab.txt), built first from `corpus` with `build`'s vocabulary and sample options
/// when the folder holds none (Note [A data folder built once from a corpus]). Token ids are
/// checked against the vocabulary; every shard must have the first one's shapes. The whole folder
/// must fit the host's memory (Note [Training data held in memory]): OutOfMemory otherwise, before
/// more than the first shard is read; `budget` replaces memory_budget(cpu) (tests).
BertData read_data_folder(const std::string& dir, const std::string& corpus, const text::BertPrepareOptions& build,
                          const MemoryBudget* budget = nullptr);

/// Synthetic training and evaluation sets for runs without data: max(4 x batch, 64) training
/// samples from `seed`, max(eval_batch, 16) evaluation samples from seed + 1 (synthetic_samples).
BertData synthetic_data(std::int64_t batch, std::int64_t eval_batch, std::int64_t seq_len,
                        std::int64_t max_predictions, std::int64_t vocab, std::uint64_t seed);

/// Build one batch from samples `order[first .. first+count)` of `src`. With packing, rows are
/// filled until `rows` rows are used or the samples run out; `consumed` says how many samples
/// went in. Tensors are created on the CPU.
BertBatch make_batch(const text::BertSamples& src, const std::vector<std::int64_t>& order, std::int64_t first,
                     std::int64_t count, std::int64_t rows, bool packing, std::int64_t max_per_row,
                     std::int64_t* consumed);

/// A synthetic set of `count` samples with the given shapes: random ids, full-length rows,
/// 15% positions masked, random NSP labels. Pure function of the seed.
text::BertSamples synthetic_samples(std::int64_t count, std::int64_t seq_len, std::int64_t max_predictions,
                                    std::int64_t vocab, std::uint64_t seed);

/// Masked-LM accuracies of two predictors that use no model, on the first `eval_count` samples
/// of `eval` (the ones the metric scores), each learned from the training samples:
///   majority: always the most frequent masked token of `train`;
///   left_bigram: the most frequent successor, in the uncorrupted training text, of the token
///   left of the masked position as the evaluation input shows it (a [MASK] or random token
///   there has no successor statistics and falls back to the majority token).
/// left_bigram is NaN when vocab > 4096 (its V x V table would not be small).
struct MaskedLmBaselines {
  double majority = 0, left_bigram = 0;
  std::int32_t top_token = 0;  ///< the majority token
};
MaskedLmBaselines masked_lm_baselines(const text::BertSamples& train, const text::BertSamples& eval,
                                      std::int64_t eval_count, std::int64_t vocab);

/// Move every tensor of a batch to `device`.
BertBatch batch_to(const BertBatch& b, Device device);

}  // namespace benchhost::bert
