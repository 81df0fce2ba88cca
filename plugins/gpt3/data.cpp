#include "data.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/random.hpp"
#include "corpus_data_folder.hpp"
#include "text/indexed_dataset.hpp"
#include "text/prepare.hpp"

namespace benchhost::gpt3 {
namespace {

// Builds the Megatron files into dir once (in a private folder, then renamed); returns them.
text::GptPrepared ensure_gpt_data(const std::string& dir, const std::string& corpus, std::int32_t merges) {
  lm::CorpusDataFolder folder;
  folder.plugin = "gpt3";
  folder.dir = dir;
  folder.corpus = corpus;
  folder.build_options = fmt::format("merges={}", merges);
  folder.contents = "train_text_document/valid_text_document .bin/.idx and bpe.txt";
  folder.prepare_tool = "make_gpt_dataset";
  lm::ensure_corpus_data_folder(
      folder, [](const std::string& d) { return !text::find_gpt_data(d).train_prefix.empty(); },
      [&](const std::string& corpus_file, const std::string& out_dir) {
        text::GptPrepareOptions p;
        p.corpus = corpus_file;
        p.out_dir = out_dir;
        p.merges = merges;
        text::prepare_gpt_data(p);
      });
  return text::find_gpt_data(dir);
}

}  // namespace

TokenStreams read_data_folder(const std::string& dir, const std::string& corpus, std::int32_t merges,
                              std::int64_t seq_len, const MemoryBudget* budget) {
  const auto files = ensure_gpt_data(dir, corpus, merges);
  TokenStreams d;
  d.vocab = files.vocab_size;
  const text::IndexedDataset train(files.train_prefix), valid(files.valid_prefix);
  // Note [Training data held in memory]: the indexes count the tokens; each is held as an int32.
  const double tokens = static_cast<double>(train.num_tokens()) + static_cast<double>(valid.num_tokens());
  lm::check_data_fits("gpt3", dir, tokens * sizeof(std::int32_t),
                      fmt::format("{} training and {} validation tokens, 4 bytes each", train.num_tokens(), valid.num_tokens()),
                      budget ? *budget : memory_budget(Device::cpu()));
  d.train = train.all_tokens();
  d.valid = valid.all_tokens();
  for (const auto* v : {&d.train, &d.valid})
    for (std::int32_t tok : *v)
      BH_CHECK_AS(DataError, tok >= 0 && tok < d.vocab, "gpt3: token {} in '{}' is outside the tokenizer's vocabulary of {}",
                  tok, dir, d.vocab);
  BH_CHECK_AS(DataError, static_cast<std::int64_t>(d.valid.size()) > seq_len && static_cast<std::int64_t>(d.train.size()) > seq_len,
              "gpt3: '{}' holds fewer tokens than one sequence of {}", dir, seq_len);
  return d;
}

TokenStreams synthetic_tokens(std::int64_t batch, std::int64_t eval_batch, std::int64_t seq_len, std::int64_t vocab,
                              std::uint64_t seed) {
  TokenStreams d;
  d.vocab = vocab;
  Rng rng(seed, 0x6e7);
  const std::int64_t n = (std::max<std::int64_t>(4 * batch, 16)) * seq_len + 1;
  d.train.resize(static_cast<std::size_t>(n));
  for (auto& tok : d.train) tok = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  d.valid.assign(d.train.begin(), d.train.begin() + std::min<std::int64_t>(n, eval_batch * seq_len + 1));
  return d;
}

std::int64_t window_count(const std::vector<std::int32_t>& tokens, std::int64_t seq_len) {
  return (static_cast<std::int64_t>(tokens.size()) - 1) / seq_len;
}

WindowBatch window_batch(const std::vector<std::int32_t>& tokens, const std::vector<std::int64_t>& windows,
                         std::int64_t seq_len, Device device) {
  const std::int64_t B = static_cast<std::int64_t>(windows.size()), T = seq_len;
  std::vector<std::int32_t> in(B * T), tgt(B * T);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int32_t* src = tokens.data() + windows[b] * T;
    std::copy(src, src + T, in.data() + b * T);
    std::copy(src + 1, src + T + 1, tgt.data() + b * T);
  }
  return {Tensor::from_vector_i32(in, {B, T}, device), Tensor::from_vector_i32(tgt, {B, T}, device)};
}

double unigram_log_perplexity(const std::vector<std::int32_t>& train, const std::vector<std::int32_t>& valid,
                              std::int64_t windows, std::int64_t seq_len, std::int64_t vocab) {
  std::vector<double> counts(static_cast<std::size_t>(vocab), 1.0);  // add-one smoothing
  for (std::int32_t tok : train) counts[tok] += 1.0;
  const double total = static_cast<double>(train.size()) + static_cast<double>(vocab);
  double nll = 0;
  const std::int64_t n = windows * seq_len;
  for (std::int64_t i = 1; i <= n; ++i) nll -= std::log(counts[valid[i]] / total);
  return nll / static_cast<double>(n);
}

}  // namespace benchhost::gpt3
