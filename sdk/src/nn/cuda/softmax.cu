// softmax / log_softmax over the last dim on CUDA, forward and backward.
//
// Rows [R, C], one group of threads per row: a warp (8 rows per 256-thread block) for
// C <= 1024, a whole 512-thread block for longer rows (vocabulary-sized logits). Each group
// reduces the row max and the sum of exp(x - max) in f32 with a fixed-order tree
// (group_reduce), so results are deterministic. Backward from the OUTPUT y:
//   softmax:     dx = y (dy - sum(dy y));   log_softmax: dx = dy - exp(y) sum(dy).

#include <cmath>

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

template <int kThreads, bool kLog>
__global__ void softmax_fwd_kernel(const float* __restrict__ x, float* __restrict__ y, std::int64_t R, std::int64_t C) {
  __shared__ float scratch[32];
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / kThreads) + threadIdx.x / kThreads;
  const int t = static_cast<int>(threadIdx.x % kThreads);
  const bool valid = row < R;
  const float* xr = x + (valid ? row : 0) * C;
  float m, s;
  row_max_sumexp<kThreads>(xr, C, t, valid, scratch, m, s);
  if (!valid) return;
  float* yr = y + row * C;
  if (kLog) {
    const float lse = m + logf(s);
    for (std::int64_t j = t; j < C; j += kThreads) yr[j] = xr[j] - lse;
  } else {
    const float inv = 1.0f / s;
    for (std::int64_t j = t; j < C; j += kThreads) yr[j] = expf(xr[j] - m) * inv;
  }
}

template <int kThreads, bool kLog>
__global__ void softmax_bwd_kernel(const float* __restrict__ dy, const float* __restrict__ y, float* __restrict__ dx,
                                   std::int64_t R, std::int64_t C) {
  __shared__ float scratch[32];
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / kThreads) + threadIdx.x / kThreads;
  const int t = static_cast<int>(threadIdx.x % kThreads);
  const bool valid = row < R;
  const float* dyr = dy + (valid ? row : 0) * C;
  const float* yr = y + (valid ? row : 0) * C;
  float s = 0.0f;
  if (valid)
    for (std::int64_t j = t; j < C; j += kThreads) s += kLog ? dyr[j] : dyr[j] * yr[j];
  s = group_reduce<kThreads>(s, SumOp{}, scratch);
  if (!valid) return;
  float* dxr = dx + row * C;
  for (std::int64_t j = t; j < C; j += kThreads) dxr[j] = kLog ? dyr[j] - expf(yr[j]) * s : yr[j] * (dyr[j] - s);
}

template <bool kLog>
void fwd(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const std::int64_t C = x.dim() == 0 ? 1 : x.size(-1), R = rows_of(x);
  if (x.numel() == 0) return;
  set_device_of(x);
  if (C <= 1024) {
    softmax_fwd_kernel<32, kLog><<<static_cast<unsigned>((R + 7) / 8), 256, 0, op_stream()>>>(
        x.data<float>(), c.outputs[0].data<float>(), R, C);
  } else {
    softmax_fwd_kernel<512, kLog><<<static_cast<unsigned>(R), 512, 0, op_stream()>>>(x.data<float>(),
                                                                                     c.outputs[0].data<float>(), R, C);
  }
  BH_CHECK_CUDA_LAUNCH("softmax_fwd_kernel");
}

template <bool kLog>
void bwd(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const std::int64_t C = dy.dim() == 0 ? 1 : dy.size(-1), R = rows_of(dy);
  BH_CHECK_AS(InvalidArgument, c.inputs[1].numel() == dy.numel(), "softmax backward: dy and y differ in size");
  if (dy.numel() == 0) return;
  set_device_of(dy);
  if (C <= 1024) {
    softmax_bwd_kernel<32, kLog><<<static_cast<unsigned>((R + 7) / 8), 256, 0, op_stream()>>>(
        dy.data<float>(), c.inputs[1].data<float>(), c.outputs[0].data<float>(), R, C);
  } else {
    softmax_bwd_kernel<512, kLog><<<static_cast<unsigned>(R), 512, 0, op_stream()>>>(
        dy.data<float>(), c.inputs[1].data<float>(), c.outputs[0].data<float>(), R, C);
  }
  BH_CHECK_CUDA_LAUNCH("softmax_bwd_kernel");
}

const bool registered =
    register_op_impl("softmax_forward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, fwd<false>, false}) &&
    register_op_impl("softmax_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, bwd<false>, false}) &&
    register_op_impl("log_softmax_forward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, fwd<true>, false}) &&
    register_op_impl("log_softmax_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, bwd<true>, false});

}  // namespace
}  // namespace benchhost::nn::cuda
