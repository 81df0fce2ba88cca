#pragma once
/// @file data/sampler.hpp  Sharding and deterministic shuffling of dataset indices.
///
/// Note [Sharding and tails]
/// Every rank computes the same global order for an epoch (a Fisher-Yates shuffle driven by
/// Rng(seed, epoch), or 0..N-1 without shuffling) and takes every world_size-th index starting
/// at its rank: rank r gets order[r], order[r + R], order[r + 2R], ... When N is not a multiple
/// of R the tail is handled by TailPolicy:
///   - uneven (default): nothing added or removed. Every index is seen by exactly one rank per
///     epoch; the first N mod R ranks get one sample more than the others.
///   - pad: the global order is extended by wrapping around to its start until it is a multiple
///     of R (PyTorch DistributedSampler's default). All ranks get ceil(N/R) samples; the first
///     (R - N mod R) indices of the order are seen twice in that epoch.
///   - drop: the last N mod R indices of the (shuffled) order are left out of that epoch. All
///     ranks get floor(N/R) samples; each kept index is seen by exactly one rank; which indices
///     are dropped changes from epoch to epoch when shuffling.
/// Data-parallel training with collectives needs equal step counts on every rank: use pad or
/// drop there (or make the loader drop the last incomplete batch and check the counts).
///
/// Note [Grouped batches]
/// Aspect-ratio grouping (maskrcnn_benchmark's GroupedBatchSampler): with group_ids set (a group
/// per dataset index, e.g. 0 for landscape and 1 for portrait images) no batch mixes groups, so
/// the collate pads less. Per epoch, the global order above is taken apart by group (keeping its
/// order), each group's sequence is cut into global batches of group_batch_size * world_size,
/// the incomplete last cut of each group is dropped, and the global batches are ordered by the
/// position of their first element in the global order (the reference's order); rank r takes
/// elements [r * B, (r + 1) * B) of each, B = group_batch_size. So every rank gets
/// B * sum_g floor(n_g / (B R)) samples every epoch (n_g the size of group g), every consecutive B
/// of them one group's, and the ranks' batches together form whole global batches of one group.
/// The tail policy does not apply (the dropped cuts are the tail). Two differences from the
/// reference, both for data parallelism's equal step counts: it groups each rank's shard
/// separately and keeps incomplete batches (drop_uneven = False), running a fixed number of
/// iterations rather than epochs.

#include <cstdint>
#include <vector>

namespace benchhost::data {

enum class TailPolicy { uneven, pad, drop };

struct SamplerOptions {
  std::int64_t dataset_size = 0;
  int rank = 0;                        ///< this process's rank, 0 <= rank < world_size
  int world_size = 1;
  bool shuffle = true;
  std::uint64_t seed = 0;              ///< same on every rank
  TailPolicy tail = TailPolicy::uneven;  ///< see Note [Sharding and tails]
  /// Note [Grouped batches]: a group per dataset index (size dataset_size, values >= 0), or
  /// empty for no grouping; with groups, group_batch_size (> 0) is the per-rank batch size the
  /// order is built for (a DataLoader over this sampler must use the same batch size).
  std::vector<std::int32_t> group_ids;
  std::int64_t group_batch_size = 0;
};

/// Deterministic, sharded index order. Immutable after construction; thread-safe.
class Sampler {
 public:
  /// Throws InvalidArgument for a negative size, a rank outside [0, world_size), or group_ids of
  /// the wrong size, with a negative group or without a positive group_batch_size.
  explicit Sampler(SamplerOptions options);
  /// Whether batches are grouped (Note [Grouped batches]).
  bool grouped() const { return !options_.group_ids.empty(); }

  /// Samples this rank gets in every epoch (depends on the tail policy, not on the epoch).
  std::int64_t num_samples() const { return num_samples_; }
  /// This rank's dataset indices for `epoch`, starting at `position` (0 = the whole epoch; a
  /// position from Batch::position resumes after the samples already consumed). Throws
  /// InvalidArgument when position is outside [0, num_samples()].
  std::vector<std::int64_t> indices(std::int64_t epoch, std::int64_t position = 0) const;
  /// The global order for `epoch` before sharding (size N, a permutation of 0..N-1).
  std::vector<std::int64_t> global_order(std::int64_t epoch) const;
  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  std::int64_t num_samples_ = 0;
};

}  // namespace benchhost::data
