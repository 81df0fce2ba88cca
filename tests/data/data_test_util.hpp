#pragma once
// Helpers for the data tests: a per-test temporary folder and byte-file utilities.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "benchhost/error.hpp"

namespace bh_data_test {

/// A fresh folder under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("bh_data_") + (info ? std::string(info->test_suite_name()) + "_" + info->name() : "x");
    for (auto& c : name)
      if (c == '/') c = '_';
    path_ = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(f), {});
}

/// The checked-in malformed files (tests/data/files/).
inline std::string malformed(const std::string& name) {
  return std::string(BENCHHOST_SOURCE_DIR) + "/tests/data/files/" + name;
}

/// Expect `stmt` to throw benchhost::DataError whose message contains `needle`.
#define EXPECT_DATA_ERROR(stmt, needle)                                                   \
  do {                                                                                    \
    try {                                                                                 \
      stmt;                                                                               \
      ADD_FAILURE() << "expected DataError from: " #stmt;                                 \
    } catch (const ::benchhost::DataError& e) {                                           \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)                   \
          << "message: " << e.what() << "\nexpected to contain: " << (needle);            \
    }                                                                                     \
  } while (0)

}  // namespace bh_data_test
