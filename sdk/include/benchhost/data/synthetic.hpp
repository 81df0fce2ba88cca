#pragma once
/// @file data/synthetic.hpp  Synthetic data: batches of declared shapes and dtypes.
///
/// Note [Synthetic sources]
/// Throughput runs must measure the machine, not storage. SyntheticSource generates its batch
/// once (on the device) at construction and returns the same tensors on every next(): memory
/// speed, no allocation per step. Workloads must not modify the tensors of a synthetic batch in
/// place (they are shared between steps). SyntheticDataset is the random-access counterpart, with
/// sample i a pure function of (seed, i), for exercising the real pipeline without files.

#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/data/pipeline.hpp"

namespace benchhost::data {

/// One field of a synthetic sample. Values are uniform in [low, high): floating dtypes get real
/// values, integer dtypes integers in [low, high) (e.g. labels low=0, high=1000), bool 0/1.
struct FieldSpec {
  std::string name;
  Shape shape;              ///< per-sample shape (the batch adds a leading dimension)
  DType dtype = DType::f32;
  double low = 0;
  double high = 1;
};

/// Batches of the declared fields; the same tensors every time (Note [Synthetic sources]).
class SyntheticSource final : public BatchSource {
 public:
  /// batches_per_epoch <= 0 means endless epochs (next() never returns std::nullopt).
  SyntheticSource(std::vector<FieldSpec> fields, std::int64_t batch_size,
                  std::int64_t batches_per_epoch = 0, Device device = Device::cpu(),
                  std::uint64_t seed = 0);

  void start_epoch(std::int64_t epoch, std::int64_t position = 0) override;
  std::optional<Batch> next() override;
  std::int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  std::int64_t batch_size() const override { return batch_size_; }
  LoaderStats stats() const override { return stats_; }
  const std::vector<FieldSpec>& fields() const { return fields_; }

 private:
  std::vector<FieldSpec> fields_;
  std::int64_t batch_size_;
  std::int64_t batches_per_epoch_;
  TensorDict tensors_;
  std::vector<std::int64_t> indices_;
  std::int64_t epoch_ = -1;
  std::int64_t batch_in_epoch_ = 0;
  LoaderStats stats_;
};

/// Random-access synthetic samples: sample i is a pure function of (seed, i).
class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(std::vector<FieldSpec> fields, std::int64_t size, std::uint64_t seed = 0);
  std::int64_t size() const override { return size_; }
  Sample get(const SampleContext& ctx) const override;
  using Dataset::get;

 private:
  std::vector<FieldSpec> fields_;
  std::int64_t size_;
  std::uint64_t seed_;
};

/// Fill a CPU tensor (any dtype) with uniform values in [low, high) drawn from `rng`.
void fill_uniform(Tensor& t, Rng& rng, double low, double high);

}  // namespace benchhost::data
