// Speech synthesised with espeak-ng in MLPerf's LibriSpeech layout (Note [Synthetic speech]).
#include "synthetic.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "benchhost/data/generated.hpp"
#include "benchhost/comm/communicator.hpp"
#include "benchhost/data/audio.hpp"
#include "benchhost/error.hpp"
#include "benchhost/random.hpp"
#include "librispeech.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace benchhost::librispeech {

namespace {

constexpr const char* kMarker = "librispeech_synthetic.txt";
constexpr int kSampleRate = 16000;
constexpr int kRateMin = 130, kRateStep = 10, kRates = 8;     // 130..200 words per minute
constexpr int kPitchMin = 25, kPitchStep = 10, kPitches = 6;  // 25..75 (espeak's 0..99 scale)

// One utterance's choices, drawn before anything runs.
struct Plan {
  bool eval = false;
  int index = 0;  // within its split
  std::string transcript;
  int accent = 0, variant = 0;  // variant: index into train variants, then eval variants
  int rate = 0, pitch = 0;
  bool flac = false;
  std::string fname;  // relative to the dataset directory
};

// What sox wrote.
struct Written {
  std::int64_t num_samples = 0;
  std::uintmax_t bytes = 0;
};

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (fs::path(dir.empty() ? "." : dir) / name).string();
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string require_program(const std::string& name, const char* package, const char* role) {
  std::string found = find_program(name);
  BH_CHECK_AS(Unsupported, !found.empty(),
              "make_librispeech_synthetic: '{}' not found ({}); install the Debian package {} "
              "(apt-get install {})",
              name, role, package, package);
  return found;
}

std::string tail_of(const fs::path& log) {
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > 600) s = "..." + s.substr(s.size() - 600);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "no output" : s;
}

// Run argv[0] (a path) with stdout and stderr into `log`, in `cwd` when not empty. Throws
// DataError with the program's output when it cannot start or exits non-zero.
void run_program(const std::vector<std::string>& argv, const fs::path& log, const fs::path& cwd = {}) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  std::string command;
  for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;
  BH_CHECK_AS(DataError, rc == 0, "make_librispeech_synthetic: cannot run {}: {}", command, std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    BH_CHECK_AS(DataError, errno == EINTR, "make_librispeech_synthetic: waiting for {}: {}", command,
                std::strerror(errno));
  }
  BH_CHECK_AS(DataError, WIFEXITED(status) && WEXITSTATUS(status) == 0, "make_librispeech_synthetic: `{}` failed ({}): {}",
              command,
              WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                : fmt::format("signal {}", WTERMSIG(status)),
              tail_of(log));
}

void check_options(const LibriSpeechSyntheticOptions& o) {
  BH_CHECK_AS(InvalidArgument, o.train_utterances >= 1 && o.train_utterances <= 10000,
              "make_librispeech_synthetic: {} training utterances (need 1..10000: the index has 4 digits)",
              o.train_utterances);
  BH_CHECK_AS(InvalidArgument, o.eval_utterances >= 0 && o.eval_utterances <= 10000,
              "make_librispeech_synthetic: {} evaluation utterances (need 0..10000)", o.eval_utterances);
  BH_CHECK_AS(InvalidArgument, o.vocab_size >= 24 && o.vocab_size <= 4096,
              "make_librispeech_synthetic: vocabulary size {} (need 24..4096: the 19 letters, the word "
              "boundary and <unk> take 21)",
              o.vocab_size);
  BH_CHECK_AS(InvalidArgument, o.flac_fraction >= 0 && o.flac_fraction <= 1,
              "make_librispeech_synthetic: flac fraction {} (need 0..1)", o.flac_fraction);
  BH_CHECK_AS(InvalidArgument, o.jobs >= 0 && o.jobs <= 256, "make_librispeech_synthetic: {} jobs (need 0..256)",
              o.jobs);
}

Plan draw_plan(const LibriSpeechSyntheticOptions& o, bool eval, int index) {
  Rng rng(o.seed ^ 0x6c69627269ull, (eval ? 0x100000000ull : 0) + static_cast<std::uint64_t>(index));
  Plan p;
  p.eval = eval;
  p.index = index;
  const auto& words = synthetic_vocabulary();
  const int n = 2 + static_cast<int>(rng.below(4));
  for (int k = 0; k < n; ++k) p.transcript += (k ? " " : "") + words[rng.below(words.size())];
  p.accent = static_cast<int>(rng.below(synthetic_accents().size()));
  const auto& variants = synthetic_voice_variants(eval);
  p.variant = static_cast<int>(rng.below(variants.size())) + (eval ? static_cast<int>(synthetic_voice_variants(false).size()) : 0);
  // A uniform cell of this split's part of the grid.
  std::vector<std::pair<int, int>> cells;
  for (int r = 0; r < kRates; ++r)
    for (int q = 0; q < kPitches; ++q) {
      const int rate = kRateMin + kRateStep * r, pitch = kPitchMin + kPitchStep * q;
      if (is_eval_prosody(rate, pitch) == eval) cells.emplace_back(rate, pitch);
    }
  const auto& cell = cells[rng.below(cells.size())];
  p.rate = cell.first;
  p.pitch = cell.second;
  p.flac = rng.uniform() < o.flac_fraction;
  const int speaker = 100 * (p.accent + 1) + p.variant;
  const int chapter = 1000 * p.rate + p.pitch;
  p.fname = fmt::format("{}-wav/{}/{}/{}-{}-{:04d}.{}", eval ? kSyntheticEvalSplit : kSyntheticTrainSplit, speaker,
                        chapter, speaker, chapter, index, p.flac ? "flac" : "wav");
  return p;
}

std::string variant_name(int variant) {
  const auto& train = synthetic_voice_variants(false);
  const auto v = static_cast<std::size_t>(variant);
  return v < train.size() ? train[v] : synthetic_voice_variants(true)[v - train.size()];
}

struct Programs {
  std::string espeak, sox, spm_train;
};

Written synthesise(const Plan& p, const Programs& programs, const fs::path& staging) {
  const fs::path scratch = staging / ".scratch";
  const fs::path raw = scratch / fmt::format("{}{}.wav", p.eval ? "e" : "t", p.index);
  const fs::path log = scratch / fmt::format("{}{}.log", p.eval ? "e" : "t", p.index);
  const fs::path out = staging / p.fname;  // its directory exists (made before the workers start)
  std::error_code ec;
  const std::string voice = synthetic_accents()[static_cast<std::size_t>(p.accent)] + "+" + variant_name(p.variant);
  run_program({programs.espeak, "-v", voice, "-s", std::to_string(p.rate), "-p", std::to_string(p.pitch), "-w",
               raw.string(), p.transcript},
              log);
  // -D: no dither (sox would otherwise add seeded noise when it requantises after resampling).
  std::vector<std::string> sox = {programs.sox, "-D", "-V1", raw.string(), "-r", std::to_string(kSampleRate),
                                  "-b", "16", "-c", "1"};
  if (!p.flac) sox.insert(sox.end(), {"-e", "signed-integer"});
  sox.push_back(out.string());
  run_program(sox, log);
  fs::remove(raw, ec);
  fs::remove(log, ec);
  const data::Audio a = data::read_audio(out.string());
  BH_CHECK_AS(DataError, a.sample_rate == kSampleRate && a.channels == 1 && a.frames() > 0,
              "make_librispeech_synthetic: {} has {} channels at {} Hz, {} frames (expected mono {} Hz)", out.string(),
              a.channels, a.sample_rate, a.frames(), kSampleRate);
  return {a.frames(), fs::file_size(out)};
}

// One record in the reference's shape (convert_librispeech.py + pysox's file_info.info).
nlohmann::ordered_json record(const Plan& p, const Written& w) {
  const double duration = static_cast<double>(w.num_samples) / kSampleRate;
  nlohmann::ordered_json f;
  f["channels"] = 1;
  f["sample_rate"] = static_cast<double>(kSampleRate);
  f["bitdepth"] = 16;
  // soxi -B: the nominal rate for PCM, the average over the file for FLAC.
  f["bitrate"] = p.flac ? std::round(static_cast<double>(w.bytes) * 8 / duration) : 16.0 * kSampleRate;
  f["duration"] = duration;
  f["num_samples"] = w.num_samples;
  f["encoding"] = p.flac ? "FLAC" : "Signed Integer PCM";
  f["silent"] = false;
  f["fname"] = p.fname;
  f["speed"] = 1;
  nlohmann::ordered_json r;
  r["transcript"] = p.transcript;
  r["files"] = nlohmann::ordered_json::array({f});
  r["original_duration"] = duration;
  r["original_num_samples"] = w.num_samples;
  return r;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  BH_CHECK_AS(DataError, f.good(), "make_librispeech_synthetic: cannot write {}", path.string());
}

}  // namespace

const std::vector<std::string>& synthetic_vocabulary() {
  static const std::vector<std::string> words = {"zero", "one",  "two", "three", "four", "five", "six",
                                                 "seven", "eight", "nine", "oh",   "yes",  "no",   "up",
                                                 "down",  "left", "right", "on",   "off",  "stop", "go"};
  return words;
}

const std::vector<std::string>& synthetic_accents() {
  // British English is named "en" (the voice file gmw/en): espeak-ng 1.51 ignores a variant
  // appended to the language name ("en-gb+f3" speaks exactly as plain "en"), while "en+f3" works.
  static const std::vector<std::string> accents = {"en-us",      "en",             "en-029",          "en-gb-scotland",
                                                   "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc"};
  return accents;
}

const std::vector<std::string>& synthetic_voice_variants(bool eval) {
  static const std::vector<std::string> train = {"m1", "m2", "m3", "m5", "m6", "m8", "f1", "f2", "f4", "klatt"};
  static const std::vector<std::string> held_out = {"m4", "m7", "f3", "f5"};
  return eval ? held_out : train;
}

bool is_eval_prosody(int rate, int pitch) {
  const int r = (rate - kRateMin) / kRateStep, q = (pitch - kPitchMin) / kPitchStep;
  return (r + 2 * q) % 4 == 0;
}

std::string synthetic_tokenizer_model(const LibriSpeechSyntheticOptions& o) {
  return fmt::format("sentencepieces/librispeech{}.model", o.vocab_size);
}

std::string librispeech_synthetic_options_text(const LibriSpeechSyntheticOptions& o) {
  return fmt::format(
      "librispeech synthetic v1\ntrain_utterances {}\neval_utterances {}\nseed {}\nvocab_size {}\nflac_fraction {}\n",
      o.train_utterances, o.eval_utterances, o.seed, o.vocab_size, o.flac_fraction);
}

LibriSpeechSyntheticReport generate_librispeech_synthetic(const std::string& dir,
                                                          const LibriSpeechSyntheticOptions& o) {
  check_options(o);
  Programs programs;
  programs.espeak = require_program(o.espeak_program, "espeak-ng", "the speech synthesiser");
  programs.sox = require_program(o.sox_program, "sox", "the resampler");
  programs.spm_train = require_program(o.spm_train_program, "sentencepiece", "the tokenizer trainer");
  std::error_code ec;
  const fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
  const fs::path final_path = target.filename().empty() ? target.parent_path() : target;
  BH_CHECK_AS(InvalidArgument, !fs::exists(final_path, ec), "make_librispeech_synthetic: {} already exists", dir);
  fs::create_directories(final_path.parent_path(), ec);
  const fs::path staging =
      final_path.parent_path() / fmt::format(".{}.tmp.{}", final_path.filename().string(), ::getpid());
  fs::remove_all(staging, ec);
  fs::create_directories(staging / ".scratch", ec);
  BH_CHECK_AS(DataError, !ec, "make_librispeech_synthetic: cannot create {}: {}", staging.string(), ec.message());
  LibriSpeechSyntheticReport report;
  try {
    std::vector<Plan> plans;
    for (int i = 0; i < o.train_utterances; ++i) plans.push_back(draw_plan(o, false, i));
    for (int i = 0; i < o.eval_utterances; ++i) plans.push_back(draw_plan(o, true, i));
    // One synthesis (espeak-ng then sox) per utterance, `jobs` at once: the work is the two
    // programs' start-up and DSP, so threads that wait on processes are enough.
    for (const Plan& p : plans) {
      const fs::path d = (staging / p.fname).parent_path();
      fs::create_directories(d, ec);
      BH_CHECK_AS(DataError, !ec, "make_librispeech_synthetic: cannot create {}: {}", d.string(), ec.message());
    }
    std::vector<Written> written(plans.size());
    std::vector<std::exception_ptr> errors(plans.size());
    std::atomic<std::size_t> next{0};
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const auto jobs = std::min<std::size_t>(o.jobs > 0 ? static_cast<std::size_t>(o.jobs) : hw, plans.size());
    std::atomic<bool> failed{false};
    auto worker = [&] {
      for (std::size_t i; !failed && (i = next++) < plans.size();) {
        try {
          written[i] = synthesise(plans[i], programs, staging);
        } catch (...) {
          errors[i] = std::current_exception();
          failed = true;
        }
      }
    };
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < jobs; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    // Manifests, voice lists and the training transcripts.
    for (bool eval : {false, true}) {
      const std::string split = eval ? kSyntheticEvalSplit : kSyntheticTrainSplit;
      nlohmann::ordered_json records = nlohmann::ordered_json::array();
      std::string voices = "fname\taccent\tvariant\trate\tpitch\n";
      double seconds = 0;
      for (std::size_t i = 0; i < plans.size(); ++i) {
        const Plan& p = plans[i];
        if (p.eval != eval) continue;
        records.push_back(record(p, written[i]));
        voices += fmt::format("{}\t{}\t{}\t{}\t{}\n", p.fname, synthetic_accents()[static_cast<std::size_t>(p.accent)],
                              variant_name(p.variant), p.rate, p.pitch);
        seconds += static_cast<double>(written[i].num_samples) / kSampleRate;
      }
      write_text(staging / manifest_name(split), records.dump(2));  // json.dump(indent=2): no final newline
      write_text(staging / fmt::format("voices-{}.tsv", split), voices);
      (eval ? report.eval_audio_seconds : report.train_audio_seconds) = seconds;
    }
    // The tokenizer, as create_sentencepieces.sh trains it on the training transcripts.
    std::string transcripts;
    for (const Plan& p : plans)
      if (!p.eval) transcripts += p.transcript + "\n";
    write_text(staging / ".scratch" / "train_transcripts.txt", transcripts);
    fs::create_directories(staging / "sentencepieces", ec);
    const std::string prefix = synthetic_tokenizer_model(o).substr(0, synthetic_tokenizer_model(o).size() - 6);
    run_program({programs.spm_train, "--input=.scratch/train_transcripts.txt", "--model_prefix=" + prefix,
                 fmt::format("--vocab_size={}", o.vocab_size), "--character_coverage=1.0", "--bos_id=-1",
                 "--eos_id=-1", "--model_type=unigram", "--hard_vocab_limit=false", "--num_threads=1",
                 "--minloglevel=1"},
                staging / ".scratch" / "spm_train.log", staging);
    BH_CHECK_AS(DataError, fs::is_regular_file(staging / synthetic_tokenizer_model(o), ec),
                "make_librispeech_synthetic: spm_train wrote no {}: {}", synthetic_tokenizer_model(o),
                tail_of(staging / ".scratch" / "spm_train.log"));
    fs::remove_all(staging / ".scratch", ec);
    write_text(staging / kMarker, librispeech_synthetic_options_text(o));
    fs::rename(staging, final_path, ec);
    BH_CHECK_AS(DataError, !ec, "make_librispeech_synthetic: cannot rename {} to {}: {}", staging.string(),
                final_path.string(), ec.message());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  report.train_utterances = o.train_utterances;
  report.eval_utterances = o.eval_utterances;
  report.tokenizer_model = (final_path / synthetic_tokenizer_model(o)).string();
  report.generated = true;
  return report;
}

namespace {

bool check_existing(const std::string& dir, const LibriSpeechSyntheticOptions& o, LibriSpeechSyntheticReport& r) {
  if (!data::generated_with("LibriSpeech", dir, kMarker, librispeech_synthetic_options_text(o))) return false;
  r.train_utterances = o.train_utterances;
  r.eval_utterances = o.eval_utterances;
  r.tokenizer_model = (fs::path(dir) / synthetic_tokenizer_model(o)).string();
  r.generated = false;
  return true;
}

}  // namespace

LibriSpeechSyntheticReport ensure_librispeech_synthetic(const std::string& dir, const LibriSpeechSyntheticOptions& o, Communicator* comm) {
  // Note [Generated once across ranks] (benchhost/data/generated.hpp).
  return data::ensure_generated<LibriSpeechSyntheticReport>(
      comm, "LibriSpeech", dir, [&](LibriSpeechSyntheticReport& r) { return check_existing(dir, o, r); },
      [&] { return generate_librispeech_synthetic(dir, o); });
}

}  // namespace benchhost::librispeech
