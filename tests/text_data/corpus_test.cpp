// The local English corpus: the bible-kjv-text EC02 file (compress(1) LZW segments) and plain text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>

#include <unistd.h>

#include "benchhost/error.hpp"
#include "text/corpus.hpp"

using namespace benchhost;
using namespace benchhost::text;

namespace {

// A small compress(1)-style LZW encoder (block mode, no CLEAR): enough to exercise the decoder's
// code-width growth, group padding and the KwKwK case on arbitrary data.
std::vector<std::uint8_t> lzw_compress(const std::string& in, int max_bits) {
  std::vector<std::uint8_t> out;
  std::uint64_t bitpos = 0, run_start = 0;
  int n_bits = 9;
  std::uint32_t free_ent = 257, max_code = 511;
  std::map<std::pair<std::uint32_t, std::uint8_t>, std::uint32_t> dict;
  auto put = [&](std::uint32_t code) {
    for (int b = 0; b < n_bits; ++b, ++bitpos) {
      if ((bitpos >> 3) >= out.size()) out.push_back(0);
      out[bitpos >> 3] |= static_cast<std::uint8_t>(((code >> b) & 1u) << (bitpos & 7));
    }
  };
  auto maybe_grow = [&] {
    if (free_ent > max_code && n_bits < max_bits) {
      const std::uint64_t group = static_cast<std::uint64_t>(n_bits) * 8;
      bitpos = run_start + (bitpos - run_start + group - 1) / group * group;
      while ((bitpos >> 3) > out.size()) out.push_back(0);
      run_start = bitpos;
      ++n_bits;
      max_code = n_bits == max_bits ? (1u << max_bits) : (1u << n_bits) - 1;
    }
  };
  if (in.empty()) return out;
  std::uint32_t w = static_cast<std::uint8_t>(in[0]);
  for (std::size_t i = 1; i < in.size(); ++i) {
    const auto c = static_cast<std::uint8_t>(in[i]);
    auto it = dict.find({w, c});
    if (it != dict.end()) {
      w = it->second;
      continue;
    }
    put(w);
    maybe_grow();  // compress(1) checks after writing a code, before adding its entry
    if (free_ent < (1u << max_bits)) dict[{w, c}] = free_ent++;
    w = c;
  }
  put(w);
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(Lzw, RoundTripsThroughCodeWidthGrowth) {
  std::mt19937 gen(7);
  std::string text;
  const char* words[] = {"the ", "and ", "of ", "lord ", "unto ", "said ", "\n", "God ", "x", "aaaa"};
  while (text.size() < 300000) text += words[gen() % 10];
  for (int bits : {10, 12, 16}) {
    const auto packed = lzw_compress(text, bits);
    EXPECT_LT(packed.size(), text.size() / 2) << bits;
    EXPECT_EQ(lzw_decompress(packed, bits, text.size(), "test"), text) << "max bits " << bits;
  }
}

TEST(Lzw, KwKwKCase) {
  const std::string text(1000, 'a');  // every new code is the one being defined
  EXPECT_EQ(lzw_decompress(lzw_compress(text, 16), 16, text.size(), "test"), text);
}

TEST(Lzw, RejectsCorruptStreamsAndOversizedOutput) {
  const std::string text = "abcabcabcabcabcabcabc";
  auto packed = lzw_compress(text, 16);
  EXPECT_THROW(lzw_decompress(packed, 16, 5, "test"), DataError);  // exceeds the declared size
  std::vector<std::uint8_t> bad = {0xff, 0xff, 0xff, 0xff};        // first code 511: not a literal
  EXPECT_THROW(lzw_decompress(bad, 16, 100, "test"), DataError);
  std::vector<std::uint8_t> jump = {'a', 0xfe, 0x03, 0x00};  // second code far beyond the next free code
  EXPECT_THROW(lzw_decompress(jump, 16, 100, "test"), DataError);
  EXPECT_THROW(lzw_decompress(packed, 20, 100, "test"), DataError);
}

TEST(Kjv, DecodesTheInstalledBible) {
  const std::string path = default_kjv_path();
  if (path.empty()) GTEST_SKIP() << "bible-kjv-text is not installed (/usr/lib/bible.data)";
  const std::string text = read_ec02_file(path);
  EXPECT_EQ(text.size(), 4404475u);
  EXPECT_EQ(text.rfind("Holy Bible, Authorized (King James) Version.", 0), 0u);
  EXPECT_NE(text.find("\nGe1:1 In the beginning God created the heaven and the earth.\n"), std::string::npos);
  EXPECT_NE(text.find("\nRev22:21 The grace of our Lord Jesus Christ be with you all. Amen.\n"), std::string::npos);
  const auto docs = split_kjv(text);
  std::size_t verses = 0;
  for (const auto& d : docs) verses += d.sentences.size();
  EXPECT_EQ(docs.size(), 1189u);  // chapters
  EXPECT_EQ(verses, 31102u);
  EXPECT_EQ(docs.front().title, "Ge1");
  EXPECT_EQ(docs.front().sentences.front(), "In the beginning God created the heaven and the earth.");
  EXPECT_EQ(docs[1188].title, "Rev22");
  const auto loaded = load_corpus(path);
  EXPECT_EQ(loaded.size(), docs.size());
}

TEST(Kjv, RejectsTruncatedAndCorruptFiles) {
  const std::string path = default_kjv_path();
  if (path.empty()) GTEST_SKIP() << "bible-kjv-text is not installed (/usr/lib/bible.data)";
  const std::string bytes = slurp(path);
  const auto dir = std::filesystem::temp_directory_path() / ("bh_kjv_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& content) {
    const auto p = (dir / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  };
  EXPECT_THROW(read_ec02_file(write("short", bytes.substr(0, 60))), DataError);           // inside the header
  EXPECT_THROW(read_ec02_file(write("table", bytes.substr(0, 0x60))), DataError);         // inside the table
  EXPECT_THROW(read_ec02_file(write("half", bytes.substr(0, bytes.size() / 2))), DataError);
  std::string flipped = bytes;
  for (std::size_t i = 0x200; i < 0x200 + 64; ++i) flipped[i] = static_cast<char>(~flipped[i]);
  EXPECT_THROW(read_ec02_file(write("flipped", flipped)), DataError);
  std::string huge = bytes;
  huge[0x58] = 0x7f;  // segment count
  EXPECT_THROW(read_ec02_file(write("count", huge)), DataError);
  EXPECT_THROW(read_ec02_file((dir / "missing").string()), DataError);
  std::filesystem::remove_all(dir);
}

TEST(PlainText, SentencesPerLineDocumentsPerBlankLine) {
  const auto docs = split_plain("First one.\nSecond one.\n\n\n  Third.  \n\nFourth\n");
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].sentences, (std::vector<std::string>{"First one.", "Second one."}));
  EXPECT_EQ(docs[1].sentences, (std::vector<std::string>{"Third."}));
  EXPECT_EQ(docs[2].sentences, (std::vector<std::string>{"Fourth"}));
}
