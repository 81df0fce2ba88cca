// Corpus word error rate, merged across ranks. See metrics/wer.hpp.
#include "benchhost/metrics/wer.hpp"

#include <algorithm>
#include <limits>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/error.hpp"

namespace benchhost::metrics {

namespace {

// Bytes of the whitespace character starting at text[i] (0 if none), per Python's str.isspace().
std::size_t space_at(std::string_view text, std::size_t i) {
  const auto c0 = static_cast<unsigned char>(text[i]);
  if (c0 == ' ' || (c0 >= 0x09 && c0 <= 0x0d) || (c0 >= 0x1c && c0 <= 0x1f)) return 1;
  if (c0 < 0xc2) return 0;
  auto byte = [&](std::size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u; };
  if (c0 == 0xc2) return byte(1) == 0x85 || byte(1) == 0xa0 ? 2 : 0;  // U+0085, U+00A0
  if (c0 == 0xe1) return byte(1) == 0x9a && byte(2) == 0x80 ? 3 : 0;  // U+1680
  if (c0 == 0xe2 && byte(1) == 0x80) {
    const unsigned c2 = byte(2);  // U+2000-U+200A, U+2028, U+2029, U+202F
    return (c2 >= 0x80 && c2 <= 0x8a) || c2 == 0xa8 || c2 == 0xa9 || c2 == 0xaf ? 3 : 0;
  }
  if (c0 == 0xe2 && byte(1) == 0x81) return byte(2) == 0x9f ? 3 : 0;  // U+205F
  if (c0 == 0xe3) return byte(1) == 0x80 && byte(2) == 0x80 ? 3 : 0;  // U+3000
  return 0;
}

template <class W>
std::int64_t edit_distance(std::span<const W> a, std::span<const W> b) {
  if (a.size() < b.size()) std::swap(a, b);  // b is the shorter: one row of |b| + 1
  std::vector<std::int64_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<std::int64_t>(j);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::int64_t diag = row[0];  // d[i-1][j-1]
    row[0] = static_cast<std::int64_t>(i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::int64_t up = row[j];  // d[i-1][j]
      row[j] = std::min({up + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t i = 0, start = std::string_view::npos;
  while (i < text.size()) {
    const std::size_t s = space_at(text, i);
    if (s > 0) {
      if (start != std::string_view::npos) words.push_back(text.substr(start, i - start));
      start = std::string_view::npos;
      i += s;
    } else {
      if (start == std::string_view::npos) start = i;
      ++i;
    }
  }
  if (start != std::string_view::npos) words.push_back(text.substr(start));
  return words;
}

std::int64_t word_edit_distance(std::span<const std::string_view> a, std::span<const std::string_view> b) {
  return edit_distance(a, b);
}

std::int64_t word_edit_distance(std::span<const std::int64_t> a, std::span<const std::int64_t> b) {
  return edit_distance(a, b);
}

void WordErrorRate::add(std::string_view hypothesis, std::string_view reference) {
  const std::vector<std::string_view> hyp = split_words(hypothesis), ref = split_words(reference);
  errors_ += word_edit_distance(std::span<const std::string_view>(hyp), std::span<const std::string_view>(ref));
  words_ += static_cast<std::int64_t>(ref.size());
  ++utterances_;
}

void WordErrorRate::add(std::span<const std::int64_t> hypothesis, std::span<const std::int64_t> reference) {
  errors_ += word_edit_distance(hypothesis, reference);
  words_ += static_cast<std::int64_t>(reference.size());
  ++utterances_;
}

void WordErrorRate::add_counts(std::int64_t errors, std::int64_t reference_words) {
  BH_CHECK_AS(InvalidArgument, errors >= 0 && reference_words >= 0,
              "word error rate: counts must be >= 0, got {} errors and {} reference words", errors, reference_words);
  errors_ += errors;
  words_ += reference_words;
}

double WordErrorRate::value(Communicator* comm) const {
  std::int64_t errors = errors_, words = words_;
  if (comm != nullptr && comm->size() > 1) {
    const auto sums = allreduce_values(*comm, std::vector<std::int64_t>{errors, words}, ReduceOp::sum);
    errors = sums[0];
    words = sums[1];
  }
  if (words == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(errors) / static_cast<double>(words);
}

}  // namespace benchhost::metrics
