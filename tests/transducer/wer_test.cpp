// Word error rate (metrics/wer.hpp): hand cases, Python str.split() word splitting, torchaudio's
// edit_distance on random word strings (tools/peers/rnnt_peer.py, skipped visibly without
// torchaudio) and the merge across ranks.

#include "benchhost/metrics/wer.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "benchhost/error.hpp"
#include "benchhost/random.hpp"
#include "common/thread_comm.hpp"

namespace benchhost::metrics {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view w : split_words(text)) out.emplace_back(w);
  return out;
}

TEST(WordErrorRate, HandCases) {
  WordErrorRate w;
  w.add("the cat sat", "the cat sat");
  EXPECT_EQ(w.errors(), 0);
  EXPECT_EQ(w.words(), 3);
  EXPECT_EQ(w.value(), 0.0);
  // one substitution (bat) and one insertion (on)
  w.add("the bat sat on", "the cat sat");
  EXPECT_EQ(w.errors(), 2);
  // two deletions
  w.add("a", "a b c");
  EXPECT_EQ(w.errors(), 4);
  EXPECT_EQ(w.words(), 9);
  EXPECT_DOUBLE_EQ(w.value(), 4.0 / 9.0);
  // a reordering is two edits, not a swap
  WordErrorRate s;
  s.add("b a", "a b");
  EXPECT_DOUBLE_EQ(s.value(), 1.0);
  EXPECT_EQ(s.utterances(), 1);
}

TEST(WordErrorRate, EmptyHypothesisIsOneExactlyAndNothingAddedIsNaN) {
  WordErrorRate w;
  EXPECT_TRUE(std::isnan(w.value())) << "no reference word: NaN, like the other accumulators";
  w.add("", "one two three four five six seven");
  EXPECT_EQ(w.value(), 1.0);
  w.add("   \t\n", "x y");
  EXPECT_EQ(w.value(), 1.0);
  // A hypothesis against an empty reference: errors but no words.
  WordErrorRate e;
  e.add("extra words", "");
  EXPECT_EQ(e.errors(), 2);
  EXPECT_TRUE(std::isnan(e.value()));
  e.add_counts(0, 4);
  EXPECT_DOUBLE_EQ(e.value(), 0.5);
  EXPECT_THROW(e.add_counts(-1, 3), InvalidArgument);
  e.reset();
  EXPECT_EQ(e.errors(), 0);
  EXPECT_EQ(e.words(), 0);
}

TEST(WordErrorRate, SplitsLikePythonStrSplit) {
  EXPECT_EQ(words_of("  a\tb\n\nc \r\v\f d  "), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(words_of("x\x1cy\x1fz"), (std::vector<std::string>{"x", "y", "z"}));
  // U+00A0, U+3000 and U+2009 separate words; U+00E9 (\xc3\xa9) and U+200B (not a space) do not.
  EXPECT_EQ(words_of("caf\xc3\xa9\xc2\xa0noir\xe3\x80\x80the\xe2\x80\x89"
                     "end\xe2\x80\x8b"
                     "x"),
            (std::vector<std::string>{"caf\xc3\xa9", "noir", "the", "end\xe2\x80\x8bx"}));
  EXPECT_TRUE(words_of("").empty());
  EXPECT_TRUE(words_of(" \t ").empty());
  // Word ids skip the splitting.
  WordErrorRate w;
  const std::vector<std::int64_t> hyp = {1, 2, 3}, ref = {1, 3};
  w.add(hyp, ref);
  EXPECT_EQ(w.errors(), 1);
  EXPECT_EQ(w.words(), 2);
}

TEST(WordErrorRate, MergesAcrossRanksToTheCorpusValue) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"a b c", "a b d"}, {"", "x y z w"}, {"he said hi", "she said hi there"}, {"q", "q"}, {"m n", "n m o"}};
  WordErrorRate one;
  for (const auto& [h, r] : pairs) one.add(h, r);
  const int ranks = 2;
  test_support::Group g(ranks);
  std::vector<double> merged(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      test_support::ThreadComm comm(g, r);
      WordErrorRate w;
      for (std::size_t i = 0; i < pairs.size(); ++i)
        if (static_cast<int>(i % ranks) == r) w.add(pairs[i].first, pairs[i].second);
      merged[static_cast<std::size_t>(r)] = w.value(&comm);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(merged[static_cast<std::size_t>(r)], one.value()) << "rank " << r;
}

TEST(WordErrorRateTorchaudio, MatchesEditDistanceOnRandomWordStrings) {
  if (std::system("/usr/bin/python3 -c 'import torch, torchaudio' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 has no torch/torchaudio: the torchaudio cross-check did not run";
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_wer_{}", ::getpid());
  fs::create_directories(dir);
  const char* vocab[] = {"the", "a", "cat", "sat", "on", "mat", "dog", "ran", "it's", "x"};
  // One pair per line of the peer's file: no newline inside a sentence (\v is whitespace too).
  const char* spaces[] = {" ", "  ", "\t", " \v "};
  Rng rng(2026, 1);
  std::vector<std::pair<std::string, std::string>> pairs;
  auto sentence = [&](std::uint64_t max_words) {
    std::string s = rng.below(3) == 0 ? " " : "";
    const std::uint64_t n = rng.below(max_words + 1);
    for (std::uint64_t i = 0; i < n; ++i) {
      if (i > 0) s += spaces[rng.below(4)];
      s += vocab[rng.below(10)];
    }
    return s;
  };
  for (int i = 0; i < 200; ++i) pairs.emplace_back(sentence(12), sentence(10));
  pairs.emplace_back("", "only the reference");
  {
    std::ofstream f(dir / "pairs.txt", std::ios::binary);
    for (const auto& [h, r] : pairs) f << h << '|' << r << '\n';
  }
  const fs::path peer = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "rnnt_peer.py";
  const std::string cmd = fmt::format("/usr/bin/python3 '{}' edit_distance '{}' 2>&1", peer.string(), dir.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(dir / "distances.bin", std::ios::binary | std::ios::ate);
  std::vector<std::int64_t> dist(static_cast<std::size_t>(f.tellg()) / 8);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(dist.data()), static_cast<std::streamsize>(dist.size() * 8));
  fs::remove_all(dir);
  ASSERT_EQ(dist.size(), pairs.size());
  WordErrorRate w;
  std::int64_t errors = 0, words = 0;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    WordErrorRate one;
    one.add(pairs[i].first, pairs[i].second);
    ASSERT_EQ(one.errors(), dist[i]) << "'" << pairs[i].first << "' vs '" << pairs[i].second << "'";
    w.add(pairs[i].first, pairs[i].second);
    errors += dist[i];
    words += static_cast<std::int64_t>(split_words(pairs[i].second).size());
  }
  EXPECT_EQ(w.value(), static_cast<double>(errors) / static_cast<double>(words));
}

}  // namespace
}  // namespace benchhost::metrics
