// WAV and FLAC audio through libsndfile (sdk/src/data/audio.cpp).
#include "benchhost/data/audio.hpp"
#include "fuzz.hpp"

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  using namespace benchhost;
  std::vector<Bytes> out;
  std::vector<float> wave(400);
  for (std::size_t k = 0; k < wave.size(); ++k) wave[k] = 0.5f * static_cast<float>((k * 7) % 100) / 100.0f - 0.25f;
  for (auto [name, format] : {std::pair{"seed.wav", data::AudioFormat::wav_pcm16},
                               std::pair{"seed_f.wav", data::AudioFormat::wav_float},
                               std::pair{"seed.flac", data::AudioFormat::flac_pcm16}}) {
    const std::string p = write_scratch(name, {});
    data::write_audio(p, Tensor::from_vector(wave, {static_cast<std::int64_t>(wave.size())}), 16000, format);
    out.push_back(read_bytes(p));
  }
  return out;
}
}  // namespace bh_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = bh_fuzz::write_scratch("fuzz.audio", {data, size});
  for (bool mono : {false, true}) bh_fuzz::refused_or_read([&] { benchhost::data::read_audio(path, mono); });
  return 0;
}
