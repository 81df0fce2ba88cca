#pragma once
/// @file datasets/text/bpe.hpp  Byte-level BPE (GPT-2 style), trained on a corpus.
///
/// Note [Byte-level BPE]
/// Text is first cut into pre-tokens the way GPT-2 does: English contractions ('s 't 're 've 'm
/// 'll 'd), an optional space followed by a run of letters, of digits or of other symbols, and
/// runs of whitespace (a whitespace run before a word leaves its last space to that word).
/// Bytes >= 0x80 count as letters. Each pre-token starts as its bytes (ids 0..255); training
/// repeatedly merges the most frequent adjacent pair (ties: smallest pair of ids) into a new id
/// 256, 257, ...; encoding applies the learned merges in rank order inside each pre-token. The
/// end-of-document token is the last id (vocab_size - 1). The tokenizer file is text:
/// "benchhost-bpe 1 <merges>" then one "left right" id pair per merge.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "corpus.hpp"

namespace benchhost::text {

class ByteBpe {
 public:
  ByteBpe() = default;
  explicit ByteBpe(std::vector<std::pair<std::int32_t, std::int32_t>> merges);

  /// Learn `num_merges` merges from the corpus (fewer if the corpus runs out of pairs).
  static ByteBpe train(const std::vector<Document>& docs, std::int32_t num_merges);
  static ByteBpe load(const std::string& path);  ///< throws DataError naming the file
  void save(const std::string& path) const;

  static std::vector<std::string> pretokenize(std::string_view text);
  std::vector<std::int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;

  std::int32_t num_merges() const { return static_cast<std::int32_t>(merges_.size()); }
  std::int32_t eod() const { return 256 + num_merges(); }
  std::int32_t vocab_size() const { return 257 + num_merges(); }

 private:
  void encode_pretoken(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::vector<std::pair<std::int32_t, std::int32_t>> merges_;
  std::unordered_map<std::uint64_t, std::int32_t> rank_;  // pair key -> merge index
  std::vector<std::string> bytes_of_;                      // id -> bytes
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
};

}  // namespace benchhost::text
