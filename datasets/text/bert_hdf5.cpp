#include "bert_hdf5.hpp"

#include <hdf5.h>

#include <algorithm>
#include <numeric>

#include "benchhost/error.hpp"
#include "benchhost/random.hpp"

namespace benchhost::text {
namespace {

// RAII for HDF5 ids; HDF5's own error printing is silenced so that our DataError is the report.
struct H5Id {
  hid_t id = H5I_INVALID_HID;
  herr_t (*close)(hid_t) = nullptr;
  H5Id(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  H5Id(const H5Id&) = delete;
  ~H5Id() {
    if (id >= 0 && close) close(id);
  }
  bool ok() const { return id >= 0; }
};

void quiet_hdf5() {
  static const bool once = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

void write_dataset(hid_t file, const std::string& path, const char* name, const std::vector<std::int32_t>& data,
                   std::vector<hsize_t> dims, hid_t file_type) {
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  H5Id set(H5Dcreate2(file, name, file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  BH_CHECK_AS(DataError, space.ok() && set.ok(), "cannot create dataset '{}' in '{}'", name, path);
  if (!data.empty())
    BH_CHECK_AS(DataError, H5Dwrite(set.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) >= 0,
                "cannot write dataset '{}' of '{}' (disk full?)", name, path);
}

std::vector<std::int32_t> read_dataset(hid_t file, const std::string& path, const char* name,
                                       std::vector<hsize_t>& dims) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
    BH_THROW(DataError, "'{}' has no dataset '{}' (not an MLPerf BERT HDF5 shard)", path, name);
  H5Id set(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  BH_CHECK_AS(DataError, set.ok(), "'{}': cannot open dataset '{}'", path, name);
  H5Id type(H5Dget_type(set.id), H5Tclose);
  BH_CHECK_AS(DataError, type.ok() && H5Tget_class(type.id) == H5T_INTEGER,
              "'{}': dataset '{}' is not an integer array", path, name);
  H5Id space(H5Dget_space(set.id), H5Sclose);
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.id) : -1;
  BH_CHECK_AS(DataError, rank >= 1 && rank <= 2, "'{}': dataset '{}' has rank {}, expected 1 or 2", path, name, rank);
  dims.assign(static_cast<std::size_t>(rank), 0);
  H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  hsize_t n = 1;
  for (hsize_t d : dims) {
    BH_CHECK_AS(DataError, d < (hsize_t{1} << 32), "'{}': dataset '{}' has an implausible dimension {}", path, name, d);
    n *= d;
  }
  BH_CHECK_AS(DataError, n < (hsize_t{1} << 31), "'{}': dataset '{}' has {} elements (too many)", path, name, n);
  std::vector<std::int32_t> out(static_cast<std::size_t>(n));
  if (n > 0)
    BH_CHECK_AS(DataError, H5Dread(set.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0,
                "'{}' is truncated or corrupt: reading dataset '{}' failed", path, name);
  return out;
}

}  // namespace

void BertSamples::reserve(std::int64_t n) {
  input_ids.reserve(n * seq_len);
  input_mask.reserve(n * seq_len);
  segment_ids.reserve(n * seq_len);
  masked_lm_positions.reserve(n * max_predictions);
  masked_lm_ids.reserve(n * max_predictions);
  next_sentence_labels.reserve(n);
}

void BertSamples::append(const BertSamples& src, std::int64_t i) {
  auto copy = [&](std::vector<std::int32_t>& dst, const std::vector<std::int32_t>& s, std::int64_t w) {
    dst.insert(dst.end(), s.begin() + i * w, s.begin() + (i + 1) * w);
  };
  copy(input_ids, src.input_ids, seq_len);
  copy(input_mask, src.input_mask, seq_len);
  copy(segment_ids, src.segment_ids, seq_len);
  copy(masked_lm_positions, src.masked_lm_positions, max_predictions);
  copy(masked_lm_ids, src.masked_lm_ids, max_predictions);
  next_sentence_labels.push_back(src.next_sentence_labels[i]);
  ++count;
}

std::int64_t BertSamples::num_predictions(std::int64_t i) const {
  const std::int32_t* p = masked_lm_positions.data() + i * max_predictions;
  std::int64_t k = 0;
  while (k < max_predictions && p[k] > 0) ++k;
  return k;
}

void write_bert_hdf5(const std::string& path, const BertSamples& s) {
  quiet_hdf5();
  H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  BH_CHECK_AS(DataError, file.ok(), "cannot create HDF5 file '{}'", path);
  const auto n = static_cast<hsize_t>(s.count), L = static_cast<hsize_t>(s.seq_len),
             P = static_cast<hsize_t>(s.max_predictions);
  write_dataset(file.id, path, "input_ids", s.input_ids, {n, L}, H5T_STD_I32LE);
  write_dataset(file.id, path, "input_mask", s.input_mask, {n, L}, H5T_STD_I32LE);
  write_dataset(file.id, path, "segment_ids", s.segment_ids, {n, L}, H5T_STD_I32LE);
  write_dataset(file.id, path, "masked_lm_positions", s.masked_lm_positions, {n, P}, H5T_STD_I32LE);
  write_dataset(file.id, path, "masked_lm_ids", s.masked_lm_ids, {n, P}, H5T_STD_I32LE);
  write_dataset(file.id, path, "next_sentence_labels", s.next_sentence_labels, {n}, H5T_STD_I8LE);
  BH_CHECK_AS(DataError, H5Fflush(file.id, H5F_SCOPE_GLOBAL) >= 0, "cannot flush '{}'", path);
}

BertSamples read_bert_hdf5(const std::string& path, std::int64_t vocab_size) {
  quiet_hdf5();
  if (H5Fis_hdf5(path.c_str()) <= 0)
    BH_THROW(DataError, "'{}' is missing or not an HDF5 file (truncated or corrupt?)", path);
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  BH_CHECK_AS(DataError, file.ok(), "cannot open HDF5 file '{}' (truncated or corrupt?)", path);
  BertSamples s;
  std::vector<hsize_t> d_ids, d_mask, d_seg, d_pos, d_lm, d_nsp;
  s.input_ids = read_dataset(file.id, path, "input_ids", d_ids);
  s.input_mask = read_dataset(file.id, path, "input_mask", d_mask);
  s.segment_ids = read_dataset(file.id, path, "segment_ids", d_seg);
  s.masked_lm_positions = read_dataset(file.id, path, "masked_lm_positions", d_pos);
  s.masked_lm_ids = read_dataset(file.id, path, "masked_lm_ids", d_lm);
  s.next_sentence_labels = read_dataset(file.id, path, "next_sentence_labels", d_nsp);
  BH_CHECK_AS(DataError, d_ids.size() == 2 && d_mask == d_ids && d_seg == d_ids,
              "'{}': input_ids, input_mask and segment_ids must all be [N, seq_len]", path);
  BH_CHECK_AS(DataError, d_pos.size() == 2 && d_lm == d_pos && d_pos[0] == d_ids[0],
              "'{}': masked_lm_positions and masked_lm_ids must be [N, max_predictions] with N = {}", path, d_ids[0]);
  BH_CHECK_AS(DataError, (d_nsp.size() == 1 || (d_nsp.size() == 2 && d_nsp[1] == 1)) && d_nsp[0] == d_ids[0],
              "'{}': next_sentence_labels must be [N] with N = {}", path, d_ids[0]);
  s.count = static_cast<std::int64_t>(d_ids[0]);
  s.seq_len = static_cast<std::int64_t>(d_ids[1]);
  s.max_predictions = static_cast<std::int64_t>(d_pos[1]);
  BH_CHECK_AS(DataError, s.seq_len >= 3 && s.max_predictions >= 1, "'{}': seq_len {} / max_predictions {} too small",
              path, s.seq_len, s.max_predictions);
  for (std::int64_t i = 0; i < s.count * s.seq_len; ++i) {
    const auto id = s.input_ids[i];
    BH_CHECK_AS(DataError, id >= 0 && (vocab_size <= 0 || id < vocab_size),
                "'{}': input_ids of sample {} holds {} outside the vocabulary [0, {})", path, i / s.seq_len, id, vocab_size);
    BH_CHECK_AS(DataError, (s.input_mask[i] | 1) == 1 && (s.segment_ids[i] | 1) == 1,
                "'{}': input_mask / segment_ids of sample {} must be 0 or 1", path, i / s.seq_len);
  }
  for (std::int64_t i = 0; i < s.count * s.max_predictions; ++i) {
    BH_CHECK_AS(DataError, s.masked_lm_positions[i] >= 0 && s.masked_lm_positions[i] < s.seq_len,
                "'{}': masked_lm_positions of sample {} holds {} outside [0, {})", path, i / s.max_predictions,
                s.masked_lm_positions[i], s.seq_len);
    BH_CHECK_AS(DataError, s.masked_lm_ids[i] >= 0 && (vocab_size <= 0 || s.masked_lm_ids[i] < vocab_size),
                "'{}': masked_lm_ids of sample {} holds {} outside the vocabulary", path, i / s.max_predictions,
                s.masked_lm_ids[i]);
  }
  for (std::int64_t i = 0; i < s.count; ++i)
    BH_CHECK_AS(DataError, (s.next_sentence_labels[i] | 1) == 1, "'{}': next_sentence_labels[{}] = {} is not 0 or 1",
                path, i, s.next_sentence_labels[i]);
  return s;
}

namespace {

struct TokenizedDoc {
  std::vector<std::vector<std::int32_t>> sentences;
};

std::vector<TokenizedDoc> tokenize_docs(const std::vector<Document>& docs, const WordPiece& vocab) {
  std::vector<TokenizedDoc> out(docs.size());
  for (std::size_t d = 0; d < docs.size(); ++d)
    for (const auto& s : docs[d].sentences) {
      auto ids = vocab.encode(s);
      if (!ids.empty()) out[d].sentences.push_back(std::move(ids));
    }
  return out;
}

}  // namespace

BertSamples make_bert_samples(const std::vector<Document>& docs, const std::vector<Document>& random_pool,
                              const WordPiece& vocab, const BertSampleOptions& opt) {
  BH_CHECK_AS(InvalidArgument, opt.seq_len >= 8 && opt.max_predictions >= 1 && opt.mask_prob > 0 && opt.mask_prob < 1,
              "BERT sample options: seq_len {} (>= 8), max_predictions {} (>= 1), mask_prob {} (0..1)",
              opt.seq_len, opt.max_predictions, opt.mask_prob);
  const auto tdocs = tokenize_docs(docs, vocab);
  const auto pool = tokenize_docs(random_pool, vocab);
  std::vector<std::size_t> nonempty_pool;
  for (std::size_t d = 0; d < pool.size(); ++d)
    if (!pool[d].sentences.empty()) nonempty_pool.push_back(d);
  BH_CHECK_AS(InvalidArgument, !nonempty_pool.empty(), "BERT samples: the random-sentence pool is empty");

  BertSamples out;
  out.seq_len = opt.seq_len;
  out.max_predictions = opt.max_predictions;
  const std::int64_t max_tokens = opt.seq_len - 3;  // [CLS] A [SEP] B [SEP]
  Rng rng(opt.seed, 0xbe27);
  for (std::int64_t pass = 0; pass < opt.dupe_factor; ++pass) {
    for (std::size_t d = 0; d < tdocs.size(); ++d) {
      const auto& doc = tdocs[d].sentences;
      std::int64_t target = max_tokens;
      if (rng.uniform() < opt.short_seq_prob) target = 2 + static_cast<std::int64_t>(rng.below(max_tokens - 1));
      std::vector<const std::vector<std::int32_t>*> chunk;
      std::int64_t chunk_len = 0;
      for (std::size_t si = 0; si < doc.size(); ++si) {
        chunk.push_back(&doc[si]);
        chunk_len += static_cast<std::int64_t>(doc[si].size());
        if (si + 1 != doc.size() && chunk_len < target) continue;
        if (chunk.empty()) continue;
        // A = the first a_end sentences of the chunk; B = the rest, or random text (NotNext).
        const std::size_t a_end = chunk.size() >= 2 ? 1 + rng.below(chunk.size() - 1) : 1;
        std::vector<std::int32_t> a, b;
        for (std::size_t k = 0; k < a_end; ++k) a.insert(a.end(), chunk[k]->begin(), chunk[k]->end());
        bool random_next = chunk.size() == 1 || rng.uniform() < 0.5;
        if (random_next) {
          const auto& rdoc = pool[nonempty_pool[rng.below(nonempty_pool.size())]].sentences;
          for (std::size_t k = rng.below(rdoc.size()); k < rdoc.size() && static_cast<std::int64_t>(b.size()) < target; ++k)
            b.insert(b.end(), rdoc[k].begin(), rdoc[k].end());
          si -= chunk.size() - a_end;  // the unused sentences go back to the document
        } else {
          for (std::size_t k = a_end; k < chunk.size(); ++k) b.insert(b.end(), chunk[k]->begin(), chunk[k]->end());
        }
        // Truncate the longer side, alternately from the front and the back (as BERT does).
        while (static_cast<std::int64_t>(a.size() + b.size()) > max_tokens) {
          auto& longer = a.size() > b.size() ? a : b;
          if (rng.uniform() < 0.5) longer.erase(longer.begin());
          else longer.pop_back();
        }
        chunk.clear();
        chunk_len = 0;
        if (a.empty() || b.empty()) continue;

        std::vector<std::int32_t> ids{WordPiece::kCls}, seg{0};
        for (auto t : a) ids.push_back(t), seg.push_back(0);
        ids.push_back(WordPiece::kSep), seg.push_back(0);
        for (auto t : b) ids.push_back(t), seg.push_back(1);
        ids.push_back(WordPiece::kSep), seg.push_back(1);

        std::vector<std::int32_t> candidates;
        for (std::size_t p = 0; p < ids.size(); ++p)
          if (ids[p] != WordPiece::kCls && ids[p] != WordPiece::kSep) candidates.push_back(static_cast<std::int32_t>(p));
        for (std::size_t k = candidates.size(); k > 1; --k) std::swap(candidates[k - 1], candidates[rng.below(k)]);
        const auto n_pred = std::min<std::int64_t>(
            {opt.max_predictions, static_cast<std::int64_t>(candidates.size()),
             std::max<std::int64_t>(1, std::llround(static_cast<double>(ids.size()) * opt.mask_prob))});
        std::vector<std::int32_t> positions(candidates.begin(), candidates.begin() + n_pred);
        std::sort(positions.begin(), positions.end());
        std::vector<std::int32_t> labels;
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
        target = max_tokens;
        if (rng.uniform() < opt.short_seq_prob) target = 2 + static_cast<std::int64_t>(rng.below(max_tokens - 1));
      }
    }
  }
  return out;
}

}  // namespace benchhost::text
