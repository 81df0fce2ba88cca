#pragma once
// Helpers of the datasets/text tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <unistd.h>

#include "text/bert_hdf5.hpp"

namespace benchhost::text::test {

/// A fresh folder under the system temp directory for one test (named after the process and the
/// test), removed with everything in it when the test ends.
struct TempDir {
  std::filesystem::path path;
  TempDir()
      : path(std::filesystem::temp_directory_path() /
             ("bh_text_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

/// Every array of two BERT sample sets is equal (the shapes too).
inline void expect_same_samples(const BertSamples& a, const BertSamples& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.max_predictions, b.max_predictions);
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.input_mask, b.input_mask);
  EXPECT_EQ(a.segment_ids, b.segment_ids);
  EXPECT_EQ(a.masked_lm_positions, b.masked_lm_positions);
  EXPECT_EQ(a.masked_lm_ids, b.masked_lm_ids);
  EXPECT_EQ(a.next_sentence_labels, b.next_sentence_labels);
}

}  // namespace benchhost::text::test
