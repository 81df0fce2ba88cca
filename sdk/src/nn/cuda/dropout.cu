// dropout_forward / dropout_backward on CUDA, bit-identical masks to the CPU.
//
// Element i is kept iff (Philox block i / 4, lane i % 4) >> 8 >= ceil(p * 2^24), with Philox
// keyed by mix64(seed) and counter_hi = mix64(step) ^ stream (ops.hpp Note [Dropout
// randomness]; random.hpp's philox4x32_into runs on the device). One thread per Philox block
// (4 elements). Kept elements are scaled by 1 / (1 - p); the u8 mask feeds the backward.

#include <cmath>

#include "benchhost/random.hpp"
#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

__global__ void dropout_fwd_kernel(std::uint64_t key, std::uint64_t stream, std::uint32_t thr, float scale,
                                   const float* __restrict__ x, float* __restrict__ y, std::uint8_t* __restrict__ mask,
                                   std::int64_t n) {
  const std::int64_t blocks = (n + 3) / 4;
  for (std::int64_t b = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint32_t bits[4];
    philox4x32_into(key, stream, static_cast<std::uint64_t>(b), bits);
    for (int l = 0; l < 4; ++l) {
      const std::int64_t i = b * 4 + l;
      if (i >= n) break;
      const bool keep = (bits[l] >> 8) >= thr;
      mask[i] = keep ? 1 : 0;
      y[i] = keep ? x[i] * scale : 0.0f;
    }
  }
}

__global__ void dropout_bwd_kernel(const float* __restrict__ dy, const std::uint8_t* __restrict__ mask, float scale,
                                   float* __restrict__ dx, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

std::uint64_t rng_attr(const OpCall& c, std::size_t i) {
  const auto& v = c.attrs.get_ints("rng");
  BH_CHECK_AS(InvalidArgument, v.size() > i, "dropout: attribute rng needs [seed, step, stream]");
  return static_cast<std::uint64_t>(v[i]);
}

std::string accepts_fwd(const OpCall& c) {
  std::string why = require_cuda_contiguous({c.inputs[0], c.outputs[0]});
  if (!why.empty()) return why;
  why = require_cuda_contiguous({c.outputs[1]}, DType::u8);
  if (!why.empty()) return "mask " + why;
  return c.attrs.has("p") ? std::string() : "attr p missing";
}

std::string accepts_bwd(const OpCall& c) {
  std::string why = require_cuda_contiguous({c.inputs[0], c.outputs[0]});
  if (!why.empty()) return why;
  why = require_cuda_contiguous({c.inputs[1]}, DType::u8);
  return why.empty() ? std::string() : "mask " + why;
}

void fwd(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const double p = c.attrs.get("p");
  BH_CHECK_AS(InvalidArgument, p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1), got {}", p);
  const std::int64_t n = x.numel();
  BH_CHECK_AS(InvalidArgument, c.outputs[0].numel() == n && c.outputs[1].numel() == n, "dropout: outputs do not match x");
  if (n == 0) return;
  // The same threshold, key and stream as the CPU (nn/cpu/dropout.cpp).
  const auto thr = static_cast<std::uint32_t>(std::ceil(p * 16777216.0));
  const std::uint64_t key = mix64(rng_attr(c, 0));
  const std::uint64_t stream = mix64(rng_attr(c, 1)) ^ rng_attr(c, 2);
  set_device_of(x);
  dropout_fwd_kernel<<<grid_for((n + 3) / 4), 256, 0, op_stream()>>>(key, stream, thr, static_cast<float>(1.0 / (1.0 - p)),
                                                                     x.data<float>(), c.outputs[0].data<float>(),
                                                                     c.outputs[1].data<std::uint8_t>(), n);
  BH_CHECK_CUDA_LAUNCH("dropout_fwd_kernel");
}

void bwd(OpCall& c) {
  const double p = c.attrs.get("p");
  const std::int64_t n = c.inputs[0].numel();
  BH_CHECK_AS(InvalidArgument, c.inputs[1].numel() == n && c.outputs[0].numel() == n, "dropout_backward: dy and mask differ");
  if (n == 0) return;
  set_device_of(c.inputs[0]);
  dropout_bwd_kernel<<<grid_for(n), 256, 0, op_stream()>>>(c.inputs[0].data<float>(), c.inputs[1].data<std::uint8_t>(),
                                                           static_cast<float>(1.0 / (1.0 - p)), c.outputs[0].data<float>(), n);
  BH_CHECK_CUDA_LAUNCH("dropout_bwd_kernel");
}

const bool registered =
    register_op_impl("dropout_forward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accepts_fwd, fwd, false}) &&
    register_op_impl("dropout_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accepts_bwd, bwd, false});

}  // namespace
}  // namespace benchhost::nn::cuda
