// The reference tokenizers: the 28 character labels by hand, sentencepiece models that are
// missing or corrupt, and round trips through a model spm_train wrote (the shared synthetic set).
#include <gtest/gtest.h>

#include <fstream>

#include "benchhost/error.hpp"
#include "common.hpp"
#include "librispeech.hpp"
#include "synthetic.hpp"
#include "tokenizer.hpp"

using namespace benchhost;
using namespace benchhost::librispeech;

TEST(LibriSpeechTokenizer, CharLabelsByHand) {
  const CharTokenizer t;
  EXPECT_EQ(t.vocab_size(), 28);
  EXPECT_EQ(CharTokenizer::reference_labels(), " abcdefghijklmnopqrstuvwxyz'");
  EXPECT_EQ(t.encode("a z"), (std::vector<std::int32_t>{1, 0, 26}));
  EXPECT_EQ(t.encode("don't"), (std::vector<std::int32_t>{4, 15, 14, 27, 20}));
  // Characters outside the labels are dropped, as the reference's list comprehension does.
  EXPECT_EQ(t.encode("Hi, 2 you!"), (std::vector<std::int32_t>{9, 0, 0, 25, 15, 21}));
  EXPECT_EQ(t.encode("HELLO"), (std::vector<std::int32_t>{}));
  EXPECT_EQ(t.decode({20, 23, 15, 0, 15, 8}), "two oh");
  EXPECT_EQ(t.decode(t.encode("seven oh four")), "seven oh four");
  EXPECT_THROW(t.decode({28}), InvalidArgument);
  EXPECT_THROW(t.decode({-1}), InvalidArgument);
  EXPECT_EQ(CharTokenizer("ab").encode("abcba"), (std::vector<std::int32_t>{0, 1, 1, 0}));
  EXPECT_THROW(CharTokenizer("aba"), InvalidArgument);
  EXPECT_THROW(CharTokenizer(""), InvalidArgument);
  EXPECT_EQ(make_tokenizer("")->describe(), "characters (28 labels)");
}

TEST(LibriSpeechTokenizer, MissingOrCorruptModelIsADataError) {
  test::TempDir dir("tok");
  const std::string missing = dir / "sentencepieces/librispeech1023.model";
  try {
    SentencePieceTokenizer t(missing);
    ADD_FAILURE() << "loaded a missing model";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find(missing), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("not found"), std::string::npos) << e.message();
  }
  EXPECT_THROW(make_tokenizer(missing), DataError);
  for (const std::string& junk : {std::string("not a protobuf at all\n"), std::string(), std::string("\x0a\xff\xff\xff\x0f", 5)}) {
    const std::string corrupt = dir / "corrupt.model";
    std::ofstream(corrupt, std::ios::binary) << junk;
    try {
      SentencePieceTokenizer t(corrupt);
      ADD_FAILURE() << "loaded a corrupt model";
    } catch (const DataError& e) {
      EXPECT_NE(e.message().find(corrupt), std::string::npos) << e.message();
    }
  }
  // A directory is not a model either.
  EXPECT_THROW(SentencePieceTokenizer t(dir.path.string()), DataError);
}

TEST(LibriSpeechTokenizer, SentencePieceRoundTrips) {
  if (!test::have_generator_programs()) GTEST_SKIP() << test::kNoPrograms;
  const std::string model = test::shared_set() + "/" + synthetic_tokenizer_model(test::shared_options());
  const SentencePieceTokenizer t(model);
  EXPECT_GE(t.vocab_size(), 21);  // 19 letters, the word boundary and <unk> at least
  EXPECT_LE(t.vocab_size(), 32);
  EXPECT_EQ(t.piece(0), "<unk>");  // the reference's model has <unk> = 0 too
  EXPECT_NE(t.describe().find("librispeech32.model"), std::string::npos);
  // Every sentence of the vocabulary's words, in both splits, round-trips.
  for (const char* split : {kSyntheticTrainSplit, kSyntheticEvalSplit}) {
    for (const Utterance& u : read_manifest(test::shared_set(), test::shared_set() + "/" + manifest_name(split))) {
      const auto ids = t.encode(u.transcript);
      ASSERT_FALSE(ids.empty());
      EXPECT_LE(ids.size(), u.transcript.size() + 1);  // at most one piece per character and the leading "▁"
      for (auto id : ids) EXPECT_TRUE(id > 0 && id < t.vocab_size()) << u.transcript;
      EXPECT_EQ(t.decode(ids), u.transcript);
    }
  }
  std::string all;
  for (const auto& w : synthetic_vocabulary()) all += (all.empty() ? "" : " ") + w;
  EXPECT_EQ(t.decode(t.encode(all)), all);
  // A character the model never saw is <unk>: refused, naming the model.
  try {
    t.encode("zebra");
    ADD_FAILURE() << "encoded <unk>";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find(model), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("<unk>"), std::string::npos) << e.message();
  }
  EXPECT_THROW(t.decode({t.vocab_size()}), InvalidArgument);
  EXPECT_THROW(t.piece(-1), InvalidArgument);
}
