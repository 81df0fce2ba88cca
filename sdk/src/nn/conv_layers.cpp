// nn::Layer wrappers of the convolution, batch norm and pooling ops (nn/conv.hpp). Each layer
// keeps exactly what its backward pass needs from the last forward pass, and calls
// mark_grad_ready() on its parameters as soon as their gradients are final (before computing
// the input gradient, so data parallelism can start reducing them early).

#include "benchhost/nn/conv.hpp"

#include "benchhost/nn/ops.hpp"
#include "benchhost/precision.hpp"

namespace benchhost::nn {

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_h,
               std::int64_t kernel_w, const Conv2dSpec& spec, bool bias)
    : in_channels_(in_channels), out_channels_(out_channels), spec_(spec) {
  BH_CHECK_AS(InvalidArgument, in_channels > 0 && out_channels > 0 && kernel_h > 0 &&
                                   kernel_w > 0 && spec.groups > 0 &&
                                   in_channels % spec.groups == 0 &&
                                   out_channels % spec.groups == 0,
              "Conv2d: channels {} -> {} must be positive and divisible by groups {}, kernel "
              "{}x{} positive",
              in_channels, out_channels, spec.groups, kernel_h, kernel_w);
  weight_ = &register_parameter(
      "weight", Tensor::zeros({out_channels, in_channels / spec.groups, kernel_h, kernel_w}));
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({out_channels}), false);
}

Tensor Conv2d::forward(const Tensor& x) {
  // Note [Layers under a precision policy] (nn/module.hpp): the conv class's type for the input
  // and a per-forward copy of the fp32 master weight, both kept for backward.
  const DType h = precision().storage_dtype(OpClass::conv);
  input_dtype_ = x.dtype();
  x_ = cast(x, h);
  w_ = cast(weight_->value, h);
  return conv2d_forward(x_, w_, bias_ ? bias_->value : Tensor(), spec_);
}

Tensor Conv2d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(), "Conv2d '{}': backward() before forward()", name());
  const Tensor dyh = cast(dy, x_.dtype());
  conv2d_backward_weights(dyh, x_, weight_->grad, bias_ ? bias_->grad : no_bias_grad_, spec_);
  weight_->mark_grad_ready();
  if (bias_) bias_->mark_grad_ready();
  Tensor dx;
  if (input_grad_) dx = cast(conv2d_backward_data(dyh, w_, x_.shape(), spec_), input_dtype_);
  x_ = w_ = Tensor();
  return dx;
}

Tensor Conv2d::apply(const Tensor& x) const {
  const DType h = precision().storage_dtype(OpClass::conv);
  return conv2d_forward(cast(x, h), cast(weight_->value, h), bias_ ? bias_->value : Tensor(), spec_);
}

Tensor Conv2d::apply_backward(const Tensor& dy, const Tensor& x, bool input_grad) {
  const DType h = precision().storage_dtype(OpClass::conv);
  const Tensor dyh = cast(dy, h);
  conv2d_backward_weights(dyh, cast(x, h), weight_->grad, bias_ ? bias_->grad : no_bias_grad_, spec_);
  if (!input_grad) return Tensor();
  return cast(conv2d_backward_data(dyh, cast(weight_->value, h), x.shape(), spec_), x.dtype());
}

BatchNorm2d::BatchNorm2d(std::int64_t channels, const BatchNormSpec& spec)
    : channels_(channels), spec_(spec) {
  BH_CHECK_AS(InvalidArgument, channels > 0 && spec.eps > 0 && spec.momentum >= 0 &&
                                   spec.momentum <= 1,
              "BatchNorm2d: channels ({}) and eps ({}) must be positive, momentum ({}) in [0, 1]",
              channels, spec.eps, spec.momentum);
  gamma_ = &register_parameter("weight", Tensor::full({channels}, 1.0), false);
  beta_ = &register_parameter("bias", Tensor::zeros({channels}), false);
  running_mean_ = &register_buffer("running_mean", Tensor::zeros({channels}));
  running_var_ = &register_buffer("running_var", Tensor::full({channels}, 1.0));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (is_training()) {
    x_ = x;
    return batch_norm_forward_train(x, gamma_->value, beta_->value, *running_mean_,
                                    *running_var_, spec_, saved_);
  }
  x_ = Tensor();
  return batch_norm_forward_eval(x, gamma_->value, beta_->value, *running_mean_, *running_var_,
                                 spec_);
}

Tensor BatchNorm2d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(),
              "BatchNorm2d '{}': backward() needs a training-mode forward() first", name());
  Tensor dx = batch_norm_backward(dy, x_, gamma_->value, saved_, spec_, gamma_->grad,
                                  beta_->grad);
  gamma_->mark_grad_ready();
  beta_->mark_grad_ready();
  x_ = Tensor();
  saved_ = BatchNormSaved{};
  return dx;
}

Tensor MaxPool2d::forward(const Tensor& x) {
  Tensor y = max_pool2d_forward(x, spec_);
  if (is_training()) {
    x_ = x;
    y_ = y;
  }
  return y;
}

Tensor MaxPool2d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(),
              "MaxPool2d '{}': backward() needs a training-mode forward() first", name());
  Tensor dx = max_pool2d_backward(dy, x_, y_, spec_);
  x_ = Tensor();
  y_ = Tensor();
  return dx;
}

Tensor AvgPool2d::forward(const Tensor& x) {
  x_shape_ = x.shape();
  return avg_pool2d_forward(x, spec_);
}

Tensor AvgPool2d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, !x_shape_.empty(), "AvgPool2d '{}': backward() before forward()",
              name());
  return avg_pool2d_backward(dy, x_shape_, spec_);
}

Tensor GlobalAvgPool::forward(const Tensor& x) {
  x_shape_ = x.shape();
  return global_avg_pool_forward(x, layout_);
}

Tensor GlobalAvgPool::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, !x_shape_.empty(),
              "GlobalAvgPool '{}': backward() before forward()", name());
  return global_avg_pool_backward(dy, x_shape_, layout_);
}

}  // namespace benchhost::nn
