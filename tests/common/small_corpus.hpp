#pragma once
// A small plain-text corpus for the language-model plugins' data tests: 12 documents of 30
// sentences over 150 words, documents separated by blank lines (text::load_corpus's plain format).
#include <fstream>
#include <string>

namespace benchhost::test_support {

inline std::string write_small_corpus(const std::string& path) {
  std::ofstream out(path);
  for (int d = 0; d < 12; ++d) {
    for (int s = 0; s < 30; ++s) {
      for (int k = 0; k < 6 + (d + s) % 7; ++k) out << (k ? " " : "") << "w" << (d * 31 + s * 7 + k * 3) % 150;
      out << ".\n";
    }
    out << "\n";
  }
  return path;
}

}  // namespace benchhost::test_support
