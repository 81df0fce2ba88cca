#pragma once
/// @file plugins/maskrcnn/model.hpp  Mask R-CNN R-50-FPN as MLPerf runs it (maskrcnn_benchmark's
/// e2e_mask_rcnn_R_50_FPN_1x): a ResNet-50 with the stride in each bottleneck's first 1x1 and
/// frozen batch norms, a feature pyramid P2-P6, the RPN head, the box head and the mask head, with
/// explicit backward. One implementation for the reference model and the scaled-down
/// configurations of tests and the mini run.
///
/// Note [Mask R-CNN architecture]
/// Backbone (maskrcnn_benchmark modeling/backbone/resnet.py, STRIDE_IN_1X1 = True): stem conv
/// 7x7/2 + FrozenBN + ReLU + max pool 3x3/2 (pad 1); four stages of bottlenecks (1x1 with the
/// stage's stride -> 3x3 -> 1x1, expansion 4, a projection shortcut on each stage's first block)
/// of widths stem_channels * 2^s and outputs stem_channels * 4 * 2^s. Every norm is a
/// FrozenBatchNorm2d. FPN (modeling/backbone/fpn.py): 1x1 lateral convs with bias on C2..C5
/// ("fpn_inner1..4"), top-down nearest 2x upsampling of the coarser merged map and sum, 3x3
/// output convs ("fpn_layer1..4") giving P2..P5, and P6 = max_pool2d(P5, kernel 1, stride 2)
/// (LastLevelMaxPool). RPN head (rpn/rpn.py RPNHead), shared by P2..P6: conv 3x3 + ReLU, then
/// 1x1 "cls_logits" (A objectness logits) and 1x1 "bbox_pred" (4A deltas, anchor-major). Box
/// head (roi_box_feature_extractors FPN2MLPFeatureExtractor, FPNPredictor): multi-level
/// RoIAlign 7x7 (nn/detection.hpp Note [Legacy RoIAlign], sampling ratio 2, levels P2..P5 by
/// the legacy level mapper) -> flatten (C, 7, 7) -> fc6 + ReLU -> fc7 + ReLU -> "cls_score" (K
/// classes, 0 the background) and "bbox_pred" (4K, class-specific). Mask head
/// (MaskRCNNFPNFeatureExtractor, MaskRCNNC4Predictor): RoIAlign 14x14 -> mask_convs x (conv
/// 3x3 + bias + ReLU, "mask_fcn1..") -> "conv5_mask" ConvTranspose2d 2x2/2 + ReLU ->
/// "mask_fcn_logits" 1x1 to K channels of 28x28.
///
/// The model computes no losses: forward() gives the RPN outputs, the box and mask heads run on
/// RoIs the workload chooses (proposals, sampled RoIs, detections), and backward() takes the
/// gradients of every output the training forward produced.
///
/// Note [Mask R-CNN frozen layers]
/// freeze_at = f freezes the stem (f >= 1) and the first f - 1 stages (MODEL.BACKBONE.
/// FREEZE_CONV_BODY_AT; MLPerf: 2, the stem and res2). Frozen convolutions stay parameters (so
/// names and counts match the reference's 44,347,573) but are never trained: they keep no
/// activations, their gradient stays zero, and trainable_parameters() leaves them out.
///
/// Parameter names are maskrcnn_benchmark's state_dict names: backbone.body.stem.conv1.weight,
/// backbone.body.layer1.0.conv1.weight, backbone.body.layer1.0.downsample.0.weight (FrozenBN
/// buffers backbone.body.stem.bn1.running_mean, ...), backbone.fpn.fpn_inner1.weight,
/// backbone.fpn.fpn_layer4.bias, rpn.head.conv.weight, rpn.head.cls_logits.weight,
/// rpn.head.bbox_pred.bias, roi_heads.box.feature_extractor.fc6.weight,
/// roi_heads.box.predictor.cls_score.weight, roi_heads.mask.feature_extractor.mask_fcn1.weight,
/// roi_heads.mask.predictor.conv5_mask.weight, roi_heads.mask.predictor.mask_fcn_logits.bias.
///
/// Note [Mask R-CNN layout]
/// The interface is NCHW whatever the layout: images [N, 3, H, W], the RPN outputs [N, A, H_l, W_l]
/// and [N, 4A, H_l, W_l], mask logits [P, K, 2M, 2M], the box head's RoI features flattened in
/// (C, h, w) order (fc6's weights are the reference's). Inside, MaskRcnnConfig::layout chooses:
/// NHWC (the default, and the workload's option layout=nhwc) runs every convolution, frozen batch
/// norm, pool, upsampling and RoIAlign channels-last, with a permute at each edge (the images in;
/// the RPN outputs, the box head's pooled features and the mask logits out; their gradients back),
/// as PyTorch's channels-last AMP runs. On CUDA this is the layout where cuDNN takes
/// half-precision convolutions at all (Note [Half-precision convolutions]): in NCHW every bf16
/// convolution was promoted to f32, 0.16x PyTorch AMP on an H200 (results/gpu/2026-11-27/run4).
/// On the CPU the mini configuration trains as fast or a little faster in NHWC (42-47 against
/// 38-40 samples/s). NCHW stays for comparison (layout=nchw).
///
/// Precision: the policy of set_precision() (nn/module.hpp, Note [Layers under a precision
/// policy]): f32 master weights and gradients; activations and every output in the conv/matmul
/// storage type (f32, or bf16/f16, emulated on the CPU), the functional convolutions of the FPN and
/// RPN and the frozen layers' included; tf32 on CUDA through the math scope. Ownership: the model owns its
/// layers and keeps the activations of the last training forward (features, RPN, and each head's
/// last call) until backward(). Threading: one training thread.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/nn/frozen_bn.hpp"
#include "benchhost/nn/layers.hpp"
#include "benchhost/nn/module.hpp"

namespace benchhost::maskrcnn {

struct MaskRcnnConfig {
  std::vector<std::int64_t> blocks{3, 4, 6, 3};  ///< bottlenecks per stage (ResNet-50)
  std::int64_t stem_channels = 64;               ///< stage widths stem * 2^s, outputs 4 stem 2^s
  std::int64_t fpn_channels = 256;
  std::int64_t num_classes = 81;                 ///< K, the background (0) included
  std::int64_t num_anchors = 3;                  ///< per location and level (aspect ratios)
  std::int64_t representation_size = 1024;       ///< fc6 / fc7 width
  std::int64_t mask_convs = 4;                   ///< mask_fcn layers
  std::int64_t mask_channels = 256;              ///< their width (and conv5_mask's)
  std::int64_t box_resolution = 7;               ///< box-head RoIAlign output
  std::int64_t mask_resolution = 14;             ///< mask-head RoIAlign output (logits are 2x)
  std::int64_t freeze_at = 2;                    ///< Note [Mask R-CNN frozen layers]; 0..5
  /// The activations' layout inside the model (Note [Mask R-CNN layout]); the interface is NCHW.
  nn::ImageLayout layout = nn::ImageLayout::nhwc;
};

/// The RPN's outputs, per level P2..P6.
struct RpnOutputs {
  std::vector<Tensor> objectness;  ///< [N, A, H_l, W_l] logits (the storage type: f32, bf16, f16)
  std::vector<Tensor> deltas;      ///< [N, 4A, H_l, W_l], anchor-major (dx, dy, dw, dh)
  std::vector<std::pair<std::int64_t, std::int64_t>> grid_sizes;  ///< (H_l, W_l)
};

struct BoxHeadOutputs {
  Tensor class_logits;    ///< [R, K] (the storage type)
  Tensor box_regression;  ///< [R, 4K]
};

/// One ResNet bottleneck with the stride in its first 1x1 (Note [Mask R-CNN architecture]).
class Bottleneck : public nn::Layer {
 public:
  Bottleneck(std::int64_t in_channels, std::int64_t width, std::int64_t out_channels, std::int64_t stride,
             nn::ImageLayout layout);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void set_frozen(bool frozen) { frozen_ = frozen; }
  /// false: backward() skips the input gradient (the lowest trainable block).
  void set_input_grad(bool on);

 private:
  nn::Conv2d *conv1_, *conv2_, *conv3_, *proj_conv_ = nullptr;
  nn::FrozenBatchNorm2d *bn1_, *bn2_, *bn3_, *proj_bn_ = nullptr;
  bool frozen_ = false;
  bool input_grad_ = true;
  Tensor out_;
};

class MaskRcnn : public nn::Module {
 public:
  explicit MaskRcnn(const MaskRcnnConfig& config);
  const MaskRcnnConfig& config() const { return config_; }

  /// Backbone + FPN + RPN head on images f32 [N, 3, H, W] (H, W multiples of 32, normalised).
  /// Returns the RPN outputs; the pyramid P2..P6 stays available through features() for the
  /// heads. In training mode the activations are kept for backward().
  RpnOutputs forward(const Tensor& images);
  /// P2..P6 of the last forward(), in the model's layout.
  const std::vector<Tensor>& features() const { return p_; }

  /// The box head on rois f32 [R, 5] (batch index, x1, y1, x2, y2 in the padded image's pixels)
  /// of the last forward()'s images. Training mode keeps what backward() needs (one call per
  /// training forward).
  BoxHeadOutputs box_head(const Tensor& rois);
  /// The mask head on rois f32 [P, 5]: logits [P, K, 2M, 2M] in the storage type (M = mask_resolution).
  Tensor mask_head(const Tensor& rois);

  /// Backward of a training forward(), box_head() and mask_head() (each head optional: pass
  /// undefined gradients for a head that was not called or got no RoIs). drpn_objectness and
  /// drpn_deltas per level as RpnOutputs. Accumulates the trainable parameters' gradients.
  void backward(const std::vector<Tensor>& dobjectness, const std::vector<Tensor>& ddeltas,
                const Tensor& dclass_logits, const Tensor& dbox_regression, const Tensor& dmask_logits);

  /// maskrcnn_benchmark's initialisation: backbone convs kaiming-uniform (a = 1) as Detectron's
  /// c2_msra_fill... see model.cpp; FrozenBN identity; FPN kaiming-uniform a = 1, bias 0; RPN
  /// N(0, 0.01), bias 0; fc6/fc7 kaiming-uniform a = 1 (make_fc), bias 0; cls_score N(0, 0.01),
  /// bbox_pred N(0, 0.001), bias 0; mask convs and conv5_mask kaiming-normal fan_out relu, bias
  /// 0; mask_fcn_logits likewise. Deterministic per (seed, name).
  void initialize(std::uint64_t seed);

  /// ImageNet-pretrained body weights from a file in nn/serialize.hpp format with the body's
  /// state_dict names less "backbone.body." ("stem.conv1.weight", "layer1.0.bn1.running_mean",
  /// ...; other names ignored). Every body parameter and buffer must be present with its shape:
  /// otherwise DataError naming the file and the tensor, and nothing is changed.
  void load_backbone(const std::string& path);

  /// The parameters the optimizer updates (parameters() less the frozen convs).
  std::vector<nn::Parameter*> trainable_parameters();

  /// Multiply-accumulates of the backbone, FPN and RPN head for one h x w image (the heads'
  /// share depends on the RoI counts: box_head_macs_per_roi).
  double forward_macs(std::int64_t h, std::int64_t w) const;
  double frozen_forward_macs(std::int64_t h, std::int64_t w) const;
  double box_head_macs_per_roi() const;

 private:
  int first_trainable_stage() const;  // 0..3, 4 when no stage trains
  bool stage_trainable(std::size_t s) const;
  nn::RoIAlignSpec roi_spec(std::int64_t resolution) const;
  bool nhwc() const { return config_.layout == nn::ImageLayout::nhwc; }
  Tensor from_nchw(const Tensor& t) const;  // an interface tensor into the model's layout
  Tensor to_nchw(const Tensor& t) const;    // and back
  double count_macs(std::int64_t h, std::int64_t w, bool frozen_only) const;

  MaskRcnnConfig config_;
  nn::Conv2d* stem_conv_;
  nn::FrozenBatchNorm2d* stem_bn_;
  nn::MaxPool2d* stem_pool_;
  std::vector<std::vector<Bottleneck*>> stages_;
  std::vector<nn::Conv2d*> inner_, layer_;  // FPN, C2..C5
  nn::Conv2d *rpn_conv_, *rpn_cls_, *rpn_box_;
  nn::Linear *fc6_, *fc7_, *cls_score_, *bbox_pred_;
  std::vector<nn::Conv2d*> mask_fcn_;
  nn::ConvTranspose2d* conv5_mask_;
  nn::Conv2d* mask_logits_;

  // Activations of the last training forward.
  std::vector<Tensor> c_;       // C2..C5
  std::vector<Tensor> merged_;  // FPN inputs of the output convs, levels 2..5
  std::vector<Tensor> p_;       // P2..P6 (kept in eval mode too, for the heads)
  std::vector<Tensor> rpn_t_;   // per level: relu(rpn conv)
  Tensor box_rois_, box_levels_;
  Tensor mask_rois_, mask_levels_;
  std::vector<Tensor> mask_acts_;  // mask head: each ReLU output (conv5 included)
  bool have_forward_ = false, have_box_ = false, have_mask_ = false;
};

/// Parameters of a configuration without building it: the reference's 44,347,573 for
/// MaskRcnnConfig{} (FrozenBN values are buffers); count_trainable_parameters 44,125,173.
std::int64_t count_parameters(const MaskRcnnConfig& config);
std::int64_t count_trainable_parameters(const MaskRcnnConfig& config);

}  // namespace benchhost::maskrcnn
