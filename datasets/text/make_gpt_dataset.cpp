// make_gpt_dataset: plain English text -> byte-level BPE tokenizer trained on it, and Megatron
// indexed datasets (train_text_document / valid_text_document .bin + .idx). See prepare.hpp.
#include <cstdio>
#include <iostream>

#include <boost/program_options.hpp>

#include "benchhost/error.hpp"
#include "prepare.hpp"

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  using namespace benchhost::text;
  GptPrepareOptions opt;
  po::options_description desc("make_gpt_dataset: build a Megatron indexed dataset from English text");
  desc.add_options()("help,h", "show this help")
      ("corpus", po::value(&opt.corpus)->default_value(default_kjv_path()), "EC02 (bible-kjv-text) or plain text file")
      ("out", po::value(&opt.out_dir)->required(), "output folder")
      ("merges", po::value(&opt.merges)->default_value(2048), "BPE merges to learn (vocabulary = 257 + merges)")
      ("heldout-every", po::value(&opt.heldout_every)->default_value(20), "every Nth document is held out for validation");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (opt.corpus.empty()) throw benchhost::InvalidArgument("no --corpus given and bible-kjv-text is not installed", __FILE__, __LINE__);
    const GptPrepared r = prepare_gpt_data(opt);
    std::printf("make_gpt_dataset: vocabulary %lld (%s), %lld training tokens (%s.bin), %lld validation tokens (%s.bin)\n",
                static_cast<long long>(r.vocab_size), r.tokenizer_file.c_str(), static_cast<long long>(r.train_tokens),
                r.train_prefix.c_str(), static_cast<long long>(r.valid_tokens), r.valid_prefix.c_str());
    return 0;
  } catch (const benchhost::Error& e) {
    std::fprintf(stderr, "make_gpt_dataset: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_gpt_dataset: %s\n%s", e.what(), "run with --help for the options\n");
  }
  return 1;
}
