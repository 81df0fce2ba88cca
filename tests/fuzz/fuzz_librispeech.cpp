// LibriSpeech manifests as MLPerf's RNN-T preparation writes them (datasets/librispeech/
// librispeech.cpp): parse_manifest with every check (fields, files[-1].fname inside the dataset
// directory, the audio file's existence), the duration filter, tokenization into the dataset
// and decoding of the audio the records name. Invariants: every record read names a relative
// path that stays inside the directory and a finite non-negative duration, and the filter keeps
// a subset.
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "benchhost/data/audio.hpp"
#include "benchhost/tensor.hpp"
#include "fuzz.hpp"
#include "librispeech.hpp"
#include "tokenizer.hpp"

namespace {

// The dataset directory: two short utterances, a WAV and a FLAC, written once per process.
const std::string& dataset_dir() {
  static const std::string dir = [] {
    const std::filesystem::path d = bh_fuzz::scratch_dir() / "librispeech";
    std::filesystem::create_directories(d / "dev-clean-wav/1/2");
    benchhost::Tensor t = benchhost::Tensor::empty({400});
    for (int i = 0; i < 400; ++i) t.data<float>()[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    benchhost::data::write_audio((d / "dev-clean-wav/1/2/1-2-0000.wav").string(), t, 16000);
    benchhost::data::write_audio((d / "dev-clean-wav/1/2/1-2-0001.flac").string(), t, 16000,
                                 benchhost::data::AudioFormat::flac_pcm16);
    return d.string();
  }();
  return dir;
}

}  // namespace

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  dataset_dir();
  auto rec = [](const std::string& transcript, const std::string& fname, double duration, const char* encoding) {
    nlohmann::ordered_json f;
    f["channels"] = 1;
    f["sample_rate"] = 16000.0;
    f["bitdepth"] = 16;
    f["bitrate"] = 256000.0;
    f["duration"] = duration;
    f["num_samples"] = static_cast<int>(duration * 16000);
    f["encoding"] = encoding;
    f["silent"] = false;
    f["fname"] = fname;
    f["speed"] = 1;
    nlohmann::ordered_json r;
    r["transcript"] = transcript;
    r["files"] = nlohmann::ordered_json::array({f});
    r["original_duration"] = duration;
    r["original_num_samples"] = static_cast<int>(duration * 16000);
    return r;
  };
  nlohmann::ordered_json doc = nlohmann::ordered_json::array();
  doc.push_back(rec("seven oh two", "dev-clean-wav/1/2/1-2-0000.wav", 0.025, "Signed Integer PCM"));
  doc.push_back(rec("it's a flac", "dev-clean-wav/1/2/1-2-0001.flac", 0.025, "FLAC"));
  auto speeds = rec("two speeds", "dev-clean-wav/1/2/1-2-0000.wav", 17.5, "Signed Integer PCM");
  speeds["files"].insert(speeds["files"].begin(), speeds["files"][0]);
  speeds["files"][0]["speed"] = 0.9;
  doc.push_back(speeds);
  std::string lines;  // the same records as JSON Lines
  for (const auto& r : doc) lines += r.dump() + "\n";
  return {to_bytes(doc.dump(2)), to_bytes(lines)};
}
}  // namespace bh_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace benchhost::librispeech;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string& dir = dataset_dir();
  bh_fuzz::refused_or_read([&] {
    const auto all = parse_manifest(text, "fuzz.json", dir);
    for (const Utterance& u : all) {
      const std::filesystem::path p(u.fname);
      if (u.fname.empty() || p.is_absolute() || (!p.lexically_normal().empty() && *p.lexically_normal().begin() == ".."))
        std::abort();
      if (!std::isfinite(u.duration) || u.duration < 0 || u.transcript.empty()) std::abort();
    }
    ManifestOptions filter;
    filter.max_duration = 16.7;
    const auto kept = parse_manifest(text, "fuzz.json", dir, filter);
    if (kept.size() > all.size()) std::abort();
    for (const Utterance& u : kept)
      if (u.duration > 16.7) std::abort();
    const LibriSpeechDataset ds(all, std::make_shared<CharTokenizer>());
    for (std::int64_t i = 0; i < std::min<std::int64_t>(ds.size(), 4); ++i)
      bh_fuzz::refused_or_read([&] {
        const auto s = ds.get(i);
        if (s["tokens"].numel() < 1 || s["audio"].dim() != 1) std::abort();
      });
  });
  return 0;
}
