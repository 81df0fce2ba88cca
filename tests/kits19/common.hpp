#pragma once
// Helpers shared by the KiTS19 tests: a temporary directory and the python3 check.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

namespace benchhost::kits19::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / fmt::format("bh_kits19_{}_{}", tag, ::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// /usr/bin/python3 with numpy and scipy (the reference scripts need nothing else).
inline bool have_numpy_scipy() {
  return std::system("/usr/bin/python3 -c 'import numpy, scipy.ndimage, scipy.signal' >/dev/null 2>&1") == 0;
}

inline std::string script(const std::string& name) {
  return std::string(BENCHHOST_SOURCE_DIR) + "/tests/kits19/" + name;
}

}  // namespace benchhost::kits19::test
