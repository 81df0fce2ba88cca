#pragma once
/// @file plugins/gpt3/data.hpp  GPT-3's data: token streams (the Megatron data folder, built once
/// from a corpus for the mini, or synthetic tokens), cut into windows for the model, and the
/// unigram baseline a target must beat.
///
/// A stream of N tokens holds (N - 1) / T whole windows of T tokens: window w is tokens
/// [w T, (w + 1) T) as input and the same shifted by one, [w T + 1, (w + 1) T], as next-token
/// targets (MLPerf's GPT-3 reads its validation set the same way, in order).

#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/memory_budget.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::gpt3 {

/// The tokens a run trains and evaluates on.
struct TokenStreams {
  std::vector<std::int32_t> train, valid;
  std::int64_t vocab = 0;  ///< the tokenizer's vocabulary (synthetic: the configured one)
};

/// train_text_document / valid_text_document (Megatron .bin/.idx) and bpe.txt in `dir`, built
/// first from `corpus` with `merges` BPE merges when the folder holds none (Note [A data folder
/// built once from a corpus]). Every token is checked against the tokenizer's vocabulary; each
/// stream must hold more than one window of `seq_len`. Both streams must fit the host's memory
/// (Note [Training data held in memory]): OutOfMemory otherwise, before any token is copied;
/// `budget` replaces memory_budget(cpu) (tests).
TokenStreams read_data_folder(const std::string& dir, const std::string& corpus, std::int32_t merges,
                              std::int64_t seq_len, const MemoryBudget* budget = nullptr);

/// Uniformly random tokens for runs without data: max(4 x batch, 16) training windows from
/// Rng(seed), validation = their first eval_batch windows.
TokenStreams synthetic_tokens(std::int64_t batch, std::int64_t eval_batch, std::int64_t seq_len, std::int64_t vocab,
                              std::uint64_t seed);

/// Whole windows of `seq_len` in `tokens`.
std::int64_t window_count(const std::vector<std::int32_t>& tokens, std::int64_t seq_len);

/// Windows `windows` of `tokens` as one batch on `device`: inputs and next-token targets, i32 [B, T].
struct WindowBatch {
  Tensor tokens, targets;
};
WindowBatch window_batch(const std::vector<std::int32_t>& tokens, const std::vector<std::int64_t>& windows,
                         std::int64_t seq_len, Device device);

/// Cross-entropy (nats/token) of a unigram model fitted to `train` with add-one smoothing, on the
/// targets of the first `windows` windows of `valid`.
double unigram_log_perplexity(const std::vector<std::int32_t>& train, const std::vector<std::int32_t>& valid,
                              std::int64_t windows, std::int64_t seq_len, std::int64_t vocab);

}  // namespace benchhost::gpt3
