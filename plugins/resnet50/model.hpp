#pragma once
/// @file plugins/resnet50/model.hpp  ResNet v1.5 (bottleneck) with explicit backward, built from
/// the SDK's conv/bn/pool layers. One implementation for the full ResNet-50 and the width/depth
/// scaled variants of the mini config.
///
/// Note [ResNet-50 v1.5]
/// v1.5 differs from the paper's v1 only in where a downsampling block strides: on its 3x3
/// convolution (conv2), not on the first 1x1 (conv1). Blocks per stage 3-4-6-3, bottleneck widths
/// 64-128-256-512 with expansion 4, projection shortcut (1x1 conv + BN, with the block's stride)
/// on the first block of each stage, a 7x7/2 stem conv + BN + ReLU + 3x3/2 max pool, global
/// average pooling and a fully connected layer. With 1000 classes: 25,557,032 parameters, ~4.1
/// GMAC per 224x224 image forward. Every batch norm that is followed by a ReLU runs it fused.
/// Optionally the last BN of each block starts with gamma = 0 (each block starts as identity),
/// which large-batch recipes use.
///
/// The mini variant keeps the code path and changes sizes: fewer blocks per stage, a narrower
/// base width and, for 28x28 inputs, a 3x3/1 stem conv without max pooling.
///
/// Ownership: the model owns its layers; it keeps the activations of the last forward for the
/// backward. Threading: one training thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/layers.hpp"
#include "benchhost/nn/module.hpp"

namespace benchhost::resnet {

struct ResNetConfig {
  std::vector<std::int64_t> blocks{3, 4, 6, 3};  ///< bottleneck blocks per stage
  std::int64_t base_width = 64;  ///< stem channels and stage-1 bottleneck width (doubles per stage)
  std::int64_t expansion = 4;
  std::int64_t num_classes = 1000;
  std::int64_t in_channels = 3;
  bool small_stem = false;       ///< 3x3/1 stem conv, no max pool (28x28 or 32x32 inputs)
  bool zero_init_last_bn_gamma = false;
  nn::ImageLayout layout = nn::ImageLayout::nhwc;
  double bn_eps = 1e-5;
  double bn_momentum = 0.1;      ///< PyTorch convention (MXNet's 0.9 decay = 0.1 here)

  /// The MLPerf model: ResNet-50 v1.5.
  static ResNetConfig resnet50(std::int64_t num_classes = 1000);
};

/// One bottleneck block (Note [ResNet-50 v1.5]): out = relu(bn3(conv3(relu(bn2(conv2(relu(bn1(
/// conv1(x))))))) + shortcut(x)).
class Bottleneck : public nn::Layer {
 public:
  Bottleneck(std::int64_t in_channels, std::int64_t width, std::int64_t stride,
             const ResNetConfig& config);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  nn::BatchNorm2d& last_bn() { return *bn3_; }
  bool has_projection() const { return proj_conv_ != nullptr; }

 private:
  nn::Conv2d *conv1_, *conv2_, *conv3_, *proj_conv_ = nullptr;
  nn::BatchNorm2d *bn1_, *bn2_, *bn3_, *proj_bn_ = nullptr;
  Tensor out_;  // post-ReLU output: its sign is the ReLU mask
};

/// The network: stem, stages, global average pool, fc. forward(images) -> logits [N, classes].
/// Images are [N, C, H, W] or [N, H, W, C] according to config.layout.
class ResNet : public nn::Layer {
 public:
  explicit ResNet(const ResNetConfig& config);
  Tensor forward(const Tensor& x) override;
  /// Backward from d(loss)/d(logits); returns an undefined tensor (no gradient for the images).
  Tensor backward(const Tensor& dlogits) override;
  const ResNetConfig& config() const { return config_; }

  /// Kaiming-normal (fan_out, ReLU) conv weights as in torchvision/MLPerf, BN gamma 1 / beta 0
  /// (gamma 0 for each block's last BN with zero_init_last_bn_gamma), fc weight ~ U(+-1/sqrt(in))
  /// and bias likewise (PyTorch's Linear default). Deterministic per (seed, parameter name).
  void initialize(std::uint64_t seed);

  /// Multiply-accumulates of one forward pass for one image of h x w (convolutions and fc).
  double forward_macs_per_image(std::int64_t h, std::int64_t w) const;

  /// MLPerf's tensor name for a parameter of this model ("stage2_unit1_conv1sc_weight"), for the
  /// weights_initialization MLLOG events; "" for names it does not know.
  static std::string mlperf_tensor_name(const std::string& parameter_name);

 private:
  ResNetConfig config_;
  nn::Conv2d* stem_conv_;
  nn::BatchNorm2d* stem_bn_;
  nn::MaxPool2d* stem_pool_ = nullptr;
  std::vector<Bottleneck*> blocks_;
  nn::GlobalAvgPool* pool_;
  nn::Linear* fc_;
};

/// MLPerf's names of the parameters of a ResNet with `blocks` bottlenecks per stage, in the order
/// of ResNet::parameters(), read off the architecture without building it (describe() declares
/// closed ResNet-50's 161 names, and `benchhost list` must not allocate 25M parameters for that):
/// conv0_weight, bn0_gamma/beta; per stage s and unit u (1-based) stage{s}_unit{u}_conv{1,2,3}_weight
/// and _bn{1,2,3}_gamma/beta, the first unit adding the projection's conv1sc_weight and
/// bnsc_gamma/beta; fc1_weight, fc1_bias. The same names mlperf_tensor_name() gives a built model.
std::vector<std::string> mlperf_tensor_names(const std::vector<std::int64_t>& blocks);

/// y = relu(a + b), written into `a` (which must be a contiguous f32 tensor the caller owns).
void add_relu_(Tensor& a, const Tensor& b);
/// dy masked by out > 0 (the gradient through relu(a + b) for both a and b).
Tensor relu_mask_backward(const Tensor& dy, const Tensor& out);

}  // namespace benchhost::resnet
