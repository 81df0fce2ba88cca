#include "data.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "benchhost/random.hpp"
#include "corpus_data_folder.hpp"

namespace benchhost::bert {

namespace {

// Builds the shards into data_dir once (in a private folder, then renamed); returns their files.
text::BertPrepared ensure_bert_data(const std::string& data_dir, const std::string& corpus,
                                    const text::BertPrepareOptions& build) {
  lm::CorpusDataFolder folder;
  folder.plugin = "bert";
  folder.dir = data_dir;
  folder.corpus = corpus;
  folder.build_options = fmt::format("vocab={} seq_len={} max_predictions={} dupe_factor={} builder={}", build.vocab_size,
                                     build.samples.seq_len, build.samples.max_predictions, build.samples.dupe_factor,
                                     text::kBertSampleBuilderVersion);
  folder.contents = "part_*.hdf5 / eval.hdf5 / vocab.txt";
  folder.prepare_tool = "make_bert_shards";
  lm::ensure_corpus_data_folder(
      folder, [](const std::string& dir) { return !text::find_bert_data(dir).train_files.empty(); },
      [&](const std::string& corpus_file, const std::string& out_dir) {
        text::BertPrepareOptions p = build;
        p.corpus = corpus_file;
        p.out_dir = out_dir;
        text::prepare_bert_data(p);
      });
  return text::find_bert_data(data_dir);
}

std::size_t bytes_held(const text::BertSamples& s) {
  std::size_t n = 0;
  for (const auto* v : {&s.input_ids, &s.input_mask, &s.segment_ids, &s.masked_lm_positions, &s.masked_lm_ids,
                        &s.next_sentence_labels})
    n += v->size() * sizeof(std::int32_t);
  return n;
}

}  // namespace

BertData read_data_folder(const std::string& dir, const std::string& corpus, const text::BertPrepareOptions& build,
                          const MemoryBudget* budget) {
  const auto files = ensure_bert_data(dir, corpus, build);
  BertData d;
  d.vocab = text::WordPiece::load(files.vocab_file);
  const std::int64_t vocab = d.vocab.size();
  // Note [Training data held in memory]: the first shard's samples per byte of file, times every
  // file's bytes; the training set is reserved at that count, so it is not reallocated (twice
  // its size at once) as the shards are appended.
  auto file_bytes = [](const std::string& f) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(f, ec);
    return ec ? 0.0 : static_cast<double>(n);
  };
  double train_file_bytes = 0;
  for (const auto& f : files.train_files) train_file_bytes += file_bytes(f);
  bool first = true;
  for (const auto& f : files.train_files) {
    auto shard = text::read_bert_hdf5(f, vocab);
    if (first) {
      first = false;
      const double size = file_bytes(f);
      if (size > 0 && shard.count > 0) {
        const double per_file_byte = static_cast<double>(bytes_held(shard)) / size;
        const double all_files = train_file_bytes + file_bytes(files.eval_file);
        lm::check_data_fits("bert", dir, per_file_byte * all_files,
                            fmt::format("{} training shards and eval.hdf5, {} of files; the first shard's samples take "
                                        "{:.2f} times its file's size", files.train_files.size(), lm::size_text(all_files),
                                        per_file_byte),
                            budget ? *budget : memory_budget(Device::cpu()));
      }
      if (files.train_files.size() == 1) {
        d.train = std::move(shard);
        break;
      }
      d.train.seq_len = shard.seq_len;
      d.train.max_predictions = shard.max_predictions;
      if (size > 0)
        d.train.reserve(static_cast<std::int64_t>(static_cast<double>(shard.count) * train_file_bytes / size * 1.02) + 1);
    }
    BH_CHECK_AS(DataError, shard.seq_len == d.train.seq_len && shard.max_predictions == d.train.max_predictions,
                "'{}' has seq_len {} / max_predictions {}, unlike the first shard ({} / {})", f, shard.seq_len,
                shard.max_predictions, d.train.seq_len, d.train.max_predictions);
    for (std::int64_t i = 0; i < shard.count; ++i) d.train.append(shard, i);
  }
  d.eval = text::read_bert_hdf5(files.eval_file, vocab);
  BH_CHECK_AS(DataError, d.eval.seq_len == d.train.seq_len, "eval.hdf5 seq_len {} differs from the training shards' {}",
              d.eval.seq_len, d.train.seq_len);
  BH_CHECK_AS(DataError, d.train.count > 0 && d.eval.count > 0, "bert: '{}' holds no samples", dir);
  return d;
}

BertData synthetic_data(std::int64_t batch, std::int64_t eval_batch, std::int64_t seq_len, std::int64_t max_predictions,
                        std::int64_t vocab, std::uint64_t seed) {
  BertData d;
  d.train = synthetic_samples(std::max<std::int64_t>(4 * batch, 64), seq_len, max_predictions, vocab, seed);
  d.eval = synthetic_samples(std::max<std::int64_t>(eval_batch, 16), seq_len, max_predictions, vocab, seed + 1);
  return d;
}

namespace {

// The host-side arrays of one batch, filled sample by sample (place_sample), then made tensors.
struct BatchArrays {
  BatchArrays(std::int64_t rows, std::int64_t seq_len, bool packing)
      : rows(rows), seq_len(seq_len), packing(packing), ids(rows * seq_len, 0), seg(rows * seq_len, 0),
        pos(rows * seq_len, 0), pad(rows * seq_len, 0) {
    if (packing) block.assign(rows * seq_len * seq_len, 0);
  }
  std::int64_t rows, seq_len;
  bool packing;
  std::vector<std::int32_t> ids, seg, pos;
  std::vector<std::uint8_t> pad;    // 1 = real token
  std::vector<std::uint8_t> block;  // packed rows: [rows, T, T] block-diagonal attention mask
  std::vector<std::int32_t> mlm_index, cls_index;
  std::vector<std::int64_t> mlm_labels, nsp_labels;
};

// Sample i of src, `len` real tokens, into row `row` from token `offset` on.
void place_sample(const text::BertSamples& src, std::int64_t i, std::int64_t len, std::int64_t row, std::int64_t offset,
                  BatchArrays& a) {
  const std::int64_t T = src.seq_len, P = src.max_predictions;
  const std::int64_t base = row * T + offset;
  for (std::int64_t t = 0; t < len; ++t) {
    a.ids[base + t] = src.input_ids[i * T + t];
    a.seg[base + t] = src.segment_ids[i * T + t];
    a.pos[base + t] = static_cast<std::int32_t>(t);
    a.pad[base + t] = 1;
  }
  if (a.packing)
    for (std::int64_t q = 0; q < len; ++q)
      std::fill_n(a.block.begin() + (row * T + offset + q) * T + offset, len, std::uint8_t{1});
  for (std::int64_t p = 0; p < P; ++p) {
    const std::int32_t position = src.masked_lm_positions[i * P + p];
    if (position <= 0 || position >= len) continue;  // padding entries
    a.mlm_index.push_back(static_cast<std::int32_t>(base + position));
    a.mlm_labels.push_back(src.masked_lm_ids[i * P + p]);
  }
  a.cls_index.push_back(static_cast<std::int32_t>(base));
  a.nsp_labels.push_back(src.next_sentence_labels[i]);
}

BertBatch to_tensors(BatchArrays& a, std::int64_t sequences) {
  const std::int64_t rows = a.rows, T = a.seq_len;
  if (a.mlm_index.empty()) {  // keep shapes valid: one ignored entry
    a.mlm_index.push_back(0);
    a.mlm_labels.push_back(-100);
  }
  BertBatch b;
  b.input_ids = Tensor::from_vector_i32(a.ids, {rows, T});
  b.segment_ids = Tensor::from_vector_i32(a.seg, {rows, T});
  b.position_ids = Tensor::from_vector_i32(a.pos, {rows, T});
  if (a.packing) {
    // Rows past the last sample have no real token; give each padding query itself as a key so
    // no softmax row is empty (its output is never used).
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t t = 0; t < T; ++t)
        if (!a.pad[r * T + t]) a.block[(r * T + t) * T + t] = 1;
    b.packed_mask = Tensor::empty({rows, T, T}, DType::u8);
    std::copy(a.block.begin(), a.block.end(), b.packed_mask.data<std::uint8_t>());
  } else {
    b.key_padding = Tensor::empty({rows, T}, DType::u8);
    std::copy(a.pad.begin(), a.pad.end(), b.key_padding.data<std::uint8_t>());
  }
  const auto M = static_cast<std::int64_t>(a.mlm_index.size()), K = static_cast<std::int64_t>(a.cls_index.size());
  b.mlm_index = Tensor::from_vector_i32(a.mlm_index, {M});
  b.mlm_labels = Tensor::from_vector_i64(a.mlm_labels, {M});
  b.cls_index = Tensor::from_vector_i32(a.cls_index, {K});
  b.nsp_labels = Tensor::from_vector_i64(a.nsp_labels, {K});
  b.sequences = sequences;
  return b;
}

}  // namespace

BertBatch make_batch(const text::BertSamples& src, const std::vector<std::int64_t>& order, std::int64_t first,
                     std::int64_t count, std::int64_t rows, bool packing, std::int64_t max_per_row,
                     std::int64_t* consumed) {
  const std::int64_t T = src.seq_len;
  BH_CHECK_AS(InvalidArgument, rows >= 1 && count >= 1 && first >= 0 && first + count <= static_cast<std::int64_t>(order.size()),
              "BERT batch: rows {} / samples [{}, {}) out of range of {}", rows, first, first + count, order.size());
  BatchArrays arrays(rows, T, packing);
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
    place_sample(src, i, len, row, offset, arrays);
    ++taken;
    if (packing) {
      offset += len;
      ++in_row;
    } else {
      ++row;
    }
  }
  if (consumed) *consumed = taken;
  return to_tensors(arrays, taken);
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

namespace {

// What the baselines learn from the training samples: how often each token is a masked label,
// and for each token the most frequent successor in the uncorrupted training text (`top_token`
// where it has none; empty without the bigram table).
struct TrainingStatistics {
  std::int32_t top_token = 0;
  std::vector<std::int32_t> successor;
};

TrainingStatistics training_statistics(const text::BertSamples& train, std::int64_t vocab, bool bigram) {
  const std::int64_t T = train.seq_len, P = train.max_predictions;
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
  TrainingStatistics out;
  out.top_token = static_cast<std::int32_t>(std::max_element(label_freq.begin(), label_freq.end()) - label_freq.begin());
  out.successor.assign(bigram ? static_cast<std::size_t>(vocab) : 0, out.top_token);
  for (std::int64_t a = 0; a < static_cast<std::int64_t>(out.successor.size()); ++a) {
    const auto first = pair_count.begin() + a * vocab;
    const auto best = std::max_element(first, first + vocab);
    if (*best > 0) out.successor[a] = static_cast<std::int32_t>(best - first);
  }
  return out;
}

}  // namespace

MaskedLmBaselines masked_lm_baselines(const text::BertSamples& train, const text::BertSamples& eval,
                                      std::int64_t eval_count, std::int64_t vocab) {
  const std::int64_t T = train.seq_len, P = train.max_predictions;
  BH_CHECK_AS(InvalidArgument, eval.seq_len == T && eval.max_predictions == P && eval_count <= eval.count && vocab > 0,
              "masked-LM baselines: eval shapes {}x{} vs train {}x{}, {} of {} samples", eval.seq_len,
              eval.max_predictions, T, P, eval_count, eval.count);
  const bool bigram = vocab <= 4096;
  const TrainingStatistics stats = training_statistics(train, vocab, bigram);
  MaskedLmBaselines out;
  out.top_token = stats.top_token;
  std::int64_t majority_hits = 0, bigram_hits = 0, total = 0;
  for (std::int64_t i = 0; i < eval_count; ++i)
    for (std::int64_t k = 0; k < eval.num_predictions(i); ++k, ++total) {
      const std::int32_t label = eval.masked_lm_ids[i * P + k];
      majority_hits += label == out.top_token;
      if (bigram) bigram_hits += label == stats.successor[eval.input_ids[i * T + eval.masked_lm_positions[i * P + k] - 1]];
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
