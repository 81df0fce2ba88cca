#pragma once
/// @file datasets/librispeech/librispeech.hpp  LibriSpeech as MLPerf's RNN-T preparation leaves
/// it: the per-split JSON manifests, the duration filter, and the Dataset of decoded utterances
/// with their transcripts' token ids.
///
/// Layout (rnn_speech_recognition/pytorch/utils/convert_librispeech.py), one dataset directory:
///   librispeech-<split>-wav.json   one JSON array per split (json.dump, indent=2)
///   <split>-wav/SPK/CHAP/SPK-CHAP-UTT.wav   16 kHz mono 16-bit PCM (FLAC also read)
///   sentencepieces/librispeech1023.model    the tokenizer (tokenizer.hpp)
/// Each record:
///   {"transcript": "lowercased stripped text",
///    "files": [{"channels": 1, "sample_rate": 16000.0, "bitdepth": 16, "bitrate": ...,
///               "duration": 14.53, "num_samples": 232480, "encoding": "Signed Integer PCM",
///               "silent": false, "fname": "<split>-wav/SPK/CHAP/SPK-CHAP-UTT.wav", "speed": 1}],
///    "original_duration": 14.53, "original_num_samples": 232480}
/// The reader needs `transcript`, the last entry of `files` (its `fname`, relative to the dataset
/// directory; several entries are the speed-perturbed copies and the reference reads the last)
/// and `original_duration` (seconds; the training filter keeps records with
/// original_duration <= max_duration). Other keys are ignored.
///
/// Note [Manifest errors name the record]
/// Everything a manifest says is checked when it is read, so a bad file fails at setup rather
/// than mid-epoch: a missing or ill-typed field, an empty `files`, an empty transcript, an
/// absolute fname or one that leaves the dataset directory through "..", a negative or
/// non-finite duration, and (with check_files, the default) an audio file that does not exist.
/// What only decoding can tell (truncated or corrupt audio, more than one channel, another
/// sample rate) is found by get(). Every such error is a DataError whose message starts with
/// "<manifest path>: record <index>:" (the index within that JSON array, 0-based), so a person
/// can open the file at the right place.
///
/// Threading: the utterance list and the dataset are immutable after construction; get() may
/// be called from several threads at once (each call opens its own file).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "tokenizer.hpp"

namespace benchhost::librispeech {

/// One utterance of a manifest (the fields the reference reads).
struct Utterance {
  std::string transcript;  ///< as in the JSON (MLPerf lowercased and stripped it)
  std::string fname;       ///< files[-1].fname, relative to the dataset directory
  std::string audio_path;  ///< dataset directory / fname
  double duration = 0;     ///< original_duration, seconds
  std::string manifest;    ///< path of the JSON it came from
  std::int64_t record = 0; ///< its index in that JSON array
};

struct ManifestOptions {
  /// Keep records with original_duration <= max_duration seconds (the reference's training
  /// filter, 16.7 s); <= 0 keeps every record (the reference's evaluation).
  double max_duration = 0;
  /// Check at load that every audio file exists (one stat per record).
  bool check_files = true;
};

/// Read and check one manifest (Note [Manifest errors name the record]). `manifest_path` is
/// taken as given; fnames are resolved against `dataset_dir`. Records above max_duration are
/// left out (in file order otherwise). Throws DataError naming the file (and record).
std::vector<Utterance> read_manifest(const std::string& dataset_dir, const std::string& manifest_path,
                                     const ManifestOptions& options = {});

/// Parse manifest text (what read_manifest does after reading the file; `name` stands for the
/// file in messages). For tests and the fuzz harness.
std::vector<Utterance> parse_manifest(const std::string& text, const std::string& name, const std::string& dataset_dir,
                                      const ManifestOptions& options = {});

/// Several manifests, concatenated in the order given (the reference trains on three). A
/// relative manifest name is taken inside `dataset_dir`, as the reference joins
/// `--dataset_dir` with each `--train_manifests` entry; an absolute one as is.
std::vector<Utterance> read_manifests(const std::string& dataset_dir, const std::vector<std::string>& manifests,
                                      const ManifestOptions& options = {});

/// The name of split `split`'s manifest: "librispeech-<split>-wav.json".
std::string manifest_name(const std::string& split);

struct LibriSpeechDatasetOptions {
  int sample_rate = 16000;  ///< every file must have this rate (Hz); the data is not resampled
};

/// Note [Utterance samples]
/// get(i) returns {"audio": f32 [frames] in [-1, 1] (the file's samples, mono),
///                 "sample_rate": i32 [] (Hz),
///                 "tokens": i32 [n] (the transcript's token ids, n >= 1)}.
/// Lengths differ per utterance, so the default collate cannot stack them: the RNN-T pipeline
/// computes features per sample and pads (or passes its own collate). Transcripts are tokenized
/// once, at construction; one that tokenizes to nothing (the char tokenizer drops every
/// character) or to <unk> is a DataError naming its manifest and record.
class LibriSpeechDataset final : public data::Dataset {
 public:
  LibriSpeechDataset(std::vector<Utterance> utterances, std::shared_ptr<const Tokenizer> tokenizer,
                     const LibriSpeechDatasetOptions& options = {});
  std::int64_t size() const override { return static_cast<std::int64_t>(utterances_.size()); }
  /// Note [Utterance samples]. A file that is missing, truncated, corrupt, not mono or not at
  /// options.sample_rate is a DataError "<manifest>: record <i>: <audio path>: ...".
  data::Sample get(const data::SampleContext& ctx) const override;
  using Dataset::get;
  /// "<audio path> (<manifest> record <i>)".
  std::string source(std::int64_t index) const override;

  const Utterance& utterance(std::int64_t index) const;
  const std::vector<std::int32_t>& tokens(std::int64_t index) const;
  const std::vector<Utterance>& utterances() const { return utterances_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  /// Sum of the utterances' durations (seconds).
  double total_duration() const;

 private:
  std::vector<Utterance> utterances_;
  std::vector<std::vector<std::int32_t>> tokens_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  LibriSpeechDatasetOptions options_;
};

}  // namespace benchhost::librispeech
