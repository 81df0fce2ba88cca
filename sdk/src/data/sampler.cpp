// Deterministic sharded index orders (Note [Sharding and tails] in sampler.hpp).
#include "benchhost/data/sampler.hpp"

#include <algorithm>
#include <map>
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
  if (grouped()) {
    const std::int64_t b = options_.group_batch_size;
    if (static_cast<std::int64_t>(options_.group_ids.size()) != n)
      BH_THROW(InvalidArgument, "sampler: {} group ids for a dataset of {} samples (one per sample)",
               options_.group_ids.size(), n);
    if (b < 1) BH_THROW(InvalidArgument, "sampler: grouped batches need group_batch_size >= 1, got {}", b);
    std::map<std::int32_t, std::int64_t> sizes;
    for (std::size_t i = 0; i < options_.group_ids.size(); ++i) {
      const std::int32_t g = options_.group_ids[i];
      if (g < 0) BH_THROW(InvalidArgument, "sampler: sample {} has group {}; groups are >= 0", i, g);
      ++sizes[g];
    }
    num_samples_ = 0;
    for (const auto& [g, count] : sizes) num_samples_ += count / (b * r) * b;
    return;
  }
  switch (options_.tail) {
    case TailPolicy::uneven: num_samples_ = n / r + (options_.rank < n % r ? 1 : 0); break;
    case TailPolicy::pad: num_samples_ = n == 0 ? 0 : (n + r - 1) / r; break;
    case TailPolicy::drop: num_samples_ = n / r; break;
  }
}

namespace {

// This rank's grouped order (Note [Grouped batches]).
std::vector<std::int64_t> grouped_order(const std::vector<std::int64_t>& order, const SamplerOptions& o) {
  const std::int64_t b = o.group_batch_size, global = b * o.world_size;
  struct Cut {
    std::size_t first;  // position of its first element in `order`
    std::vector<std::int64_t> indices;
  };
  std::map<std::int32_t, Cut> open;
  std::vector<Cut> full;
  for (std::size_t p = 0; p < order.size(); ++p) {
    Cut& c = open[o.group_ids[static_cast<std::size_t>(order[p])]];
    if (c.indices.empty()) c.first = p;
    c.indices.push_back(order[p]);
    if (static_cast<std::int64_t>(c.indices.size()) == global) {
      full.push_back(std::move(c));
      c = Cut{};
    }
  }
  std::sort(full.begin(), full.end(), [](const Cut& a, const Cut& c) { return a.first < c.first; });
  std::vector<std::int64_t> mine;
  mine.reserve(full.size() * static_cast<std::size_t>(b));
  for (const Cut& c : full)
    mine.insert(mine.end(), c.indices.begin() + o.rank * b, c.indices.begin() + (o.rank + 1) * b);
  return mine;
}

}  // namespace

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
  if (grouped()) {
    std::vector<std::int64_t> mine = grouped_order(order, options_);
    mine.erase(mine.begin(), mine.begin() + position);
    return mine;
  }
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
