#pragma once
/// @file plugins/maskrcnn/targets.hpp  Mask R-CNN's training targets and losses, host code:
/// the RPN's anchor labels and loss, the RoI heads' proposal sampling, the box-head loss and the
/// mask-head targets (maskrcnn_benchmark modeling/rpn/loss.py, roi_heads/box_head/loss.py,
/// roi_heads/mask_head/loss.py as MLPerf runs them).
///
/// Note [Mask R-CNN losses]
/// RPN, per image: the legacy (+1) IoU of every anchor with every ground-truth box, Matcher(0.7,
/// 0.3, allow_low_quality_matches) -> label 1 (matched), 0 (below 0.3), -1 (between, ignored);
/// anchors that cross the image border (visibility, STRADDLE_THRESH 0) are ignored; 256 anchors
/// sampled with at most half positive (nn::balanced_sample). Over the whole batch: objectness
/// loss = mean BCE-with-logits over the sampled anchors, box loss = smooth-L1 (beta 1/9) summed
/// over the positive anchors' deltas against BoxCoder(1, 1, 1, 1).encode (+1 convention) of
/// their matched box, divided by the number of sampled anchors. The anchor order of a level is
/// (y, x, anchor), the RPN's outputs permuted from [N, A, H, W] to [N, H, W, A] as
/// concat_box_prediction_layers does.
/// RoI heads, per image: proposals (ground truth appended) matched with Matcher(0.5, 0.5) ->
/// class of the matched box, or 0 (background); 512 sampled with at most a quarter positive;
/// kept in index order (the reference's nonzero(pos | neg)). Box loss over the batch's sampled
/// RoIs R: cross entropy averaged over R, plus smooth-L1 (beta 1) of the positive RoIs' deltas of
/// their class against BoxCoder(10, 10, 5, 5).encode, summed and divided by R. Mask targets: the
/// positive RoIs, their matched object's polygons cropped and rasterised at 28 x 28
/// (nn::polygon_mask_targets); mask loss = nn::mask_bce_loss_forward on each RoI's class channel.
/// Sampling draws from streams keyed by each image's dataset index (ImageTargets::sample_key), so
/// an image samples the same anchors and RoIs in any batch, position or rank.
/// Data parallelism: each rank normalises these losses over its own batch, as the reference does
/// (per-GPU losses), and the ranks' gradients are averaged. That is the gradient of the global
/// batch exactly when every image contributes as many sampled anchors, sampled RoIs and positive
/// RoIs as the others (MaskRcnnWorkload.TwoRanksMatchOneProcess builds such a case); otherwise an
/// image on a rank with fewer samples weighs more, in the reference too.

#include <cstdint>
#include <vector>

#include "benchhost/nn/detection.hpp"
#include "data.hpp"
#include "model.hpp"

namespace benchhost::maskrcnn {

/// A model output as f32 on the host, contiguous (outputs are f16/bf16 under those precisions).
Tensor host_f32(const Tensor& t);

/// maskrcnn_benchmark's boxlist_iou: f32 [G, A] with widths x2 - x1 + 1 (CPU tensors).
Tensor legacy_box_iou(const Tensor& a, const Tensor& b);

struct RpnLoss {
  double objectness = 0, box = 0;
  std::vector<Tensor> dobjectness, ddeltas;  ///< per level, shaped as RpnOutputs, on the outputs' device, in their dtype
  std::int64_t sampled = 0, positive = 0;
};

struct RpnLossSpec {
  float fg_iou = 0.7f, bg_iou = 0.3f;
  std::int64_t batch_size_per_image = 256;
  float positive_fraction = 0.5f;
  float straddle_thresh = 0.0f;
  float beta = 1.0f / 9.0f;
};

/// Note [Mask R-CNN losses], RPN part. level_anchors[l]: f32 [H_l W_l A, 4] (legacy), the same for
/// every image. seed: the step's sampling seed (image i draws from stream 2 targets[i].sample_key).
RpnLoss rpn_loss(const RpnOutputs& out, const std::vector<Tensor>& level_anchors, const std::vector<ImageTargets>& targets,
                 const RpnLossSpec& spec, std::uint64_t seed, float dloss);

/// The sampled RoIs of a batch (Note [Mask R-CNN losses]), CPU tensors.
struct RoiSample {
  Tensor rois;                ///< f32 [R, 5]: batch index, x1, y1, x2, y2
  Tensor labels;              ///< i64 [R]: class, 0 background
  Tensor regression_targets;  ///< f32 [R, 4] (meaningful for positives)
  Tensor matched;             ///< i64 [R]: matched ground-truth index within its image (positives)
};

struct RoiSampleSpec {
  float fg_iou = 0.5f, bg_iou = 0.5f;
  std::int64_t batch_size_per_image = 512;
  float positive_fraction = 0.25f;
};

/// Image i draws from stream 2 targets[i].sample_key + 1 of `seed`.
RoiSample sample_rois(const std::vector<nn::Proposals>& proposals, const std::vector<ImageTargets>& targets,
                      const RoiSampleSpec& spec, std::uint64_t seed);

struct BoxLoss {
  double classifier = 0, box_reg = 0;
  Tensor dclass_logits, dbox_regression;  ///< on the outputs' device
};

BoxLoss box_head_loss(const BoxHeadOutputs& out, const RoiSample& sample, float dloss);

/// The mask head's RoIs (the positive sampled RoIs), their classes and 0/1 targets f32 [P, M, M].
struct MaskTargets {
  Tensor rois;     ///< f32 [P, 5]
  Tensor labels;   ///< i64 [P]
  Tensor targets;  ///< f32 [P, M, M]
};

MaskTargets mask_targets(const RoiSample& sample, const std::vector<ImageTargets>& targets, std::int64_t M);

}  // namespace benchhost::maskrcnn
