#pragma once
/// @file datasets/criteo/criteo.hpp  MLPerf's preprocessed Criteo 1TB multi-hot layout.
///
/// The layout (MLPerf Training DLRM-DCNv2 reference, recommendation_v2/torchrec_dlrm, after
/// torchrec's preprocessing and materialize_synthetic_multihot_dataset.py), one directory, one
/// file triple per day d = 0..23:
///   day_<d>_dense.npy             f32 [N_d, 13]  log(count + 3) of the 13 integer features
///   day_<d>_labels.npy            i32 [N_d, 1]   click 0/1
///   day_<d>_sparse_multi_hot.npz  np.savez archive (stored, not compressed) of 26 members
///                                 "0.npy" .. "25.npy", member k i32 [N_d, hotness_k]: the row
///                                 ids of categorical feature k (the MLPerf hotness is
///                                 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1)
/// Days 0..22 are the training set; the last day is split in two: its first ceil(N/2) rows are
/// the validation set (MLPerf's eval set, 89,137,319 samples) and the rest the test set. As in
/// the reference reader, a row id is reduced modulo its table's size when a batch is read.
///
/// Everything is memory-mapped (a day of the real dataset is ~160 GB): opening a day reads the
/// headers only; a batch copies its rows out of the mapping. Headers are parsed by
/// benchhost::data::parse_npy_header; the .npz members are located through the zip central
/// directory (zip64 aware) so they can be mapped in place, which is why they must be stored.
///
/// Threading: a CriteoMultiHot is immutable after construction; read_rows() may be called from
/// several threads at once with different output batches.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/tensor.hpp"

namespace benchhost::criteo {

inline constexpr int kNumDense = 13;
inline constexpr int kNumSparse = 26;

/// MLPerf DLRM-DCNv2 embedding table sizes (rows per categorical feature), 204,184,588 in total.
const std::array<std::int64_t, kNumSparse>& mlperf_table_sizes();
/// MLPerf DLRM-DCNv2 multi-hot sizes (row ids per sample per feature), 214 per sample.
const std::array<std::int64_t, kNumSparse>& mlperf_multi_hot_sizes();
/// Samples in MLPerf's training set (days 0..22) and validation set (first half of day 23).
inline constexpr std::int64_t kMlperfTrainSamples = 4195197692;
inline constexpr std::int64_t kMlperfEvalSamples = 89137319;

/// The three file names of one day under `dir`.
struct DayFiles {
  std::string dense, labels, sparse;
};
DayFiles day_files(const std::string& dir, int day);

/// One batch of samples, host memory, contiguous.
struct Batch {
  Tensor dense;                ///< f32 [B, 13]
  Tensor labels;               ///< f32 [B] (0 or 1)
  std::vector<Tensor> sparse;  ///< 26 x i32 [B, hotness_k], ids already reduced mod table size
  std::int64_t size() const { return dense.defined() ? dense.size(0) : 0; }
};
/// Allocate a batch of `rows` samples for the given hotness.
Batch make_batch(std::int64_t rows, const std::vector<std::int64_t>& hotness);

/// One memory-mapped day (see the file comment). Throws DataError naming the file for a missing,
/// truncated or malformed file, a wrong dtype or shape, compressed npz members, or row counts
/// that differ between the three files.
class MultiHotDay {
 public:
  MultiHotDay(const std::string& dir, int day);
  ~MultiHotDay();
  MultiHotDay(const MultiHotDay&) = delete;
  MultiHotDay& operator=(const MultiHotDay&) = delete;

  std::int64_t rows() const { return rows_; }
  const std::vector<std::int64_t>& hotness() const { return hotness_; }
  /// Copy rows [first, first + count) into `out` starting at out row `out_row`, reducing sparse
  /// ids modulo `table_sizes[k]`.
  void copy_rows(std::int64_t first, std::int64_t count, Batch& out, std::int64_t out_row,
                 const std::vector<std::int64_t>& table_sizes) const;

 private:
  struct Mapping;
  std::vector<std::unique_ptr<Mapping>> maps_;
  std::int64_t rows_ = 0;
  std::vector<std::int64_t> hotness_;
  const std::uint8_t* dense_ = nullptr;   // f32 [rows, 13]
  const std::uint8_t* labels_ = nullptr;  // i32 or f32 [rows, 1]
  bool labels_f32_ = false;
  std::vector<const std::uint8_t*> sparse_;  // i32 [rows, hotness_k], possibly unaligned
};

/// A contiguous range of rows over consecutive days, read as batches.
class CriteoMultiHot {
 public:
  enum class Split { train, validation, test };
  /// Open days [0, num_days) of `dir`; train = all days but the last, validation/test = the two
  /// halves of the last day. `table_sizes`: the 26 table sizes ids are reduced by. Throws
  /// DataError (files) or InvalidArgument (num_days < 2, wrong number of table sizes, hotness
  /// that differs between days).
  CriteoMultiHot(const std::string& dir, int num_days, Split split,
                 std::vector<std::int64_t> table_sizes);
  ~CriteoMultiHot();

  std::int64_t size() const { return size_; }
  const std::vector<std::int64_t>& hotness() const { return hotness_; }
  const std::vector<std::int64_t>& table_sizes() const { return table_sizes_; }
  /// Copy samples [first, first + count) of this split into out rows [0, count) (out must have at
  /// least count rows). InvalidArgument if the range leaves the split.
  void read_rows(std::int64_t first, std::int64_t count, Batch& out) const;

 private:
  std::vector<std::unique_ptr<MultiHotDay>> days_;
  std::vector<std::int64_t> day_first_;  // global row of each opened day's row `begin_`
  std::vector<std::int64_t> day_begin_, day_end_;
  std::vector<std::int64_t> hotness_, table_sizes_;
  std::int64_t size_ = 0;
};

}  // namespace benchhost::criteo
