#pragma once
// Shared by the 3-d convolution ops (their Tensor-level API in conv3d.cpp, their CPU
// implementations in nn/cpu/conv3d.cpp and CUDA ones in nn/cuda/conv3d_cudnn.cpp): the mapping
// between Conv3dSpec and registry attributes, and the shape arithmetic. Private to the SDK.
//
// Registry calling conventions (inputs -> outputs; "+=" outputs accumulate):
//   conv3d_forward                    {x, w [O,I,k...], bias?} -> {y}
//   conv3d_backward_data              {dy, w}                  -> {dx}   (x shape = dx shape)
//   conv3d_backward_weights           {dy, x}                  -> {dw +=, dbias +=?}
//   conv_transpose3d_forward          {x, w [I,O,k...], bias?} -> {y}
//   conv_transpose3d_backward_data    {dy, w}                  -> {dx}
//   conv_transpose3d_backward_weights {dy, x}                  -> {dw +=, dbias +=?}
// Attributes: stride=[d,h,w], pad=[d,h,w], layout (0 ncdhw, 1 ndhwc).
//
// Note [Convolution view of a transposed convolution]
// A transposed convolution with input x [N, I, ...] and weight [I, O, k...] is the adjoint of
// the convolution from y's shape to x's shape whose weight is the same tensor read as
// [O_conv = I, I_conv = O, k...]. Every implementation therefore works on one "convolution
// view": `big` is the convolution's input (conv: x; transposed: y), `small` its output (conv: y;
// transposed: x), the weight is [small.c, big.c, k...], and
//   small[n, o, p] = sum_{c, t} big[n, c, p * stride - pad + t] * w[o, c, t].
// conv forward = transposed backward-data (big -> small); conv backward-data = transposed
// forward (small -> big); both weight gradients are sum big * small-gradient over the taps.

#include <cstdint>

#include "benchhost/error.hpp"
#include "benchhost/nn/conv3d.hpp"
#include "benchhost/nn/registry.hpp"

namespace benchhost::nn::conv3d_detail {

inline Attrs conv3d_attrs(const Conv3dSpec& s) {
  Attrs a;
  a.set_ints("stride", {s.stride_d, s.stride_h, s.stride_w});
  a.set_ints("pad", {s.pad_d, s.pad_h, s.pad_w});
  a.set("layout", s.layout == VolumeLayout::ndhwc ? 1.0 : 0.0);
  return a;
}

inline std::int64_t triple_at(const Attrs& a, const char* name, int i, std::int64_t fallback) {
  const auto& v = a.get_ints(name);
  return v.size() == 3 ? v[static_cast<std::size_t>(i)] : fallback;
}

inline Conv3dSpec conv3d_spec(const Attrs& a) {
  Conv3dSpec s;
  s.stride_d = triple_at(a, "stride", 0, 1);
  s.stride_h = triple_at(a, "stride", 1, 1);
  s.stride_w = triple_at(a, "stride", 2, 1);
  s.pad_d = triple_at(a, "pad", 0, 0);
  s.pad_h = triple_at(a, "pad", 1, 0);
  s.pad_w = triple_at(a, "pad", 2, 0);
  s.layout = a.get_int("layout", 0) == 1 ? VolumeLayout::ndhwc : VolumeLayout::ncdhw;
  return s;
}

/// The geometry of a call (Note [Convolution view of a transposed convolution]).
struct Conv3dGeometry {
  VolumeDims x, y;  ///< the op's input and output
  std::int64_t kd = 1, kh = 1, kw = 1;
  bool transposed = false;
  const VolumeDims& big() const { return transposed ? y : x; }
  const VolumeDims& small() const { return transposed ? x : y; }
};

/// Geometry of a (transposed) 3-d convolution from its input and weight shapes; throws
/// InvalidArgument naming `op` when they do not agree or the output would be empty.
inline Conv3dGeometry conv3d_geometry(const Shape& x_shape, const Shape& w_shape,
                                      const Conv3dSpec& s, bool transposed, const char* op) {
  Conv3dGeometry g;
  g.transposed = transposed;
  BH_CHECK_AS(InvalidArgument, x_shape.size() == 5,
              "{}: input must be a 5-d {} tensor, got shape {}", op, volume_layout_name(s.layout),
              shape_str(x_shape));
  g.x = volume_dims(x_shape, s.layout, op);
  BH_CHECK_AS(InvalidArgument, w_shape.size() == 5,
              "{}: weight must be 5-d ({}), got {}", op,
              transposed ? "[I, O, KD, KH, KW]" : "[O, I, KD, KH, KW]", shape_str(w_shape));
  BH_CHECK_AS(InvalidArgument,
              s.stride_d >= 1 && s.stride_h >= 1 && s.stride_w >= 1 && s.pad_d >= 0 &&
                  s.pad_h >= 0 && s.pad_w >= 0,
              "{}: strides must be >= 1 and padding >= 0 (stride {}x{}x{}, padding {}x{}x{})", op,
              s.stride_d, s.stride_h, s.stride_w, s.pad_d, s.pad_h, s.pad_w);
  g.kd = w_shape[2];
  g.kh = w_shape[3];
  g.kw = w_shape[4];
  BH_CHECK_AS(InvalidArgument, g.kd >= 1 && g.kh >= 1 && g.kw >= 1 && w_shape[0] >= 1 &&
                                   w_shape[1] >= 1,
              "{}: weight {} has an empty dimension", op, shape_str(w_shape));
  const std::int64_t in_c = transposed ? w_shape[0] : w_shape[1];
  const std::int64_t out_c = transposed ? w_shape[1] : w_shape[0];
  BH_CHECK_AS(InvalidArgument, g.x.c == in_c,
              "{}: input {} ({}) has {} channels but weight {} expects {}", op,
              shape_str(x_shape), volume_layout_name(s.layout), g.x.c, shape_str(w_shape), in_c);
  BH_CHECK_AS(InvalidArgument, g.x.n >= 1 && g.x.d >= 1 && g.x.h >= 1 && g.x.w >= 1,
              "{}: input {} is empty", op, shape_str(x_shape));
  auto out = [&](std::int64_t in, std::int64_t k, std::int64_t st, std::int64_t p) {
    return transposed ? (in - 1) * st - 2 * p + k
                      : (in + 2 * p >= k ? (in + 2 * p - k) / st + 1 : 0);
  };
  g.y = {g.x.n, out_c, out(g.x.d, g.kd, s.stride_d, s.pad_d), out(g.x.h, g.kh, s.stride_h, s.pad_h),
         out(g.x.w, g.kw, s.stride_w, s.pad_w)};
  BH_CHECK_AS(InvalidArgument, g.y.d >= 1 && g.y.h >= 1 && g.y.w >= 1,
              "{}: input {}x{}x{} with kernel {}x{}x{}, stride {}x{}x{} and padding {}x{}x{} gives "
              "an empty output ({}x{}x{})",
              op, g.x.d, g.x.h, g.x.w, g.kd, g.kh, g.kw, s.stride_d, s.stride_h, s.stride_w,
              s.pad_d, s.pad_h, s.pad_w, g.y.d, g.y.h, g.y.w);
  return g;
}

/// Element offset of (n, c, d, h, w) in a contiguous tensor of dims `v` in `layout`.
inline std::int64_t vol_offset(const VolumeDims& v, VolumeLayout layout, std::int64_t n,
                               std::int64_t c, std::int64_t d, std::int64_t h, std::int64_t w) {
  return layout == VolumeLayout::ncdhw ? (((n * v.c + c) * v.d + d) * v.h + h) * v.w + w
                                       : (((n * v.d + d) * v.h + h) * v.w + w) * v.c + c;
}

}  // namespace benchhost::nn::conv3d_detail
