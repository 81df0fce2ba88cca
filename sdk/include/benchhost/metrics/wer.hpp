#pragma once
/// @file metrics/wer.hpp  Word error rate (RNN-T's metric, MLPerf speech recognition) as an
/// accumulator that merges across ranks.
///
/// Definition (the MLPerf reference, rnn_speech_recognition/pytorch/common/metrics.py
/// word_error_rate): corpus-level WER = sum over utterances of the word-level Levenshtein distance
/// between hypothesis and reference / sum over utterances of the reference's word count. Words
/// are compared exactly (no normalisation: the reference lower-cases transcripts once, at
/// preprocessing). An empty hypothesis against N reference words scores N errors; a hypothesis
/// against an empty reference scores its own word count as errors and adds no words.
///
/// Words. add(string, string) splits both sides like Python's str.split() with no argument:
/// on runs of whitespace, leading and trailing whitespace ignored. Whitespace is what Python's
/// str.isspace() accepts: ASCII \t \n \v \f \r, space and \x1c-\x1f, and (decoded from UTF-8)
/// U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000. Other bytes,
/// invalid UTF-8 included, belong to words and compare byte for byte. add() of word-id sequences
/// skips the splitting (e.g. sentencepiece pieces or ids of words a caller already split).
///
/// Across ranks: each rank adds its own share of the evaluation set; value(comm) sums (errors,
/// words) over the ranks with one allreduce before dividing, so the result is the corpus WER of
/// the union, not a mean of per-rank rates (the reference gathers every rank's counts too).
/// Like the other accumulators, value() is NaN when no reference word was added anywhere.
///
/// Threading: an accumulator is used by one thread at a time.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace benchhost {

class Communicator;  // comm/communicator.hpp

namespace metrics {

/// The words of `text` as Python's text.split() gives them (see the header's notes).
std::vector<std::string_view> split_words(std::string_view text);

/// Levenshtein distance between two word sequences (insertions, deletions and substitutions
/// each cost 1): O(|a| |b|) time, O(min(|a|, |b|)) memory.
std::int64_t word_edit_distance(std::span<const std::string_view> a, std::span<const std::string_view> b);
std::int64_t word_edit_distance(std::span<const std::int64_t> a, std::span<const std::int64_t> b);

class WordErrorRate {
 public:
  void reset() { errors_ = 0, words_ = 0, utterances_ = 0; }
  /// One utterance: hypothesis and reference transcripts, split into words.
  void add(std::string_view hypothesis, std::string_view reference);
  /// One utterance as word ids (or any tokens a caller compares by id).
  void add(std::span<const std::int64_t> hypothesis, std::span<const std::int64_t> reference);
  /// Counts a caller made itself (e.g. another rank's, or a cached utterance). Throws
  /// InvalidArgument when either is negative.
  void add_counts(std::int64_t errors, std::int64_t reference_words);
  std::int64_t errors() const { return errors_; }          ///< on this rank
  std::int64_t words() const { return words_; }            ///< reference words on this rank
  std::int64_t utterances() const { return utterances_; }  ///< add() calls on this rank
  /// errors / words over this rank or (comm with more than one rank) over all ranks: a
  /// collective call that every rank makes, every rank gets the same value. NaN when no
  /// reference word was added anywhere.
  double value(Communicator* comm = nullptr) const;
  /// The same as value(): the name the other accumulators use.
  double compute(Communicator* comm = nullptr) const { return value(comm); }

 private:
  std::int64_t errors_ = 0, words_ = 0, utterances_ = 0;
};

}  // namespace metrics
}  // namespace benchhost
