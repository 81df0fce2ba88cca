// make_librispeech_synthetic: speech synthesised with espeak-ng in MLPerf's LibriSpeech layout,
// with a sentencepiece model trained on it. See synthetic.hpp Note [Synthetic speech].
#include <chrono>
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "synthetic.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  benchhost::librispeech::LibriSpeechSyntheticOptions o;
  std::string out;
  po::options_description desc(
      "make_librispeech_synthetic: short utterances (2-5 words: digits, \"oh\", command words) spoken by\n"
      "espeak-ng in MLPerf's LibriSpeech layout (<split>-wav/SPK/CHAP/SPK-CHAP-UTT.wav at 16 kHz,\n"
      "librispeech-<split>-wav.json, sentencepieces/librispeech<N>.model); evaluation uses held-out voices\n"
      "and rate/pitch combinations. Needs the Debian packages espeak-ng, sox and sentencepiece");
  desc.add_options()("help,h", "this help")
      ("out,o", po::value(&out)->required(), "output directory (must not exist; written atomically)")
      ("train", po::value(&o.train_utterances)->default_value(800), "training utterances (split train-synthetic)")
      ("eval", po::value(&o.eval_utterances)->default_value(150), "evaluation utterances (split dev-synthetic)")
      ("vocab-size", po::value(&o.vocab_size)->default_value(32), "sentencepiece vocabulary size (a soft limit)")
      ("flac-fraction", po::value(&o.flac_fraction)->default_value(0.1), "share of utterances written as FLAC")
      ("seed", po::value(&o.seed)->default_value(1), "seed: the same seed writes the same bytes")
      ("jobs,j", po::value(&o.jobs)->default_value(0), "synthesis processes at once (0: one per hardware thread)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    const auto start = std::chrono::steady_clock::now();
    const auto r = benchhost::librispeech::generate_librispeech_synthetic(out, o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("wrote {} training ({:.1f} s of audio) and {} evaluation ({:.1f} s) utterances and {} to {} in {:.1f} s\n",
               r.train_utterances, r.train_audio_seconds, r.eval_utterances, r.eval_audio_seconds, r.tokenizer_model,
               out, seconds);
    return 0;
  } catch (const po::error& e) {
    std::cerr << "make_librispeech_synthetic: " << e.what() << "\n\n" << desc << "\n";
    return 2;
  } catch (const benchhost::InvalidArgument& e) {
    std::cerr << "make_librispeech_synthetic: " << e.message() << "\n";
    return 2;
  } catch (const benchhost::Error& e) {
    std::cerr << e.message() << "\n";
    return 1;
  }
}
