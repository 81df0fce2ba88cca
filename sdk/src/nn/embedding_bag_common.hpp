#pragma once
// Embedding bags: (indices, offsets) on the CPU seen as bags, with the layout checks of
// nn/embedding_bag.hpp. Shared by the public embedding_bag_count (nn/embedding_bag.cpp) and the
// CPU kernels (nn/cpu/embedding_bag.cpp). Private to the SDK.

#include <cstdint>

#include "benchhost/error.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn::embedding_bag_detail {

// A view of (indices, offsets) as "bag b = positions [begin(b), end(b))" with typed row ids.
struct BagView {
  const void* idx = nullptr;
  bool idx64 = false;
  const std::int64_t* offsets = nullptr;  // null: fixed hotness
  std::int64_t hotness = 0;
  std::int64_t bags = 0;
  std::int64_t total = 0;  // N

  std::int64_t begin(std::int64_t b) const { return offsets ? offsets[b] : b * hotness; }
  std::int64_t end(std::int64_t b) const { return offsets ? offsets[b + 1] : (b + 1) * hotness; }
  std::int64_t row(std::int64_t pos) const {
    return idx64 ? static_cast<const std::int64_t*>(idx)[pos]
                 : static_cast<const std::int32_t*>(idx)[pos];
  }
};

inline BagView make_view(const Tensor& indices, const Tensor& offsets) {
  BH_CHECK_AS(InvalidArgument, indices.defined(), "embedding bag: indices are undefined");
  BH_CHECK_AS(InvalidArgument, indices.device().is_cpu(),
              "embedding bag (cpu): indices must be a CPU tensor, got {}", indices.describe());
  BH_CHECK_AS(InvalidArgument, indices.dtype() == DType::i32 || indices.dtype() == DType::i64,
              "embedding bag: indices must be i32 or i64, got {}", indices.describe());
  BH_CHECK_AS(InvalidArgument, indices.is_contiguous(),
              "embedding bag: indices must be contiguous, got {}", indices.describe());
  BagView v;
  v.idx = indices.raw_data();
  v.idx64 = indices.dtype() == DType::i64;
  v.total = indices.numel();
  if (!offsets.defined()) {
    BH_CHECK_AS(InvalidArgument, indices.dim() == 2,
                "embedding bag: without offsets, indices must be [bags, hotness], got {}",
                indices.describe());
    v.bags = indices.size(0);
    v.hotness = indices.size(1);
    return v;
  }
  BH_CHECK_AS(InvalidArgument, indices.dim() == 1,
              "embedding bag: with offsets, indices must be 1-D, got {}", indices.describe());
  BH_CHECK_AS(InvalidArgument,
              offsets.dtype() == DType::i64 && offsets.dim() == 1 && offsets.numel() >= 1 &&
                  offsets.is_contiguous() && offsets.device().is_cpu(),
              "embedding bag: offsets must be a contiguous CPU i64 [bags + 1], got {}",
              offsets.describe());
  v.offsets = offsets.data<std::int64_t>();
  v.bags = offsets.numel() - 1;
  BH_CHECK_AS(InvalidArgument, v.offsets[0] == 0 && v.offsets[v.bags] == v.total,
              "embedding bag: offsets must start at 0 and end at the number of indices ({}), got "
              "{} .. {}", v.total, v.offsets[0], v.offsets[v.bags]);
  for (std::int64_t b = 0; b < v.bags; ++b)
    BH_CHECK_AS(InvalidArgument, v.offsets[b] <= v.offsets[b + 1],
                "embedding bag: offsets must not decrease (offsets[{}] = {} > offsets[{}] = {})", b,
                v.offsets[b], b + 1, v.offsets[b + 1]);
  return v;
}

}  // namespace benchhost::nn::embedding_bag_detail
