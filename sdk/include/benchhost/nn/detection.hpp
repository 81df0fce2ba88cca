#pragma once
/// @file nn/detection.hpp  The detection toolkit shared by RetinaNet (MLPerf `ssd`) and Mask R-CNN:
/// anchors, box IoU, the anchor matcher, the box coder, RetinaNet's two losses (sigmoid focal
/// loss over the classes, L1 over the box deltas of matched anchors) with their gradients, NMS
/// and RetinaNet's post-processing, as plain functions (llm.c style).
///
/// Semantics are torchvision 0.14's exactly (torchvision/models/detection/anchor_utils.py,
/// _utils.py, retinanet.py; torchvision/ops/boxes.py, focal_loss.py), which MLPerf's reference
/// (training/single_stage_detector/ssd/model/) copies:
/// - Boxes are f32 [N, 4] (x1, y1, x2, y2) in pixels; widths are x2 - x1 (no +1).
/// - AnchorGenerator: per level, base anchors round([-w, -h, w, h] / 2) with h_ratio = sqrt(r),
///   w_ratio = 1 / h_ratio, w = w_ratio * size, h = h_ratio * size (aspect ratio outer, size inner,
///   all in f32, round half to even), shifted by (x * stride_w, y * stride_h) for every grid cell
///   in (y, x, anchor) order, stride = image_size // grid_size per dimension (no half-stride
///   offset). Levels are concatenated.
/// - Matcher(high, low, allow_low_quality_matches): per anchor the GT of highest IoU (the first
///   on ties); -1 below `low`, -2 in [low, high); with low-quality matches, every anchor that
///   reaches some GT's highest IoU (ties included) gets back its best GT.
/// - BoxCoder(weights): encode dx = wx (gx - ax) / aw, dy likewise, dw = ww log(gw / aw),
///   dh likewise (centres at x1 + 0.5 w); decode clamps dw, dh at log(1000 / 16).
/// - Losses per image, divided by max(1, number of foreground anchors); the caller averages
///   over the images of a batch (torchvision's `_sum(losses) / len(targets)`).
///
/// Backend. box_iou, match_anchors, encode_boxes, decode_boxes and the four loss functions
/// validate their arguments, allocate outputs and dispatch through the op registry
/// (nn/registry.hpp) to ops of the same names (the losses' ops are named
/// retinanet_focal_loss_forward/backward and retinanet_box_loss_forward/backward). CPU: oneTBB
/// kernels over fixed chunks (results do not depend on the thread count) and plain-loop
/// references (sdk/src/nn/cpu/detection.cpp); CUDA: our kernels (sdk/src/nn/cuda/detection.cu),
/// which have not yet been run on a GPU. generate_anchors, nms, batched_nms and
/// retinanet_postprocess are host code: they run on the CPU, take CPU tensors (or copy CUDA ones
/// to the host) and return CPU tensors.
///
/// Precision: f32 boxes, logits and deltas (f16/bf16 logits and deltas go through f32 promotion);
/// indices and labels i64. Loss sums accumulate in f64 across chunks.
/// Ownership: outputs are new tensors; inputs are never modified.
/// Threading: every function may be called from several threads at once.
/// Errors: a shape, dtype or device mismatch throws InvalidArgument naming the function and the
/// shapes; a matched index outside [-2, G) or a GT label outside [0, K) (every GT's label is
/// checked) throws DataError naming the value and its position. On CUDA the forward losses check
/// (they return host values and synchronise anyway); the backward kernels do not synchronise to
/// check, and treat such an anchor as ignored (zero gradient).

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "benchhost/tensor.hpp"

namespace benchhost::nn {

// ============================================================================================
// Anchors
// ============================================================================================

/// Anchor sizes and aspect ratios per feature level (torchvision AnchorGenerator's arguments).
/// `sizes[l]` are level l's anchor sizes in pixels; the aspect ratios (height / width) are
/// shared by every level. A level has sizes[l].size() * aspect_ratios.size() anchors per cell.
struct AnchorSpec {
  std::vector<std::vector<double>> sizes;
  std::vector<double> aspect_ratios{0.5, 1.0, 2.0};
};

/// torchvision's anchors for an image of image_h x image_w pixels (the padded batch size) and
/// feature maps of grid_sizes[l] = (H_l, W_l): f32 [sum_l H_l * W_l * A_l, 4] on the CPU, level
/// by level, within a level in (y, x, anchor) order. Throws InvalidArgument when grid_sizes and
/// spec.sizes differ in length, or a grid is empty or larger than the image.
Tensor generate_anchors(const AnchorSpec& spec, std::int64_t image_h, std::int64_t image_w,
                        const std::vector<std::pair<std::int64_t, std::int64_t>>& grid_sizes);

/// RetinaNet's anchors (torchvision retinanet._default_anchorgen): five levels with sizes
/// int(x * 2^(k/3)) for x in 32, 64, 128, 256, 512 and k = 0, 1, 2; ratios 0.5, 1, 2 (9 per cell).
/// At 800x800 with grids 100, 50, 25, 13, 7 that is 120,087 anchors.
AnchorSpec retinanet_anchor_spec();

// ============================================================================================
// IoU, matching, box coding
// ============================================================================================

/// IoU of every pair: f32 [N, M] for boxes a [N, 4] and b [M, 4] on one device
/// (torchvision.ops.box_iou: inter / (area_a + area_b - inter); 0 / 0 gives NaN as there).
Tensor box_iou(const Tensor& a, const Tensor& b);

/// torchvision's Matcher on an IoU matrix iou [G, A] (GT rows, anchor columns): i64 [A] holding
/// the matched GT index, -1 (IoU below `low`) or -2 (in [low, high), ignored). With G = 0 every
/// anchor is -1 (RetinaNet's rule for an image without boxes). Requires low <= high.
Tensor match_anchors(const Tensor& iou, float high = 0.5f, float low = 0.4f, bool allow_low_quality = true);

/// BoxCoder.encode_single(gt, anchors): f32 [N, 4] regression targets (dx, dy, dw, dh) of boxes
/// gt [N, 4] relative to anchors [N, 4].
Tensor encode_boxes(const Tensor& gt, const Tensor& anchors, std::array<float, 4> weights = {1, 1, 1, 1});

/// BoxCoder.decode_single(deltas, anchors): f32 [N, 4] boxes from deltas [N, 4] and anchors
/// [N, 4]; dw and dh are clamped at log(1000 / 16) before exp.
Tensor decode_boxes(const Tensor& deltas, const Tensor& anchors, std::array<float, 4> weights = {1, 1, 1, 1});

// ============================================================================================
// RetinaNet losses (one image)
// ============================================================================================

struct FocalLossResult {
  float loss = 0;                  ///< sum of the focal terms / max(1, num_foreground)
  std::int64_t num_foreground = 0; ///< anchors with matched >= 0
};

/// RetinaNet's classification loss for one image: logits [A, K] (f32 on any device), matched
/// i64 [A] (match_anchors), gt_labels i64 [G] (class of each GT, in [0, K)). The target is
/// one-hot at gt_labels[matched] for a foreground anchor (matched >= 0), all zeros for a
/// background anchor (-1); ignored anchors (-2) contribute nothing. The loss is
/// torchvision.ops.sigmoid_focal_loss(alpha, gamma, reduction "sum") / max(1, num_foreground).
FocalLossResult retinanet_focal_loss_forward(const Tensor& logits, const Tensor& matched, const Tensor& gt_labels,
                                             float alpha = 0.25f, float gamma = 2.0f);

/// d(dloss * loss) / d logits: f32 [A, K] on the logits' device (zero rows for ignored anchors).
Tensor retinanet_focal_loss_backward(const Tensor& logits, const Tensor& matched, const Tensor& gt_labels,
                                     float alpha = 0.25f, float gamma = 2.0f, float dloss = 1.0f);

/// RetinaNet's regression loss for one image: sum over foreground anchors a (matched >= 0) of
/// |deltas[a] - encode_boxes(gt_boxes[matched[a]], anchors[a])|_1, / max(1, num_foreground).
/// deltas [A, 4], anchors [A, 4], matched i64 [A], gt_boxes [G, 4], all on one device.
float retinanet_box_loss_forward(const Tensor& deltas, const Tensor& anchors, const Tensor& matched,
                                 const Tensor& gt_boxes);

/// d(dloss * loss) / d deltas: f32 [A, 4], dloss * sign(deltas - target) / max(1, num_foreground)
/// on foreground rows (sign(0) = 0, PyTorch's l1_loss), zero elsewhere.
Tensor retinanet_box_loss_backward(const Tensor& deltas, const Tensor& anchors, const Tensor& matched,
                                   const Tensor& gt_boxes, float dloss = 1.0f);

// ============================================================================================
// Non-maximum suppression and post-processing (host code)
// ============================================================================================

/// torchvision.ops.nms: boxes [N, 4], scores f32 [N]; visits boxes by score, descending, ties in
/// index order (a stable sort), keeps a box and suppresses every later box whose IoU with it
/// exceeds iou_threshold (compared in double, as torchvision's kernel does). Returns the kept
/// indices, i64 [D] on the CPU, in that order.
Tensor nms(const Tensor& boxes, const Tensor& scores, float iou_threshold);

/// torchvision.ops.batched_nms: NMS within each class (classes i64 [N]), never across. As in
/// torchvision on the CPU: up to 1000 boxes use the coordinate-offset trick (every box shifted by
/// class * (max coordinate + 1), one NMS); more boxes run NMS per class and merge the kept
/// indices sorted by score (descending, stable). Returns i64 [D] on the CPU.
Tensor batched_nms(const Tensor& boxes, const Tensor& scores, const Tensor& classes, float iou_threshold);

/// Detections of one image, on the CPU, sorted by score (descending).
struct Detections {
  Tensor boxes;   ///< f32 [D, 4], clipped to the image
  Tensor scores;  ///< f32 [D], sigmoid probabilities
  Tensor labels;  ///< i64 [D], class index in [0, K)
};

/// torchvision RetinaNet.postprocess_detections for one image. Per level l: logits [A_l, K],
/// deltas [A_l, 4], anchors [A_l, 4]; scores = sigmoid(logits) flattened (anchor-major), keep
/// those > score_thresh, take the min(topk, kept) best (descending, ties by index), decode their
/// boxes with the level's anchors and clip them to [0, image_w] x [0, image_h]. Then all levels
/// together: batched_nms(nms_thresh) by class, and the first detections_per_img survivors.
Detections retinanet_postprocess(const std::vector<Tensor>& level_logits, const std::vector<Tensor>& level_deltas,
                                 const std::vector<Tensor>& level_anchors, std::int64_t image_h, std::int64_t image_w,
                                 float score_thresh = 0.05f, std::int64_t topk = 1000, float nms_thresh = 0.5f,
                                 std::int64_t detections_per_img = 300);

}  // namespace benchhost::nn
