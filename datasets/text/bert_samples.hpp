#pragma once
/// @file datasets/text/bert_samples.hpp  BERT pre-training samples from documents: sentence
/// pairs for next-sentence prediction and masked-LM targets, by the rules of BERT's
/// create_pretraining_data.py.
///
/// Note [BERT sentence pairs]
/// Per document, BERT accumulates consecutive segments until they reach a target length
/// (seq_len - 3 tokens, or with probability short_seq_prob a random length in [2, seq_len - 3]),
/// splits the chunk after a random segment into A and B, and with probability 0.5 replaces B by
/// text from a random other document starting at a random segment (the chunk's unused segments
/// then go back to the document, so they start the next chunk); a chunk of one segment always
/// gets a random B. The longer of A/B loses a token from a random end until the pair fits.
/// Label 0 = IsNext (B is A's continuation in the source), 1 = NotNext (B is random).
///
/// What a "segment" is decides the label split. BERT's segment is a sentence; a KJV verse is a
/// sentence, ~30 WordPiece tokens, so with 32-token samples (29 for text) a single verse already
/// reaches the target, almost every chunk holds one segment, and the old builder here labelled
/// 92% of the mini's pairs NotNext. So a segment is at most a third of the text budget,
/// max_segment_tokens() = max(1, (seq_len - 3) / 3): a sentence that fits stays whole (at
/// 128 tokens that is most verses, at 512 all: BERT's rule unchanged); a longer one
/// is cut after its clause punctuation (, ; : . ? !), consecutive clauses packed greedily up to the
/// limit; a clause still longer is cut before a word that starts within the limit (never before
/// a "##" piece), or at the limit inside a word longer than the limit. A full-length chunk then
/// holds at least two segments, and single-segment chunks are left only at document ends and in
/// short-target chunks, so the label split stays near 50/50 at any sequence length
/// (nsp_split(); make_bert_shards prints it). Every cut keeps the tokens in order, so an IsNext
/// B is the text that follows A in the document, less what truncation removed.

#include <cstdint>
#include <vector>

#include "bert_hdf5.hpp"
#include "corpus.hpp"
#include "wordpiece.hpp"

namespace benchhost::text {

/// Bumped whenever make_bert_samples gives other samples for the same options and seed, so that
/// cached data built by an older builder is never taken for current (the bert plugin's recipe).
/// 2: segments of at most max_segment_tokens() (Note [BERT sentence pairs]), random B always from
/// another document.
inline constexpr int kBertSampleBuilderVersion = 2;

/// How make_bert_shards turns documents into samples (BERT's create_pretraining_data rules).
struct BertSampleOptions {
  std::int64_t seq_len = 128;
  std::int64_t max_predictions = 20;
  double mask_prob = 0.15;
  double short_seq_prob = 0.1;  ///< fraction of chunks with a shorter random target length
  std::int64_t dupe_factor = 1; ///< passes over the documents, each with fresh masks and pairs
  std::uint64_t seed = 12345;
};

/// The most tokens of one segment for a sample length (Note [BERT sentence pairs]).
std::int64_t max_segment_tokens(std::int64_t seq_len);

/// Cut the token ids of one sentence into segments of at most `max_tokens` tokens (whole when it
/// fits, else at clause ends, then at word starts; Note [BERT sentence pairs]). Concatenating the
/// result gives `ids` back.
std::vector<std::vector<std::int32_t>> split_sentence(const std::vector<std::int32_t>& ids, std::int64_t max_tokens,
                                                      const WordPiece& vocab);

/// Build samples from `docs` (Note [BERT sentence pairs]): 15% of the tokens chosen for
/// prediction, at most max_predictions (80% -> [MASK], 10% -> a random token, 10% unchanged).
/// NotNext B text comes from another document of `docs`, so at least two documents must hold
/// text. Deterministic: the same documents, vocabulary and options give the same samples.
BertSamples make_bert_samples(const std::vector<Document>& docs, const WordPiece& vocab, const BertSampleOptions& opt);

/// How many samples carry each next-sentence label.
struct NspSplit {
  std::int64_t is_next = 0;      ///< label 0: B follows A
  std::int64_t random_next = 0;  ///< label 1: B is from another document
  double is_next_fraction() const {
    const std::int64_t n = is_next + random_next;
    return n > 0 ? static_cast<double>(is_next) / static_cast<double>(n) : 0.0;
  }
  NspSplit& operator+=(const NspSplit& o) {
    is_next += o.is_next;
    random_next += o.random_next;
    return *this;
  }
};
NspSplit nsp_split(const BertSamples& samples);

}  // namespace benchhost::text
