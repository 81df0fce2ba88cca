// FrozenBatchNorm2d (nn/frozen_bn.hpp, Note [Frozen batch norm]) on the batch-norm ops of
// nn/conv.hpp in frozen-statistics mode.

#include "benchhost/nn/frozen_bn.hpp"

#include "benchhost/error.hpp"

namespace benchhost::nn {

FrozenBatchNorm2d::FrozenBatchNorm2d(std::int64_t channels, const FrozenBatchNormSpec& spec)
    : channels_(channels), spec_(spec) {
  BH_CHECK_AS(InvalidArgument, channels > 0, "FrozenBatchNorm2d: channels must be positive, got {}",
              channels);
  weight_ = &register_buffer("weight", Tensor::full({channels}, 1.0));
  bias_ = &register_buffer("bias", Tensor::zeros({channels}));
  running_mean_ = &register_buffer("running_mean", Tensor::zeros({channels}));
  running_var_ = &register_buffer("running_var", Tensor::full({channels}, 1.0));
}

BatchNormSpec FrozenBatchNorm2d::bn_spec() const {
  BatchNormSpec s;
  s.eps = spec_.eps;
  s.fuse_relu = spec_.fuse_relu;
  s.layout = spec_.layout;
  return s;
}

Tensor FrozenBatchNorm2d::forward(const Tensor& x) {
  const bool keep = is_training();
  BatchNormSaved saved;
  Tensor y = batch_norm_forward_eval(x, *weight_, *bias_, *running_mean_, *running_var_, bn_spec(),
                                     keep ? &saved : nullptr);
  if (keep) {
    x_ = x;
    saved_ = std::move(saved);
  } else {
    x_ = Tensor();
    saved_ = BatchNormSaved();
  }
  return y;
}

Tensor FrozenBatchNorm2d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(),
              "FrozenBatchNorm2d '{}': backward() without a forward() in training mode", name());
  // The affine gradients are computed by the op and dropped (Note [Frozen batch norm]).
  Tensor dweight = Tensor::zeros({channels_}, DType::f32, weight_->device());
  Tensor dbias = Tensor::zeros({channels_}, DType::f32, weight_->device());
  Tensor dx = batch_norm_backward(dy, x_, *weight_, saved_, bn_spec(), dweight, dbias);
  x_ = Tensor();
  saved_ = BatchNormSaved();
  return dx;
}

}  // namespace benchhost::nn
