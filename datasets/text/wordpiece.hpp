#pragma once
/// @file datasets/text/wordpiece.hpp  BERT's WordPiece vocabulary and greedy longest-match tokenizer.
///
/// Note [WordPiece vocabulary]
/// BERT's tokenizer first splits text into words (lower-cased; whitespace separates words,
/// every punctuation character is a word of its own), then splits each word greedily into the
/// longest vocabulary entries from the left, continuation pieces carrying a "##" prefix
/// ("walketh" -> "walk", "##eth"); a word with no split is [UNK]. We build the vocabulary
/// from the corpus by frequency: the five special tokens, every character seen (alone and as
/// "##c", so any word of seen characters can be split), the most frequent whole words, and
/// then the most frequent word-initial prefixes and "##" inner pieces of the words left out
/// (counted with their word's frequency). Ties break by string, so a corpus gives one vocabulary.
/// The file format is BERT's vocab.txt: one token per line, the line number is the id.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "corpus.hpp"

namespace benchhost::text {

class WordPiece {
 public:
  static constexpr std::int32_t kPad = 0, kUnk = 1, kCls = 2, kSep = 3, kMask = 4;
  static constexpr std::int32_t kNumSpecial = 5;

  WordPiece() = default;
  explicit WordPiece(std::vector<std::string> tokens);  ///< throws InvalidArgument on duplicates

  /// Build a vocabulary of at most `vocab_size` tokens from a corpus (see the note).
  static WordPiece build(const std::vector<Document>& docs, std::int32_t vocab_size);
  /// vocab.txt; throws DataError naming the file when it is missing or lacks the special tokens.
  static WordPiece load(const std::string& path);
  void save(const std::string& path) const;

  /// Lower-case and split into words and single punctuation characters.
  static std::vector<std::string> basic_tokenize(std::string_view text);
  /// Token ids of one piece of text (basic tokenisation, then greedy longest match per word).
  std::vector<std::int32_t> encode(std::string_view text) const;
  /// Ids of one word (already basic-tokenised); appends to `out`.
  void encode_word(const std::string& word, std::vector<std::int32_t>& out) const;
  /// Tokens joined by spaces with "##" pieces glued to the previous one.
  std::string decode(const std::vector<std::int32_t>& ids) const;

  std::int32_t size() const { return static_cast<std::int32_t>(tokens_.size()); }
  const std::string& token(std::int32_t id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  /// Id of a token, or -1.
  std::int32_t find(const std::string& token) const;

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> ids_;
  std::size_t max_token_chars_ = 0;
};

}  // namespace benchhost::text
