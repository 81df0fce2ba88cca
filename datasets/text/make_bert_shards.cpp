// make_bert_shards: plain English text -> MLPerf-layout BERT HDF5 shards, a held-out eval shard
// and the WordPiece vocab.txt built from the corpus. See prepare.hpp and bert_hdf5.hpp.
#include <cstdio>
#include <iostream>
#include <utility>

#include <boost/program_options.hpp>

#include "benchhost/error.hpp"
#include "prepare.hpp"

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  using namespace benchhost::text;
  BertPrepareOptions opt;
  po::options_description desc("make_bert_shards: build BERT pretraining shards from English text");
  desc.add_options()("help,h", "show this help")
      ("corpus", po::value(&opt.corpus)->default_value(default_kjv_path()), "EC02 (bible-kjv-text) or plain text file")
      ("out", po::value(&opt.out_dir)->required(), "output folder")
      ("vocab-size", po::value(&opt.vocab_size)->default_value(4096), "WordPiece vocabulary size")
      ("seq-len", po::value(&opt.samples.seq_len)->default_value(128), "tokens per sample")
      ("max-predictions", po::value(&opt.samples.max_predictions)->default_value(20), "masked positions per sample")
      ("dupe-factor", po::value(&opt.samples.dupe_factor)->default_value(1), "passes with fresh masks")
      ("shards", po::value(&opt.train_shards)->default_value(4), "training shards")
      ("heldout-every", po::value(&opt.heldout_every)->default_value(20), "every Nth document is held out for eval")
      ("seed", po::value(&opt.samples.seed)->default_value(12345), "random seed");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (opt.corpus.empty()) throw benchhost::InvalidArgument("no --corpus given and bible-kjv-text is not installed", __FILE__, __LINE__);
    const BertPrepared r = prepare_bert_data(opt);
    std::printf("make_bert_shards: %lld training samples in %zu shards, %lld eval samples (%s), vocabulary %s\n",
                static_cast<long long>(r.train_samples), r.train_files.size(),
                static_cast<long long>(r.eval_samples), r.eval_file.c_str(), r.vocab_file.c_str());
    // Note [BERT sentence pairs]: the split should be near 50/50 at any --seq-len.
    for (const auto& [set, split] : {std::pair{"training", r.train_nsp}, std::pair{"eval", r.eval_nsp}})
      std::printf("make_bert_shards: %s next-sentence labels: %lld IsNext, %lld NotNext (%.1f%% IsNext)\n", set,
                  static_cast<long long>(split.is_next), static_cast<long long>(split.random_next),
                  100.0 * split.is_next_fraction());
    return 0;
  } catch (const benchhost::Error& e) {
    std::fprintf(stderr, "make_bert_shards: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_bert_shards: %s\n%s", e.what(), "run with --help for the options\n");
  }
  return 1;
}
