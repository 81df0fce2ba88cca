// Deterministic sharded index orders (Note [Sharding and tails] in sampler.hpp).
#include "benchhost/data/sampler.hpp"

#include <numeric>
#include <utility>

#include "benchhost/error.hpp"
#include "benchhost/random.hpp"

namespace benchhost::data {

namespace {
// Distinct stream id for shuffling, so the shuffle never shares numbers with the augmentation
// streams (which use the sample index as stream id) under the same seed.
constexpr std::uint64_t kShuffleStream = 0x5348554646ull;  // "SHUFF"
}  // namespace

Sampler::Sampler(SamplerOptions options) : options_(options) {
  const auto n = options_.dataset_size;
  const auto r = static_cast<std::int64_t>(options_.world_size);
  if (n < 0) BH_THROW(InvalidArgument, "sampler: dataset size {} is negative", n);
  if (r < 1) BH_THROW(InvalidArgument, "sampler: world size {} must be at least 1", r);
  if (options_.rank < 0 || options_.rank >= options_.world_size)
    BH_THROW(InvalidArgument, "sampler: rank {} outside [0, {})", options_.rank, r);
  switch (options_.tail) {
    case TailPolicy::uneven: num_samples_ = n / r + (options_.rank < n % r ? 1 : 0); break;
    case TailPolicy::pad: num_samples_ = n == 0 ? 0 : (n + r - 1) / r; break;
    case TailPolicy::drop: num_samples_ = n / r; break;
  }
}

std::vector<std::int64_t> Sampler::global_order(std::int64_t epoch) const {
  std::vector<std::int64_t> order(static_cast<std::size_t>(options_.dataset_size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (options_.shuffle && order.size() > 1) {
    // Fisher-Yates from the back; the stream of numbers is a pure function of (seed, epoch).
    Rng rng(options_.seed ^ mix64(static_cast<std::uint64_t>(epoch)), kShuffleStream);
    for (std::size_t i = order.size() - 1; i > 0; --i) {
      const auto j = static_cast<std::size_t>(rng.below(i + 1));
      std::swap(order[i], order[j]);
    }
  }
  return order;
}

std::vector<std::int64_t> Sampler::indices(std::int64_t epoch, std::int64_t position) const {
  if (position < 0 || position > num_samples_)
    BH_THROW(InvalidArgument, "sampler: resume position {} outside [0, {}] (samples per epoch on "
             "rank {})", position, num_samples_, options_.rank);
  std::vector<std::int64_t> order = global_order(epoch);
  const auto n = static_cast<std::int64_t>(order.size());
  const auto r = static_cast<std::int64_t>(options_.world_size);
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_ - position));
  // Element k of this rank's shard is position rank + k * R of the (padded) global order.
  for (std::int64_t k = position; k < num_samples_; ++k) {
    const std::int64_t g = options_.rank + k * r;
    mine.push_back(order[static_cast<std::size_t>(g % n)]);  // g >= n only when padding
  }
  return mine;
}

}  // namespace benchhost::data
