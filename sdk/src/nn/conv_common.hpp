#pragma once
// Shared by the convolution / batch norm / pooling ops (their Tensor-level API in conv.cpp) and
// their CPU and CUDA implementations: op names, the mapping between the public spec structs and
// registry attributes, and the output-shape arithmetic. Private to the SDK.
//
// Registry calling conventions (inputs -> outputs; "+=" outputs accumulate):
//   conv2d_forward           {x, w, bias?}                 -> {y}
//   conv2d_backward_data     {dy, w}                       -> {dx}            (x shape = dx shape)
//   conv2d_backward_weights  {dy, x}                       -> {dw +=, dbias +=?}
//   batch_norm_forward       {x, gamma, beta, mean?, var?} -> {y, mean, var}  (eval: mean/var in)
//   batch_norm_backward      {dy, x, gamma, mean, var, y?} -> {dx, dgamma +=, dbeta +=}
//   max_pool2d_forward       {x}                           -> {y}
//   max_pool2d_backward      {dy, x, y}                    -> {dx}
//   avg_pool2d_forward       {x}                           -> {y}
//   avg_pool2d_backward      {dy}                          -> {dx}
// Attributes: stride=[h,w], pad=[h,w], dilation=[h,w], kernel=[h,w], groups, layout (0 nchw,
// 1 nhwc), eps, training, fuse_relu, count_include_pad.

#include <cstdint>
#include <functional>
#include <string>

#include "benchhost/error.hpp"
#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/registry.hpp"

namespace benchhost::nn::conv_detail {

/// Activations and gradients of the image ops may be f32, f16 or bf16 (ops.hpp's dtype rules;
/// the registry promotes what an implementation does not take natively).
inline void check_floating(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  const DType d = t.dtype();
  if (d != DType::f32 && d != DType::f16 && d != DType::bf16)
    BH_THROW(Unsupported, "{}: {} has dtype {}; f32, f16 and bf16 are implemented", op, what,
             dtype_name(d));
}

inline Attrs conv_attrs(const Conv2dSpec& s) {
  Attrs a;
  a.set_ints("stride", {s.stride_h, s.stride_w});
  a.set_ints("pad", {s.pad_h, s.pad_w});
  a.set_ints("dilation", {s.dilation_h, s.dilation_w});
  a.set("groups", static_cast<double>(s.groups));
  a.set("layout", s.layout == ImageLayout::nhwc ? 1.0 : 0.0);
  return a;
}

inline std::int64_t pair_at(const Attrs& a, const char* name, int i, std::int64_t fallback) {
  const auto& v = a.get_ints(name);
  return v.size() == 2 ? v[static_cast<std::size_t>(i)] : fallback;
}

inline ImageLayout layout_attr(const Attrs& a) {
  return a.get_int("layout", 0) == 1 ? ImageLayout::nhwc : ImageLayout::nchw;
}

inline Conv2dSpec conv_spec(const Attrs& a) {
  Conv2dSpec s;
  s.stride_h = pair_at(a, "stride", 0, 1);
  s.stride_w = pair_at(a, "stride", 1, 1);
  s.pad_h = pair_at(a, "pad", 0, 0);
  s.pad_w = pair_at(a, "pad", 1, 0);
  s.dilation_h = pair_at(a, "dilation", 0, 1);
  s.dilation_w = pair_at(a, "dilation", 1, 1);
  s.groups = a.get_int("groups", 1);
  s.layout = layout_attr(a);
  return s;
}

inline Attrs pool_attrs(const Pool2dSpec& s) {
  Attrs a;
  a.set_ints("kernel", {s.kernel_h, s.kernel_w});
  a.set_ints("stride", {s.stride_h, s.stride_w});
  a.set_ints("pad", {s.pad_h, s.pad_w});
  a.set("count_include_pad", s.count_include_pad ? 1.0 : 0.0);
  a.set("layout", s.layout == ImageLayout::nhwc ? 1.0 : 0.0);
  return a;
}

inline Pool2dSpec pool_spec(const Attrs& a) {
  Pool2dSpec s;
  s.kernel_h = pair_at(a, "kernel", 0, 1);
  s.kernel_w = pair_at(a, "kernel", 1, 1);
  s.stride_h = pair_at(a, "stride", 0, 1);
  s.stride_w = pair_at(a, "stride", 1, 1);
  s.pad_h = pair_at(a, "pad", 0, 0);
  s.pad_w = pair_at(a, "pad", 1, 0);
  s.count_include_pad = a.get_bool("count_include_pad", true);
  s.layout = layout_attr(a);
  return s;
}

inline Attrs bn_attrs(const BatchNormSpec& s, bool training) {
  Attrs a;
  a.set("eps", s.eps);
  a.set("training", training ? 1.0 : 0.0);
  a.set("fuse_relu", s.fuse_relu ? 1.0 : 0.0);
  a.set("layout", s.layout == ImageLayout::nhwc ? 1.0 : 0.0);
  return a;
}

inline BatchNormSpec bn_spec(const Attrs& a) {
  BatchNormSpec s;
  s.eps = a.get("eps", 1e-5);
  s.fuse_relu = a.get_bool("fuse_relu", false);
  s.layout = layout_attr(a);
  return s;
}

struct ConvGeometry {
  ImageDims x, y;
  std::int64_t out_channels, kh, kw, groups;
};

inline ConvGeometry conv_geometry(const Shape& x_shape, const Shape& w_shape,
                                  const Conv2dSpec& s) {
  const ImageDims x = image_dims(x_shape, s.layout, "conv2d input");
  BH_CHECK_AS(InvalidArgument, w_shape.size() == 4,
              "conv2d: weight must be [O, I/groups, KH, KW], got {}", shape_str(w_shape));
  BH_CHECK_AS(InvalidArgument,
              s.groups >= 1 && s.stride_h >= 1 && s.stride_w >= 1 && s.dilation_h >= 1 &&
                  s.dilation_w >= 1 && s.pad_h >= 0 && s.pad_w >= 0,
              "conv2d: groups, strides and dilations must be >= 1 and padding >= 0 (groups {}, "
              "stride {}x{}, dilation {}x{}, padding {}x{})",
              s.groups, s.stride_h, s.stride_w, s.dilation_h, s.dilation_w, s.pad_h, s.pad_w);
  const std::int64_t o = w_shape[0], ig = w_shape[1], kh = w_shape[2], kw = w_shape[3];
  BH_CHECK_AS(InvalidArgument, x.c == ig * s.groups && o % s.groups == 0,
              "conv2d: input {} ({}) has {} channels but weight {} with groups={} expects {} "
              "(and O divisible by groups)",
              shape_str(x_shape), image_layout_name(s.layout), x.c, shape_str(w_shape), s.groups,
              ig * s.groups);
  const std::int64_t ekh = s.dilation_h * (kh - 1) + 1, ekw = s.dilation_w * (kw - 1) + 1;
  BH_CHECK_AS(InvalidArgument, x.h + 2 * s.pad_h >= ekh && x.w + 2 * s.pad_w >= ekw,
              "conv2d: input {}x{} with padding {}x{} is smaller than the dilated kernel {}x{}",
              x.h, x.w, s.pad_h, s.pad_w, ekh, ekw);
  const std::int64_t oh = (x.h + 2 * s.pad_h - ekh) / s.stride_h + 1;
  const std::int64_t ow = (x.w + 2 * s.pad_w - ekw) / s.stride_w + 1;
  return {x, {x.n, o, oh, ow}, o, kh, kw, s.groups};
}

struct PoolGeometry {
  ImageDims x, y;
};

inline PoolGeometry pool_geometry(const Shape& x_shape, const Pool2dSpec& s, const char* op) {
  const ImageDims x = image_dims(x_shape, s.layout, op);
  BH_CHECK_AS(InvalidArgument, s.kernel_h >= 1 && s.kernel_w >= 1 && s.stride_h >= 1 &&
                                   s.stride_w >= 1 && s.pad_h >= 0 && s.pad_w >= 0,
              "{}: kernel and stride must be >= 1 and padding >= 0 (kernel {}x{}, stride {}x{}, "
              "padding {}x{})",
              op, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w);
  BH_CHECK_AS(InvalidArgument, 2 * s.pad_h <= s.kernel_h && 2 * s.pad_w <= s.kernel_w,
              "{}: padding {}x{} must be at most half the kernel {}x{}", op, s.pad_h, s.pad_w,
              s.kernel_h, s.kernel_w);
  BH_CHECK_AS(InvalidArgument, x.h + 2 * s.pad_h >= s.kernel_h && x.w + 2 * s.pad_w >= s.kernel_w,
              "{}: input {}x{} (padding {}x{}) is smaller than the kernel {}x{}", op, x.h, x.w,
              s.pad_h, s.pad_w, s.kernel_h, s.kernel_w);
  const std::int64_t oh = (x.h + 2 * s.pad_h - s.kernel_h) / s.stride_h + 1;
  const std::int64_t ow = (x.w + 2 * s.pad_w - s.kernel_w) / s.stride_w + 1;
  return {x, {x.n, x.c, oh, ow}};
}

/// Element offset of (n, c, h, w) in a contiguous tensor of dims d in `layout`.
inline std::int64_t act_offset(const ImageDims& d, ImageLayout layout, std::int64_t n,
                               std::int64_t c, std::int64_t h, std::int64_t w) {
  return layout == ImageLayout::nchw ? ((n * d.c + c) * d.h + h) * d.w + w
                                     : ((n * d.h + h) * d.w + w) * d.c + c;
}

/// Each op is declared (doc, example cases, tolerance) in its own file (nn/cpu/conv2d.cpp,
/// nn/cpu/batchnorm.cpp, nn/cpu/pooling.cpp) next to its oneDNN implementation; the plain
/// references are in nn/cpu/conv_reference.cpp.

/// Seeded uniform values in [-1, 1) for the parity test's example cases.
Tensor conv_random(const Shape& shape, std::uint64_t seed);

/// The oneDNN implementation entry of a conv-net op: vendor-library priority, the op's own
/// acceptance test and kernel.
inline OpImpl onednn_impl(std::function<std::string(const OpCall&)> accepts,
                          std::function<void(OpCall&)> run) {
  OpImpl impl;
  impl.name = "cpu.onednn";
  impl.device = DeviceType::cpu;
  impl.priority = 100;
  impl.accepts = std::move(accepts);
  impl.run = std::move(run);
  return impl;
}

}  // namespace benchhost::nn::conv_detail
