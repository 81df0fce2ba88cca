// CUDA max and average pooling kernels, forward and backward (global average pooling is an
// average pooling whose window is the whole image, see sdk/src/nn/conv.cpp), with the
// conventions of the CPU reference (sdk/src/nn/cpu/conv_reference.cpp). The ops that launch
// them are in pooling.cpp.
//
// Layout and precision: NCHW or NHWC in place; values stored as f32, f16 or bf16 (one type per
// call, nn/cuda/storage.hpp), compared and summed in f32. One thread per output element forward; one
// thread per INPUT element backward, which gathers from the outputs whose window covers it
// (windows overlap for 3x3 stride 2), so the backward needs no atomics and no zero-fill and is
// deterministic. Max pooling: padding never wins, ties go to the first element of the window in
// (kh, kw) order; the backward recomputes the arg-max from x exactly as the forward chose it, once
// per window in a first pass (Note [Max pooling backward by arg-max codes]).
// Average pooling divides by kh*kw (count_include_pad) or by the window's valid elements.

#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/image_kernels.hpp"
#include "nn/cuda/storage.hpp"

namespace benchhost::nn::cuda {
namespace {


__device__ __forceinline__ std::int64_t offset(const PoolArgs& a, std::int64_t n, std::int64_t c,
                                               std::int64_t h, std::int64_t w, std::int64_t H,
                                               std::int64_t W) {
  return a.nhwc ? ((n * H + h) * W + w) * a.c + c : ((n * a.c + c) * H + h) * W + w;
}

// Decompose a flat element index of a [n, c, H, W] tensor in the args' layout.
__device__ __forceinline__ void coords(const PoolArgs& a, std::int64_t i, std::int64_t H,
                                       std::int64_t W, std::int64_t& n, std::int64_t& c,
                                       std::int64_t& h, std::int64_t& w) {
  if (a.nhwc) {
    c = i % a.c;
    i /= a.c;
    w = i % W;
    i /= W;
    h = i % H;
    n = i / H;
  } else {
    w = i % W;
    i /= W;
    h = i % H;
    i /= H;
    c = i % a.c;
    n = i / a.c;
  }
}

struct Window {
  std::int64_t h0, h1, w0, w1;
};

__device__ __forceinline__ Window window(const PoolArgs& a, std::int64_t oh, std::int64_t ow) {
  const std::int64_t hs = oh * a.sh - a.ph, ws = ow * a.sw - a.pw;
  return {max(hs, std::int64_t{0}), min(hs + a.kh, a.h), max(ws, std::int64_t{0}), min(ws + a.kw, a.w)};
}

// Offset of the window's maximum in x (first in (kh, kw) order on ties), -1 for a window of
// padding only; `local` gets its position in the whole (unclipped) window, (h - hs) * kw + (w - ws).
template <class T>
__device__ __forceinline__ std::int64_t argmax(const PoolArgs& a, const T* x, std::int64_t n,
                                               std::int64_t c, std::int64_t oh, std::int64_t ow,
                                               int* local = nullptr) {
  const Window wd = window(a, oh, ow);
  std::int64_t best = -1, best_h = 0, best_w = 0;
  float best_v = 0.0f;
  for (std::int64_t h = wd.h0; h < wd.h1; ++h)
    for (std::int64_t w = wd.w0; w < wd.w1; ++w) {
      const std::int64_t off = offset(a, n, c, h, w, a.h, a.w);
      const float v = widen(x[off]);
      if (best < 0 || v > best_v) {
        best = off;
        best_v = v;
        best_h = h;
        best_w = w;
      }
    }
  if (local)
    *local = static_cast<int>((best_h - (oh * a.sh - a.ph)) * a.kw + (best_w - (ow * a.sw - a.pw)));
  return best;
}

__device__ __forceinline__ float divisor(const PoolArgs& a, const Window& wd) {
  if (a.include_pad) return static_cast<float>(a.kh * a.kw);
  return static_cast<float>((wd.h1 - wd.h0) * (wd.w1 - wd.w0));
}

template <class T>
__global__ void max_forward(PoolArgs a, const T* x, T* y) {
  const std::int64_t total = a.n * a.c * a.oh * a.ow;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t n, c, oh, ow;
    coords(a, i, a.oh, a.ow, n, c, oh, ow);
    const std::int64_t best = argmax(a, x, n, c, oh, ow);
    y[i] = best >= 0 ? x[best] : narrow<T>(0.0f);
  }
}

template <class T>
__global__ void avg_forward(PoolArgs a, const T* x, T* y) {
  const std::int64_t total = a.n * a.c * a.oh * a.ow;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t n, c, oh, ow;
    coords(a, i, a.oh, a.ow, n, c, oh, ow);
    const Window wd = window(a, oh, ow);
    float sum = 0.0f;
    for (std::int64_t h = wd.h0; h < wd.h1; ++h)
      for (std::int64_t w = wd.w0; w < wd.w1; ++w) sum += widen(x[offset(a, n, c, h, w, a.h, a.w)]);
    y[i] = narrow<T>(sum / divisor(a, wd));
  }
}

// Output rows whose window covers input row h: oh*s - p <= h < oh*s - p + k.
__device__ __forceinline__ void covering(std::int64_t h, int k, int s, int p, std::int64_t out,
                                         std::int64_t& lo, std::int64_t& hi) {
  const std::int64_t a = h + p - k + 1;  // oh >= ceil(a / s)
  lo = a <= 0 ? 0 : (a + s - 1) / s;
  hi = min((h + p) / s + 1, out);        // oh <= floor((h + p) / s)
}

// `code`: each window's arg-max position from max_codes (Note [Max pooling backward by arg-max
// codes]), or null to recompute each covering window's arg-max here.
template <class T>
__global__ void max_backward(PoolArgs a, const T* dy, const T* x, const std::uint8_t* code, T* dx) {
  const std::int64_t total = a.n * a.c * a.h * a.w;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t n, c, h, w;
    coords(a, i, a.h, a.w, n, c, h, w);
    std::int64_t oh0, oh1, ow0, ow1;
    covering(h, a.kh, a.sh, a.ph, a.oh, oh0, oh1);
    covering(w, a.kw, a.sw, a.pw, a.ow, ow0, ow1);
    float g = 0.0f;
    for (std::int64_t oh = oh0; oh < oh1; ++oh)
      for (std::int64_t ow = ow0; ow < ow1; ++ow) {
        const std::int64_t o = offset(a, n, c, oh, ow, a.oh, a.ow);
        const bool mine = code ? code[o] == (h - (oh * a.sh - a.ph)) * a.kw + (w - (ow * a.sw - a.pw))
                               : argmax(a, x, n, c, oh, ow) == i;
        if (mine) g += widen(dy[o]);
      }
    dx[i] = narrow<T>(g);
  }
}

// Note [Max pooling backward by arg-max codes]
// max_backward above finds, for each input element, every window that covers it and recomputes
// each window's arg-max: with 3x3 stride-2 windows that is four windows of nine loads per input
// element, and ResNet-50's stem pool backward (bf16, batch 256) took about 15 ms a step on an H200,
// six times its forward (results/gpu/2026-11-27/run5). Where a window has at most 254 elements the
// backward runs in two passes instead: max_codes computes each window's arg-max once, as the
// forward chose it, and stores its position in the window (one byte, kNoMax for a window of
// padding only); max_backward then gathers, for each input element, the output gradients
// of the covering windows whose code names its position. Same sums in the same order, no atomics.
constexpr std::uint8_t kNoMax = 255;

template <class T>
__global__ void max_codes(PoolArgs a, const T* x, std::uint8_t* code) {
  const std::int64_t total = a.n * a.c * a.oh * a.ow;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t n, c, oh, ow;
    coords(a, i, a.oh, a.ow, n, c, oh, ow);
    int local = 0;
    code[i] = argmax(a, x, n, c, oh, ow, &local) >= 0 ? static_cast<std::uint8_t>(local) : kNoMax;
  }
}

template <class T>
__global__ void avg_backward(PoolArgs a, const T* dy, T* dx) {
  const std::int64_t total = a.n * a.c * a.h * a.w;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t n, c, h, w;
    coords(a, i, a.h, a.w, n, c, h, w);
    std::int64_t oh0, oh1, ow0, ow1;
    covering(h, a.kh, a.sh, a.ph, a.oh, oh0, oh1);
    covering(w, a.kw, a.sw, a.pw, a.ow, ow0, ow1);
    float g = 0.0f;
    for (std::int64_t oh = oh0; oh < oh1; ++oh)
      for (std::int64_t ow = ow0; ow < ow1; ++ow)
        g += widen(dy[offset(a, n, c, oh, ow, a.oh, a.ow)]) / divisor(a, window(a, oh, ow));
    dx[i] = narrow<T>(g);
  }
}

}  // namespace

template <class T>
void max_pool_forward(const PoolArgs& a, const T* x, T* y) {
  const std::int64_t total = a.n * a.c * a.oh * a.ow;
  if (total == 0) return;
  max_forward<T><<<grid_for(total), 256, 0, op_stream()>>>(a, x, y);
  BH_CHECK_CUDA_LAUNCH("max_pool2d forward");
}

template <class T>
void avg_pool_forward(const PoolArgs& a, const T* x, T* y) {
  const std::int64_t total = a.n * a.c * a.oh * a.ow;
  if (total == 0) return;
  avg_forward<T><<<grid_for(total), 256, 0, op_stream()>>>(a, x, y);
  BH_CHECK_CUDA_LAUNCH("avg_pool2d forward");
}

template <class T>
void max_pool_backward(const PoolArgs& a, const T* dy, const T* x, T* dx, std::uint8_t* codes) {
  const std::int64_t total = a.n * a.c * a.h * a.w, outputs = a.n * a.c * a.oh * a.ow;
  if (total == 0) return;
  if (codes && outputs > 0) {  // Note [Max pooling backward by arg-max codes]
    max_codes<T><<<grid_for(outputs), 256, 0, op_stream()>>>(a, x, codes);
    BH_CHECK_CUDA_LAUNCH("max_pool2d backward (arg-max codes)");
  }
  max_backward<T><<<grid_for(total), 256, 0, op_stream()>>>(a, dy, x, outputs > 0 ? codes : nullptr, dx);
  BH_CHECK_CUDA_LAUNCH("max_pool2d backward");
}

template <class T>
void avg_pool_backward(const PoolArgs& a, const T* dy, T* dx) {
  const std::int64_t total = a.n * a.c * a.h * a.w;
  if (total == 0) return;
  avg_backward<T><<<grid_for(total), 256, 0, op_stream()>>>(a, dy, dx);
  BH_CHECK_CUDA_LAUNCH("avg_pool2d backward");
}

#define BENCHHOST_POOL_INSTANTIATE(T)                                      \
  template void max_pool_forward<T>(const PoolArgs&, const T*, T*);        \
  template void avg_pool_forward<T>(const PoolArgs&, const T*, T*);        \
  template void max_pool_backward<T>(const PoolArgs&, const T*, const T*, T*, std::uint8_t*); \
  template void avg_pool_backward<T>(const PoolArgs&, const T*, T*);
BENCHHOST_POOL_INSTANTIATE(float)
BENCHHOST_POOL_INSTANTIATE(__half)
BENCHHOST_POOL_INSTANTIATE(__nv_bfloat16)
#undef BENCHHOST_POOL_INSTANTIATE

}  // namespace benchhost::nn::cuda
