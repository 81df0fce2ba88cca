#pragma once
// Host-side launchers of elementwise CUDA kernels (elementwise.cu) that other CUDA op files
// compose with (linear runs activations its GEMM epilogue does not have). All enqueue on
// op_stream() and check the launch.

#include <cstdint>

#include "benchhost/nn/ops.hpp"

namespace benchhost::nn::cuda {

/// y[i] = act(x[i]) for i < n (y may alias x), f32 on the current device.
void activation_forward_f32(Activation act, const float* x, float* y, std::int64_t n);

/// y[i] = act(x[i] + bias[i % N]) rounded once to y's storage type (f32, f16 or bf16): x f32,
/// bias (f32, f16 or bf16, N elements) or null, y may alias x only when y is f32. Linear's
/// half-precision outputs (its GEMM accumulates into f32 scratch, then this one pass).
void bias_activation_store(Activation act, const float* x, const void* bias, DType bias_dtype, std::int64_t N,
                           void* y, DType y_dtype, std::int64_t n);

/// dst (contiguous, same shape and dtype) = src (any strides, 0 included; at most 8 dims), both
/// on one cuda device. Defined in shape_ops.cu.
void strided_copy(const Tensor& src, Tensor& dst);

}  // namespace benchhost::nn::cuda
