#pragma once
// Helpers shared by the LibriSpeech tests: a temporary directory, whether the generator's
// programs are here, and one small synthetic set generated once per test process.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "synthetic.hpp"

namespace benchhost::librispeech::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / fmt::format("bh_librispeech_{}_{}", tag, ::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// espeak-ng, sox and spm_train on PATH (the Debian packages espeak-ng, sox, sentencepiece).
inline bool have_generator_programs() {
  return std::system("command -v espeak-ng >/dev/null && command -v sox >/dev/null && "
                     "command -v spm_train >/dev/null") == 0;
}
inline const char* kNoPrograms =
    "espeak-ng, sox or spm_train missing (Debian packages espeak-ng, sox, sentencepiece; tools/setup.sh installs them)";

/// The options of the shared set: 40 training and 10 evaluation utterances.
inline LibriSpeechSyntheticOptions shared_options() {
  LibriSpeechSyntheticOptions o;
  o.train_utterances = 40;
  o.eval_utterances = 10;
  o.seed = 3;
  o.flac_fraction = 0.2;
  return o;
}

/// The shared set's directory (call only when have_generator_programs()). ctest runs every test
/// in its own process, so the set is kept in the build tree under a name stamped with this test
/// binary's modification time: one generation per build of the tests (any change to the
/// generator relinks the binary and so changes the stamp), shared by concurrent test processes
/// through ensure_librispeech_synthetic's atomic rename. Sets of older stamps are removed.
inline const std::string& shared_set() {
  static const std::string path = [] {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto stamp = fs::last_write_time("/proc/self/exe", ec).time_since_epoch().count();
    const fs::path root = fs::path(BENCHHOST_BINARY_DIR) / "test_data";
    const std::string name = fmt::format("librispeech_shared_{}", static_cast<std::uint64_t>(stamp));
    fs::create_directories(root, ec);
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string other = e.path().filename().string();
      if (other.starts_with("librispeech_shared_") && other != name) fs::remove_all(e.path(), ec);
    }
    const std::string p = (root / name).string();
    ensure_librispeech_synthetic(p, shared_options());
    return p;
  }();
  return path;
}

}  // namespace benchhost::librispeech::test
