#pragma once
/// @file data/pipeline.hpp  The parallel data loader: sampler -> read/decode/augment -> collate
/// -> (pinned copy to the device), in the background, with bounded prefetch.
///
/// Note [Loader pipeline]
/// A DataLoader runs one oneTBB parallel_pipeline per epoch on a background thread inside its own
/// tbb::task_arena of `num_threads` threads (so it neither steals nor lends threads to the
/// compute library's pool):
///   1. serial in order : take the next index from the sampler's order for this epoch
///   2. parallel        : dataset.get(SampleContext{index, epoch, seed}) - read, decode, augment
///                        (workers take chunks of up to 64 consecutive positions, fewer for small
///                        batches, so that cheap samples do not each pay a pipeline token)
///   3. serial in order : append to the batch being built; a full batch is collated into
///                        contiguous tensors (pinned host memory when the device is CUDA), copied
///                        to the device on the loader's side stream, and pushed to the ready queue.
/// Samples in flight are bounded by max_samples_in_flight (tokens x chunk size) and ready batches
/// by prefetch_batches; when both are full the pipeline waits for next(). Batch
/// content and order depend only on (dataset, sampler, seed, epoch), never on thread count or
/// timing (Note [Per-sample randomness] in dataset.hpp).
///
/// Note [Loader errors and shutdown]
/// An exception in a worker (a corrupt file) cancels the epoch's pipeline; batches completed
/// before it are still delivered, then next() throws DataError "sample <index> (epoch <e>) from
/// <source>: <cause>". After that the epoch is over (next() returns std::nullopt) until the next
/// start_epoch(). start_epoch() during an epoch, cancel() and the destructor stop the pipeline
/// (no new samples are started, in-flight ones finish) and join the background thread; none of
/// them can hang on a full queue.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/data/sampler.hpp"
#include "benchhost/device.hpp"

namespace benchhost::data {

/// Counters of one batch source, cumulative since construction.
struct LoaderStats {
  std::int64_t batches = 0;       ///< batches returned by next()
  std::int64_t samples = 0;       ///< samples in those batches
  double wait_seconds = 0;        ///< wall time spent inside next() (waiting for the pipeline)
};

/// What a training loop pulls batches from: a DataLoader over a real dataset, or a
/// SyntheticSource (synthetic.hpp). Methods are called from one thread (the training thread).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Begin `epoch` (0-based), skipping the first `position` samples of this rank's order (resume).
  /// Stops any epoch in flight first.
  virtual void start_epoch(std::int64_t epoch, std::int64_t position = 0) = 0;
  /// The next batch of the current epoch, or std::nullopt at its end. Blocks only while the
  /// background work is behind. Throws DataError for a bad sample (see Note [Loader errors and
  /// shutdown]) and InvalidArgument when no epoch was started.
  virtual std::optional<Batch> next() = 0;
  /// Batches next() returns in one full epoch.
  virtual std::int64_t batches_per_epoch() const = 0;
  /// Samples per batch (the last batch of an epoch may be smaller unless drop_last_batch).
  virtual std::int64_t batch_size() const = 0;
  virtual LoaderStats stats() const = 0;
};

/// Replace the default stacking collate: gets the batch's samples in order, returns CPU tensors
/// (e.g. concatenate blocks of rows along dimension 0 when each get() returns a block of tiny
/// records, as a DLRM reader may, so that per-sample overhead is paid once per block).
/// The loader copies them to the device (from pinned memory only with the default collate).
/// Called on one pipeline thread at a time.
using CollateFn = std::function<TensorDict(const std::vector<Sample>& samples)>;

struct LoaderOptions {
  std::int64_t batch_size = 1;           ///< samples per batch (per rank)
  /// Threads of the loader's task_arena (>= 1), counting the loader's own background thread.
  /// Capped at oneTBB's default concurrency (the CPUs this process may use).
  int num_threads = 1;
  std::int64_t prefetch_batches = 2;     ///< ready batches queued ahead of next() (>= 1)
  /// Samples being read/decoded at once; 0 = max(4 * num_threads, 8) chunks (Note [Loader pipeline]).
  std::int64_t max_samples_in_flight = 0;
  bool drop_last_batch = false;          ///< drop an incomplete last batch of the epoch
  Device device = Device::cpu();         ///< where batches are delivered
  std::uint64_t seed = 0;                ///< augmentation seed (SampleContext::seed)
  CollateFn collate;                     ///< empty = data::collate (stack each field)
};

/// The parallel loader (Note [Loader pipeline]). Construct it once per run; call start_epoch()
/// before each epoch. Owned by one thread (the training thread); the dataset is shared with the
/// worker threads and must outlive the loader (it is held by shared_ptr).
class DataLoader final : public BatchSource {
 public:
  /// Throws InvalidArgument for a bad option (naming it) or a sampler over a different size.
  DataLoader(std::shared_ptr<const Dataset> dataset, Sampler sampler, LoaderOptions options);
  /// Stops the epoch in flight and joins the background thread.
  ~DataLoader() override;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  void start_epoch(std::int64_t epoch, std::int64_t position = 0) override;
  std::optional<Batch> next() override;
  std::int64_t batches_per_epoch() const override;
  std::int64_t batch_size() const override;
  LoaderStats stats() const override;
  /// Stop the epoch in flight (next() then returns std::nullopt); idempotent.
  void cancel();
  const Sampler& sampler() const;
  const LoaderOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Note [Training and evaluation loaders]
/// The two loaders of a data-parallel workload, as every first-party plugin builds them:
///   - training: this rank's shard of a shuffled order (Sampler seeded with `seed`, the same on
///     every rank), the tail that does not fill a batch on every rank dropped (TailPolicy::drop,
///     drop_last_batch), so every rank runs the same number of steps; with group_ids, grouped
///     batches instead (Note [Grouped batches]);
///   - evaluation: the whole set in order, shared unevenly (TailPolicy::uneven, every sample on
///     exactly one rank, a short last batch kept), for metrics that merge over the ranks.
struct RunLoaderOptions {
  int rank = 0;
  int world_size = 1;
  std::uint64_t seed = 0;                ///< shuffle and augmentation seed (the run's)
  int num_threads = 1;                   ///< loader threads (>= 1)
  Device device = Device::cpu();         ///< where batches are delivered
  CollateFn collate;                     ///< empty = data::collate
  std::vector<std::int32_t> group_ids;   ///< training only: Note [Grouped batches] (empty = none)
};

/// The training loader of Note [Training and evaluation loaders]. InvalidArgument as DataLoader's.
std::unique_ptr<DataLoader> training_loader(std::shared_ptr<const Dataset> dataset, std::int64_t batch_size,
                                            const RunLoaderOptions& options);
/// The evaluation loader of Note [Training and evaluation loaders] (group_ids are not used).
std::unique_ptr<DataLoader> evaluation_loader(std::shared_ptr<const Dataset> dataset, std::int64_t batch_size,
                                              const RunLoaderOptions& options);

}  // namespace benchhost::data
