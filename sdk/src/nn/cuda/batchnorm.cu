// CUDA batch normalisation kernels (per channel over N, H, W): batch statistics, normalisation
// (+ ReLU), backward and the running-statistics update. The ops that launch them
// (batch_norm_forward, batch_norm_backward, batch_norm_running_update) are in batchnorm.cpp.
//
// Why not cuDNN: cuDNN's batch norm saves the inverse standard deviation and updates the running
// statistics itself, while the op contract (sdk/src/nn/cpu/batchnorm.cpp) saves the biased batch
// variance and leaves the running update to batch_norm_running_update; converting between the
// two loses bits. These kernels follow the CPU reference's arithmetic instead.
//
// Layout and precision: NCHW or NHWC, used in place. The activations (x, y, dy, dx) are stored
// as f32, f16 or bf16 (one type per call; nn/cuda/storage.hpp), the per-channel vectors (gamma,
// beta, mean, variance and their gradients) are f32, and all arithmetic is in double: a
// mixed-precision ResNet hands its bf16 activations and f32 parameters straight to these kernels,
// with no promotion copies. Per-channel sums are in double. A channel
// reduction is two kernels: partial sums per (chunk of the channel's elements, channel), then a
// per-channel finish that adds the partials in chunk order (deterministic, no atomics). NCHW
// blocks own one channel and read contiguous H*W runs; NHWC blocks are 32 channels x 8 rows so
// that a warp reads 32 consecutive floats. The batch statistics take two passes (mean, then the
// sum of squared deviations), as the CPU reference does, so the variance never comes out
// negative through cancellation.

#include <algorithm>

#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/image_kernels.hpp"
#include "nn/cuda/storage.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kNhwcTileC = 32, kNhwcTileR = 8;


__device__ __forceinline__ std::int64_t channel_of(std::int64_t i, const BnShape& s) {
  return s.nhwc ? i % s.c : (i / s.hw) % s.c;
}

__device__ __forceinline__ double2 add2(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

__device__ __forceinline__ double2 warp_sum(double2 v) {
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_down_sync(0xffffffffu, v.x, o);
    v.y += __shfl_down_sync(0xffffffffu, v.y, o);
  }
  return v;
}

// partial[chunk * C + c] = sum over the chunk's values of channel c of f(offset, c), NCHW.
template <class F>
__global__ void __launch_bounds__(kThreads)
partials_nchw(F f, BnShape s, std::int64_t per_chunk, double2* partial) {
  const std::int64_t c = blockIdx.x;
  const std::int64_t k0 = static_cast<std::int64_t>(blockIdx.y) * per_chunk;
  const std::int64_t k1 = min(k0 + per_chunk, s.count());
  double2 acc = make_double2(0.0, 0.0);
  for (std::int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
    const std::int64_t n = k / s.hw, p = k - n * s.hw;
    acc = add2(acc, f((n * s.c + c) * s.hw + p, c));
  }
  __shared__ double2 warps[kThreads / 32];
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double2 total = make_double2(0.0, 0.0);
    for (int w = 0; w < kThreads / 32; ++w) total = add2(total, warps[w]);
    partial[blockIdx.y * s.c + c] = total;
  }
}

// Same for NHWC: rows are the n*h*w positions, a row holds C channels.
template <class F>
__global__ void __launch_bounds__(kNhwcTileC* kNhwcTileR)
partials_nhwc(F f, BnShape s, std::int64_t per_chunk, double2* partial) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kNhwcTileC + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * per_chunk;
  const std::int64_t r1 = min(r0 + per_chunk, s.count());
  double2 acc = make_double2(0.0, 0.0);
  if (c < s.c)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kNhwcTileR) acc = add2(acc, f(r * s.c + c, c));
  __shared__ double2 tile[kNhwcTileR][kNhwcTileC];
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < s.c) {
    double2 total = make_double2(0.0, 0.0);
    for (int y = 0; y < kNhwcTileR; ++y) total = add2(total, tile[y][threadIdx.x]);
    partial[blockIdx.y * s.c + c] = total;
  }
}

// Channel sums: totals[c] = sum over chunks of partial[chunk * C + c] (chunk order).
__global__ void finish_sums(const double2* partial, std::int64_t chunks, std::int64_t channels,
                            double2* totals) {
  for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       c < channels; c += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    double2 t = make_double2(0.0, 0.0);
    for (std::int64_t k = 0; k < chunks; ++k) t = add2(t, partial[k * channels + c]);
    totals[c] = t;
  }
}

// Per-channel totals of f: a double2 [C] scratch tensor (as bytes) on x's device.
template <class F>
Tensor channel_sums(F f, const BnShape& s, const Tensor& like) {
  const std::int64_t count = s.count();
  std::int64_t chunks, per_chunk;
  constexpr std::int64_t kTargetBlocks = 528;  // ~4 blocks per SM on an H100
  if (!s.nhwc) {
    chunks = std::clamp<std::int64_t>((kTargetBlocks + s.c - 1) / s.c, 1, (count + 1023) / 1024);
  } else {
    const std::int64_t tiles = (s.c + kNhwcTileC - 1) / kNhwcTileC;
    chunks = std::clamp<std::int64_t>((kTargetBlocks + tiles - 1) / tiles, 1, (count + 63) / 64);
  }
  chunks = std::min<std::int64_t>(chunks, 4096);
  per_chunk = (count + chunks - 1) / chunks;
  chunks = (count + per_chunk - 1) / per_chunk;
  Tensor partial = Tensor::empty({chunks * s.c * 2}, DType::f64, like.device());
  Tensor totals = Tensor::empty({s.c * 2}, DType::f64, like.device());
  auto* pp = static_cast<double2*>(partial.raw_data());
  if (!s.nhwc) {
    partials_nchw<<<dim3(static_cast<unsigned>(s.c), static_cast<unsigned>(chunks)), kThreads, 0,
                    op_stream()>>>(f, s, per_chunk, pp);
  } else {
    partials_nhwc<<<dim3(static_cast<unsigned>((s.c + kNhwcTileC - 1) / kNhwcTileC),
                         static_cast<unsigned>(chunks)),
                    dim3(kNhwcTileC, kNhwcTileR), 0, op_stream()>>>(f, s, per_chunk, pp);
  }
  BH_CHECK_CUDA_LAUNCH("batch_norm channel partials");
  finish_sums<<<grid_for(s.c), 256, 0, op_stream()>>>(pp, chunks, s.c,
                                                      static_cast<double2*>(totals.raw_data()));
  BH_CHECK_CUDA_LAUNCH("batch_norm channel sums");
  return totals;
}

template <class T>
__device__ __forceinline__ double load(const T* p, std::int64_t i) { return static_cast<double>(widen(p[i])); }

// The output gradient at i, zero where the fused ReLU's output y (if any) is not positive.
template <class T>
__device__ __forceinline__ double masked_grad(const T* dy, const T* y, std::int64_t i) {
  return (y != nullptr && !(widen(y[i]) > 0.0f)) ? 0.0 : load(dy, i);
}

template <class T>
struct SumX {
  const T* x;
  __device__ double2 operator()(std::int64_t i, std::int64_t) const { return make_double2(load(x, i), 0.0); }
};

template <class T>
struct SumSqDev {
  const T* x;
  const float* mean;
  __device__ double2 operator()(std::int64_t i, std::int64_t c) const {
    const double d = load(x, i) - mean[c];
    return make_double2(d * d, 0.0);
  }
};

// (g, g * xhat) with g the (ReLU-masked) output gradient and xhat the normalised input.
template <class T>
struct GradSums {
  const T *dy, *x, *y;
  const float *mean, *var;
  double eps;
  __device__ double2 operator()(std::int64_t i, std::int64_t c) const {
    const double g = masked_grad(dy, y, i);
    const double inv = rsqrt(static_cast<double>(var[c]) + eps);
    return make_double2(g, g * (load(x, i) - mean[c]) * inv);
  }
};

__global__ void write_mean(const double2* totals, double count, std::int64_t channels, float* mean) {
  for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       c < channels; c += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    mean[c] = static_cast<float>(totals[c].x / count);
}

template <class T>
__global__ void normalize(const T* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, double eps, bool relu, BnShape s, T* y) {
  const std::int64_t n = s.numel();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = channel_of(i, s);
    const double inv = rsqrt(static_cast<double>(var[c]) + eps);
    double v = static_cast<double>(gamma[c]) * (load(x, i) - mean[c]) * inv + beta[c];
    if (relu && v < 0) v = 0;
    y[i] = narrow<T>(static_cast<float>(v));
  }
}

__global__ void grad_params(const double2* totals, std::int64_t channels, float* dgamma, float* dbeta) {
  for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       c < channels; c += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dbeta[c] += static_cast<float>(totals[c].x);
    dgamma[c] += static_cast<float>(totals[c].y);
  }
}

template <class T>
__global__ void grad_input(const T* dy, const T* x, const T* y, const float* gamma,
                           const float* mean, const float* var, const double2* totals, double eps,
                           bool training, BnShape s, T* dx) {
  const std::int64_t n = s.numel();
  const double count = static_cast<double>(s.count());
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = channel_of(i, s);
    const double g = masked_grad(dy, y, i);
    const double inv = rsqrt(static_cast<double>(var[c]) + eps);
    if (!training) {
      dx[i] = narrow<T>(static_cast<float>(gamma[c] * inv * g));
    } else {
      const double xhat = (load(x, i) - mean[c]) * inv;
      dx[i] = narrow<T>(static_cast<float>(gamma[c] * inv / count *
                                           (count * g - totals[c].x - xhat * totals[c].y)));
    }
  }
}

__global__ void running_update(const float* batch_mean, const float* batch_var, float momentum,
                               float unbias, std::int64_t channels, float* running_mean,
                               float* running_var) {
  for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       c < channels; c += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * batch_mean[c];
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * batch_var[c] * unbias;
  }
}

}  // namespace

template <class T>
void bn_batch_stats(const T* x, const BnShape& s, float* mean, float* var, const Tensor& like) {
  if (s.numel() == 0) return;
  const double count = static_cast<double>(s.count());
  Tensor sums = channel_sums(SumX<T>{x}, s, like);
  write_mean<<<grid_for(s.c), 256, 0, op_stream()>>>(static_cast<const double2*>(sums.raw_data()),
                                                     count, s.c, mean);
  BH_CHECK_CUDA_LAUNCH("batch_norm write_mean");
  Tensor sq = channel_sums(SumSqDev<T>{x, mean}, s, like);
  write_mean<<<grid_for(s.c), 256, 0, op_stream()>>>(static_cast<const double2*>(sq.raw_data()),
                                                     count, s.c, var);
  BH_CHECK_CUDA_LAUNCH("batch_norm write_var");
}

template <class T>
void bn_normalize(const T* x, const float* gamma, const float* beta, const float* mean,
                  const float* var, double eps, bool relu, const BnShape& s, T* y) {
  if (s.numel() == 0) return;
  normalize<T><<<grid_for(s.numel()), 256, 0, op_stream()>>>(x, gamma, beta, mean, var, eps, relu, s, y);
  BH_CHECK_CUDA_LAUNCH("batch_norm normalize");
}

template <class T>
void bn_backward(const T* dy, const T* x, const T* y, const float* gamma, const float* mean,
                 const float* var, double eps, bool training, const BnShape& s, T* dx,
                 float* dgamma, float* dbeta, const Tensor& like) {
  if (s.numel() == 0) return;
  Tensor sums = channel_sums(GradSums<T>{dy, x, y, mean, var, eps}, s, like);
  const auto* totals = static_cast<const double2*>(sums.raw_data());
  grad_params<<<grid_for(s.c), 256, 0, op_stream()>>>(totals, s.c, dgamma, dbeta);
  BH_CHECK_CUDA_LAUNCH("batch_norm grad_params");
  grad_input<T><<<grid_for(s.numel()), 256, 0, op_stream()>>>(dy, x, y, gamma, mean, var, totals, eps,
                                                           training, s, dx);
  BH_CHECK_CUDA_LAUNCH("batch_norm grad_input");
}

void bn_running_update(const float* batch_mean, const float* batch_var, float momentum,
                       float unbias, std::int64_t channels, float* running_mean,
                       float* running_var) {
  if (channels == 0) return;
  running_update<<<grid_for(channels), 256, 0, op_stream()>>>(batch_mean, batch_var, momentum, unbias,
                                                              channels, running_mean, running_var);
  BH_CHECK_CUDA_LAUNCH("batch_norm running_update");
}

#define BENCHHOST_BN_INSTANTIATE(T)                                                                \
  template void bn_batch_stats<T>(const T*, const BnShape&, float*, float*, const Tensor&);       \
  template void bn_normalize<T>(const T*, const float*, const float*, const float*, const float*, \
                                double, bool, const BnShape&, T*);                                \
  template void bn_backward<T>(const T*, const T*, const T*, const float*, const float*,          \
                               const float*, double, bool, const BnShape&, T*, float*, float*,    \
                               const Tensor&);
BENCHHOST_BN_INSTANTIATE(float)
BENCHHOST_BN_INSTANTIATE(__half)
BENCHHOST_BN_INSTANTIATE(__nv_bfloat16)
#undef BENCHHOST_BN_INSTANTIATE

}  // namespace benchhost::nn::cuda
