#pragma once
/// @file plugins/unet3d/model.hpp  3D U-Net (MLPerf Training image_segmentation, KiTS19) with
/// explicit backward, built from the SDK's volumetric layers (nn/conv3d.hpp, nn/segmentation.hpp).
///
/// Note [3D U-Net]
/// The reference (image_segmentation/pytorch/model/{unet3d,layers}.py) with filters F =
/// [32, 64, 128, 256, 320], one input channel and three classes:
///   conv block  = Conv3d k3 p1 (no bias) -> InstanceNorm3d(affine, eps 1e-5) -> ReLU
///   input block = two conv blocks 1 -> F0 -> F0
///   downsample  = a conv block with stride 2 (F[i] -> F[i+1]), then one with stride 1; one per
///                 step of F, then the bottleneck: one more downsample block F[-1] -> F[-1]
///   upsample    = ConvTranspose3d k2 s2 with bias (no norm, no activation), concatenated with
///                 the skip on channels (upsampled first), then two conv blocks 2C -> C -> C;
///                 len(F) of them: F[-1] -> F[-1], then back down the list to F0
///   output      = Conv3d 1x1x1 F0 -> 3 with bias (logits)
/// 31,190,243 parameters. A shorter filter list is a size change only (the mini uses it): the
/// depth follows len(F), and inputs need a side divisible by 2^len(F) with a bottleneck of at
/// least 2 voxels per side (instance norm over one voxel outputs its bias).
/// Parameter names are the reference's state_dict names ("downsample.2.conv1.0.weight",
/// "upsample.0.upsample_conv.0.bias", "output.conv.0.weight"), so a weights file interchanges
/// with the PyTorch peer. Initialisation is PyTorch's default for each layer (uniform +-1/sqrt(
/// fan_in) for weights and biases, with ConvTranspose3d's fan_in from its weight's dimension 1),
/// instance norm gamma 1 / beta 0; the reference's weights_init_scale is 1.
///
/// Ownership: the model owns its layers and keeps the activations of the last forward for the
/// backward. Threading: one training thread.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/nn/conv3d.hpp"
#include "benchhost/nn/module.hpp"
#include "benchhost/nn/segmentation.hpp"
#include "benchhost/nn/volume.hpp"

namespace benchhost::unet3d {

struct UNet3dConfig {
  std::vector<std::int64_t> filters{32, 64, 128, 256, 320};
  std::int64_t in_channels = 1;
  std::int64_t num_classes = 3;
  nn::VolumeLayout layout = nn::VolumeLayout::ndhwc;
  double norm_eps = 1e-5;
};

/// Conv3d (no bias) -> InstanceNorm3d -> ReLU, the ReLU fused into the norm.
class ConvBlock : public nn::Layer {
 public:
  ConvBlock(std::int64_t in_channels, std::int64_t out_channels, std::int64_t stride,
            const UNet3dConfig& config);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  nn::Conv3d& conv() { return *conv_; }

 private:
  nn::Conv3d* conv_;
  nn::InstanceNorm3d* norm_;
};

/// Two conv blocks; the first strides by `stride` (1 for the input block, 2 to downsample).
class DoubleConv : public nn::Layer {
 public:
  DoubleConv(std::int64_t in_channels, std::int64_t out_channels, std::int64_t stride,
             const UNet3dConfig& config);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  ConvBlock& first() { return *conv1_; }

 private:
  ConvBlock *conv1_, *conv2_;
};

/// ConvTranspose3d k2 s2 (+bias), concatenation with the skip, two conv blocks.
class UpsampleBlock : public nn::Module {
 public:
  UpsampleBlock(std::int64_t in_channels, std::int64_t out_channels, const UNet3dConfig& config);
  Tensor forward(const Tensor& x, const Tensor& skip);
  /// {d(input), d(skip)} from d(output).
  std::pair<Tensor, Tensor> backward(const Tensor& dy);

 private:
  std::int64_t out_channels_;
  nn::VolumeLayout layout_;
  nn::ConvTranspose3d* up_;
  ConvBlock *conv1_, *conv2_;
};

class UNet3d : public nn::Layer {
 public:
  explicit UNet3d(const UNet3dConfig& config);
  /// logits [N, classes, D, H, W] (or NDHWC) from images [N, 1, D, H, W] (or NDHWC).
  Tensor forward(const Tensor& x) override;
  /// Backward from d(loss)/d(logits); returns an undefined tensor (no gradient for the images).
  Tensor backward(const Tensor& dlogits) override;
  const UNet3dConfig& config() const { return config_; }

  /// PyTorch's default initialisation (Note [3D U-Net]), deterministic per (seed, parameter name).
  void initialize(std::uint64_t seed);
  /// Multiply-accumulates of one forward pass over a d x h x w volume (convolutions only).
  double forward_macs(std::int64_t d, std::int64_t h, std::int64_t w) const;
  /// The smallest side a volume may have, and the multiple every side must be: 2^(len(F)).
  std::int64_t side_multiple() const;

 private:
  UNet3dConfig config_;
  DoubleConv* input_block_;
  std::vector<DoubleConv*> downsample_;
  DoubleConv* bottleneck_;
  std::vector<UpsampleBlock*> upsample_;
  nn::Conv3d* output_;
};

/// Parameters of the model a configuration describes, counted without building it.
std::int64_t count_parameters(const UNet3dConfig& config);

}  // namespace benchhost::unet3d
