#pragma once
/// @file nn/resample.hpp  Nearest-neighbour resizing of 4-d images to a given output size,
/// forward and backward (PyTorch's F.interpolate(x, size=(H, W), mode="nearest")): the top-down
/// path of a feature pyramid network upsamples each level to the size of the next finer one.
///
/// Note [Nearest source index]
/// Output row (column) d of an image resized from `in` to `out` reads input row
///   s(d) = min(floor(float(d) * float(in / out)), in - 1)
/// where the scale in/out is computed once in single precision, as PyTorch computes it
/// (upsample_nearest2d on the CPU and on CUDA, for a given size and no scale factor) and the
/// product and floor are single-precision too. For ratios that are not powers of two the float
/// rule matters: 13 -> 25 (the FPN at 800x800) reads rows 0,0,1,1,...,11,11,12 (row 12 once),
/// where the half-pixel rule of oneDNN's resampling primitive and OpenCV, floor((d + 0.5) * in /
/// out), reads 0,0,...,5,5,6,7,7,...,12,12 (row 6 once); so every
/// implementation here computes s(d) with this exact float formula. s is non-decreasing in d,
/// which the backward uses: the outputs that read input row i form one contiguous range, so each
/// input gradient element is a sum over a rectangle of dy (a gather, no atomics, deterministic).
/// The same formula shrinks (out < in) as well as enlarges.
///
/// Backend: ops upsample_nearest2d_forward / upsample_nearest2d_backward through the registry
/// (nn/registry.hpp): a plain-loop reference (cpu.ref), a oneTBB CPU implementation (cpu.tbb),
/// CUDA kernels (cuda.kernels). f32 natively; f16/bf16 through the registry's f32 promotion.
/// Layout: NCHW or NHWC (nn::ImageLayout); outputs are new contiguous tensors in x's dtype.
/// Errors: InvalidArgument for a non-4-d input, a non-positive size or a gradient whose shape
/// does not match; Unsupported for a non-floating dtype. Threading: callable from any thread.

#include <cmath>
#include <cstdint>

#include "benchhost/nn/conv.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn {

/// s(d) of Note [Nearest source index] for a resize from `in` to `out` elements along one axis.
inline std::int64_t nearest_source_index(std::int64_t d, std::int64_t in, std::int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const auto s = static_cast<std::int64_t>(std::floor(static_cast<float>(d) * scale));
  return s < in - 1 ? s : in - 1;
}

/// y[n, c, oh, ow] = x[n, c, s(oh), s(ow)], y of spatial size out_h x out_w in `layout`.
/// Op "upsample_nearest2d_forward" (attrs out=[h, w], layout).
Tensor upsample_nearest2d_forward(const Tensor& x, std::int64_t out_h, std::int64_t out_w,
                                  ImageLayout layout);

/// dx (shape x_shape) from dy (the forward output's shape): dx[n, c, i, j] = the sum of dy over
/// the outputs that read (i, j). Op "upsample_nearest2d_backward" (attrs out=[h, w], layout).
Tensor upsample_nearest2d_backward(const Tensor& dy, const Shape& x_shape, ImageLayout layout);

}  // namespace benchhost::nn
