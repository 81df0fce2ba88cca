#pragma once
/// @file datasets/librispeech/synthetic.hpp  Speech synthesised with espeak-ng in MLPerf's
/// LibriSpeech layout (librispeech.hpp), with a sentencepiece model trained on it: the data of
/// the RNN-T mini configuration and of the tests.
///
/// Note [Synthetic speech]
/// Each utterance is 2 to 5 words drawn uniformly from a closed vocabulary of 21 words
/// (synthetic_vocabulary(): the digits zero..nine, "oh", and ten command words), spoken by
/// espeak-ng with
///   - an English accent, uniform over the 8 packaged ones (en-us, en (British: espeak-ng 1.51
///     ignores a variant after "en-gb", so it is named by its voice "en"), en-029,
///     en-gb-scotland, en-gb-x-rp, en-gb-x-gbclan, en-gb-x-gbcwmd, en-us-nyc), shared by both
///     splits;
///   - a voice variant (espeak's "+m3", "+f2", ...): training uses 10 of them, evaluation the
///     other 4 (synthetic_voice_variants()), so every evaluation speaker is unseen;
///   - a (rate, pitch) cell of the grid rate 130..200 words/min step 10 x pitch 25..75 step 10:
///     the 12 cells with (rate index + 2 * pitch index) % 4 == 0 are evaluation's only
///     (is_eval_prosody()), the 36 others training's, so evaluation prosody is held out too.
/// espeak-ng writes 22050 Hz mono 16-bit WAV; `sox` (run as a process, no dither, so the bytes
/// are repeatable) resamples it to 16 kHz mono 16-bit, as a WAV, or for a seeded share of the
/// utterances (flac_fraction) as a FLAC, so the reader's FLAC path is exercised on real data.
/// espeak-ng is GPL: it is only ever run as a program, never linked.
///
/// Layout written (the real one, librispeech.hpp), splits "train-synthetic" and "dev-synthetic":
///   <split>-wav/SPK/CHAP/SPK-CHAP-UTTT.{wav,flac}  SPK = 100 (accent + 1) + variant index,
///                                  CHAP = 1000 rate + pitch, UTTT = the utterance's index in the
///                                  split (4 digits)
///   librispeech-<split>-wav.json   records in the reference's shape, in utterance order
///   voices-<split>.tsv             fname, accent, variant, rate, pitch per utterance (not part of
///                                  the MLPerf layout; for tests and analysis)
///   sentencepieces/librispeech<N>.model (.vocab)  spm_train --model_type=unigram
///                                  --vocab_size=N --character_coverage=1.0 --bos_id=-1
///                                  --eos_id=-1 --hard_vocab_limit=false on the training
///                                  transcripts, as MLPerf's create_sentencepieces.sh does
///   librispeech_synthetic.txt      the options (ensure_librispeech_synthetic compares them)
/// Tokens per utterance: the 21 words need 19 letters, so the unigram model's pieces are <unk>,
/// "▁", the 19 letters and then whole words. With vocab_size 32 about 11 words are whole pieces
/// and the rest are spelled (800 utterances of 3.5 words average 8.8 tokens); vocab_size 48
/// (42 pieces after the soft limit) makes every word one piece (3.5 tokens per utterance).
///
/// Cost: 800 training + 150 evaluation utterances (1305 s of audio) take about 30 s wall and
/// 16 s CPU on the 2-core development machine while it was busy compiling; the work is ~1900
/// short espeak-ng and sox processes, `jobs` at a time.
///
/// Utterance choices are a pure function of (seed, split, index); espeak-ng, sox and spm_train
/// (one thread, run inside the output directory so the model records relative paths) are
/// deterministic, so the same options write the same bytes.

#include <cstdint>
#include <string>
#include <vector>

namespace benchhost {
class Communicator;  // comm/communicator.hpp
}

namespace benchhost::librispeech {

inline constexpr const char* kSyntheticTrainSplit = "train-synthetic";
inline constexpr const char* kSyntheticEvalSplit = "dev-synthetic";

struct LibriSpeechSyntheticOptions {
  int train_utterances = 800;
  int eval_utterances = 150;
  std::uint64_t seed = 1;
  int vocab_size = 32;         ///< sentencepiece pieces (a soft limit, as in --hard_vocab_limit=false)
  double flac_fraction = 0.1;  ///< share of utterances written as FLAC instead of WAV
  // Not part of the data (not recorded, do not change the bytes):
  int jobs = 0;  ///< synthesis processes at once; 0: one per hardware thread
  std::string espeak_program = "espeak-ng";  ///< a name looked up on PATH, or a path
  std::string sox_program = "sox";
  std::string spm_train_program = "spm_train";
};

struct LibriSpeechSyntheticReport {
  int train_utterances = 0, eval_utterances = 0;
  double train_audio_seconds = 0, eval_audio_seconds = 0;  ///< 0 when not generated now
  std::string tokenizer_model;  ///< path of the sentencepiece model
  bool generated = false;       ///< false: the directory was already there
};

/// The 21 words utterances are made of (Note [Synthetic speech]).
const std::vector<std::string>& synthetic_vocabulary();
/// The 8 espeak-ng English accents.
const std::vector<std::string>& synthetic_accents();
/// espeak-ng voice variants of a split ("m1", "f2", ...): training's 10 or evaluation's 4.
const std::vector<std::string>& synthetic_voice_variants(bool eval);
/// Whether (rate, pitch) is a held-out evaluation cell of the prosody grid.
bool is_eval_prosody(int rate, int pitch);

/// Write the set into `dir` (Note [Synthetic speech]). Atomic: written into a temporary directory
/// beside `dir`, renamed at the end. Throws InvalidArgument for bad options or an existing `dir`,
/// Unsupported when a program is missing (naming its Debian package: espeak-ng, sox,
/// sentencepiece), DataError when a program fails (with its output) or a file cannot be written.
LibriSpeechSyntheticReport generate_librispeech_synthetic(const std::string& dir,
                                                          const LibriSpeechSyntheticOptions& options);

/// Generate `dir` unless it exists. With a communicator of more than one rank, rank 0 generates
/// while the others wait at a barrier (every rank must call). An existing directory generated
/// with other options is a DataError (remove it to regenerate); one without
/// librispeech_synthetic.txt (real data) is left alone.
LibriSpeechSyntheticReport ensure_librispeech_synthetic(const std::string& dir,
                                                        const LibriSpeechSyntheticOptions& options,
                                                        Communicator* comm = nullptr);

/// The text of librispeech_synthetic.txt for these options.
std::string librispeech_synthetic_options_text(const LibriSpeechSyntheticOptions& options);

/// "sentencepieces/librispeech<N>.model", relative to the dataset directory.
std::string synthetic_tokenizer_model(const LibriSpeechSyntheticOptions& options);

}  // namespace benchhost::librispeech
