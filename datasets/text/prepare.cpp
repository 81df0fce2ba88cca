#include "prepare.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "bpe.hpp"
#include "indexed_dataset.hpp"

namespace benchhost::text {
namespace fs = std::filesystem;
namespace {

void split_heldout(const std::vector<Document>& docs, std::int64_t every, std::vector<Document>& train,
                   std::vector<Document>& heldout) {
  BH_CHECK_AS(InvalidArgument, every >= 2, "held-out interval {} must be >= 2", every);
  for (std::size_t d = 0; d < docs.size(); ++d) (d % static_cast<std::size_t>(every) == 0 ? heldout : train).push_back(docs[d]);
  BH_CHECK_AS(DataError, !train.empty() && !heldout.empty(),
              "corpus has {} documents: too few to hold out every {}th for evaluation", docs.size(), every);
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  BH_CHECK_AS(DataError, !ec && fs::is_directory(dir), "cannot create output folder '{}': {}", dir, ec.message());
}

}  // namespace

BertPrepared prepare_bert_data(const BertPrepareOptions& opt) {
  BH_CHECK_AS(InvalidArgument, opt.train_shards >= 1, "train shards {} must be >= 1", opt.train_shards);
  make_dir(opt.out_dir);
  const auto docs = load_corpus(opt.corpus);
  std::vector<Document> train, heldout;
  split_heldout(docs, opt.heldout_every, train, heldout);
  const WordPiece vocab = WordPiece::build(train, opt.vocab_size);
  BertPrepared out;
  out.vocab_file = opt.out_dir + "/vocab.txt";
  vocab.save(out.vocab_file);

  const BertSamples all = make_bert_samples(train, vocab, opt.samples);
  BertSampleOptions eval_opt = opt.samples;
  eval_opt.seed = opt.samples.seed ^ 0x5eed0e7a1ull;
  eval_opt.dupe_factor = 1;
  const BertSamples eval = make_bert_samples(heldout, vocab, eval_opt);
  for (std::int64_t s = 0; s < opt.train_shards; ++s) {
    BertSamples shard;
    shard.seq_len = all.seq_len;
    shard.max_predictions = all.max_predictions;
    for (std::int64_t i = s; i < all.count; i += opt.train_shards) shard.append(all, i);
    out.train_files.push_back(fmt::format("{}/part_{:05d}.hdf5", opt.out_dir, s));
    write_bert_hdf5(out.train_files.back(), shard);
  }
  out.eval_file = opt.out_dir + "/eval.hdf5";
  write_bert_hdf5(out.eval_file, eval);
  out.train_samples = all.count;
  out.eval_samples = eval.count;
  out.train_nsp = nsp_split(all);
  out.eval_nsp = nsp_split(eval);
  return out;
}

BertPrepared find_bert_data(const std::string& dir) {
  BertPrepared out;
  if (!fs::is_directory(dir) || !fs::exists(dir + "/vocab.txt") || !fs::exists(dir + "/eval.hdf5")) return out;
  for (int s = 0;; ++s) {
    std::string f = fmt::format("{}/part_{:05d}.hdf5", dir, s);
    if (!fs::exists(f)) break;
    out.train_files.push_back(f);
  }
  out.vocab_file = dir + "/vocab.txt";
  out.eval_file = dir + "/eval.hdf5";
  return out;
}

GptPrepared prepare_gpt_data(const GptPrepareOptions& opt) {
  make_dir(opt.out_dir);
  const auto docs = load_corpus(opt.corpus);
  std::vector<Document> train, heldout;
  split_heldout(docs, opt.heldout_every, train, heldout);
  const ByteBpe bpe = ByteBpe::train(train, opt.merges);
  GptPrepared out;
  out.tokenizer_file = opt.out_dir + "/bpe.txt";
  bpe.save(out.tokenizer_file);
  out.vocab_size = bpe.vocab_size();
  auto write = [&](const std::vector<Document>& set, const std::string& prefix) {
    IndexedDatasetWriter w(prefix, bpe.vocab_size());
    std::int64_t tokens = 0;
    for (const auto& d : set) {
      std::string text;
      for (std::size_t s = 0; s < d.sentences.size(); ++s) text += (s ? " " : "") + d.sentences[s];
      auto ids = bpe.encode(text);
      ids.push_back(bpe.eod());
      tokens += static_cast<std::int64_t>(ids.size());
      w.add_sequence(ids);
      w.end_document();
    }
    w.finish();
    return tokens;
  };
  out.train_prefix = opt.out_dir + "/train_text_document";
  out.valid_prefix = opt.out_dir + "/valid_text_document";
  out.train_tokens = write(train, out.train_prefix);
  out.valid_tokens = write(heldout, out.valid_prefix);
  return out;
}

GptPrepared find_gpt_data(const std::string& dir) {
  GptPrepared out;
  for (const char* f : {"/bpe.txt", "/train_text_document.idx", "/train_text_document.bin",
                        "/valid_text_document.idx", "/valid_text_document.bin"})
    if (!fs::exists(dir + f)) return out;
  out.tokenizer_file = dir + "/bpe.txt";
  out.train_prefix = dir + "/train_text_document";
  out.valid_prefix = dir + "/valid_text_document";
  out.vocab_size = ByteBpe::load(out.tokenizer_file).vocab_size();
  return out;
}

}  // namespace benchhost::text
