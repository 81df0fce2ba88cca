#pragma once
/// @file nn/detection.hpp  The detection toolkit shared by RetinaNet (MLPerf `ssd`) and Mask R-CNN:
/// anchors, box IoU, the anchor matcher, the box coder, RetinaNet's two losses (sigmoid focal
/// loss over the classes, L1 over the box deltas of matched anchors) with their gradients, NMS
/// and RetinaNet's post-processing, and Mask R-CNN's ops (multi-level RoIAlign and its level
/// mapper, smooth-L1 with beta, the mask loss; their conventions are maskrcnn_benchmark's, in the
/// Mask R-CNN section below), as plain functions (llm.c style). Elsewhere: the mask head's
/// ConvTranspose2d (nn/conv.hpp, conv_transpose2d_*) and the segm mAP with MLPerf's
/// {"BBOX": b, "SEGM": s} (metrics/coco_map.hpp, CocoIouType::segm, CocoBoxMaskAccuracy).
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
/// to the host) and return CPU tensors. Mask R-CNN's roi_align_forward/backward, smooth-L1 and
/// mask loss dispatch to ops of the same names (sdk/src/nn/cpu/roi_align.cpp and
/// maskrcnn_losses.cpp; CUDA in sdk/src/nn/cuda/, likewise not yet run on a GPU); its level
/// mapper, anchors, proposals, sampler, post-processing, mask targets, paste and RLE are host code
/// (sdk/src/nn/detection.cpp, proposals.cpp, masks.cpp).
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
#include <string>
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
/// gt [N, 4] relative to anchors [N, 4]. legacy_plus_one: maskrcnn_benchmark's BoxCoder, widths
/// x2 - x1 + 1 (Note [Legacy box convention]).
Tensor encode_boxes(const Tensor& gt, const Tensor& anchors, std::array<float, 4> weights = {1, 1, 1, 1},
                    bool legacy_plus_one = false);

/// BoxCoder.decode_single(deltas, anchors): f32 [N, 4] boxes from deltas [N, 4] and anchors
/// [N, 4]; dw and dh are clamped at log(1000 / 16) before exp. legacy_plus_one: maskrcnn_benchmark's
/// BoxCoder.decode, widths x2 - x1 + 1 and x2 = cx + w / 2 - 1 (Note [Legacy box convention]).
Tensor decode_boxes(const Tensor& deltas, const Tensor& anchors, std::array<float, 4> weights = {1, 1, 1, 1},
                    bool legacy_plus_one = false);

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

// ============================================================================================
// Mask R-CNN: RoIAlign and its level mapper, smooth-L1, the mask loss
// ============================================================================================
//
// Note [Legacy RoIAlign]
// maskrcnn_benchmark's ROIAlign (layers/roi_align.py, csrc/cpu/ROIAlign_cpu.cpp), which MLPerf's
// Mask R-CNN runs, is torchvision.ops.roi_align with aligned=False: for an RoI (b, x1, y1, x2, y2)
// in image pixels and a level of scale s, the RoI is (x1 s, y1 s) .. (x2 s, y2 s) on the feature
// map, its size max(x2 s - x1 s, 1) by max(y2 s - y1 s, 1) (aligned=True instead subtracts 0.5
// from every coordinate and has no minimum), cut into pooled_h x pooled_w bins; each bin averages
// sampling_ratio x sampling_ratio bilinear samples at the centres of a regular grid over the bin
// (sampling_ratio <= 0: ceil(bin size) samples per axis). A sample with y < -1, y > H, x < -1
// or x > W is 0; otherwise coordinates below 0 are clamped to 0 and the last row or column
// repeats. The backward scatters dout / count times each bilinear weight onto the four
// neighbours. Arithmetic is f32 in torchvision's order of operations.
//
// Multi-level (FPN) pooling takes every level's features at once and one level index per RoI
// (map_roi_levels): one op call pools every RoI from its own level, in RoI order, as
// maskrcnn_benchmark's Pooler does with its per-level index_select / scatter. The CPU backward
// is deterministic (threads own channel ranges); the CUDA backward adds with atomics, so its
// f32 sums are in no fixed order.

/// RoIAlign's parameters. spatial_scales has one entry per feature level (1/4 ... 1/32 for P2-P5;
/// one entry for single-level pooling).
struct RoIAlignSpec {
  std::int64_t pooled_h = 7;
  std::int64_t pooled_w = 7;
  std::vector<float> spatial_scales{0.25f};
  std::int64_t sampling_ratio = 2;  ///< samples per bin and axis; <= 0: ceil(bin size) (adaptive)
  bool aligned = false;             ///< false: legacy (maskrcnn_benchmark); true: half-pixel offset
  bool channels_last = false;       ///< features [N, H, W, C] and output [K, ph, pw, C] (else NCHW)
};

/// RoIAlign forward over one or more feature levels (Note [Legacy RoIAlign]). features[l]: f32
/// [N, C, H_l, W_l] (or [N, H_l, W_l, C] with channels_last), all on one device with the same N
/// and C; rois: f32 [K, 5] rows (batch index, x1, y1, x2, y2) in image pixels; levels: i64 [K] in
/// [0, L) (map_roi_levels), or undefined for one level. Returns f32 [K, C, ph, pw] (or [K, ph, pw,
/// C]). Throws InvalidArgument on shapes, a scale count different from L, non-positive pooled
/// sizes; DataError on a batch index outside [0, N) or a level outside [0, L).
Tensor roi_align_forward(const std::vector<Tensor>& features, const Tensor& rois, const Tensor& levels,
                         const RoIAlignSpec& spec);

/// d features of roi_align_forward for dout f32 [K, C, ph, pw] (or [K, ph, pw, C]): one f32
/// tensor per level, shaped feature_shapes[l], on dout's device (zero where no RoI samples).
std::vector<Tensor> roi_align_backward(const Tensor& dout, const Tensor& rois, const Tensor& levels,
                                       const std::vector<Shape>& feature_shapes, const RoIAlignSpec& spec);

/// The FPN level mapper (maskrcnn_benchmark poolers.LevelMapper, as in Feature Pyramid Networks
/// eq. 1): level = clamp(floor(canonical_level + log2(sqrt(area) / canonical_scale + eps)),
/// k_min, k_max) - k_min, in f32. legacy (the reference): area = (x2 - x1 + 1) (y2 - y1 + 1) and
/// eps inside the log. torchvision's MultiScaleRoIAlign (legacy = false): area = (x2 - x1)
/// (y2 - y1) and eps added after the log2.
struct LevelMapper {
  std::int64_t k_min = 2;
  std::int64_t k_max = 5;
  float canonical_scale = 224.0f;
  float canonical_level = 4.0f;
  float eps = 1e-6f;
  bool legacy = true;
};

/// Level index in [0, k_max - k_min] of each RoI: rois f32 [K, 5] (batch, x1, y1, x2, y2) or
/// [K, 4]; returns i64 [K] on the rois' device (computed on the host: K is at most a few
/// thousand per step).
Tensor map_roi_levels(const Tensor& rois, const LevelMapper& mapper = {});

/// maskrcnn_benchmark's smooth_l1_loss(input, target, beta, size_average=False) times `scale`:
/// scale * sum_i (|d_i| < beta ? 0.5 d_i^2 / beta : |d_i| - 0.5 beta) with d = input - target
/// (beta 0 is L1). input and target f32 of the same element count on one device (the caller
/// gathers the positive RoIs' class-specific deltas); the RPN uses beta 1/9 and scale
/// 1 / sampled anchors, the box head beta 1 and scale 1 / sampled RoIs. Op
/// "smooth_l1_loss_forward"; sums in f64 over fixed chunks.
float smooth_l1_loss_forward(const Tensor& input, const Tensor& target, float beta, float scale = 1.0f);

/// d(dloss * loss) / d input: dloss * scale * (|d| < beta ? d / beta : sign(d)), f32 like input.
/// Op "smooth_l1_loss_backward".
Tensor smooth_l1_loss_backward(const Tensor& input, const Tensor& target, float beta, float scale = 1.0f,
                               float dloss = 1.0f);

/// Mask R-CNN's mask loss (maskrcnn_benchmark roi_heads/mask_head/loss.py): the BCE with logits
/// of each RoI's channel labels[r] of logits f32 [R, C, M, M] against targets f32 [R, M, M] (0/1
/// rasterised masks), mean over R * M * M; 0 when R = 0 (the reference's mask_logits.sum() * 0).
/// labels i64 [R] in [0, C) (DataError otherwise). Op "mask_bce_loss_forward".
float mask_bce_loss_forward(const Tensor& logits, const Tensor& labels, const Tensor& targets);

/// d(dloss * loss) / d logits: f32 [R, C, M, M], (sigmoid(x) - t) * dloss / (R M M) on each RoI's
/// labelled channel, zero on the others. Op "mask_bce_loss_backward".
Tensor mask_bce_loss_backward(const Tensor& logits, const Tensor& labels, const Tensor& targets, float dloss = 1.0f);

// ============================================================================================
// Mask R-CNN: proposals and the balanced sampler (host code)
// ============================================================================================
//
// Note [Legacy box convention]
// maskrcnn_benchmark (and Detectron before it) treats box corners as pixel indices: a box's
// width is x2 - x1 + 1 (its TO_REMOVE = 1). Its BoxCoder decodes to (cx - w/2, cy - h/2, cx + w/2
// - 1, cy + h/2 - 1) from anchors of width x2 - x1 + 1 (dw, dh clamped at log(1000/16)), its NMS
// computes areas and intersections with the +1 (and, in the CUDA kernel MLPerf's GPU runs use,
// suppresses IoU > threshold), clip_to_image clamps x to [0, w - 1] and y to [0, h - 1], and
// remove_small_boxes keeps boxes whose +1 width and height are >= min_size. torchvision has none
// of the +1s (its functions above).

/// maskrcnn_benchmark's (Detectron's) FPN anchors: level l has one size sizes[l] at stride
/// strides[l]; its cell anchors come from the base window [0, 0, stride - 1, stride - 1] with, per
/// aspect ratio r (height / width), ws = round(sqrt(stride^2 / r)), hs = round(ws r) (round half to
/// even, in f64), scaled by size / stride about the centre (stride - 1) / 2, corners at centre -+
/// (w - 1) / 2; then shifted by (x stride, y stride) for every cell, in (y, x, ratio) order, f32.
/// grid_sizes[l] = (H_l, W_l). Returns f32 [sum_l H_l W_l R, 4] on the CPU. At stride 4, size
/// 32 and ratio 0.5 the cell anchor is (-22, -10, 25, 13).
Tensor generate_anchors_legacy(const std::vector<double>& sizes, const std::vector<std::int64_t>& strides,
                               const std::vector<double>& aspect_ratios,
                               const std::vector<std::pair<std::int64_t, std::int64_t>>& grid_sizes);

/// The anchors the RPN loss may use (add_visibility_to, STRADDLE_THRESH): u8 [A], 1 where
/// x1 >= -t, y1 >= -t, x2 < image_w + t and y2 < image_h + t; with t < 0 every anchor is visible.
Tensor anchor_visibility(const Tensor& anchors, std::int64_t image_h, std::int64_t image_w,
                         float straddle_thresh = 0.0f);

/// torchvision-convention nms() with maskrcnn_benchmark's +1 areas (Note [Legacy box convention]):
/// kept indices, i64 [D] on the CPU, by score (descending, ties in index order); a box is
/// suppressed by a kept one when their +1 IoU exceeds iou_threshold.
Tensor nms_legacy(const Tensor& boxes, const Tensor& scores, float iou_threshold);

/// maskrcnn_benchmark's RPNPostProcessor settings (FPN): per level the pre_nms_top_n best anchors
/// by sigmoid objectness, decoded, clipped, small boxes removed, NMS at nms_thresh, at most
/// post_nms_top_n kept per level; then over all levels: in training the fpn_post_nms_top_n best
/// over the whole batch (MLPerf's reference behaviour, FPN_POST_NMS_PER_BATCH), kept in their
/// level order, and the ground-truth boxes appended (objectness 1); in test the
/// fpn_post_nms_top_n best per image, sorted by objectness.
struct ProposalSpec {
  std::int64_t pre_nms_top_n = 2000;
  std::int64_t post_nms_top_n = 2000;
  std::int64_t fpn_post_nms_top_n = 2000;
  float nms_thresh = 0.7f;
  float min_size = 0.0f;
  bool training = true;
};

/// The proposals of one image, on the CPU.
struct Proposals {
  Tensor boxes;       ///< f32 [P, 4] xyxy, legacy convention
  Tensor objectness;  ///< f32 [P] sigmoid objectness (1 for appended ground truth)
};

/// RPN proposals for a batch (maskrcnn_benchmark RPNPostProcessor.forward with FPN). Per level
/// l: objectness [N, A_l, H_l, W_l] logits, deltas [N, 4 A_l, H_l, W_l] (anchor-major channels,
/// dx dy dw dh per anchor), anchors f32 [H_l W_l A_l, 4] in (y, x, anchor) order (the same for
/// every image; legacy convention). image_sizes[n] = (height, width) of image n before padding.
/// gt_boxes: per image f32 [G, 4], appended in training (may be empty: nothing appended).
/// Host code: CUDA inputs are copied to the host. Box coder weights (1, 1, 1, 1). Throws
/// InvalidArgument on inconsistent shapes.
std::vector<Proposals> generate_proposals(const std::vector<Tensor>& objectness, const std::vector<Tensor>& deltas,
                                          const std::vector<Tensor>& anchors,
                                          const std::vector<std::pair<std::int64_t, std::int64_t>>& image_sizes,
                                          const std::vector<Tensor>& gt_boxes, const ProposalSpec& spec);

/// maskrcnn_benchmark's box-head PostProcessor for one image (Note [Legacy box convention]):
/// class_logits [R, K] (class 0 background), box_regression [R, 4 K] (class-specific deltas),
/// proposals f32 [R, 4]. Softmax over the classes; each class's deltas decoded against the proposal
/// with weights `weights` and the +1 convention; boxes clipped to [0, image_w - 1] x [0, image_h -
/// 1]; then for each class j >= 1 the boxes of score > score_thresh, +1 NMS at nms_thresh; the
/// classes' survivors concatenated in class order (each in NMS order); when more than
/// detections_per_img > 0 remain, those whose score reaches the detections_per_img-th highest are
/// kept (the reference's kthvalue: ties may keep a few more). Labels are the class indices j.
/// Host code; returns CPU tensors.
Detections maskrcnn_postprocess(const Tensor& class_logits, const Tensor& box_regression, const Tensor& proposals,
                                std::int64_t image_h, std::int64_t image_w, float score_thresh = 0.05f,
                                float nms_thresh = 0.5f, std::int64_t detections_per_img = 100,
                                std::array<float, 4> weights = {10, 10, 5, 5});

/// Indices chosen by balanced_sample, i64 on the CPU.
struct BalancedSample {
  Tensor positive;  ///< i64 [P], in the order drawn
  Tensor negative;  ///< i64 [Q], in the order drawn
};

/// maskrcnn_benchmark's BalancedPositiveNegativeSampler for one image: labels i64 [A] with
/// >= 1 positive, 0 negative, < 0 ignored. Takes min(#positive, int(batch_size_per_image *
/// positive_fraction)) positives and min(#negative, batch_size_per_image - that) negatives, each
/// a uniformly random subset drawn by a partial Fisher-Yates shuffle from Rng(seed, stream)
/// (the reference's randperm()[:n]; the same seed and stream give the same draw). Throws
/// InvalidArgument for a negative batch size or a fraction outside [0, 1].
BalancedSample balanced_sample(const Tensor& labels, std::int64_t batch_size_per_image, float positive_fraction,
                               std::uint64_t seed, std::uint64_t stream = 0);

// ============================================================================================
// Instance masks: paste, COCO run-length encoding, polygons (host code)
// ============================================================================================
//
// Note [COCO RLE]
// pycocotools' run-length encoding (maskApi.c), which COCO's annotations and segm evaluation use:
// the mask of an h x w image is read in column-major order (x outer, y inner) and stored as run
// lengths alternating 0s and 1s, starting with a (possibly empty) run of 0s. Its compressed
// string form writes each count (from the fourth on, as the difference to the count two before)
// as little-endian 5-bit groups with a continuation bit (0x20) and a sign bit (0x10) in the last
// group, each group + 48 as one character. Crowd annotations carry uncompressed counts.
// Polygons are rasterised as rleFrPoly does: vertices scaled by 5 and rounded, the boundary
// walked densely on that grid, then sampled at the pixel-column centres, where each crossing
// starts or ends a run; a pixel is in the mask when its centre lies inside the polygon (with the
// boundary quantised to a fifth of a pixel). An object's parts are OR-ed (annToRLE's merge).

/// A COCO RLE (Note [COCO RLE]): counts of alternating 0s and 1s over the column-major mask.
struct Rle {
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::vector<std::uint32_t> counts;
};

/// RLE of a binary mask: u8 [H, W] (row-major, as our images; nonzero is 1) on any device.
Rle rle_encode(const Tensor& mask);
/// The mask of an RLE: u8 [H, W] on the CPU. Throws DataError when the counts do not add up to
/// H * W.
Tensor rle_decode(const Rle& rle);
/// Pixels set.
std::uint64_t rle_area(const Rle& rle);
/// Union (or intersection) of RLEs of one size (pycocotools merge). Throws InvalidArgument on
/// different sizes or an empty list.
Rle rle_merge(const std::vector<Rle>& rles, bool intersect = false);
/// pycocotools iou(dt, gt, iscrowd): f64 [D, G] on the CPU; for a crowd GT the IoU is
/// intersection / area(dt); 0 where the union is empty.
Tensor rle_iou(const std::vector<Rle>& dt, const std::vector<Rle>& gt, const std::vector<bool>& iscrowd);
/// The compressed string form of the counts (COCO result files).
std::string rle_to_string(const Rle& rle);
/// An RLE from its compressed string form; throws DataError on a malformed string.
Rle rle_from_string(const std::string& counts, std::int64_t height, std::int64_t width);
/// One polygon (x1, y1, x2, y2, ...) in pixels rasterised into an H x W RLE (rleFrPoly). Throws
/// InvalidArgument on an odd coordinate count or fewer than 2 points (COCO polygons have at
/// least 3; degenerate ones give empty masks as in pycocotools), and on what a hostile file could
/// hold (Note [Hostile polygons] in nn/masks.cpp): a non-finite coordinate or one beyond 2^20
/// pixels, a boundary of more than 2^24 grid steps, an image of 2^32 pixels or more.
Rle rle_from_polygon(const std::vector<double>& xy, std::int64_t height, std::int64_t width);
/// An object's polygons, each rasterised and OR-ed (COCO's annToRLE for iscrowd = 0).
Rle rle_from_polygons(const std::vector<std::vector<double>>& polygons, std::int64_t height, std::int64_t width);


/// An object's polygons (each x1, y1, x2, y2, ... in image pixels), as a COCO annotation with
/// iscrowd = 0 holds them.
using Polygons = std::vector<std::vector<double>>;

/// Mask R-CNN's mask targets (maskrcnn_benchmark roi_heads/mask_head/loss.py
/// project_masks_on_boxes): for each proposal p, the polygons of its matched object
/// objects[matched[p]] are cropped to the proposal (shifted by -(x1, y1); crop size max(x2 - x1, 1)
/// by max(y2 - y1, 1), no +1), scaled to M x M (f32 arithmetic, as the reference's float32
/// polygon tensors), rasterised with pycocotools' rule and OR-ed. proposals f32 [P, 4], matched
/// i64 [P] (indices into objects; DataError outside). Returns f32 [P, M, M] 0/1 on the CPU.
Tensor polygon_mask_targets(const std::vector<Polygons>& objects, const Tensor& proposals, const Tensor& matched,
                            std::int64_t M = 28);

/// maskrcnn_benchmark's Masker (paste_mask_in_image) for D detections: masks f32 [D, M, M]
/// probabilities, boxes f32 [D, 4] (xyxy in image pixels). Each mask is padded by `padding`
/// zeros per side, its box scaled about its centre by (M + 2 padding) / M and truncated to
/// integers, the padded mask resized to the box's (x2 - x1 + 1) x (y2 - y1 + 1) pixels (bilinear,
/// align_corners = false, as torch's interpolate) and thresholded (value > thresh) into an
/// image_h x image_w mask. Returns u8 [D, image_h, image_w] on the CPU (host code).
Tensor paste_masks_in_image(const Tensor& masks, const Tensor& boxes, std::int64_t image_h, std::int64_t image_w,
                            float thresh = 0.5f, std::int64_t padding = 1);

}  // namespace benchhost::nn
