// The Tensor-level API of nn/conv.hpp's 2-d transposed convolution (shape checks, output
// allocation, dispatch through the op registry) and its layer ConvTranspose2d. The ops are
// declared in nn/cpu/conv3d.cpp next to the 3-d ones whose implementations they run (Note [2-d
// transposed convolution as 3-d] in conv_transpose2d_common.hpp).

#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/precision.hpp"
#include "nn/conv_common.hpp"
#include "nn/conv_transpose2d_common.hpp"

namespace benchhost::nn {

using namespace conv_transpose2d_detail;
using conv_detail::check_floating;
using conv3d_detail::Conv3dGeometry;

namespace {

ImageDims dims_2d(const VolumeDims& v) { return {v.n, v.c, v.h, v.w}; }

Shape output_shape_of(const Conv3dGeometry& g, ImageLayout layout) { return image_shape(dims_2d(g.y), layout); }

}  // namespace

Shape conv_transpose2d_output_shape(const Shape& x, const Shape& w, const Conv2dSpec& spec) {
  return output_shape_of(conv_transpose2d_geometry(x, w, spec, "conv_transpose2d_output_shape"), spec.layout);
}

double conv_transpose2d_macs_per_sample(const Shape& x, const Shape& w, const Conv2dSpec& spec) {
  const Conv3dGeometry g = conv_transpose2d_geometry(x, w, spec, "conv_transpose2d_macs_per_sample");
  return static_cast<double>(g.x.c) * g.x.spatial() * g.y.c * g.kh * g.kw;
}

Tensor conv_transpose2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dSpec& spec) {
  const char* op = "conv_transpose2d_forward";
  check_floating(x, op, "input");
  check_floating(w, op, "weight");
  const Conv3dGeometry g = conv_transpose2d_geometry(x.shape(), w.shape(), spec, op);
  if (bias.defined()) {
    check_floating(bias, op, "bias");
    BH_CHECK_AS(InvalidArgument, bias.numel() == g.y.c, "{}: bias has {} elements, expected {} (output channels)",
                op, bias.numel(), g.y.c);
  }
  OpCall call;
  call.inputs = {x.contiguous(), w.contiguous(), bias.defined() ? bias.contiguous() : Tensor()};
  call.outputs = {Tensor::empty(output_shape_of(g, spec.layout), x.dtype(), x.device())};
  call.attrs = conv_transpose2d_attrs(spec);
  dispatch(op, call);
  return call.outputs[0];
}

Tensor conv_transpose2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                      const Conv2dSpec& spec) {
  const char* op = "conv_transpose2d_backward_data";
  check_floating(dy, op, "output gradient");
  check_floating(w, op, "weight");
  const Conv3dGeometry g = conv_transpose2d_geometry(x_shape, w.shape(), spec, op);
  BH_CHECK_AS(InvalidArgument, dy.shape() == output_shape_of(g, spec.layout),
              "{}: output gradient {} does not match the forward output {}", op, shape_str(dy.shape()),
              shape_str(output_shape_of(g, spec.layout)));
  OpCall call;
  call.inputs = {dy.contiguous(), w.contiguous()};
  call.outputs = {Tensor::empty(x_shape, dy.dtype(), dy.device())};
  call.attrs = conv_transpose2d_attrs(spec);
  dispatch(op, call);
  return call.outputs[0];
}

void conv_transpose2d_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& dbias,
                                       const Conv2dSpec& spec) {
  const char* op = "conv_transpose2d_backward_weights";
  check_floating(dy, op, "output gradient");
  check_floating(x, op, "input");
  check_floating(dw, op, "weight gradient");
  BH_CHECK_AS(InvalidArgument, dw.is_contiguous(), "{}: the weight gradient must be contiguous (it accumulates in place)",
              op);
  const Conv3dGeometry g = conv_transpose2d_geometry(x.shape(), dw.shape(), spec, op);
  BH_CHECK_AS(InvalidArgument, dy.shape() == output_shape_of(g, spec.layout),
              "{}: output gradient {} does not match the forward output {}", op, shape_str(dy.shape()),
              shape_str(output_shape_of(g, spec.layout)));
  if (dbias.defined())
    BH_CHECK_AS(InvalidArgument,
                dbias.numel() == g.y.c && dbias.is_contiguous() &&
                    (dbias.dtype() == DType::f32 || dbias.dtype() == DType::f16 || dbias.dtype() == DType::bf16),
                "{}: bias gradient must be a contiguous floating [{}], got {}", op, g.y.c, dbias.describe());
  OpCall call;
  call.inputs = {dy.contiguous(), x.contiguous()};
  call.outputs = {dw, dbias};
  call.attrs = conv_transpose2d_attrs(spec);
  dispatch(op, call);
}

// ---------------------------------------------------------------------------------------------
// Layer
// ---------------------------------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_h,
                                 std::int64_t kernel_w, const Conv2dSpec& spec, bool bias)
    : in_channels_(in_channels), out_channels_(out_channels), spec_(spec) {
  BH_CHECK_AS(InvalidArgument, in_channels > 0 && out_channels > 0 && kernel_h > 0 && kernel_w > 0,
              "ConvTranspose2d: channels {} -> {} and kernel {}x{} must be positive", in_channels, out_channels,
              kernel_h, kernel_w);
  BH_CHECK_AS(InvalidArgument,
              spec.stride_h >= 1 && spec.stride_w >= 1 && spec.pad_h >= 0 && spec.pad_w >= 0 &&
                  spec.dilation_h == 1 && spec.dilation_w == 1 && spec.groups == 1,
              "ConvTranspose2d: needs strides >= 1, padding >= 0, dilation 1 and groups 1 (stride {}x{}, padding "
              "{}x{}, dilation {}x{}, groups {})",
              spec.stride_h, spec.stride_w, spec.pad_h, spec.pad_w, spec.dilation_h, spec.dilation_w, spec.groups);
  weight_ = &register_parameter("weight", Tensor::zeros({in_channels, out_channels, kernel_h, kernel_w}));
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({out_channels}), false);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  // Note [Layers under a precision policy] (nn/module.hpp), as Conv2d.
  const DType h = precision().storage_dtype(OpClass::conv);
  input_dtype_ = x.dtype();
  x_ = cast(x, h);
  w_ = cast(weight_->value, h);
  return conv_transpose2d_forward(x_, w_, bias_ ? bias_->value : Tensor(), spec_);
}

Tensor ConvTranspose2d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(), "ConvTranspose2d '{}': backward() before forward()", name());
  const Tensor dyh = cast(dy, x_.dtype());
  conv_transpose2d_backward_weights(dyh, x_, weight_->grad, bias_ ? bias_->grad : no_bias_grad_, spec_);
  weight_->mark_grad_ready();
  if (bias_) bias_->mark_grad_ready();
  Tensor dx;
  if (input_grad_) dx = cast(conv_transpose2d_backward_data(dyh, w_, x_.shape(), spec_), input_dtype_);
  x_ = w_ = Tensor();
  return dx;
}

}  // namespace benchhost::nn
