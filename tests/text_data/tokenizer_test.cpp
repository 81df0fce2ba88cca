// WordPiece (greedy longest match, vocabulary from the corpus) and byte-level BPE round trips.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "benchhost/error.hpp"
#include "text/bpe.hpp"
#include "text/wordpiece.hpp"

using namespace benchhost;
using namespace benchhost::text;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
}

std::vector<Document> small_corpus() {
  std::vector<Document> docs(2);
  for (int r = 0; r < 20; ++r) {
    docs[0].sentences.push_back("And God said, Let there be light: and there was light.");
    docs[0].sentences.push_back("The unaffable walketh and talketh; unto them that walked.");
    docs[1].sentences.push_back("In the beginning God created the heaven and the earth.");
  }
  return docs;
}

}  // namespace

TEST(WordPiece, BasicTokenizationLowercasesAndSplitsPunctuation) {
  EXPECT_EQ(WordPiece::basic_tokenize("And God said, Let there be LIGHT:"),
            (std::vector<std::string>{"and", "god", "said", ",", "let", "there", "be", "light", ":"}));
}

TEST(WordPiece, GreedyLongestMatchFirst) {
  const WordPiece v({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "unaff", "##aff", "##able", "##a", "##ble", "a"});
  const auto ids = v.encode("unaffable");
  ASSERT_EQ(ids.size(), 2u);  // "unaff" + "##able", not "un" + "##aff" + "##able"
  EXPECT_EQ(v.token(ids[0]), "unaff");
  EXPECT_EQ(v.token(ids[1]), "##able");
  EXPECT_EQ(v.encode("unaffxable"), std::vector<std::int32_t>{WordPiece::kUnk});  // no split: whole word UNK
  EXPECT_EQ(v.decode(ids), "unaffable");
}

TEST(WordPiece, VocabularyFromCorpusCoversItAndRoundTrips) {
  const auto docs = small_corpus();
  const WordPiece v = WordPiece::build(docs, 120);
  EXPECT_LE(v.size(), 120);
  EXPECT_EQ(v.token(WordPiece::kMask), "[MASK]");
  for (const auto& d : docs)
    for (const auto& s : d.sentences) {
      const auto ids = v.encode(s);
      for (auto id : ids) EXPECT_NE(id, WordPiece::kUnk) << s;  // every character is in the vocabulary
      std::string joined;
      for (const auto& w : WordPiece::basic_tokenize(s)) joined += (joined.empty() ? "" : " ") + w;
      EXPECT_EQ(v.decode(ids), joined);
    }
  // Frequent words are whole tokens; the vocabulary is deterministic.
  EXPECT_GE(v.find("light"), 0);
  const WordPiece again = WordPiece::build(docs, 120);
  for (std::int32_t i = 0; i < v.size(); ++i) EXPECT_EQ(v.token(i), again.token(i));
}

TEST(WordPiece, SaveLoadAndRejectBadFiles) {
  const WordPiece v = WordPiece::build(small_corpus(), 100);
  const std::string path = temp_path("vocab.txt");
  v.save(path);
  const WordPiece w = WordPiece::load(path);
  ASSERT_EQ(w.size(), v.size());
  EXPECT_EQ(w.encode("the unaffable walketh"), v.encode("the unaffable walketh"));
  std::ofstream(path) << "[UNK]\n[PAD]\nfoo\n";  // specials in the wrong place
  EXPECT_THROW(WordPiece::load(path), DataError);
  std::ofstream(path) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nfoo\nfoo\n";  // duplicate
  EXPECT_THROW(WordPiece::load(path), DataError);
  std::filesystem::remove(path);
  EXPECT_THROW(WordPiece::load(path), DataError);
}

TEST(ByteBpe, PretokenizesLikeGpt2) {
  EXPECT_EQ(ByteBpe::pretokenize("Hello world's  end, 42x"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " end", ",", " 42", "x"}));
}

TEST(ByteBpe, TrainsMergesAndRoundTripsAnyBytes) {
  const auto docs = small_corpus();
  const ByteBpe bpe = ByteBpe::train(docs, 60);
  EXPECT_EQ(bpe.num_merges(), 60);
  EXPECT_EQ(bpe.vocab_size(), 257 + 60);
  const std::string s = "And God said, Let there be light: and there was light.";
  const auto ids = bpe.encode(s);
  EXPECT_LT(ids.size(), s.size() / 2);  // merges compress frequent text
  EXPECT_EQ(bpe.decode(ids), s);
  std::string weird = "caf\xc3\xa9  \t\n tabs\x01\xff and 1234567 ''' 's";
  EXPECT_EQ(bpe.decode(bpe.encode(weird)), weird);
  for (auto id : bpe.encode(weird)) EXPECT_TRUE(id >= 0 && id < bpe.eod());
}

TEST(ByteBpe, SaveLoadAndRejectBadFiles) {
  const ByteBpe bpe = ByteBpe::train(small_corpus(), 40);
  const std::string path = temp_path("bpe.txt");
  bpe.save(path);
  const ByteBpe back = ByteBpe::load(path);
  EXPECT_EQ(back.encode("the heaven and the earth"), bpe.encode("the heaven and the earth"));
  std::ofstream(path) << "benchhost-bpe 1 3\n97 98\n";  // truncated
  EXPECT_THROW(ByteBpe::load(path), DataError);
  std::ofstream(path) << "benchhost-bpe 1 1\n97 300\n";  // refers to an undefined id
  EXPECT_THROW(ByteBpe::load(path), DataError);
  std::ofstream(path) << "something else\n";
  EXPECT_THROW(ByteBpe::load(path), DataError);
  std::filesystem::remove(path);
}
