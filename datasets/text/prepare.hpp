#pragma once
/// @file datasets/text/prepare.hpp  Build the BERT and GPT-3 training data from plain text.
///
/// Used by the make_bert_shards / make_gpt_dataset tools and by the plugins when a mini config
/// names a corpus instead of prepared files (the data is then built once into a cache folder).
/// Every document whose index is a multiple of `heldout_every` goes to the evaluation set and
/// never into training. Deterministic for a given corpus and seed.

#include <cstdint>
#include <string>
#include <vector>

#include "bert_samples.hpp"

namespace benchhost::text {

struct BertPrepareOptions {
  std::string corpus;          ///< EC02 or plain text file
  std::string out_dir;         ///< created if missing
  std::int32_t vocab_size = 4096;
  std::int64_t train_shards = 4;
  std::int64_t heldout_every = 20;
  BertSampleOptions samples;
};
struct BertPrepared {
  std::vector<std::string> train_files;  ///< out_dir/part_00000.hdf5 ...
  std::string eval_file;                 ///< out_dir/eval.hdf5
  std::string vocab_file;                ///< out_dir/vocab.txt
  std::int64_t train_samples = 0, eval_samples = 0;
  NspSplit train_nsp, eval_nsp;          ///< next-sentence labels (prepare_bert_data only)
};
BertPrepared prepare_bert_data(const BertPrepareOptions& opt);
/// The files a previous prepare_bert_data(opt) left, or empty train_files if incomplete (the
/// sample counts and label splits stay 0: the files are not read).
BertPrepared find_bert_data(const std::string& out_dir);

struct GptPrepareOptions {
  std::string corpus;
  std::string out_dir;
  std::int32_t merges = 2048;
  std::int64_t heldout_every = 20;
};
struct GptPrepared {
  std::string train_prefix;    ///< out_dir/train_text_document (.bin/.idx)
  std::string valid_prefix;    ///< out_dir/valid_text_document
  std::string tokenizer_file;  ///< out_dir/bpe.txt
  std::int64_t vocab_size = 0, train_tokens = 0, valid_tokens = 0;
};
GptPrepared prepare_gpt_data(const GptPrepareOptions& opt);
/// The files a previous prepare_gpt_data left, or empty train_prefix if incomplete.
GptPrepared find_gpt_data(const std::string& out_dir);

}  // namespace benchhost::text
