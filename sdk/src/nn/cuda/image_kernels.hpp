#pragma once
// Launchers of the CUDA batch norm and pooling kernels (batchnorm.cu, pooling.cu), called by the
// op glue in batchnorm.cpp and pooling.cpp. The split keeps the .cu files free of the op
// plumbing's headers (conv_common.hpp's format strings trip nvcc's front end) and of work that
// nvcc would only compile slower. All launchers enqueue on op_stream() and check the launch.
// Pointers are device pointers to contiguous data: T = float, __half or __nv_bfloat16 for the
// images (instantiated in batchnorm.cu and pooling.cu; nn/cuda/storage.hpp), f32 for the batch
// norm's per-channel vectors.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "benchhost/tensor.hpp"

namespace benchhost::nn::cuda {

/// A 4-d activation seen per channel: c channels, n*hw values each; NCHW or NHWC.
struct BnShape {
  std::int64_t n = 0, c = 0, hw = 0;
  bool nhwc = false;
  __host__ __device__ std::int64_t count() const { return n * hw; }
  __host__ __device__ std::int64_t numel() const { return n * c * hw; }
};

/// mean[c] and the biased variance var[c] of x's channels (`like` names the device for scratch).
template <class T>
void bn_batch_stats(const T* x, const BnShape& s, float* mean, float* var, const Tensor& like);
/// y = gamma (x - mean) / sqrt(var + eps) + beta, then max(y, 0) when relu.
template <class T>
void bn_normalize(const T* x, const float* gamma, const float* beta, const float* mean,
                  const float* var, double eps, bool relu, const BnShape& s, T* y);
/// dx (overwritten), dgamma += and dbeta += for dy; y (forward output) non-null masks dy by
/// y > 0 (fused ReLU). training = false treats mean/var as constants.
template <class T>
void bn_backward(const T* dy, const T* x, const T* y, const float* gamma, const float* mean,
                 const float* var, double eps, bool training, const BnShape& s, T* dx,
                 float* dgamma, float* dbeta, const Tensor& like);
/// running = (1 - momentum) running + momentum batch (variance scaled by unbias).
void bn_running_update(const float* batch_mean, const float* batch_var, float momentum,
                       float unbias, std::int64_t channels, float* running_mean,
                       float* running_var);

/// Geometry of a 2-d pooling (input n, c, h, w; output oh, ow).
struct PoolArgs {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  std::int64_t oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  bool nhwc = false, include_pad = true;
};

template <class T>
void max_pool_forward(const PoolArgs& a, const T* x, T* y);
template <class T>
void avg_pool_forward(const PoolArgs& a, const T* x, T* y);
/// dx overwritten (every element written). `codes`: scratch of one byte per output element where
/// kh * kw <= kMaxPoolCodeWindow (two passes, Note [Max pooling backward by arg-max codes] in
/// pooling.cu), or nullptr (one pass that recomputes each covering window's arg-max).
constexpr int kMaxPoolCodeWindow = 254;
template <class T>
void max_pool_backward(const PoolArgs& a, const T* dy, const T* x, T* dx, std::uint8_t* codes);
template <class T>
void avg_pool_backward(const PoolArgs& a, const T* dy, T* dx);

}  // namespace benchhost::nn::cuda
