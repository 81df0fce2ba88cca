// WAV/FLAC through libsndfile, and JSON manifests.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/data/audio.hpp"
#include "benchhost/data/manifest.hpp"
#include "data_test_util.hpp"

using namespace benchhost;
using namespace benchhost::data;
using bh_data_test::malformed;
using bh_data_test::TempDir;

namespace {

Tensor tone(std::int64_t frames, int channels) {
  Tensor t = Tensor::empty({frames, channels});
  for (std::int64_t i = 0; i < frames; ++i)
    for (int c = 0; c < channels; ++c)
      t.data<float>()[i * channels + c] = 0.5f * std::sin(0.01f * static_cast<float>(i) * static_cast<float>(c + 1));
  return t;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto av = a.to_float_vector(), bv = b.to_float_vector();
  EXPECT_EQ(av.size(), bv.size());
  float m = 0;
  for (std::size_t i = 0; i < std::min(av.size(), bv.size()); ++i) m = std::max(m, std::abs(av[i] - bv[i]));
  return m;
}

}  // namespace

TEST(Audio, WavAndFlacRoundTrip) {
  TempDir dir;
  const Tensor stereo = tone(4000, 2);
  struct Case { AudioFormat format; const char* name; float tol; };
  for (const Case& c : {Case{AudioFormat::wav_pcm16, "a.wav", 1.0f / 16384}, Case{AudioFormat::wav_float, "f.wav", 0.0f},
                        Case{AudioFormat::flac_pcm16, "a.flac", 1.0f / 16384}}) {
    write_audio(dir.file(c.name), stereo, 16000, c.format);
    const Audio a = read_audio(dir.file(c.name));
    EXPECT_EQ(a.sample_rate, 16000) << c.name;
    EXPECT_EQ(a.channels, 2);
    EXPECT_EQ(a.samples.shape(), (Shape{4000, 2}));
    EXPECT_LE(max_abs_diff(a.samples, stereo), c.tol) << c.name;
    EXPECT_NEAR(a.seconds(), 0.25, 1e-9);
    const Audio m = read_audio(dir.file(c.name), /*mono=*/true);
    EXPECT_EQ(m.samples.shape(), (Shape{4000}));
    EXPECT_NEAR(m.samples.item({123}), 0.5 * (stereo.item({123, 0}) + stereo.item({123, 1})), 2.0 / 16384);
  }
}

TEST(Audio, TruncatedAndCorruptFilesAreRefused) {
  TempDir dir;
  for (const char* name : {"t.wav", "t.flac"}) {
    const std::string path = dir.file(name);
    write_audio(path, tone(20000, 1), 16000, std::string(name).ends_with(".wav") ? AudioFormat::wav_pcm16 : AudioFormat::flac_pcm16);
    const auto bytes = bh_data_test::read_bytes(path);
    for (double frac : {0.0, 0.02, 0.5, 0.9}) {
      bh_data_test::write_bytes(path, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(frac * static_cast<double>(bytes.size()))));
      EXPECT_DATA_ERROR(read_audio(path), name);
    }
  }
  EXPECT_DATA_ERROR(read_audio(malformed("wav_truncated.wav")), "truncated WAV");
  EXPECT_DATA_ERROR(read_audio(malformed("npy_fortran.npy")), "npy_fortran.npy");
  EXPECT_DATA_ERROR(read_audio(dir.file("missing.wav")), "missing.wav");
  // Found by fuzz_audio: an odd-sized last chunk without its pad byte moved the chunk walk one
  // byte past the end, and the next "chunk" was read from beyond the file.
  const std::string odd = dir.file("odd_last_chunk.wav");
  bh_data_test::write_bytes(odd, {'R', 'I', 'F', 'F', 0x44, 0x08, 0, 0, 'W', 'A', 'V', 'E', 0xec, 0, 0, 0, 9, 0, 0, 0,
                                  'd', 'a', 't', 'a', 0xff, 0xff, 0xff, 0xff, 0x0a});
  EXPECT_DATA_ERROR(read_audio(odd), "odd_last_chunk.wav");
}

TEST(Manifest, ArrayAndJsonLinesWithValidation) {
  const std::vector<ManifestField> fields = {{"audio_filepath", FieldType::string},
                                             {"duration", FieldType::number},
                                             {"text", FieldType::string, false}};
  const Manifest a = Manifest::parse(R"([{"audio_filepath": "a.flac", "duration": 1.5, "text": "hi"},
                                         {"audio_filepath": "b.flac", "duration": 2}])", "m.json", fields);
  ASSERT_EQ(a.size(), 2);
  EXPECT_EQ(a[0].get_string("audio_filepath"), "a.flac");
  EXPECT_EQ(a[1].get_number("duration"), 2.0);
  EXPECT_EQ(a[1].get_int("duration"), 2);
  EXPECT_FALSE(a[1].has("text"));
  EXPECT_DATA_ERROR(a[1].get_string("text"), "record 1: no field 'text'");
  EXPECT_DATA_ERROR(a[0].get_int("duration"), "must be an integer");
  EXPECT_THROW(a[2], InvalidArgument);
  const Manifest l = Manifest::parse("{\"audio_filepath\": \"x.wav\", \"duration\": 0.1, \"tags\": [1, 2]}\n\n"
                                     "{\"audio_filepath\": \"y.wav\", \"duration\": 3}\n", "m.jsonl", fields);
  ASSERT_EQ(l.size(), 2);
  EXPECT_EQ(l[0].get_json("tags"), "[1,2]");
  EXPECT_DATA_ERROR(Manifest::parse("{\"audio_filepath\": \"x\", \"duration\": 1}\n{oops}\n", "bad.jsonl", fields),
                    "bad.jsonl: line 2");
  EXPECT_DATA_ERROR(Manifest::parse(R"([{"duration": 1}])", "m.json", fields), "required field 'audio_filepath'");
  EXPECT_DATA_ERROR(Manifest::parse("[1, 2]", "m.json"), "record 0 is number");
  EXPECT_DATA_ERROR(Manifest::parse("  ", "m.json"), "empty manifest");
  EXPECT_DATA_ERROR(Manifest::read(malformed("manifest_bad.json"), fields),
                    "field 'duration' must be a number, got string");
}
