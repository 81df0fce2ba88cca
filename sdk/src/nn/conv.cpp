// The Tensor-level API of nn/conv.hpp: image layouts, and for the convolution, batch norm and
// pooling ops the shape checks, output allocation and dispatch through the op registry. The
// ops' calling conventions are in conv_common.hpp; the ops are declared, next to their oneDNN
// CPU implementations, in nn/cpu/conv2d.cpp, nn/cpu/batchnorm.cpp and nn/cpu/pooling.cpp (CUDA:
// nn/cuda/conv_cudnn.cpp, nn/cuda/batchnorm.cpp, nn/cuda/pooling.cpp).

#include <algorithm>
#include <cctype>

#include "nn/conv_common.hpp"

namespace benchhost::nn {

using namespace conv_detail;

// ---------------------------------------------------------------------------------------------
// Image layouts
// ---------------------------------------------------------------------------------------------

const char* image_layout_name(ImageLayout layout) {
  return layout == ImageLayout::nchw ? "nchw" : "nhwc";
}

ImageLayout parse_image_layout(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "nchw") return ImageLayout::nchw;
  if (t == "nhwc" || t == "channels_last") return ImageLayout::nhwc;
  BH_THROW(InvalidArgument, "unknown image layout '{}' (expected nchw or nhwc)", text);
}

ImageDims image_dims(const Shape& shape, ImageLayout layout, const char* what) {
  BH_CHECK_AS(InvalidArgument, shape.size() == 4, "{}: expected a 4-d {} tensor, got shape {}",
              what, image_layout_name(layout), shape_str(shape));
  if (layout == ImageLayout::nchw) return {shape[0], shape[1], shape[2], shape[3]};
  return {shape[0], shape[3], shape[1], shape[2]};
}

Shape image_shape(const ImageDims& d, ImageLayout layout) {
  if (layout == ImageLayout::nchw) return {d.n, d.c, d.h, d.w};
  return {d.n, d.h, d.w, d.c};
}

// ---------------------------------------------------------------------------------------------
// Convolution
// ---------------------------------------------------------------------------------------------

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dSpec& spec) {
  return image_shape(conv_geometry(x, w, spec).y, spec.layout);
}

double conv2d_macs_per_sample(const Shape& x, const Shape& w, const Conv2dSpec& spec) {
  const ConvGeometry g = conv_geometry(x, w, spec);
  return static_cast<double>(g.y.c) * g.y.h * g.y.w * (g.x.c / g.groups) * g.kh * g.kw;
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dSpec& s) {
  check_floating(x, "conv2d_forward", "input");
  check_floating(w, "conv2d_forward", "weight");
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), s);
  if (bias.defined()) {
    check_floating(bias, "conv2d_forward", "bias");
    BH_CHECK_AS(InvalidArgument, bias.numel() == g.out_channels,
                "conv2d_forward: bias has {} elements, expected {} (output channels)",
                bias.numel(), g.out_channels);
  }
  OpCall call;
  call.inputs = {x.contiguous(), w.contiguous(), bias.defined() ? bias.contiguous() : Tensor()};
  call.outputs = {Tensor::empty(image_shape(g.y, s.layout), x.dtype(), x.device())};
  call.attrs = conv_attrs(s);
  dispatch("conv2d_forward", call);
  return call.outputs[0];
}

Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dSpec& s) {
  check_floating(dy, "conv2d_backward_data", "output gradient");
  check_floating(w, "conv2d_backward_data", "weight");
  const ConvGeometry g = conv_geometry(x_shape, w.shape(), s);
  BH_CHECK_AS(InvalidArgument, dy.shape() == image_shape(g.y, s.layout),
              "conv2d_backward_data: output gradient {} does not match the forward output {}",
              shape_str(dy.shape()), shape_str(image_shape(g.y, s.layout)));
  OpCall call;
  call.inputs = {dy.contiguous(), w.contiguous()};
  call.outputs = {Tensor::empty(x_shape, dy.dtype(), dy.device())};
  call.attrs = conv_attrs(s);
  dispatch("conv2d_backward_data", call);
  return call.outputs[0];
}

void conv2d_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& dbias,
                             const Conv2dSpec& s) {
  check_floating(dy, "conv2d_backward_weights", "output gradient");
  check_floating(x, "conv2d_backward_weights", "input");
  check_floating(dw, "conv2d_backward_weights", "weight gradient");
  BH_CHECK_AS(InvalidArgument, dw.is_contiguous(),
              "conv2d_backward_weights: the weight gradient must be contiguous (it accumulates "
              "in place)");
  const ConvGeometry g = conv_geometry(x.shape(), dw.shape(), s);
  BH_CHECK_AS(InvalidArgument, dy.shape() == image_shape(g.y, s.layout),
              "conv2d_backward_weights: output gradient {} does not match the forward output {}",
              shape_str(dy.shape()), shape_str(image_shape(g.y, s.layout)));
  if (dbias.defined())
    BH_CHECK_AS(InvalidArgument, dbias.numel() == g.out_channels && dbias.is_contiguous() &&
                                     is_floating(dbias.dtype()),
                "conv2d_backward_weights: bias gradient must be a contiguous floating [{}]",
                g.out_channels);
  OpCall call;
  call.inputs = {dy.contiguous(), x.contiguous()};
  call.outputs = {dw, dbias};
  call.attrs = conv_attrs(s);
  dispatch("conv2d_backward_weights", call);
}

// ---------------------------------------------------------------------------------------------
// Batch normalisation
// ---------------------------------------------------------------------------------------------

namespace {

void check_vec(const Tensor& t, std::int64_t c, const char* what) {
  BH_CHECK_AS(InvalidArgument,
              t.defined() && t.numel() == c && t.dtype() == DType::f32 && t.is_contiguous(),
              "batch_norm: {} must be a contiguous f32 tensor of {} elements (channels), got {}",
              what, c, t.defined() ? t.describe() : std::string("undefined"));
}

ImageDims check_input(const Tensor& x, const BatchNormSpec& s, const char* op) {
  check_floating(x, op, "input");
  return image_dims(x.shape(), s.layout, op);
}

}  // namespace

Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                Tensor& running_mean, Tensor& running_var,
                                const BatchNormSpec& s, BatchNormSaved& saved) {
  const ImageDims d = check_input(x, s, "batch_norm_forward_train");
  check_vec(gamma, d.c, "gamma");
  check_vec(beta, d.c, "beta");
  check_vec(running_mean, d.c, "running_mean");
  check_vec(running_var, d.c, "running_var");
  const std::int64_t count = d.n * d.h * d.w;
  BH_CHECK_AS(InvalidArgument, count > 1,
              "batch_norm_forward_train: needs more than one value per channel (input {}); use "
              "a batch of at least 2 or evaluation mode",
              shape_str(x.shape()));
  OpCall call;
  call.inputs = {x.contiguous(), gamma, beta, Tensor(), Tensor()};
  call.outputs = {Tensor::empty(x.shape(), x.dtype(), x.device()),
                  Tensor::empty({d.c}, DType::f32, x.device()),
                  Tensor::empty({d.c}, DType::f32, x.device())};
  call.attrs = bn_attrs(s, true);
  dispatch("batch_norm_forward", call);
  saved.mean = call.outputs[1];
  saved.variance = call.outputs[2];
  saved.output = s.fuse_relu ? call.outputs[0] : Tensor();
  saved.training = true;
  // The running statistics live on x's device: the update is an op of its own so that it runs
  // there (a CUDA implementation cannot be reached through host pointers).
  OpCall update;
  update.inputs = {saved.mean, saved.variance};
  update.outputs = {running_mean, running_var};
  update.attrs.set("momentum", s.momentum).set("count", static_cast<double>(count));
  dispatch("batch_norm_running_update", update);
  return call.outputs[0];
}

Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var,
                               const BatchNormSpec& s, BatchNormSaved* saved) {
  const ImageDims d = check_input(x, s, "batch_norm_forward_eval");
  check_vec(gamma, d.c, "gamma");
  check_vec(beta, d.c, "beta");
  check_vec(running_mean, d.c, "running_mean");
  check_vec(running_var, d.c, "running_var");
  OpCall call;
  call.inputs = {x.contiguous(), gamma, beta, running_mean, running_var};
  call.outputs = {Tensor::empty(x.shape(), x.dtype(), x.device()),
                  Tensor::empty({d.c}, DType::f32, x.device()),
                  Tensor::empty({d.c}, DType::f32, x.device())};
  call.attrs = bn_attrs(s, false);
  dispatch("batch_norm_forward", call);
  if (saved != nullptr) {
    saved->mean = call.outputs[1];
    saved->variance = call.outputs[2];
    saved->output = s.fuse_relu ? call.outputs[0] : Tensor();
    saved->training = false;
  }
  return call.outputs[0];
}

Tensor batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                           const BatchNormSaved& saved, const BatchNormSpec& s, Tensor& dgamma,
                           Tensor& dbeta) {
  const ImageDims d = check_input(x, s, "batch_norm_backward");
  BH_CHECK_AS(InvalidArgument, dy.defined() && dy.shape() == x.shape(),
              "batch_norm_backward: output gradient {} does not match the input {}",
              dy.defined() ? shape_str(dy.shape()) : "undefined", shape_str(x.shape()));
  check_vec(gamma, d.c, "gamma");
  check_vec(dgamma, d.c, "gamma gradient");
  check_vec(dbeta, d.c, "beta gradient");
  check_vec(saved.mean, d.c, "saved mean (was the forward pass run with `saved`?)");
  check_vec(saved.variance, d.c, "saved variance");
  BH_CHECK_AS(InvalidArgument, !s.fuse_relu || (saved.output.defined() &&
                                                saved.output.shape() == x.shape()),
              "batch_norm_backward: fuse_relu needs the forward output saved in `saved.output`");
  OpCall call;
  call.inputs = {dy.contiguous(), x.contiguous(), gamma, saved.mean, saved.variance,
                 s.fuse_relu ? saved.output.contiguous() : Tensor()};
  call.outputs = {Tensor::empty(x.shape(), x.dtype(), x.device()), dgamma, dbeta};
  call.attrs = bn_attrs(s, saved.training);
  dispatch("batch_norm_backward", call);
  return call.outputs[0];
}

// ---------------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------------

namespace {

Tensor pool_forward(const Tensor& x, const Pool2dSpec& s, bool max, const char* op) {
  check_floating(x, op, "input");
  const PoolGeometry g = pool_geometry(x.shape(), s, op);
  OpCall call;
  call.inputs = {x.contiguous()};
  call.outputs = {Tensor::empty(image_shape(g.y, s.layout), x.dtype(), x.device())};
  call.attrs = pool_attrs(s);
  dispatch(max ? "max_pool2d_forward" : "avg_pool2d_forward", call);
  return call.outputs[0];
}

Tensor pool_backward(const Tensor& dy, const Shape& x_shape, const Pool2dSpec& s, const Tensor* x,
                     const Tensor* y, const char* op) {
  check_floating(dy, op, "output gradient");
  const PoolGeometry g = pool_geometry(x_shape, s, op);
  BH_CHECK_AS(InvalidArgument, dy.shape() == image_shape(g.y, s.layout),
              "{}: output gradient {} does not match the forward output {}", op,
              shape_str(dy.shape()), shape_str(image_shape(g.y, s.layout)));
  OpCall call;
  call.inputs = {dy.contiguous()};
  if (x != nullptr) {
    check_floating(*x, op, "forward input");
    check_floating(*y, op, "forward output");
    BH_CHECK_AS(InvalidArgument, y->shape() == dy.shape(),
                "{}: forward output {} does not match the output gradient {}", op,
                shape_str(y->shape()), shape_str(dy.shape()));
    call.inputs.push_back(x->contiguous());
    call.inputs.push_back(y->contiguous());
  }
  call.outputs = {Tensor::empty(x_shape, dy.dtype(), dy.device())};
  call.attrs = pool_attrs(s);
  dispatch(x != nullptr ? "max_pool2d_backward" : "avg_pool2d_backward", call);
  return call.outputs[0];
}

Pool2dSpec global_spec(const Shape& x_shape, ImageLayout layout) {
  const ImageDims d = image_dims(x_shape, layout, "global_avg_pool input");
  Pool2dSpec s;
  s.kernel_h = s.stride_h = d.h;
  s.kernel_w = s.stride_w = d.w;
  s.pad_h = s.pad_w = 0;
  s.count_include_pad = true;
  s.layout = layout;
  return s;
}

}  // namespace

Shape pool2d_output_shape(const Shape& x, const Pool2dSpec& spec) {
  return image_shape(pool_geometry(x, spec, "pool2d").y, spec.layout);
}

Tensor max_pool2d_forward(const Tensor& x, const Pool2dSpec& spec) {
  return pool_forward(x, spec, true, "max_pool2d_forward");
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& x, const Tensor& y,
                           const Pool2dSpec& spec) {
  BH_CHECK_AS(InvalidArgument, x.defined() && y.defined(),
              "max_pool2d_backward: needs the forward input and output");
  return pool_backward(dy, x.shape(), spec, &x, &y, "max_pool2d_backward");
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dSpec& spec) {
  return pool_forward(x, spec, false, "avg_pool2d_forward");
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dSpec& spec) {
  return pool_backward(dy, x_shape, spec, nullptr, nullptr, "avg_pool2d_backward");
}

Tensor global_avg_pool_forward(const Tensor& x, ImageLayout layout) {
  const Pool2dSpec s = global_spec(x.shape(), layout);
  Tensor y = pool_forward(x, s, false, "global_avg_pool_forward");
  // [N, C, 1, 1] and [N, 1, 1, C] hold the same bytes as [N, C].
  return y.view({y.numel() / image_dims(x.shape(), layout, "global_avg_pool").c,
                 image_dims(x.shape(), layout, "global_avg_pool").c});
}

Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape, ImageLayout layout) {
  const Pool2dSpec s = global_spec(x_shape, layout);
  const ImageDims d = image_dims(x_shape, layout, "global_avg_pool_backward");
  BH_CHECK_AS(InvalidArgument, dy.shape() == Shape({d.n, d.c}),
              "global_avg_pool_backward: output gradient {} should be [{}, {}]",
              shape_str(dy.shape()), d.n, d.c);
  const Tensor dy4 = dy.contiguous().view(image_shape({d.n, d.c, 1, 1}, layout));
  return pool_backward(dy4, x_shape, s, nullptr, nullptr, "global_avg_pool_backward");
}

}  // namespace benchhost::nn
