// MLPerf's LibriSpeech manifests and the utterance dataset (librispeech.hpp).
#include "librispeech.hpp"

#include <cmath>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "benchhost/data/audio.hpp"
#include "benchhost/data/file.hpp"
#include "benchhost/data/manifest.hpp"
#include "benchhost/error.hpp"

namespace fs = std::filesystem;

namespace benchhost::librispeech {

namespace {

const std::vector<data::ManifestField>& record_fields() {
  static const std::vector<data::ManifestField> fields = {
      {"transcript", data::FieldType::string, true},
      {"files", data::FieldType::array, true},
      {"original_duration", data::FieldType::number, true},
  };
  return fields;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// files[-1].fname, checked (Note [Manifest errors name the record]).
std::string last_fname(const data::ManifestRecord& r, const std::string& name, std::int64_t i) {
  const nlohmann::json files = nlohmann::json::parse(r.get_json("files"));  // valid: it was parsed once
  BH_CHECK_AS(DataError, !files.empty(), "{}: record {}: 'files' is empty (need at least one audio file)", name, i);
  const nlohmann::json& last = files.back();
  BH_CHECK_AS(DataError, last.is_object(), "{}: record {}: files[{}] must be an object, got {}", name, i,
              files.size() - 1, last.type_name());
  const auto it = last.find("fname");
  BH_CHECK_AS(DataError, it != last.end(), "{}: record {}: files[{}] has no field 'fname'", name, i, files.size() - 1);
  BH_CHECK_AS(DataError, it->is_string(), "{}: record {}: files[{}].fname must be a string, got {}", name, i,
              files.size() - 1, it->type_name());
  const std::string fname = it->get<std::string>();
  BH_CHECK_AS(DataError, !fname.empty() && fname.find('\0') == std::string::npos,
              "{}: record {}: files[{}].fname is empty or holds a NUL byte", name, i, files.size() - 1);
  const fs::path p(fname);
  BH_CHECK_AS(DataError, p.is_relative() && !p.has_root_name() && !p.has_root_directory(),
              "{}: record {}: fname '{}' is absolute; it must be relative to the dataset directory", name, i, fname);
  const fs::path normal = p.lexically_normal();
  BH_CHECK_AS(DataError, normal.empty() || *normal.begin() != "..",
              "{}: record {}: fname '{}' leaves the dataset directory (through '..')", name, i, fname);
  return fname;
}

}  // namespace

std::string manifest_name(const std::string& split) { return fmt::format("librispeech-{}-wav.json", split); }

std::vector<Utterance> parse_manifest(const std::string& text, const std::string& name, const std::string& dataset_dir,
                                      const ManifestOptions& options) {
  const data::Manifest m = data::Manifest::parse(text, name, record_fields());
  std::vector<Utterance> out;
  out.reserve(static_cast<std::size_t>(m.size()));
  for (std::int64_t i = 0; i < m.size(); ++i) {
    const data::ManifestRecord& r = m[i];
    Utterance u;
    u.manifest = name;
    u.record = i;
    u.transcript = r.get_string("transcript");
    BH_CHECK_AS(DataError, !blank(u.transcript), "{}: record {}: empty transcript", name, i);
    u.duration = r.get_number("original_duration");
    BH_CHECK_AS(DataError, std::isfinite(u.duration) && u.duration >= 0,
                "{}: record {}: original_duration {} is not a duration in seconds", name, i, u.duration);
    u.fname = last_fname(r, name, i);
    u.audio_path = (fs::path(dataset_dir) / u.fname).string();
    if (options.max_duration > 0 && u.duration > options.max_duration) continue;
    if (options.check_files) {
      std::error_code ec;
      BH_CHECK_AS(DataError, fs::is_regular_file(u.audio_path, ec), "{}: record {}: audio file {} does not exist{}",
                  name, i, u.audio_path, ec ? " (" + ec.message() + ")" : "");
    }
    out.push_back(std::move(u));
  }
  return out;
}

std::vector<Utterance> read_manifest(const std::string& dataset_dir, const std::string& manifest_path,
                                     const ManifestOptions& options) {
  const auto bytes = data::read_file(manifest_path, std::size_t{1} << 32);
  return parse_manifest(std::string(bytes.begin(), bytes.end()), manifest_path, dataset_dir, options);
}

std::vector<Utterance> read_manifests(const std::string& dataset_dir, const std::vector<std::string>& manifests,
                                      const ManifestOptions& options) {
  BH_CHECK_AS(InvalidArgument, !manifests.empty(), "LibriSpeech: no manifest given (expected e.g. {})",
              manifest_name("train-clean-100"));
  std::vector<Utterance> out;
  for (const auto& m : manifests) {
    const fs::path p(m);
    auto part = read_manifest(dataset_dir, p.is_absolute() ? m : (fs::path(dataset_dir) / p).string(), options);
    out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return out;
}

LibriSpeechDataset::LibriSpeechDataset(std::vector<Utterance> utterances, std::shared_ptr<const Tokenizer> tokenizer,
                                       const LibriSpeechDatasetOptions& options)
    : utterances_(std::move(utterances)), tokenizer_(std::move(tokenizer)), options_(options) {
  BH_CHECK_AS(InvalidArgument, tokenizer_ != nullptr, "LibriSpeechDataset: no tokenizer");
  BH_CHECK_AS(InvalidArgument, options_.sample_rate > 0, "LibriSpeechDataset: sample rate {} Hz", options_.sample_rate);
  tokens_.reserve(utterances_.size());
  for (const auto& u : utterances_) {
    std::vector<std::int32_t> ids;
    try {
      ids = tokenizer_->encode(u.transcript);
    } catch (const DataError& e) {
      BH_THROW(DataError, "{}: record {}: {}", u.manifest, u.record, e.message());
    }
    BH_CHECK_AS(DataError, !ids.empty(), "{}: record {}: transcript \"{}\" has no token under {}", u.manifest,
                u.record, u.transcript, tokenizer_->describe());
    tokens_.push_back(std::move(ids));
  }
}

const Utterance& LibriSpeechDataset::utterance(std::int64_t index) const {
  data::check_index(index, size());
  return utterances_[static_cast<std::size_t>(index)];
}

const std::vector<std::int32_t>& LibriSpeechDataset::tokens(std::int64_t index) const {
  data::check_index(index, size());
  return tokens_[static_cast<std::size_t>(index)];
}

std::string LibriSpeechDataset::source(std::int64_t index) const {
  const Utterance& u = utterance(index);
  return fmt::format("{} ({} record {})", u.audio_path, u.manifest, u.record);
}

double LibriSpeechDataset::total_duration() const {
  double total = 0;
  for (const auto& u : utterances_) total += u.duration;
  return total;
}

data::Sample LibriSpeechDataset::get(const data::SampleContext& ctx) const {
  const Utterance& u = utterance(ctx.index);
  data::Audio a;
  try {
    a = data::read_audio(u.audio_path, /*mono=*/true);
  } catch (const DataError& e) {
    BH_THROW(DataError, "{}: record {}: {}", u.manifest, u.record, e.message());
  }
  BH_CHECK_AS(DataError, a.channels == 1, "{}: record {}: {}: {} channels, expected mono", u.manifest, u.record,
              u.audio_path, a.channels);
  BH_CHECK_AS(DataError, a.sample_rate == options_.sample_rate, "{}: record {}: {}: sample rate {} Hz, expected {} Hz",
              u.manifest, u.record, u.audio_path, a.sample_rate, options_.sample_rate);
  BH_CHECK_AS(DataError, a.frames() > 0, "{}: record {}: {}: no audio samples", u.manifest, u.record, u.audio_path);
  const auto& ids = tokens_[static_cast<std::size_t>(ctx.index)];
  data::Sample s;
  s.set("audio", a.samples);
  s.set("sample_rate", Tensor::from_vector_i32({a.sample_rate}, {}));
  s.set("tokens", Tensor::from_vector_i32(ids, {static_cast<std::int64_t>(ids.size())}));
  return s;
}

}  // namespace benchhost::librispeech
