#pragma once
/// @file plugins/retinanet/model.hpp  RetinaNet (MLPerf "ssd"): a ResNeXt50_32x4d backbone with
/// frozen batch norm, a feature pyramid P3-P7 and the shared classification and box-regression
/// heads, with explicit backward. One implementation for the reference model and scaled-down
/// configurations (fewer blocks, fewer groups, narrower channels) used by tests and the mini run.
///
/// Note [RetinaNet architecture]
/// As torchvision 0.14's retinanet_resnet50_fpn built on resnext50_32x4d by the MLPerf reference
/// (single_stage_detector/ssd/model): stem conv 7x7/2 + FrozenBN + ReLU + max pool 3x3/2; four
/// stages of ResNeXt bottlenecks (1x1 -> grouped 3x3, stride on the 3x3 -> 1x1, expansion 4,
/// projection shortcut on each stage's first block) of widths width_per_group * groups * 2^s
/// and outputs stem_channels * 2^s * 4 (torchvision: planes 64 * 2^s; 128/256/512/1024 and
/// 256/512/1024/2048 for 32x4d). Every norm is a FrozenBatchNorm2d (nn/frozen_bn.hpp). The FPN
/// takes C3, C4, C5 (layer2..4): 1x1 lateral convs (with bias) to fpn_channels, nearest
/// upsampling of the coarser merged map to the lateral's size (nn/resample.hpp, torch's index
/// rule), sum, 3x3 output convs; P6 = conv3x3/2(P5), P7 = conv3x3/2(relu(P6)). The head is
/// shared by the five levels: head_convs x (conv3x3 + ReLU) then cls_logits (A*K outputs) for
/// classification, likewise then bbox_reg (A*4) for regression. Outputs per level are
/// [N, H*W*A, K] and [N, H*W*A, 4] in torchvision's (y, x, anchor) order: channel a*K + k of
/// the conv output at (y, x) is row (y*W + x)*A + a, column k. In NHWC that is a reshape of the
/// conv output; in NCHW a permute.
///
/// Note [Frozen layers]
/// trainable_layers = t trains torchvision's ["layer4", "layer3", "layer2", "layer1", "conv1"]
/// [:t]; the MLPerf reference uses 3. Frozen convolutions stay Parameters (their names and
/// counts match PyTorch's state_dict and the reference's 37,060,652), but the model never
/// computes their gradient (it stays zero), keeps no activations for them, and
/// trainable_parameters() leaves them out: hand the optimizer trainable_parameters(), not
/// parameters(). The backward pass stops at the input of the lowest trainable stage.
/// The FrozenBN affine values and statistics are buffers (Note [Frozen batch norm]).
///
/// Parameter names are torchvision's RetinaNet state_dict names: backbone.body.conv1.weight,
/// backbone.body.layer2.0.conv2.weight, backbone.body.layer2.0.downsample.0.weight (buffers
/// backbone.body.bn1.running_mean, ...), backbone.fpn.inner_blocks.0.0.weight,
/// backbone.fpn.layer_blocks.2.0.bias, backbone.fpn.extra_blocks.p6.weight,
/// head.classification_head.conv.0.0.weight, head.classification_head.cls_logits.bias,
/// head.regression_head.bbox_reg.weight; so save_weights()/load_weights() files load into the
/// PyTorch peer (tools/peers/retinanet_peer.py) and back.
///
/// Precision: f32 (the FPN and head run the SDK's functional convolutions on their inputs'
/// dtype). Ownership: the model owns its layers and keeps the activations of the last training
/// forward for backward. Threading: one training thread.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/frozen_bn.hpp"
#include "benchhost/nn/module.hpp"

namespace benchhost::retinanet {

struct RetinaNetConfig {
  std::vector<std::int64_t> blocks{3, 4, 6, 3};   ///< bottlenecks per stage (ResNeXt50)
  std::int64_t groups = 32, width_per_group = 4;  ///< stage widths width_per_group * groups * 2^s
  std::int64_t stem_channels = 64;                ///< stem output; stage outputs stem * 2^s * 4
  std::int64_t fpn_channels = 256;
  std::int64_t num_classes = 264;
  std::int64_t num_anchors = 9;
  std::int64_t head_convs = 4;                    ///< conv3x3 + ReLU layers per head
  std::int64_t trainable_layers = 3;              ///< Note [Frozen layers]; 0..5
  nn::ImageLayout layout = nn::ImageLayout::nhwc;
};

struct HeadOutputs {
  std::vector<Tensor> cls_logits;   ///< per level l: f32 [N, H_l*W_l*A, K], (y, x, anchor) order
  std::vector<Tensor> bbox_deltas;  ///< per level l: f32 [N, H_l*W_l*A, 4]
  std::vector<std::pair<std::int64_t, std::int64_t>> grid_sizes;  ///< (H_l, W_l) for P3..P7
};

/// One ResNeXt bottleneck with frozen batch norms (Note [RetinaNet architecture]).
class Bottleneck : public nn::Layer {
 public:
  Bottleneck(std::int64_t in_channels, std::int64_t width, std::int64_t out_channels,
             std::int64_t stride, const RetinaNetConfig& config);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  /// Frozen: forward keeps nothing and backward is refused (Note [Frozen layers]).
  void set_frozen(bool frozen) { frozen_ = frozen; }
  /// false: backward() skips the input gradient (the lowest trainable block).
  void set_input_grad(bool on);

 private:
  nn::Conv2d *conv1_, *conv2_, *conv3_, *proj_conv_ = nullptr;
  nn::FrozenBatchNorm2d *bn1_, *bn2_, *bn3_, *proj_bn_ = nullptr;
  bool frozen_ = false;
  bool input_grad_ = true;
  Tensor out_;  // post-ReLU output (its sign is the ReLU mask)
};

class RetinaNet : public nn::Module {
 public:
  explicit RetinaNet(const RetinaNetConfig& config);
  const RetinaNetConfig& config() const { return config_; }

  /// images [N, 3, H, W] or [N, H, W, 3] per config.layout, already normalised and resized.
  HeadOutputs forward(const Tensor& images);
  /// Backward from d(loss)/d(cls_logits) and d(loss)/d(bbox_deltas) (shapes as forward's
  /// outputs); accumulates the gradients of the trainable parameters (the head's over the five
  /// levels). No image gradient. Needs a forward in training mode before it.
  void backward(const std::vector<Tensor>& dcls, const std::vector<Tensor>& dbox);

  /// The reference initialisation: backbone convs kaiming-normal (fan_out, relu), FrozenBN
  /// weight 1 / bias 0 / mean 0 / var 1; FPN convs kaiming-uniform (a = 1), bias 0; head convs
  /// N(0, 0.01), bias 0, cls_logits bias -log((1 - 0.01) / 0.01). Deterministic per (seed, name).
  void initialize(std::uint64_t seed);

  /// ImageNet-pretrained backbone weights from a file in nn/serialize.hpp format with
  /// torchvision resnext50_32x4d state_dict names ("conv1.weight", "bn1.running_mean",
  /// "layer1.0.conv2.weight", ...; fc.*, num_batches_tracked and other extra names are
  /// ignored). Every backbone parameter and buffer must be present with its shape: otherwise
  /// DataError naming the file and the tensor, and nothing is changed.
  void load_backbone(const std::string& path);

  /// Multiply-accumulates of one forward pass for one image of h x w (convolutions).
  double forward_macs(std::int64_t h, std::int64_t w) const;
  /// The part of forward_macs in the frozen backbone (config trainable_layers), which training
  /// runs forward only: no weight or input gradients.
  double frozen_forward_macs(std::int64_t h, std::int64_t w) const;

  /// The parameters the optimizer updates (parameters() less the frozen convs).
  std::vector<nn::Parameter*> trainable_parameters();

 private:
  Tensor head_output(const Tensor& y, std::int64_t per_anchor) const;
  Tensor head_grad(const Tensor& d, std::int64_t h, std::int64_t w, std::int64_t per_anchor) const;
  int first_trainable_stage() const;  // 0..3, 4 when no stage trains
  double count_macs(std::int64_t h, std::int64_t w, bool frozen_only) const;

  RetinaNetConfig config_;
  // backbone.body
  nn::Conv2d* stem_conv_;
  nn::FrozenBatchNorm2d* stem_bn_;
  nn::MaxPool2d* stem_pool_;
  std::vector<std::vector<Bottleneck*>> stages_;
  // backbone.fpn
  std::vector<nn::Conv2d*> inner_, layer_;
  nn::Conv2d *p6_, *p7_;
  // head
  std::vector<nn::Conv2d*> cls_convs_, box_convs_;
  nn::Conv2d *cls_logits_, *bbox_reg_;

  // Activations of the last training forward.
  std::vector<Tensor> c_;       // C3..C5 (FPN inputs)
  std::vector<Tensor> merged_;  // inputs of the FPN output convs, levels 3..5
  Tensor p5_, relu_p6_;
  std::vector<std::vector<Tensor>> cls_acts_, box_acts_;  // per level: tower input, each ReLU output
  std::vector<std::pair<std::int64_t, std::int64_t>> grids_;
  bool have_forward_ = false;
};

/// Trainable plus frozen-but-parameter weights (conv1, layer1) of a configuration, without
/// building it: the reference's 37,060,652 for RetinaNetConfig{} (FrozenBN values are buffers).
std::int64_t count_parameters(const RetinaNetConfig& config);
/// The trainable subset (Note [Frozen layers]): 36,849,004 for RetinaNetConfig{}.
std::int64_t count_trainable_parameters(const RetinaNetConfig& config);

}  // namespace benchhost::retinanet
