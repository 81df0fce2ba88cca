// BERT next-sentence pairs (Note [BERT sentence pairs]): on shards built from a text this test
// writes, whose every word is unique and so names its document and place, the IsNext share is
// near one half, each IsNext B is the text after its A, each NotNext B comes from another
// document; the split holds on the King James Bible at the mini's and BERT's sequence lengths;
// long sentences are cut at clause ends and word starts; the same seed gives the same samples.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "text/bert_samples.hpp"
#include "text/prepare.hpp"
#include "text_test_util.hpp"

using namespace benchhost::text;
using namespace benchhost::text::test;

namespace {

// A word of letters only that no other index gives ("wa", "wb", ..., "wba", ...).
std::string unique_word(int index) {
  std::string w;
  do {
    w.insert(w.begin(), static_cast<char>('a' + index % 26));
    index /= 26;
  } while (index > 0);
  return "w" + w;
}

struct Place {
  int doc = 0, word = 0;  ///< document, and the word's number in it (punctuation not counted)
};

// Plain text (one sentence a line, a blank line between documents) of `docs` documents of
// `sentences` sentences: mostly 3-11 words ending in '.', every fifth a 24-word sentence with a
// comma after every 6 words (longer than a segment, so it is cut at its commas).
std::string write_corpus(const std::string& path, int docs, int sentences, std::map<std::string, Place>& places) {
  std::ofstream out(path);
  int next = 0;
  for (int d = 0; d < docs; ++d) {
    int word = 0;
    for (int s = 0; s < sentences; ++s) {
      const bool long_one = s % 5 == 4;
      const int words = long_one ? 24 : 3 + (d * 7 + s * 5) % 9;
      for (int k = 0; k < words; ++k) {
        const std::string w = unique_word(next++);
        places[w] = {d, word++};
        out << (k ? " " : "") << w << (long_one && k % 6 == 5 && k + 1 < words ? "," : "");
      }
      out << ".\n";
    }
    out << "\n";
  }
  return path;
}

struct Pair {
  std::vector<std::int32_t> a, b;  ///< uncorrupted token ids (masks undone)
  bool random_next = false;
};

Pair pair_of(const BertSamples& s, std::int64_t i) {
  std::vector<std::int32_t> ids(s.input_ids.begin() + i * s.seq_len, s.input_ids.begin() + (i + 1) * s.seq_len);
  for (std::int64_t k = 0; k < s.num_predictions(i); ++k)
    ids[s.masked_lm_positions[i * s.max_predictions + k]] = s.masked_lm_ids[i * s.max_predictions + k];
  Pair p;
  p.random_next = s.next_sentence_labels[i] == 1;
  std::size_t t = 1;  // after [CLS]
  for (; ids[t] != WordPiece::kSep; ++t) p.a.push_back(ids[t]);
  for (++t; ids[t] != WordPiece::kSep; ++t) p.b.push_back(ids[t]);
  return p;
}

// The places of the words of one side, which must be one unbroken run of one document's words.
std::optional<std::pair<Place, Place>> run_of(const std::vector<std::int32_t>& ids, const WordPiece& vocab,
                                              const std::map<std::string, Place>& places) {
  std::optional<Place> first, last;
  for (const std::int32_t id : ids) {
    const std::string& token = vocab.token(id);
    if (token == "," || token == ".") continue;
    const auto it = places.find(token);
    EXPECT_NE(it, places.end()) << "'" << token << "' is not a whole word of the corpus";
    if (it == places.end()) return std::nullopt;
    if (last) {
      EXPECT_EQ(it->second.doc, last->doc) << "one side spans two documents";
      EXPECT_EQ(it->second.word, last->word + 1) << "one side skips or repeats words";
    }
    if (!first) first = it->second;
    last = it->second;
  }
  if (!first) return std::nullopt;  // punctuation only
  return std::pair{*first, *last};
}

}  // namespace

TEST(BertPairs, IsNextPairsContinueAndNotNextPairsComeFromAnotherDocument) {
  TempDir dir;
  std::map<std::string, Place> places;
  BertPrepareOptions opt;
  opt.corpus = write_corpus(dir / "corpus.txt", 16, 40, places);
  opt.out_dir = dir / "shards";
  opt.vocab_size = 6000;  // every training word is a token of its own
  opt.train_shards = 2;
  opt.heldout_every = 5;
  opt.samples.seq_len = 32;
  opt.samples.max_predictions = 5;
  opt.samples.dupe_factor = 3;
  const BertPrepared p = prepare_bert_data(opt);
  const WordPiece vocab = WordPiece::load(p.vocab_file);
  const std::int64_t max_text = opt.samples.seq_len - 3, max_segment = max_segment_tokens(opt.samples.seq_len);

  NspSplit counted;
  std::int64_t checked = 0, untruncated_next = 0;
  for (const auto& file : p.train_files) {
    const BertSamples s = read_bert_hdf5(file, vocab.size());
    counted += nsp_split(s);
    for (std::int64_t i = 0; i < s.count; ++i) {
      const Pair pair = pair_of(s, i);
      const auto a = run_of(pair.a, vocab, places), b = run_of(pair.b, vocab, places);
      if (!a || !b) continue;
      ++checked;
      EXPECT_NE(a->first.doc % opt.heldout_every, 0) << "a held-out document in a training shard";
      if (pair.random_next) {
        EXPECT_NE(b->first.doc, a->first.doc) << "sample " << i << " of " << file << ": a NotNext B from A's document";
        continue;
      }
      // IsNext: B starts after A in A's document; only truncation (less than one segment, as
      // the chunk passed its target with its last segment) may have dropped words between.
      EXPECT_EQ(b->first.doc, a->first.doc) << "sample " << i << " of " << file;
      EXPECT_GT(b->first.word, a->second.word) << "sample " << i << " of " << file;
      EXPECT_LE(b->first.word - a->second.word - 1, max_segment) << "sample " << i << " of " << file;
      if (static_cast<std::int64_t>(pair.a.size() + pair.b.size()) < max_text) {
        ++untruncated_next;  // not truncated: B is exactly the next word on
        EXPECT_EQ(b->first.word, a->second.word + 1) << "sample " << i << " of " << file;
      }
    }
  }
  EXPECT_EQ(counted.is_next + counted.random_next, p.train_samples);
  EXPECT_EQ(counted.is_next, p.train_nsp.is_next);
  EXPECT_EQ(counted.random_next, p.train_nsp.random_next);
  EXPECT_GT(p.train_samples, 300);
  EXPECT_GT(checked, p.train_samples * 9 / 10);
  EXPECT_GT(untruncated_next, 10);
  const double is_next = p.train_nsp.is_next_fraction();
  std::printf("bert pairs: %lld training samples, %.3f IsNext; %lld eval samples, %.3f IsNext\n",
              static_cast<long long>(p.train_samples), is_next, static_cast<long long>(p.eval_samples),
              p.eval_nsp.is_next_fraction());
  EXPECT_GE(is_next, 0.4);
  EXPECT_LE(is_next, 0.6);
  EXPECT_GT(p.eval_samples, 0);
  EXPECT_EQ(p.eval_nsp.is_next + p.eval_nsp.random_next, p.eval_samples);
}

TEST(BertPairs, SplitIsNearHalfOnTheBibleAtShortAndLongSequences) {
  const std::string kjv = default_kjv_path();
  if (kjv.empty()) GTEST_SKIP() << "bible-kjv-text is not installed";
  const auto docs = load_corpus(kjv);
  std::vector<Document> part(docs.begin(), docs.begin() + 200);  // Genesis to Leviticus ~ 6k verses
  const WordPiece vocab = WordPiece::build(part, 512);
  for (const std::int64_t seq_len : {32, 128}) {  // the mini's; BERT's phase 1
    BertSampleOptions opt;
    opt.seq_len = seq_len;
    opt.max_predictions = seq_len / 6;
    const BertSamples s = make_bert_samples(part, vocab, opt);
    const NspSplit split = nsp_split(s);
    EXPECT_EQ(split.is_next + split.random_next, s.count);
    std::printf("bert pairs: KJV seq %lld: %lld samples, %.3f IsNext\n", static_cast<long long>(seq_len),
                static_cast<long long>(s.count), split.is_next_fraction());
    EXPECT_GE(split.is_next_fraction(), 0.4) << "seq_len " << seq_len;
    EXPECT_LE(split.is_next_fraction(), 0.6) << "seq_len " << seq_len;
  }
}

TEST(BertPairs, LongSentencesAreCutAtClauseEndsThenAtWordStarts) {
  const WordPiece vocab({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", ",", ";", "##x", "##y"});
  auto ids = [&](std::initializer_list<const char*> tokens) {
    std::vector<std::int32_t> out;
    for (const char* t : tokens) out.push_back(vocab.find(t));
    return out;
  };
  using Segs = std::vector<std::vector<std::int32_t>>;
  // Fits: one segment.
  EXPECT_EQ(split_sentence(ids({"a", "b", ","}), 3, vocab), Segs{ids({"a", "b", ","})});
  EXPECT_TRUE(split_sentence({}, 3, vocab).empty());
  // Clauses "a b ," "c ;" "a b" packed greedily up to 5 tokens: the first two together, then the last.
  EXPECT_EQ(split_sentence(ids({"a", "b", ",", "c", ";", "a", "b"}), 5, vocab), (Segs{ids({"a", "b", ",", "c", ";"}), ids({"a", "b"})}));
  // A clause longer than the limit: cut before a word start, not before a "##" piece.
  EXPECT_EQ(split_sentence(ids({"a", "b", "##x", "##y", "c", ","}), 3, vocab),
            (Segs{ids({"a"}), ids({"b", "##x", "##y"}), ids({"c", ","})}));
  // A word longer than the limit is cut at the limit.
  EXPECT_EQ(split_sentence(ids({"b", "##x", "##y", "##x", "a"}), 2, vocab),
            (Segs{ids({"b", "##x"}), ids({"##y", "##x"}), ids({"a"})}));
  EXPECT_EQ(max_segment_tokens(32), 9);
  EXPECT_EQ(max_segment_tokens(128), 41);
}

TEST(BertPairs, SameSeedSameSamplesOtherSeedOtherSamples) {
  std::vector<Document> docs(6);
  for (int d = 0; d < 6; ++d)
    for (int s = 0; s < 30; ++s)
      docs[d].sentences.push_back("and " + unique_word(d * 100 + s) + " said unto " + unique_word(d * 100 + s + 50) +
                                  ", go thy way; for it is " + unique_word(s) + ".");
  const WordPiece vocab = WordPiece::build(docs, 400);
  BertSampleOptions opt;
  opt.seq_len = 32;
  opt.max_predictions = 5;
  opt.dupe_factor = 2;
  const BertSamples a = make_bert_samples(docs, vocab, opt), b = make_bert_samples(docs, vocab, opt);
  ASSERT_GT(a.count, 50);
  expect_same_samples(a, b);
  opt.seed += 1;
  const BertSamples c = make_bert_samples(docs, vocab, opt);
  EXPECT_NE(a.input_ids, c.input_ids);
  EXPECT_NE(a.next_sentence_labels, c.next_sentence_labels);
}
