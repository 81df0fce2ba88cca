#pragma once
// Convolutions through cuDNN's graph (backend) API, for the 2-d and 3-d convolution ops
// (conv_cudnn.cpp, conv3d_cudnn.cpp). Private to sdk/src/nn/cuda.
//
// Note [cuDNN graph convolutions]
// cuDNN 9's legacy convolution API (cudnnFindConvolution*Algorithm, cudnnConvolution*) reaches
// only some of the library's engines. On an H100 with cuDNN 9.19 it offers no fast engine for
// channels-last bf16: backward-data of ResNet-50's 56x56x64 3x3 convolution at batch 256 takes
// 117 ms with either of the two algorithms it lists (0.31 ms in TF32), and the 3D U-Net's
// 128^3 x 32 one 244 ms (2.0 ms in TF32); forward runs at an eighth of the TF32 rate
// (results/gpu/2026-11-26/run4, bench/cudnn/bench_cudnn_conv). Those engines made bf16 ResNet-50
// 30 times slower than TF32. The graph API sees every engine, as PyTorch's convolutions do.
//
// A problem (direction, dtype, math mode, dims and strides of x, w and y, geometry) is built once
// into an operation graph of one convolution. Its engine configurations come from the mode-A
// heuristics, ranked by expected speed; configurations whose numerical notes break the
// precision contract are dropped:
//   * tensor-core engines for f32 data unless TF32 is on (tf32_enabled());
//   * engines that down-convert f32 inputs (to a half type) or reduce in reduced precision.
// The first kMaxCandidates that finalise into execution plans are timed on scratch buffers of
// the problem's shape (a warm-up that loads the kernel, a probe run, then two timed runs unless
// the probe is already 3x the best; CUDA events on the op stream), and the fastest is kept with
// its workspace size, as cudnnFind does for the legacy API. Plans are cached per (problem, cuDNN
// handle): a plan is bound to the handle it was built with, and handles are per thread and live
// as long as it (Note [cuDNN handles]). BENCHHOST_CUDNN_GRAPH_VERBOSE=1 lists every candidate.
//
// On an H100 (results/gpu/2026-11-26/run5) this made the bf16 backward-data of the shapes above
// 0.15 ms and 1.08 ms, half the TF32 time, as tensor cores twice as fast should.
//
// Where the graph API finalises no plan for a problem (or the pointers of a call are not 16-byte
// aligned, which the tensors' descriptors promise), the caller runs the legacy API instead.
// BENCHHOST_CUDNN_GRAPH chooses which calls use the graph API: "half" (the default: f16/bf16,
// where the legacy API is slow), "all" (f32 too) or "off" (the legacy API only).

#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "benchhost/dtype.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn::cuda::graph {

enum class ConvKind { forward, backward_data, backward_filter };

/// One convolution: y = conv(x, w) (forward), dx from dy and w (backward_data: `x` is dx, `y` is
/// dy), dw from x and dy (backward_filter: `w` is dw). Dims in cuDNN's order, [N, C, spatial...]
/// for x and y and [K, C/groups, spatial...] for w (a grouped convolution's groups are x's C over
/// w's), with explicit strides (the memory layout). The output is overwritten (alpha 1, beta 0).
struct ConvProblem {
  ConvKind kind = ConvKind::forward;
  DType dtype = DType::f32;  ///< of x, w and y; accumulation is f32
  bool tf32 = false;         ///< f32 data may use TF32 tensor cores
  std::vector<std::int64_t> x_dims, x_strides, w_dims, w_strides, y_dims, y_strides;
  std::vector<std::int64_t> pad, stride, dilation;  ///< one per spatial dimension
};

/// Channels-last strides of [N, C, spatial...] dims (NHWC / NDHWC, and KRSC filters).
std::vector<std::int64_t> channels_last_strides(const std::vector<std::int64_t>& dims);

/// Whether calls of `dtype` go through the graph API (BENCHHOST_CUDNN_GRAPH, read once).
bool enabled_for(DType dtype);

/// Runs `p` on x, w, y (device pointers, roles as in ConvProblem) on the handle's stream, with a
/// workspace from the caching allocator on `device`. Returns false, having run nothing, where the
/// graph API has no plan for `p` or a pointer is not 16-byte aligned: the caller then uses the
/// legacy API. Throws on a failed execution or allocation.
bool run(const ConvProblem& p, cudnnHandle_t handle, Device device, void* x, void* w, void* y);

}  // namespace benchhost::nn::cuda::graph
