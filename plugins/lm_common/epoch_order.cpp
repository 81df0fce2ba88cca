#include "epoch_order.hpp"

#include <utility>

#include "benchhost/random.hpp"

namespace benchhost::lm {

std::vector<std::int64_t> epoch_order(std::int64_t count, std::uint64_t seed, std::uint64_t stream) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  Rng rng(seed, stream);
  for (std::size_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[rng.below(k)]);
  return order;
}

}  // namespace benchhost::lm
