#pragma once
/// @file plugins/lm_common/epoch_order.hpp  The order in which a bert or gpt3 epoch visits its
/// training samples (BERT's sentence pairs, GPT-3's token windows).

#include <cstdint>
#include <vector>

namespace benchhost::lm {

/// 0..count-1 shuffled by Fisher-Yates from the back, driven by Rng(seed, stream): a pure
/// function of its arguments. A workload passes its own stream base plus the epoch, so every
/// epoch (and every seed) has its own order.
std::vector<std::int64_t> epoch_order(std::int64_t count, std::uint64_t seed, std::uint64_t stream);

}  // namespace benchhost::lm
