#include "data.hpp"

#include <algorithm>
#include <limits>

#include "benchhost/random.hpp"
#include "text/wordpiece.hpp"

namespace benchhost::bert {

BertBatch make_batch(const text::BertSamples& src, const std::vector<std::int64_t>& order, std::int64_t first,
                     std::int64_t count, std::int64_t rows, bool packing, std::int64_t max_per_row,
                     std::int64_t* consumed) {
  const std::int64_t T = src.seq_len, P = src.max_predictions;
  BH_CHECK_AS(InvalidArgument, rows >= 1 && count >= 1 && first >= 0 && first + count <= static_cast<std::int64_t>(order.size()),
              "BERT batch: rows {} / samples [{}, {}) out of range of {}", rows, first, first + count, order.size());
  std::vector<std::int32_t> ids(rows * T, 0), seg(rows * T, 0), pos(rows * T, 0);
  std::vector<std::uint8_t> pad(rows * T, 0);
  std::vector<std::uint8_t> block;
  if (packing) block.assign(rows * T * T, 0);
  std::vector<std::int32_t> mlm_index, cls_index;
  std::vector<std::int64_t> mlm_labels, nsp_labels;

  std::int64_t row = 0, offset = 0, in_row = 0, taken = 0;
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t i = order[first + k];
    const std::int32_t* mask_row = src.input_mask.data() + i * T;
    const std::int64_t len = std::count(mask_row, mask_row + T, 1);
    if (!packing) {
      if (row == rows) break;
      offset = 0;
    } else if (offset + len > T || in_row == max_per_row) {
      if (++row == rows) break;
      offset = 0;
      in_row = 0;
    }
    const std::int64_t base = row * T + offset;
    for (std::int64_t t = 0; t < len; ++t) {
      ids[base + t] = src.input_ids[i * T + t];
      seg[base + t] = src.segment_ids[i * T + t];
      pos[base + t] = static_cast<std::int32_t>(t);
      pad[base + t] = 1;
    }
    if (packing)
      for (std::int64_t a = 0; a < len; ++a)
        std::fill_n(block.begin() + (row * T + offset + a) * T + offset, len, std::uint8_t{1});
    for (std::int64_t p = 0; p < P; ++p) {
      const std::int32_t position = src.masked_lm_positions[i * P + p];
      if (position <= 0 || position >= len) continue;  // padding entries
      mlm_index.push_back(static_cast<std::int32_t>(base + position));
      mlm_labels.push_back(src.masked_lm_ids[i * P + p]);
    }
    cls_index.push_back(static_cast<std::int32_t>(base));
    nsp_labels.push_back(src.next_sentence_labels[i]);
    ++taken;
    if (packing) {
      offset += len;
      ++in_row;
    } else {
      ++row;
    }
  }
  if (mlm_index.empty()) {  // keep shapes valid: one ignored entry
    mlm_index.push_back(0);
    mlm_labels.push_back(-100);
  }
  BertBatch b;
  b.input_ids = Tensor::from_vector_i32(ids, {rows, T});
  b.segment_ids = Tensor::from_vector_i32(seg, {rows, T});
  b.position_ids = Tensor::from_vector_i32(pos, {rows, T});
  if (packing) {
    // Rows past the last sample have no real token; give each padding query itself as a key so
    // no softmax row is empty (its output is never used).
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t t = 0; t < T; ++t)
        if (!pad[r * T + t]) block[(r * T + t) * T + t] = 1;
    b.packed_mask = Tensor::empty({rows, T, T}, DType::u8);
    std::copy(block.begin(), block.end(), b.packed_mask.data<std::uint8_t>());
  } else {
    b.key_padding = Tensor::empty({rows, T}, DType::u8);
    std::copy(pad.begin(), pad.end(), b.key_padding.data<std::uint8_t>());
  }
  const auto M = static_cast<std::int64_t>(mlm_index.size()), K = static_cast<std::int64_t>(cls_index.size());
  b.mlm_index = Tensor::from_vector_i32(mlm_index, {M});
  b.mlm_labels = Tensor::from_vector_i64(mlm_labels, {M});
  b.cls_index = Tensor::from_vector_i32(cls_index, {K});
  b.nsp_labels = Tensor::from_vector_i64(nsp_labels, {K});
  b.sequences = taken;
  if (consumed) *consumed = taken;
  return b;
}

text::BertSamples synthetic_samples(std::int64_t count, std::int64_t seq_len, std::int64_t max_predictions,
                                    std::int64_t vocab, std::uint64_t seed) {
  BH_CHECK_AS(InvalidArgument, count >= 1 && seq_len >= 4 && max_predictions >= 1 && vocab > text::WordPiece::kNumSpecial,
              "synthetic BERT samples: count {} seq_len {} max_predictions {} vocab {}", count, seq_len,
              max_predictions, vocab);
  text::BertSamples s;
  s.seq_len = seq_len;
  s.max_predictions = max_predictions;
  s.reserve(count);
  Rng rng(seed, 0x5e7);
  const std::int64_t half = seq_len / 2;
  const std::int64_t n_pred = std::min<std::int64_t>(max_predictions, std::max<std::int64_t>(1, seq_len * 15 / 100));
  for (std::int64_t i = 0; i < count; ++i) {
    for (std::int64_t t = 0; t < seq_len; ++t) {
      std::int32_t id = text::WordPiece::kNumSpecial + static_cast<std::int32_t>(rng.below(vocab - text::WordPiece::kNumSpecial));
      if (t == 0) id = text::WordPiece::kCls;
      if (t == half - 1 || t == seq_len - 1) id = text::WordPiece::kSep;
      s.input_ids.push_back(id);
      s.input_mask.push_back(1);
      s.segment_ids.push_back(t >= half ? 1 : 0);
    }
    // n_pred distinct positions in [1, seq_len - 1), evenly spread with a random phase.
    const std::int64_t stride = std::max<std::int64_t>(1, (seq_len - 2) / n_pred);
    const auto phase = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(stride)));
    for (std::int64_t p = 0; p < max_predictions; ++p) {
      const bool real = p < n_pred;
      const std::int64_t position = 1 + phase + p * stride;
      s.masked_lm_positions.push_back(real && position < seq_len - 1 ? static_cast<std::int32_t>(position) : 0);
      s.masked_lm_ids.push_back(real ? s.input_ids[i * seq_len + std::min(position, seq_len - 1)] : 0);
    }
    s.next_sentence_labels.push_back(static_cast<std::int32_t>(rng.below(2)));
    ++s.count;
  }
  return s;
}

MaskedLmBaselines masked_lm_baselines(const text::BertSamples& train, const text::BertSamples& eval,
                                      std::int64_t eval_count, std::int64_t vocab) {
  const std::int64_t T = train.seq_len, P = train.max_predictions;
  BH_CHECK_AS(InvalidArgument, eval.seq_len == T && eval.max_predictions == P && eval_count <= eval.count && vocab > 0,
              "masked-LM baselines: eval shapes {}x{} vs train {}x{}, {} of {} samples", eval.seq_len,
              eval.max_predictions, T, P, eval_count, eval.count);
  const bool bigram = vocab <= 4096;
  std::vector<std::int64_t> label_freq(static_cast<std::size_t>(vocab), 0);
  std::vector<std::int32_t> pair_count(bigram ? static_cast<std::size_t>(vocab * vocab) : 0, 0);
  std::vector<std::int32_t> row(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < train.count; ++i) {
    std::copy_n(train.input_ids.begin() + i * T, T, row.begin());
    for (std::int64_t k = 0; k < train.num_predictions(i); ++k) {
      const std::int32_t id = train.masked_lm_ids[i * P + k];
      row[train.masked_lm_positions[i * P + k]] = id;  // undo the corruption
      ++label_freq[id];
    }
    if (!bigram) continue;
    const std::int64_t len = std::count(train.input_mask.begin() + i * T, train.input_mask.begin() + (i + 1) * T, 1);
    for (std::int64_t t = 1; t < len; ++t) ++pair_count[row[t - 1] * vocab + row[t]];
  }
  MaskedLmBaselines out;
  out.top_token = static_cast<std::int32_t>(std::max_element(label_freq.begin(), label_freq.end()) - label_freq.begin());
  std::vector<std::int32_t> successor(bigram ? static_cast<std::size_t>(vocab) : 0, out.top_token);
  for (std::int64_t a = 0; a < static_cast<std::int64_t>(successor.size()); ++a) {
    const auto first = pair_count.begin() + a * vocab;
    const auto best = std::max_element(first, first + vocab);
    if (*best > 0) successor[a] = static_cast<std::int32_t>(best - first);
  }
  std::int64_t majority_hits = 0, bigram_hits = 0, total = 0;
  for (std::int64_t i = 0; i < eval_count; ++i)
    for (std::int64_t k = 0; k < eval.num_predictions(i); ++k, ++total) {
      const std::int32_t label = eval.masked_lm_ids[i * P + k];
      majority_hits += label == out.top_token;
      if (bigram) bigram_hits += label == successor[eval.input_ids[i * T + eval.masked_lm_positions[i * P + k] - 1]];
    }
  const double n = static_cast<double>(std::max<std::int64_t>(total, 1));
  out.majority = static_cast<double>(majority_hits) / n;
  out.left_bigram = bigram ? static_cast<double>(bigram_hits) / n : std::numeric_limits<double>::quiet_NaN();
  return out;
}

BertBatch batch_to(const BertBatch& b, Device device) {
  if (device.is_cpu()) return b;
  auto mv = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  BertBatch o = b;
  o.input_ids = mv(b.input_ids);
  o.segment_ids = mv(b.segment_ids);
  o.position_ids = mv(b.position_ids);
  o.key_padding = mv(b.key_padding);
  o.packed_mask = mv(b.packed_mask);
  o.mlm_index = mv(b.mlm_index);
  o.mlm_labels = mv(b.mlm_labels);
  o.cls_index = mv(b.cls_index);
  o.nsp_labels = mv(b.nsp_labels);
  return o;
}

}  // namespace benchhost::bert
