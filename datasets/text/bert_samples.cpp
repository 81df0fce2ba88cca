#include "bert_samples.hpp"

#include <algorithm>
#include <cmath>

#include "benchhost/error.hpp"
#include "benchhost/random.hpp"

namespace benchhost::text {
namespace {

using Tokens = std::vector<std::int32_t>;
using Segments = std::vector<Tokens>;  // one document

bool is_clause_end(const std::string& token) {
  return token.size() == 1 && std::string_view(",;:.?!").find(token[0]) != std::string_view::npos;
}
bool is_continuation(const std::string& token) { return token.rfind("##", 0) == 0; }

std::vector<Segments> segment_docs(const std::vector<Document>& docs, const WordPiece& vocab, std::int64_t max_tokens) {
  std::vector<Segments> out(docs.size());
  for (std::size_t d = 0; d < docs.size(); ++d)
    for (const auto& sentence : docs[d].sentences)
      for (auto& segment : split_sentence(vocab.encode(sentence), max_tokens, vocab))
        out[d].push_back(std::move(segment));
  return out;
}

void append(Tokens& dst, const Tokens& src) { dst.insert(dst.end(), src.begin(), src.end()); }

// BERT's truncate_seq_pair: drop a token from a random end of the longer side until both fit.
void truncate_pair(Tokens& a, Tokens& b, std::int64_t max_tokens, Rng& rng) {
  while (static_cast<std::int64_t>(a.size() + b.size()) > max_tokens) {
    Tokens& longer = a.size() > b.size() ? a : b;
    if (rng.uniform() < 0.5f) longer.erase(longer.begin());
    else longer.pop_back();
  }
}

std::int64_t draw_target(std::int64_t max_tokens, double short_seq_prob, Rng& rng) {
  if (rng.uniform() < short_seq_prob) return 2 + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(max_tokens - 1)));
  return max_tokens;
}

// [CLS] A [SEP] B [SEP], masked by BERT's create_masked_lm_predictions, appended to `out`.
void add_sample(const Tokens& a, const Tokens& b, bool random_next, const WordPiece& vocab,
                const BertSampleOptions& opt, Rng& rng, BertSamples& out) {
  Tokens ids{WordPiece::kCls}, seg{0};
  for (auto t : a) ids.push_back(t), seg.push_back(0);
  ids.push_back(WordPiece::kSep), seg.push_back(0);
  for (auto t : b) ids.push_back(t), seg.push_back(1);
  ids.push_back(WordPiece::kSep), seg.push_back(1);

  Tokens candidates;
  for (std::size_t p = 0; p < ids.size(); ++p)
    if (ids[p] != WordPiece::kCls && ids[p] != WordPiece::kSep) candidates.push_back(static_cast<std::int32_t>(p));
  for (std::size_t k = candidates.size(); k > 1; --k) std::swap(candidates[k - 1], candidates[rng.below(k)]);
  const auto n_pred = std::min<std::int64_t>(
      {opt.max_predictions, static_cast<std::int64_t>(candidates.size()),
       std::max<std::int64_t>(1, std::llround(static_cast<double>(ids.size()) * opt.mask_prob))});
  Tokens positions(candidates.begin(), candidates.begin() + n_pred);
  std::sort(positions.begin(), positions.end());
  Tokens labels;
  for (std::int32_t p : positions) {
    labels.push_back(ids[p]);
    const float r = rng.uniform();
    if (r < 0.8f) ids[p] = WordPiece::kMask;
    else if (r < 0.9f) ids[p] = WordPiece::kNumSpecial + static_cast<std::int32_t>(rng.below(vocab.size() - WordPiece::kNumSpecial));
  }
  const auto len = static_cast<std::int64_t>(ids.size());
  for (std::int64_t p = 0; p < opt.seq_len; ++p) {
    out.input_ids.push_back(p < len ? ids[p] : WordPiece::kPad);
    out.input_mask.push_back(p < len ? 1 : 0);
    out.segment_ids.push_back(p < len ? seg[p] : 0);
  }
  for (std::int64_t k = 0; k < opt.max_predictions; ++k) {
    out.masked_lm_positions.push_back(k < n_pred ? positions[k] : 0);
    out.masked_lm_ids.push_back(k < n_pred ? labels[k] : 0);
  }
  out.next_sentence_labels.push_back(random_next ? 1 : 0);
  ++out.count;
}

}  // namespace

std::int64_t max_segment_tokens(std::int64_t seq_len) { return std::max<std::int64_t>(1, (seq_len - 3) / 3); }

std::vector<std::vector<std::int32_t>> split_sentence(const std::vector<std::int32_t>& ids, std::int64_t max_tokens,
                                                      const WordPiece& vocab) {
  BH_CHECK_AS(InvalidArgument, max_tokens >= 1, "segment limit {} must be >= 1", max_tokens);
  const auto n = static_cast<std::int64_t>(ids.size());
  if (n <= max_tokens) return ids.empty() ? Segments{} : Segments{ids};
  // Clause ends: the positions just after , ; : . ? ! (and the end of the sentence).
  std::vector<std::int64_t> clause_ends;
  for (std::int64_t p = 0; p < n; ++p)
    if (p + 1 == n || is_clause_end(vocab.token(ids[p]))) clause_ends.push_back(p + 1);
  Segments out;
  std::int64_t start = 0;
  std::size_t next_end = 0;
  while (start < n) {
    // The furthest clause end within the limit; failing that, the furthest word start.
    std::int64_t cut = start;
    while (next_end < clause_ends.size() && clause_ends[next_end] <= start) ++next_end;
    for (std::size_t e = next_end; e < clause_ends.size() && clause_ends[e] - start <= max_tokens; ++e) cut = clause_ends[e];
    if (cut == start) {
      for (std::int64_t p = std::min(n, start + max_tokens); p > start; --p)
        if (p == n || !is_continuation(vocab.token(ids[p]))) {
          cut = p;
          break;
        }
      if (cut == start) cut = start + max_tokens;  // one word longer than the limit
    }
    out.emplace_back(ids.begin() + start, ids.begin() + cut);
    start = cut;
  }
  return out;
}

BertSamples make_bert_samples(const std::vector<Document>& docs, const WordPiece& vocab, const BertSampleOptions& opt) {
  BH_CHECK_AS(InvalidArgument, opt.seq_len >= 8 && opt.max_predictions >= 1 && opt.mask_prob > 0 && opt.mask_prob < 1,
              "BERT sample options: seq_len {} (>= 8), max_predictions {} (>= 1), mask_prob {} (0..1)",
              opt.seq_len, opt.max_predictions, opt.mask_prob);
  const std::int64_t max_tokens = opt.seq_len - 3;  // [CLS] A [SEP] B [SEP]
  const auto segmented = segment_docs(docs, vocab, max_segment_tokens(opt.seq_len));
  std::vector<std::size_t> with_text;  // ascending document indices
  for (std::size_t d = 0; d < segmented.size(); ++d)
    if (!segmented[d].empty()) with_text.push_back(d);
  BH_CHECK_AS(InvalidArgument, with_text.size() >= 2,
              "BERT samples need at least two documents with text for random next sentences, got {}", with_text.size());

  BertSamples out;
  out.seq_len = opt.seq_len;
  out.max_predictions = opt.max_predictions;
  Rng rng(opt.seed, 0xbe27);
  for (std::int64_t pass = 0; pass < opt.dupe_factor; ++pass) {
    for (std::size_t k = 0; k < with_text.size(); ++k) {
      const Segments& doc = segmented[with_text[k]];
      std::int64_t target = draw_target(max_tokens, opt.short_seq_prob, rng);
      std::vector<const Tokens*> chunk;
      std::int64_t chunk_len = 0;
      for (std::size_t si = 0; si < doc.size(); ++si) {
        chunk.push_back(&doc[si]);
        chunk_len += static_cast<std::int64_t>(doc[si].size());
        if (si + 1 != doc.size() && chunk_len < target) continue;
        // A = the first a_end segments of the chunk; B = the rest, or random text (NotNext).
        const std::size_t a_end = chunk.size() >= 2 ? 1 + rng.below(chunk.size() - 1) : 1;
        Tokens a, b;
        for (std::size_t c = 0; c < a_end; ++c) append(a, *chunk[c]);
        const bool random_next = chunk.size() == 1 || rng.uniform() < 0.5f;
        if (random_next) {
          // Another document with text (never this one), from a random segment on.
          std::size_t r = rng.below(with_text.size() - 1);
          if (r >= k) ++r;
          const Segments& other = segmented[with_text[r]];
          const auto b_target = std::max<std::int64_t>(1, target - static_cast<std::int64_t>(a.size()));
          for (std::size_t j = rng.below(other.size()); j < other.size() && static_cast<std::int64_t>(b.size()) < b_target; ++j)
            append(b, other[j]);
          si -= chunk.size() - a_end;  // the unused segments go back to the document
        } else {
          for (std::size_t c = a_end; c < chunk.size(); ++c) append(b, *chunk[c]);
        }
        truncate_pair(a, b, max_tokens, rng);
        chunk.clear();
        chunk_len = 0;
        if (!a.empty() && !b.empty()) add_sample(a, b, random_next, vocab, opt, rng, out);
        target = draw_target(max_tokens, opt.short_seq_prob, rng);
      }
    }
  }
  return out;
}

NspSplit nsp_split(const BertSamples& samples) {
  NspSplit s;
  for (const std::int32_t label : samples.next_sentence_labels) (label == 0 ? s.is_next : s.random_next) += 1;
  return s;
}

}  // namespace benchhost::text
