// The espeak-ng speech generator (Note [Synthetic speech]): the set reads back through the
// production reader, records have the reference's shape, evaluation voices and prosody are held
// out, the bytes are repeatable, the tool works, and missing programs are named by package.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "benchhost/error.hpp"
#include "common.hpp"
#include "common/thread_comm.hpp"
#include "librispeech.hpp"
#include "synthetic.hpp"
#include "tokenizer.hpp"

using namespace benchhost;
using namespace benchhost::librispeech;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Voice {
  std::string accent, variant;
  int rate = 0, pitch = 0;
};

// voices-<split>.tsv: fname -> voice.
std::map<std::string, Voice> read_voices(const std::string& dir, const std::string& split) {
  std::ifstream in(dir + "/voices-" + split + ".tsv");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "fname\taccent\tvariant\trate\tpitch");
  std::map<std::string, Voice> out;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string fname;
    Voice v;
    ss >> fname >> v.accent >> v.variant >> v.rate >> v.pitch;
    out[fname] = v;
  }
  return out;
}

#define SKIP_WITHOUT_PROGRAMS() \
  if (!test::have_generator_programs()) GTEST_SKIP() << test::kNoPrograms

}  // namespace

TEST(LibriSpeechSynthetic, ReadsBackThroughTheReader) {
  SKIP_WITHOUT_PROGRAMS();
  const std::string& dir = test::shared_set();
  const auto o = test::shared_options();
  auto tokenizer = std::make_shared<SentencePieceTokenizer>(dir + "/" + synthetic_tokenizer_model(o));
  int flac = 0;
  for (bool eval : {false, true}) {
    const std::string split = eval ? kSyntheticEvalSplit : kSyntheticTrainSplit;
    const LibriSpeechDataset ds(read_manifest(dir, dir + "/" + manifest_name(split)), tokenizer);
    ASSERT_EQ(ds.size(), eval ? o.eval_utterances : o.train_utterances);
    for (std::int64_t i = 0; i < ds.size(); ++i) {
      const Utterance& u = ds.utterance(i);
      const data::Sample s = ds.get(i);
      // 2 to 5 words of a short utterance: well under a second per word.
      EXPECT_GT(u.duration, 0.4) << u.fname;
      EXPECT_LT(u.duration, 5.0) << u.fname;
      EXPECT_DOUBLE_EQ(u.duration, static_cast<double>(s["audio"].size(0)) / 16000) << u.fname;
      EXPECT_EQ(s["sample_rate"].data<std::int32_t>()[0], 16000);
      float peak = 0;
      for (std::int64_t k = 0; k < s["audio"].numel(); ++k) peak = std::max(peak, std::abs(s["audio"].data<float>()[k]));
      EXPECT_GT(peak, 0.05f) << u.fname << " is silent";
      EXPECT_EQ(tokenizer->decode(ds.tokens(i)), u.transcript);
      flac += u.fname.ends_with(".flac");
    }
    // The training filter: max_duration keeps exactly the records at or below it.
    std::vector<double> durations;
    for (const auto& u : ds.utterances()) durations.push_back(u.duration);
    std::sort(durations.begin(), durations.end());
    ManifestOptions filter;
    filter.max_duration = durations[durations.size() / 2];
    const auto kept = read_manifest(dir, dir + "/" + manifest_name(split), filter);
    EXPECT_EQ(kept.size(), static_cast<std::size_t>(std::upper_bound(durations.begin(), durations.end(),
                                                                     filter.max_duration) - durations.begin()));
    for (const auto& u : kept) EXPECT_LE(u.duration, filter.max_duration);
  }
  EXPECT_GT(flac, 0) << "no FLAC utterance: the FLAC path is not exercised";
  EXPECT_LT(flac, o.train_utterances + o.eval_utterances);
}

TEST(LibriSpeechSynthetic, RecordsHaveTheReferenceShape) {
  SKIP_WITHOUT_PROGRAMS();
  const std::string& dir = test::shared_set();
  const std::vector<std::string> record_keys = {"transcript", "files", "original_duration", "original_num_samples"};
  const std::vector<std::string> file_keys = {"channels", "sample_rate", "bitdepth", "bitrate", "duration",
                                              "num_samples", "encoding", "silent", "fname", "speed"};
  std::set<std::string> words(synthetic_vocabulary().begin(), synthetic_vocabulary().end());
  for (const char* split : {kSyntheticTrainSplit, kSyntheticEvalSplit}) {
    const std::string text = bytes_of(fs::path(dir) / manifest_name(split));
    // json.dump(indent=2): an array, two-space indentation, no final newline.
    ASSERT_TRUE(text.starts_with("[\n  {\n    \"transcript\": ")) << text.substr(0, 60);
    ASSERT_TRUE(text.ends_with("\n]"));
    const auto doc = nlohmann::ordered_json::parse(text);
    const std::regex fname(std::string("^") + split + R"(-wav/(\d+)/(\d+)/\1-\2-(\d{4})\.(wav|flac)$)");
    int index = 0;
    for (const auto& r : doc) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : r.items()) keys.push_back(k);
      EXPECT_EQ(keys, record_keys);
      const std::string t = r["transcript"].get<std::string>();
      std::stringstream ss(t);
      int n = 0;
      for (std::string w; ss >> w; ++n) EXPECT_TRUE(words.count(w)) << w;
      EXPECT_TRUE(n >= 2 && n <= 5) << t;
      for (char c : t) EXPECT_TRUE(c == ' ' || (c >= 'a' && c <= 'z')) << t;
      EXPECT_FALSE(t.starts_with(" ") || t.ends_with(" ") || t.find("  ") != std::string::npos) << t;
      ASSERT_EQ(r["files"].size(), 1u);
      const auto& f = r["files"][0];
      keys.clear();
      for (const auto& [k, v] : f.items()) keys.push_back(k);
      EXPECT_EQ(keys, file_keys);
      EXPECT_EQ(f["channels"], 1);
      EXPECT_TRUE(f["sample_rate"].is_number_float());
      EXPECT_EQ(f["sample_rate"].get<double>(), 16000.0);
      EXPECT_EQ(f["bitdepth"], 16);
      EXPECT_TRUE(f["num_samples"].is_number_integer());
      EXPECT_DOUBLE_EQ(f["duration"].get<double>(), f["num_samples"].get<double>() / 16000);
      EXPECT_EQ(r["original_duration"], f["duration"]);
      EXPECT_EQ(r["original_num_samples"], f["num_samples"]);
      EXPECT_EQ(f["silent"], false);
      EXPECT_EQ(f["speed"], 1);
      std::smatch m;
      const std::string name = f["fname"].get<std::string>();
      ASSERT_TRUE(std::regex_match(name, m, fname)) << name;
      EXPECT_EQ(std::stoi(m[3].str()), index++);
      EXPECT_EQ(f["encoding"], m[4].str() == "flac" ? "FLAC" : "Signed Integer PCM");
    }
  }
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / "sentencepieces/librispeech32.vocab"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / ".scratch"));
}

TEST(LibriSpeechSynthetic, EvaluationVoicesAndProsodyAreHeldOut) {
  SKIP_WITHOUT_PROGRAMS();
  const std::string& dir = test::shared_set();
  const auto train = read_voices(dir, kSyntheticTrainSplit), eval = read_voices(dir, kSyntheticEvalSplit);
  ASSERT_EQ(train.size(), 40u);
  ASSERT_EQ(eval.size(), 10u);
  std::set<std::string> train_variants, eval_variants, train_speakers, eval_speakers, accents;
  std::set<std::pair<int, int>> train_cells, eval_cells;
  for (const auto& [fname, v] : train) {
    train_variants.insert(v.variant);
    train_cells.insert({v.rate, v.pitch});
    train_speakers.insert(fname.substr(fname.find('/') + 1, fname.find('/', fname.find('/') + 1) - fname.find('/') - 1));
    accents.insert(v.accent);
    EXPECT_FALSE(is_eval_prosody(v.rate, v.pitch));
  }
  for (const auto& [fname, v] : eval) {
    eval_variants.insert(v.variant);
    eval_cells.insert({v.rate, v.pitch});
    eval_speakers.insert(fname.substr(fname.find('/') + 1, fname.find('/', fname.find('/') + 1) - fname.find('/') - 1));
    EXPECT_TRUE(is_eval_prosody(v.rate, v.pitch));
    EXPECT_TRUE(v.rate >= 130 && v.rate <= 200 && v.pitch >= 25 && v.pitch <= 75);
  }
  auto disjoint = [](const auto& a, const auto& b) {
    for (const auto& x : a)
      if (b.count(x)) return false;
    return true;
  };
  EXPECT_TRUE(disjoint(train_variants, eval_variants));
  EXPECT_TRUE(disjoint(train_cells, eval_cells));
  EXPECT_TRUE(disjoint(train_speakers, eval_speakers));
  EXPECT_GE(train_variants.size(), 5u);  // a mix, not one voice
  EXPECT_GE(accents.size(), 4u);
  EXPECT_GE(train_cells.size(), 10u);
  // The lists themselves are disjoint and the grid's held-out share is a quarter.
  const auto& tv = synthetic_voice_variants(false);
  const auto& ev = synthetic_voice_variants(true);
  EXPECT_TRUE(disjoint(std::set<std::string>(tv.begin(), tv.end()), std::set<std::string>(ev.begin(), ev.end())));
  int held_out = 0;
  for (int rate = 130; rate <= 200; rate += 10)
    for (int pitch = 25; pitch <= 75; pitch += 10) held_out += is_eval_prosody(rate, pitch);
  EXPECT_EQ(held_out, 12);
}

TEST(LibriSpeechSynthetic, SameSeedSameBytes) {
  SKIP_WITHOUT_PROGRAMS();
  test::TempDir dir("det");
  auto o = test::shared_options();
  o.jobs = 1;  // a different worker count than the shared set's: the bytes do not depend on it
  const auto r = generate_librispeech_synthetic(dir / "again", o);
  EXPECT_TRUE(r.generated);
  EXPECT_GT(r.train_audio_seconds, 0);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(test::shared_set())) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), test::shared_set());
    EXPECT_EQ(bytes_of(e.path()), bytes_of(dir.path / "again" / rel)) << rel;
    ++files;
  }
  EXPECT_GT(files, 50);
  // Another seed: other utterances.
  o.seed = 4;
  o.train_utterances = 3;
  o.eval_utterances = 1;
  generate_librispeech_synthetic(dir / "other", o);
  EXPECT_NE(bytes_of(dir.path / "other" / manifest_name(kSyntheticTrainSplit)).substr(0, 200),
            bytes_of(fs::path(test::shared_set()) / manifest_name(kSyntheticTrainSplit)).substr(0, 200));
}

TEST(LibriSpeechSynthetic, EnsureAndOptions) {
  SKIP_WITHOUT_PROGRAMS();
  const auto o = test::shared_options();
  const auto r = ensure_librispeech_synthetic(test::shared_set(), o);
  EXPECT_FALSE(r.generated);
  EXPECT_EQ(r.tokenizer_model, test::shared_set() + "/sentencepieces/librispeech32.model");
  auto other = o;
  other.seed = 9;
  EXPECT_THROW(ensure_librispeech_synthetic(test::shared_set(), other), DataError);
  EXPECT_THROW(generate_librispeech_synthetic(test::shared_set(), o), InvalidArgument);  // exists
  test::TempDir dir("opts");
  auto bad = o;
  bad.train_utterances = 0;
  EXPECT_THROW(generate_librispeech_synthetic(dir / "x", bad), InvalidArgument);
  bad = o;
  bad.vocab_size = 10;
  EXPECT_THROW(generate_librispeech_synthetic(dir / "x", bad), InvalidArgument);
  EXPECT_FALSE(fs::exists(dir / "x"));
}

TEST(LibriSpeechSynthetic, MissingProgramsNameTheirPackage) {
  test::TempDir dir("missing");
  const std::pair<std::string LibriSpeechSyntheticOptions::*, std::string> programs[] = {
      {&LibriSpeechSyntheticOptions::espeak_program, "espeak-ng"},
      {&LibriSpeechSyntheticOptions::sox_program, "sox"},
      {&LibriSpeechSyntheticOptions::spm_train_program, "sentencepiece"},
  };
  for (const auto& [member, package] : programs) {
    auto o = test::shared_options();
    o.*member = "/nonexistent/bin/tool";
    try {
      generate_librispeech_synthetic(dir / "x", o);
      ADD_FAILURE() << "ran without " << package;
    } catch (const Unsupported& e) {
      EXPECT_NE(e.message().find("install the Debian package " + package + " "), std::string::npos) << e.message();
    }
    EXPECT_FALSE(fs::exists(dir / "x"));
  }
  if (!test::have_generator_programs()) return;
  // A program that fails: a DataError with its exit status, and nothing left behind.
  auto o = test::shared_options();
  o.espeak_program = "/bin/false";
  try {
    generate_librispeech_synthetic(dir / "x", o);
    ADD_FAILURE() << "a failing espeak-ng went unnoticed";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("/bin/false -v"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("failed (exit 1)"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(fs::is_empty(dir.path)) << "staging directory left behind";
}

TEST(LibriSpeechSynthetic, Tool) {
  const std::string tool = std::string(BENCHHOST_BINARY_DIR) + "/bin/make_librispeech_synthetic";
  test::TempDir dir("tool");
  // Without the programs on PATH the tool refuses, naming the package.
  const std::string log = dir / "log.txt";
  const int rc = std::system(fmt::format("PATH=/nonexistent {} --out {} --train 2 --eval 1 > {} 2>&1", tool,
                                         dir / "none", log).c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
  EXPECT_NE(bytes_of(log).find("install the Debian package espeak-ng"), std::string::npos) << bytes_of(log);
  EXPECT_FALSE(fs::exists(dir / "none"));
  if (!test::have_generator_programs()) GTEST_SKIP() << test::kNoPrograms;
  ASSERT_EQ(std::system(fmt::format("{} --out {} --train 4 --eval 2 --seed 7 > {} 2>&1", tool, dir / "set", log).c_str()),
            0)
      << bytes_of(log);
  EXPECT_NE(bytes_of(log).find("wrote 4 training"), std::string::npos) << bytes_of(log);
  EXPECT_EQ(read_manifest(dir / "set", dir / ("set/" + manifest_name(kSyntheticEvalSplit))).size(), 2u);
  EXPECT_TRUE(fs::is_regular_file(dir / "set/sentencepieces/librispeech32.model"));
  EXPECT_EQ(std::system(fmt::format("{} --out {} --train 0 > {} 2>&1", tool, dir / "bad", log).c_str()) >> 8, 2);
}

// espeak-ng 1.51 silently ignores a variant it cannot attach ("en-gb+f3" speaks as plain "en"):
// every accent the generator uses must give different audio for different variants, or the
// held-out speakers would not be new voices at all.
TEST(LibriSpeechSynthetic, EveryAccentHonoursVariants) {
  SKIP_WITHOUT_PROGRAMS();
  test::TempDir dir("variants");
  for (const auto& accent : synthetic_accents()) {
    std::set<std::string> sounds;
    for (const char* variant : {"m1", "f3", "klatt"}) {
      const std::string wav = dir / "v.wav";
      ASSERT_EQ(std::system(fmt::format("espeak-ng -v {}+{} -s 150 -p 50 -w {} 'four oh six'", accent, variant, wav).c_str()), 0);
      sounds.insert(bytes_of(wav));
    }
    EXPECT_EQ(sounds.size(), 3u) << accent << ": variants make no difference";
  }
}

// Python's json and torchaudio (Debian's python3-torchaudio, sox_io) read the generated set as
// ours does: the manifests are exactly what json.dump(indent=2) writes, and every WAV and FLAC
// decodes to the same frames, rate and sample values.
TEST(LibriSpeechSynthetic, PythonPeerReadsTheSameSet) {
  SKIP_WITHOUT_PROGRAMS();
  if (std::system("/usr/bin/python3 -c 'import torchaudio' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 without torchaudio (Debian python3-torchaudio)";
  const std::string& dir = test::shared_set();
  std::string cmd = fmt::format("/usr/bin/python3 {}/tests/librispeech/manifest_peer.py {}", BENCHHOST_SOURCE_DIR, dir);
  for (const char* split : {kSyntheticTrainSplit, kSyntheticEvalSplit}) cmd += " " + dir + "/" + manifest_name(split);
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) text += buf;
  ASSERT_EQ(::pclose(p), 0) << text;
  auto tokenizer = std::make_shared<CharTokenizer>();
  std::map<std::string, std::pair<const LibriSpeechDataset*, std::int64_t>> by_fname;
  std::vector<std::unique_ptr<LibriSpeechDataset>> sets;
  for (const char* split : {kSyntheticTrainSplit, kSyntheticEvalSplit}) {
    sets.push_back(std::make_unique<LibriSpeechDataset>(read_manifest(dir, dir + "/" + manifest_name(split)), tokenizer));
    for (std::int64_t i = 0; i < sets.back()->size(); ++i) by_fname[sets.back()->utterance(i).fname] = {sets.back().get(), i};
  }
  std::stringstream lines(text);
  int manifests = 0, records = 0;
  double worst = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("manifest")) {
      EXPECT_TRUE(j["redump_identical"].get<bool>()) << j["manifest"];
      ++manifests;
      continue;
    }
    const auto it = by_fname.find(j["fname"].get<std::string>());
    ASSERT_NE(it, by_fname.end()) << line;
    const data::Sample s = it->second.first->get(it->second.second);
    const Tensor& audio = s["audio"];
    EXPECT_EQ(j["frames"].get<std::int64_t>(), audio.size(0)) << line;
    EXPECT_EQ(j["channels"].get<int>(), 1) << line;
    EXPECT_EQ(j["sample_rate"].get<int>(), 16000) << line;
    double sum = 0, sum_sq = 0;
    for (std::int64_t k = 0; k < audio.numel(); ++k) {
      const double v = audio.data<float>()[k];
      sum += v;
      sum_sq += v * v;
    }
    worst = std::max({worst, std::abs(sum - j["sum"].get<double>()), std::abs(sum_sq - j["sum_sq"].get<double>())});
    EXPECT_NEAR(sum, j["sum"].get<double>(), 1e-6) << line;
    EXPECT_NEAR(sum_sq, j["sum_sq"].get<double>(), 1e-6 * std::max(1.0, sum_sq)) << line;
    ++records;
  }
  EXPECT_EQ(manifests, 2);
  EXPECT_EQ(records, test::shared_options().train_utterances + test::shared_options().eval_utterances);
  std::printf("python peer: %d records, largest |sum| or |sum of squares| difference %.3g\n", records, worst);
}

TEST(LibriSpeechSynthetic, EnsureAcrossRanks) {
  SKIP_WITHOUT_PROGRAMS();
  test::TempDir dir("ranks");
  auto o = test::shared_options();
  o.train_utterances = 3;
  o.eval_utterances = 1;
  test_support::Group group(2);
  std::vector<LibriSpeechSyntheticReport> reports(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      test_support::ThreadComm comm(group, r);
      reports[static_cast<std::size_t>(r)] = ensure_librispeech_synthetic(dir / "e", o, &comm);
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(reports[0].generated);
  EXPECT_FALSE(reports[1].generated);  // rank 1 waited and found rank 0's set
  EXPECT_EQ(reports[1].tokenizer_model, dir / "e/sentencepieces/librispeech32.model");
  EXPECT_EQ(read_manifest(dir / "e", dir / ("e/" + manifest_name(kSyntheticTrainSplit))).size(), 3u);
}
