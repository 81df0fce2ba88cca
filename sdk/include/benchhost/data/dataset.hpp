#pragma once
/// @file data/dataset.hpp  Samples, batches and the random-access Dataset interface.
///
/// Note [Samples are named tensors]
/// A sample is a small ordered dictionary of CPU tensors: "image" + "label" for ResNet-50,
/// "input_ids" + "segment_ids" + "masked_lm_positions" ... for BERT, "dense" + "sparse" + "label"
/// for DLRM. The pipeline never looks inside a field except to collate it: field k of a batch is
/// the stack of field k of its samples along a new leading dimension, so every sample of a
/// dataset must give each field the same shape and dtype (pad variable-length data in get(), or
/// pass a custom collate function to the loader). Names rather than positions keep workload code
/// readable and let a synthetic source stand in for a real dataset with the same field names.
///
/// Note [Per-sample randomness]
/// Augmentation randomness is a pure function of (seed, epoch, sample index): get() receives a
/// SampleContext and draws from ctx.rng(). Which worker thread decodes a sample, and in which
/// order, therefore cannot change the result: 1 thread and 16 threads produce identical batches.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "benchhost/error.hpp"
#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::data {

/// An insertion-ordered map from field name to Tensor. Copies are cheap (tensors are handles).
/// Not thread-safe for concurrent mutation; concurrent reads are fine.
class TensorDict {
 public:
  TensorDict() = default;
  TensorDict(std::initializer_list<std::pair<std::string, Tensor>> fields);

  /// Insert or replace a field.
  void set(std::string name, Tensor value);
  bool has(std::string_view name) const;
  /// The field `name`; throws InvalidArgument listing the fields present when it is missing.
  const Tensor& at(std::string_view name) const;
  Tensor& at(std::string_view name);
  const Tensor& operator[](std::string_view name) const { return at(name); }
  std::size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }
  /// Field names in insertion order.
  std::vector<std::string> names() const;
  const std::vector<std::pair<std::string, Tensor>>& fields() const { return fields_; }
  /// "image: u8 [32, 32, 3], label: i64 []"
  std::string describe() const;

 private:
  std::vector<std::pair<std::string, Tensor>> fields_;
};

/// One sample: named CPU tensors (see Note [Samples are named tensors]).
using Sample = TensorDict;

/// Which sample is being produced, for deterministic augmentation (Note [Per-sample randomness]).
struct SampleContext {
  std::int64_t index = 0;   ///< dataset index of the sample
  std::int64_t epoch = 0;   ///< epoch number (0-based)
  std::uint64_t seed = 0;   ///< the run's data seed

  /// The augmentation stream of this (seed, epoch, index). Same inputs give the same numbers.
  Rng rng() const { return Rng(seed ^ mix64(static_cast<std::uint64_t>(epoch) + 0x5eedull),
                               static_cast<std::uint64_t>(index)); }
};

/// A collated batch: each field is the stack of the samples' fields, shape {batch, ...}, on the
/// loader's device (CPU, or CUDA after a pinned-memory copy). `indices` are the dataset indices of
/// the samples in batch order; `epoch` the epoch they came from; `position` the number of this
/// rank's samples of the epoch consumed once this batch is used (pass it to start_epoch to resume).
struct Batch {
  TensorDict tensors;
  std::vector<std::int64_t> indices;
  std::int64_t epoch = 0;
  std::int64_t position = 0;

  std::int64_t size() const { return static_cast<std::int64_t>(indices.size()); }
  const Tensor& operator[](std::string_view name) const { return tensors.at(name); }
};

/// A random-access dataset.
///
/// Threading: the loader calls get() and source() from several worker threads at once, for
/// different indices; implementations must be safe for that (read-only state, or per-call file
/// handles). get() returns CPU tensors; it should throw DataError naming the file for bad data
/// (the loader adds the index and epoch). A subclass that overrides get(const SampleContext&)
/// adds `using Dataset::get;` to keep the get(index) shorthand visible.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of samples.
  virtual std::int64_t size() const = 0;
  /// Sample `ctx.index`, augmented with randomness from ctx.rng() if the dataset augments.
  virtual Sample get(const SampleContext& ctx) const = 0;
  /// Convenience: get({index, 0, 0}).
  Sample get(std::int64_t index) const { return get(SampleContext{index, 0, 0}); }
  /// Where sample `index` comes from, for error messages ("train/00042.jpg", "data.npy[17]");
  /// "" when there is nothing better than the index.
  virtual std::string source(std::int64_t /*index*/) const { return {}; }
};

/// Stack samples into one batch of CPU tensors (field by field, shapes and dtypes must agree).
/// Throws DataError naming the field, the sample's position and both shapes on a mismatch.
TensorDict collate(const std::vector<Sample>& samples);

/// Check a dataset index, throwing InvalidArgument "index 12 out of range for a dataset of 10".
void check_index(std::int64_t index, std::int64_t size);

/// A dataset over tensors held in memory: sample i is {name: tensor.select(0, i)} for each
/// (name, tensor); every tensor must have the same leading dimension. The samples are views.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(TensorDict tensors);
  std::int64_t size() const override { return size_; }
  Sample get(const SampleContext& ctx) const override;
  using Dataset::get;

 private:
  TensorDict tensors_;
  std::int64_t size_ = 0;
};

}  // namespace benchhost::data
