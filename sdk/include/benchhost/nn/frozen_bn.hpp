#pragma once
/// @file nn/frozen_bn.hpp  Batch normalisation with frozen statistics and affine values
/// (torchvision.ops.FrozenBatchNorm2d), the normalisation of detection backbones fine-tuned
/// from ImageNet weights with small per-device batches.
///
/// Note [Frozen batch norm]
/// y = x * scale + shift per channel, scale = weight * rsqrt(running_var + eps), shift = bias -
/// running_mean * scale, eps 1e-5 (torchvision's default). All four [C] tensors ("weight",
/// "bias", "running_mean", "running_var", torchvision's state_dict names) are BUFFERS, not
/// Parameters: they are loaded with the weights (pretrained backbone) and saved with them, but
/// no optimizer sees them and no gradient is computed for them; parameter counts leave them
/// out, as PyTorch's sum(p.numel() for p in model.parameters()) does. The layer's backward gives
/// only dx = dy * scale (through the ReLU mask when fused). It runs on the SDK's batch-norm ops
/// in frozen-statistics mode (batch_norm_forward_eval with `saved`, batch_norm_backward), so it
/// has their CPU (oneDNN) and CUDA implementations and their dtypes; its behaviour is the same in
/// training and evaluation mode, except that only training mode keeps the input for backward.
/// Initial values: weight 1, bias 0, running_mean 0, running_var 1 (identity up to eps).
/// Ownership and threading: as every nn::Layer (one training thread).

#include <cstdint>

#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/module.hpp"

namespace benchhost::nn {

struct FrozenBatchNormSpec {
  double eps = 1e-5;
  bool fuse_relu = false;  ///< y = relu(x * scale + shift) in the same pass (BatchNormSpec::fuse_relu)
  ImageLayout layout = ImageLayout::nchw;
};

class FrozenBatchNorm2d : public Layer {
 public:
  FrozenBatchNorm2d(std::int64_t channels, const FrozenBatchNormSpec& spec);
  Tensor forward(const Tensor& x) override;
  /// dx only (Note [Frozen batch norm]); throws InvalidArgument without a training-mode forward.
  Tensor backward(const Tensor& dy) override;
  const FrozenBatchNormSpec& spec() const { return spec_; }
  std::int64_t channels() const { return channels_; }
  Tensor& weight() { return *weight_; }
  Tensor& bias() { return *bias_; }
  Tensor& running_mean() { return *running_mean_; }
  Tensor& running_var() { return *running_var_; }

 private:
  BatchNormSpec bn_spec() const;

  std::int64_t channels_;
  FrozenBatchNormSpec spec_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor* running_mean_ = nullptr;
  Tensor* running_var_ = nullptr;
  Tensor x_;
  BatchNormSaved saved_;
};

}  // namespace benchhost::nn
