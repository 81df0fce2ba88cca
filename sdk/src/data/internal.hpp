#pragma once
// Helpers shared by the data area's sources (not part of the public SDK).
#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/device.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::data {

/// A CPU-addressable tensor whose memory comes from `alloc` (e.g. pinned host memory), freed back
/// to it with the storage. alloc == nullptr: Tensor::empty on the CPU.
Tensor empty_host(const Shape& shape, DType dtype, Allocator* alloc);

/// collate() into tensors from `alloc` (see empty_host).
TensorDict collate_into(const std::vector<Sample>& samples, Allocator* alloc);

/// strerror(errno) as a string.
std::string errno_message(int err);

}  // namespace benchhost::data
