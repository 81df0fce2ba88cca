// The Tensor-level API of nn/conv3d.hpp (shape checks, output allocation, dispatch through the
// op registry) and its layers Conv3d and ConvTranspose3d. The ops are declared, next to their
// oneDNN and reference implementations, in nn/cpu/conv3d.cpp (CUDA: nn/cuda/conv3d_cudnn.cpp);
// their calling conventions are in conv3d_common.hpp.

#include "benchhost/nn/conv3d.hpp"

#include "benchhost/nn/ops.hpp"
#include "benchhost/precision.hpp"
#include "nn/conv3d_common.hpp"
#include "nn/conv_common.hpp"

namespace benchhost::nn {

using namespace conv3d_detail;
using conv_detail::check_floating;

namespace {

struct OpNames {
  const char* forward;
  const char* backward_data;
  const char* backward_weights;
};

constexpr OpNames kConv{"conv3d_forward", "conv3d_backward_data", "conv3d_backward_weights"};
constexpr OpNames kTransposed{"conv_transpose3d_forward", "conv_transpose3d_backward_data",
                              "conv_transpose3d_backward_weights"};

const OpNames& names(bool transposed) { return transposed ? kTransposed : kConv; }

Tensor forward_impl(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dSpec& s,
                    bool transposed) {
  const char* op = names(transposed).forward;
  check_floating(x, op, "input");
  check_floating(w, op, "weight");
  const Conv3dGeometry g = conv3d_geometry(x.shape(), w.shape(), s, transposed, op);
  if (bias.defined()) {
    check_floating(bias, op, "bias");
    BH_CHECK_AS(InvalidArgument, bias.numel() == g.y.c,
                "{}: bias has {} elements, expected {} (output channels)", op, bias.numel(),
                g.y.c);
  }
  OpCall call;
  call.inputs = {x.contiguous(), w.contiguous(), bias.defined() ? bias.contiguous() : Tensor()};
  call.outputs = {Tensor::empty(volume_shape(g.y, s.layout), x.dtype(), x.device())};
  call.attrs = conv3d_attrs(s);
  dispatch(op, call);
  return call.outputs[0];
}

Tensor backward_data_impl(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                          const Conv3dSpec& s, bool transposed) {
  const char* op = names(transposed).backward_data;
  check_floating(dy, op, "output gradient");
  check_floating(w, op, "weight");
  const Conv3dGeometry g = conv3d_geometry(x_shape, w.shape(), s, transposed, op);
  BH_CHECK_AS(InvalidArgument, dy.shape() == volume_shape(g.y, s.layout),
              "{}: output gradient {} does not match the forward output {}", op,
              shape_str(dy.shape()), shape_str(volume_shape(g.y, s.layout)));
  OpCall call;
  call.inputs = {dy.contiguous(), w.contiguous()};
  call.outputs = {Tensor::empty(x_shape, dy.dtype(), dy.device())};
  call.attrs = conv3d_attrs(s);
  dispatch(op, call);
  return call.outputs[0];
}

void backward_weights_impl(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& dbias,
                           const Conv3dSpec& s, bool transposed) {
  const char* op = names(transposed).backward_weights;
  check_floating(dy, op, "output gradient");
  check_floating(x, op, "input");
  check_floating(dw, op, "weight gradient");
  BH_CHECK_AS(InvalidArgument, dw.is_contiguous(),
              "{}: the weight gradient must be contiguous (it accumulates in place)", op);
  const Conv3dGeometry g = conv3d_geometry(x.shape(), dw.shape(), s, transposed, op);
  BH_CHECK_AS(InvalidArgument, dy.shape() == volume_shape(g.y, s.layout),
              "{}: output gradient {} does not match the forward output {}", op,
              shape_str(dy.shape()), shape_str(volume_shape(g.y, s.layout)));
  if (dbias.defined())
    BH_CHECK_AS(InvalidArgument, dbias.numel() == g.y.c && dbias.is_contiguous() &&
                                     (dbias.dtype() == DType::f32 || dbias.dtype() == DType::f16 ||
                                      dbias.dtype() == DType::bf16),
                "{}: bias gradient must be a contiguous floating [{}], got {}", op, g.y.c,
                dbias.describe());
  OpCall call;
  call.inputs = {dy.contiguous(), x.contiguous()};
  call.outputs = {dw, dbias};
  call.attrs = conv3d_attrs(s);
  dispatch(op, call);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Convolution
// ---------------------------------------------------------------------------------------------

Shape conv3d_output_shape(const Shape& x, const Shape& w, const Conv3dSpec& spec) {
  return volume_shape(conv3d_geometry(x, w, spec, false, "conv3d_output_shape").y, spec.layout);
}

double conv3d_macs_per_sample(const Shape& x, const Shape& w, const Conv3dSpec& spec) {
  const Conv3dGeometry g = conv3d_geometry(x, w, spec, false, "conv3d_macs_per_sample");
  return static_cast<double>(g.y.c) * g.y.spatial() * g.x.c * g.kd * g.kh * g.kw;
}

Tensor conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Conv3dSpec& spec) {
  return forward_impl(x, w, bias, spec, false);
}

Tensor conv3d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv3dSpec& spec) {
  return backward_data_impl(dy, w, x_shape, spec, false);
}

void conv3d_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& dbias,
                             const Conv3dSpec& spec) {
  backward_weights_impl(dy, x, dw, dbias, spec, false);
}

// ---------------------------------------------------------------------------------------------
// Transposed convolution
// ---------------------------------------------------------------------------------------------

Shape conv_transpose3d_output_shape(const Shape& x, const Shape& w, const Conv3dSpec& spec) {
  return volume_shape(conv3d_geometry(x, w, spec, true, "conv_transpose3d_output_shape").y,
                      spec.layout);
}

double conv_transpose3d_macs_per_sample(const Shape& x, const Shape& w, const Conv3dSpec& spec) {
  const Conv3dGeometry g = conv3d_geometry(x, w, spec, true, "conv_transpose3d_macs_per_sample");
  return static_cast<double>(g.x.c) * g.x.spatial() * g.y.c * g.kd * g.kh * g.kw;
}

Tensor conv_transpose3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                const Conv3dSpec& spec) {
  return forward_impl(x, w, bias, spec, true);
}

Tensor conv_transpose3d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                      const Conv3dSpec& spec) {
  return backward_data_impl(dy, w, x_shape, spec, true);
}

void conv_transpose3d_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw,
                                       Tensor& dbias, const Conv3dSpec& spec) {
  backward_weights_impl(dy, x, dw, dbias, spec, true);
}

// ---------------------------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------------------------

namespace {

void check_layer_args(const char* layer, std::int64_t in, std::int64_t out, std::int64_t k,
                      const Conv3dSpec& s) {
  BH_CHECK_AS(InvalidArgument, in > 0 && out > 0 && k > 0,
              "{}: channels {} -> {} and kernel {} must be positive", layer, in, out, k);
  // Validates strides and padding now rather than at the first forward pass.
  BH_CHECK_AS(InvalidArgument,
              s.stride_d >= 1 && s.stride_h >= 1 && s.stride_w >= 1 && s.pad_d >= 0 &&
                  s.pad_h >= 0 && s.pad_w >= 0,
              "{}: strides must be >= 1 and padding >= 0 (stride {}x{}x{}, padding {}x{}x{})",
              layer, s.stride_d, s.stride_h, s.stride_w, s.pad_d, s.pad_h, s.pad_w);
}

}  // namespace

Conv3d::Conv3d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
               const Conv3dSpec& spec, bool bias)
    : in_channels_(in_channels), out_channels_(out_channels), spec_(spec) {
  check_layer_args("Conv3d", in_channels, out_channels, kernel, spec);
  weight_ = &register_parameter(
      "weight", Tensor::zeros({out_channels, in_channels, kernel, kernel, kernel}));
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({out_channels}), false);
}

Tensor Conv3d::forward(const Tensor& x) {
  // Note [Layers under a precision policy] (nn/module.hpp): the conv class's type for the input
  // and a per-forward copy of the fp32 master weight, both kept for backward.
  const DType h = precision().storage_dtype(OpClass::conv);
  input_dtype_ = x.dtype();
  x_ = cast(x, h);
  w_ = cast(weight_->value, h);
  return conv3d_forward(x_, w_, bias_ ? bias_->value : Tensor(), spec_);
}

Tensor Conv3d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(), "Conv3d '{}': backward() before forward()", name());
  const Tensor dyh = cast(dy, x_.dtype());
  conv3d_backward_weights(dyh, x_, weight_->grad, bias_ ? bias_->grad : no_bias_grad_, spec_);
  weight_->mark_grad_ready();
  if (bias_) bias_->mark_grad_ready();
  Tensor dx;
  if (input_grad_) dx = cast(conv3d_backward_data(dyh, w_, x_.shape(), spec_), input_dtype_);
  x_ = w_ = Tensor();
  return dx;
}

ConvTranspose3d::ConvTranspose3d(std::int64_t in_channels, std::int64_t out_channels,
                                 std::int64_t kernel, const Conv3dSpec& spec, bool bias)
    : in_channels_(in_channels), out_channels_(out_channels), spec_(spec) {
  check_layer_args("ConvTranspose3d", in_channels, out_channels, kernel, spec);
  weight_ = &register_parameter(
      "weight", Tensor::zeros({in_channels, out_channels, kernel, kernel, kernel}));
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({out_channels}), false);
}

Tensor ConvTranspose3d::forward(const Tensor& x) {
  const DType h = precision().storage_dtype(OpClass::conv);
  input_dtype_ = x.dtype();
  x_ = cast(x, h);
  w_ = cast(weight_->value, h);
  return conv_transpose3d_forward(x_, w_, bias_ ? bias_->value : Tensor(), spec_);
}

Tensor ConvTranspose3d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(), "ConvTranspose3d '{}': backward() before forward()",
              name());
  const Tensor dyh = cast(dy, x_.dtype());
  conv_transpose3d_backward_weights(dyh, x_, weight_->grad, bias_ ? bias_->grad : no_bias_grad_,
                                    spec_);
  weight_->mark_grad_ready();
  if (bias_) bias_->mark_grad_ready();
  Tensor dx;
  if (input_grad_)
    dx = cast(conv_transpose3d_backward_data(dyh, w_, x_.shape(), spec_), input_dtype_);
  x_ = w_ = Tensor();
  return dx;
}

}  // namespace benchhost::nn
