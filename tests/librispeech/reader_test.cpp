// The LibriSpeech manifest reader and utterance dataset on hand-written manifests: what they
// return, the duration filter, several manifests, and a DataError naming the manifest and the
// record for every kind of bad input (Note [Manifest errors name the record]).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "benchhost/data/audio.hpp"
#include "benchhost/error.hpp"
#include "common.hpp"
#include "librispeech.hpp"
#include "tokenizer.hpp"

using namespace benchhost;
using namespace benchhost::librispeech;
namespace fs = std::filesystem;

namespace {

// A tone of `frames` samples at `rate` Hz with `channels` channels.
void write_tone(const std::string& path, std::int64_t frames, int rate = 16000, int channels = 1,
                data::AudioFormat format = data::AudioFormat::wav_pcm16) {
  fs::create_directories(fs::path(path).parent_path());
  Tensor t = channels == 1 ? Tensor::empty({frames}) : Tensor::empty({frames, channels});
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < frames * channels; ++i) p[i] = 0.25f * std::sin(0.01f * static_cast<float>(i));
  data::write_audio(path, t, rate, format);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A record in the reference's shape.
std::string record(const std::string& transcript, const std::string& fname, double duration) {
  return fmt::format(
      R"({{"transcript": "{}", "files": [{{"channels": 1, "sample_rate": 16000.0, "bitdepth": 16, "bitrate": 256000.0,
 "duration": {}, "num_samples": {}, "encoding": "Signed Integer PCM", "silent": false, "fname": "{}", "speed": 1}}],
 "original_duration": {}, "original_num_samples": {}}})",
      transcript, duration, static_cast<long>(duration * 16000), fname, duration, static_cast<long>(duration * 16000));
}

// A dataset directory with three good utterances (0.5 s, 1 s, 2 s) and their manifest.
struct Fixture {
  test::TempDir dir{"reader"};
  std::string manifest = dir / "librispeech-train-clean-100-wav.json";
  Fixture() {
    write_tone(dir / "train-clean-100-wav/19/198/19-198-0000.wav", 8000);
    write_tone(dir / "train-clean-100-wav/19/198/19-198-0001.flac", 16000, 16000, 1, data::AudioFormat::flac_pcm16);
    write_tone(dir / "train-clean-100-wav/26/495/26-495-0000.wav", 32000);
    write_text(manifest, "[" + record("one two", "train-clean-100-wav/19/198/19-198-0000.wav", 0.5) + ",\n" +
                             record("it's three", "train-clean-100-wav/19/198/19-198-0001.flac", 1.0) + ",\n" +
                             record("four", "train-clean-100-wav/26/495/26-495-0000.wav", 2.0) + "]");
  }
  // The manifest with record 1 replaced by `bad`.
  std::string with_record1(const std::string& bad) const {
    const std::string path = dir / "bad.json";
    write_text(path, "[" + record("one two", "train-clean-100-wav/19/198/19-198-0000.wav", 0.5) + ",\n" + bad + "]");
    return path;
  }
};

// `f` throws DataError whose message names `file` and `what`.
template <class F>
void expect_data_error(F&& f, const std::string& file, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no DataError; expected one naming " << file << " and '" << what << "'";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find(file), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
  }
}

}  // namespace

TEST(LibriSpeechReader, ReadsRecordsAndDecodes) {
  Fixture fx;
  const auto utts = read_manifest(fx.dir.path.string(), fx.manifest);
  ASSERT_EQ(utts.size(), 3u);
  EXPECT_EQ(utts[1].transcript, "it's three");
  EXPECT_EQ(utts[1].fname, "train-clean-100-wav/19/198/19-198-0001.flac");
  EXPECT_EQ(utts[1].audio_path, fx.dir / "train-clean-100-wav/19/198/19-198-0001.flac");
  EXPECT_DOUBLE_EQ(utts[2].duration, 2.0);
  EXPECT_EQ(utts[2].record, 2);
  EXPECT_EQ(utts[2].manifest, fx.manifest);

  LibriSpeechDataset ds(utts, std::make_shared<CharTokenizer>());
  ASSERT_EQ(ds.size(), 3);
  EXPECT_DOUBLE_EQ(ds.total_duration(), 3.5);
  const std::int64_t frames[] = {8000, 16000, 32000};
  for (std::int64_t i = 0; i < 3; ++i) {
    const data::Sample s = ds.get(i);
    EXPECT_EQ(s["audio"].shape(), (Shape{frames[i]})) << i;
    EXPECT_EQ(s["audio"].dtype(), DType::f32);
    EXPECT_EQ(s["sample_rate"].dtype(), DType::i32);
    EXPECT_EQ(s["sample_rate"].data<std::int32_t>()[0], 16000);
    EXPECT_NEAR(s["audio"].data<float>()[100], 0.25f * std::sin(1.0f), 1e-4f) << i;  // WAV and FLAC alike
  }
  // "it's three" in the reference's 28 labels: i=9 t=20 '=27 s=19 space=0 t h r e e.
  const data::Sample s = ds.get(1);
  const std::vector<std::int32_t> want = {9, 20, 27, 19, 0, 20, 8, 18, 5, 5};
  ASSERT_EQ(s["tokens"].shape(), (Shape{10}));
  EXPECT_EQ(std::vector<std::int32_t>(s["tokens"].data<std::int32_t>(), s["tokens"].data<std::int32_t>() + 10), want);
  EXPECT_EQ(ds.tokens(1), want);
  EXPECT_NE(ds.source(2).find("26-495-0000.wav"), std::string::npos);
  EXPECT_NE(ds.source(2).find("record 2"), std::string::npos);
}

TEST(LibriSpeechReader, DurationFilterAndSeveralManifests) {
  Fixture fx;
  ManifestOptions o;
  o.max_duration = 1.0;  // keeps <= 1.0: the 0.5 s and 1 s records
  auto kept = read_manifest(fx.dir.path.string(), fx.manifest, o);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[1].record, 1);
  o.max_duration = 0.99;
  EXPECT_EQ(read_manifest(fx.dir.path.string(), fx.manifest, o).size(), 1u);

  // A second split; names relative to the dataset directory, as the reference joins them.
  write_tone(fx.dir / "train-other-500-wav/7/8/7-8-0000.wav", 4000);
  write_text(fx.dir / manifest_name("train-other-500"), "[" + record("five", "train-other-500-wav/7/8/7-8-0000.wav", 0.25) + "]");
  const auto all = read_manifests(fx.dir.path.string(), {manifest_name("train-clean-100"), manifest_name("train-other-500")});
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3].transcript, "five");
  EXPECT_EQ(all[3].record, 0);
  EXPECT_EQ(all[3].manifest, fx.dir / manifest_name("train-other-500"));
  EXPECT_EQ(manifest_name("dev-clean"), "librispeech-dev-clean-wav.json");
  EXPECT_THROW(read_manifests(fx.dir.path.string(), {}), InvalidArgument);
  expect_data_error([&] { read_manifests(fx.dir.path.string(), {manifest_name("dev-clean")}); },
                    "librispeech-dev-clean-wav.json", "");
}

TEST(LibriSpeechReader, TruncatedJsonNamesTheFile) {
  Fixture fx;
  std::ifstream in(fx.manifest);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (std::size_t cut : {text.size() / 3, text.size() - 2}) {
    const std::string path = fx.dir / "cut.json";
    write_text(path, text.substr(0, cut));
    expect_data_error([&] { read_manifest(fx.dir.path.string(), path); }, "cut.json", "invalid JSON");
  }
  write_text(fx.dir / "empty.json", "");
  expect_data_error([&] { read_manifest(fx.dir.path.string(), fx.dir / "empty.json"); }, "empty.json", "empty");
}

TEST(LibriSpeechReader, BadRecordsNameFileAndRecord) {
  Fixture fx;
  const std::string dir = fx.dir.path.string();
  const std::string wav = "train-clean-100-wav/26/495/26-495-0000.wav";
  struct Case {
    std::string record, what;
  };
  const Case cases[] = {
      {R"({"files": [{"fname": ")" + wav + R"("}], "original_duration": 1.0})", "'transcript'"},
      {R"({"transcript": "a", "original_duration": 1.0})", "'files'"},
      {R"({"transcript": "a", "files": [{"fname": ")" + wav + R"("}]})", "'original_duration'"},
      {R"({"transcript": "a", "files": [{"speed": 1}], "original_duration": 1.0})", "'fname'"},
      {R"({"transcript": 7, "files": [{"fname": ")" + wav + R"("}], "original_duration": 1.0})", "must be a string"},
      {R"({"transcript": "a", "files": [{"fname": ")" + wav + R"("}], "original_duration": "1.0"})", "must be a number"},
      {R"({"transcript": "a", "files": {"fname": ")" + wav + R"("}, "original_duration": 1.0})", "must be an array"},
      {R"({"transcript": "a", "files": [{"fname": 3}], "original_duration": 1.0})", "must be a string"},
      {R"({"transcript": "a", "files": ["x.wav"], "original_duration": 1.0})", "must be an object"},
      {R"({"transcript": "a", "files": [], "original_duration": 1.0})", "'files' is empty"},
      {R"({"transcript": "  ", "files": [{"fname": ")" + wav + R"("}], "original_duration": 1.0})", "empty transcript"},
      {R"({"transcript": "a", "files": [{"fname": ")" + wav + R"("}], "original_duration": -1})", "original_duration"},
      {R"({"transcript": "a", "files": [{"fname": "../outside.wav"}], "original_duration": 1.0})", "leaves the dataset"},
      {R"({"transcript": "a", "files": [{"fname": "x/../../outside.wav"}], "original_duration": 1.0})", "leaves the dataset"},
      {R"({"transcript": "a", "files": [{"fname": "/etc/passwd"}], "original_duration": 1.0})", "absolute"},
      {R"({"transcript": "a", "files": [{"fname": "train-clean-100-wav/no/such.wav"}], "original_duration": 1.0})",
       "does not exist"},
      {R"(["not", "an", "object"])", "expected an object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.record);
    const std::string path = fx.with_record1(c.record);
    expect_data_error([&] { read_manifest(dir, path); }, "bad.json: record 1", c.what);
  }
  // The last entry of files[] is the one read: an earlier bad one does not matter.
  const std::string two = fx.with_record1(R"({"transcript": "a", "files": [{"fname": "gone.wav"}, {"fname": ")" + wav +
                                          R"("}], "original_duration": 1.0})");
  EXPECT_EQ(read_manifest(dir, two).at(1).fname, wav);
  // Missing files are found at decode time when not checked at load.
  ManifestOptions unchecked;
  unchecked.check_files = false;
  const std::string gone = fx.with_record1(R"({"transcript": "a", "files": [{"fname": "gone.wav"}], "original_duration": 1.0})");
  LibriSpeechDataset ds(read_manifest(dir, gone, unchecked), std::make_shared<CharTokenizer>());
  expect_data_error([&] { ds.get(1); }, "bad.json: record 1", "gone.wav");
}

TEST(LibriSpeechReader, BadAudioNamesFileAndRecord) {
  Fixture fx;
  const std::string dir = fx.dir.path.string();
  auto dataset_with = [&](const std::string& fname) {
    const std::string path = fx.with_record1(record("five", fname, 1.0));
    return LibriSpeechDataset(read_manifest(dir, path), std::make_shared<CharTokenizer>());
  };
  // Truncated: the header promises more data than the file holds.
  write_tone(fx.dir / "a/cut.wav", 16000);
  fs::resize_file(fx.dir / "a/cut.wav", 44 + 1000);
  expect_data_error([&] { dataset_with("a/cut.wav").get(1); }, "bad.json: record 1", "cut.wav");
  // Not audio at all.
  write_text(fx.dir / "a/text.wav", "this is not a RIFF file at all, just text");
  expect_data_error([&] { dataset_with("a/text.wav").get(1); }, "bad.json: record 1", "text.wav");
  // Two channels.
  write_tone(fx.dir / "a/stereo.wav", 1600, 16000, 2);
  expect_data_error([&] { dataset_with("a/stereo.wav").get(1); }, "bad.json: record 1", "2 channels");
  // Another rate.
  write_tone(fx.dir / "a/8k.wav", 1600, 8000);
  expect_data_error([&] { dataset_with("a/8k.wav").get(1); }, "bad.json: record 1", "8000 Hz");
  // The good record of the same manifest still reads.
  EXPECT_EQ(dataset_with("a/8k.wav").get(0)["audio"].size(0), 8000);
  // A transcript with no character the tokenizer knows.
  expect_data_error([&] {
    LibriSpeechDataset(read_manifest(dir, fx.with_record1(record("123!?", "a/8k.wav", 1.0))),
                       std::make_shared<CharTokenizer>());
  }, "bad.json: record 1", "no token");
}
