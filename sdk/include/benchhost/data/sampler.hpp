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
};

/// Deterministic, sharded index order. Immutable after construction; thread-safe.
class Sampler {
 public:
  /// Throws InvalidArgument for a negative size or a rank outside [0, world_size).
  explicit Sampler(SamplerOptions options);

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
