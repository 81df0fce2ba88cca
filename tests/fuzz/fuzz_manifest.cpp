// JSON and JSON Lines manifests with required fields (sdk/src/data/manifest.cpp), as the RNN-T
// LibriSpeech records use them.
#include "benchhost/data/manifest.hpp"
#include "fuzz.hpp"

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  return {to_bytes(R"([{"audio_filepath": "a/1.wav", "duration": 1.5, "text": "hello world"},
 {"audio_filepath": "a/2.flac", "duration": 12, "text": "a b c"}])"),
          to_bytes("{\"audio_filepath\": \"x.wav\", \"duration\": 0.25, \"text\": \"x\"}\n"
                   "{\"audio_filepath\": \"y.wav\", \"duration\": 3, \"text\": \"y z\", \"extra\": [1, 2]}\n")};
}
}  // namespace bh_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace benchhost::data;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<ManifestField> fields = {{"audio_filepath", FieldType::string},
                                             {"duration", FieldType::number},
                                             {"text", FieldType::string},
                                             {"extra", FieldType::array, false}};
  bh_fuzz::refused_or_read([&] {
    const Manifest m = Manifest::parse(text, "fuzz.json", fields);
    for (std::int64_t i = 0; i < m.size(); ++i) {
      m[i].get_string("audio_filepath");
      m[i].get_number("duration");
      if (m[i].has("extra")) m[i].get_json("extra");
    }
  });
  bh_fuzz::refused_or_read([&] { Manifest::parse(text, "fuzz.json"); });
  return 0;
}
