// The Tensor-level API of nn/detection.hpp: argument checks, output allocation and dispatch
// through the op registry for the per-step ops (declared with their CPU kernels in
// nn/cpu/detection.cpp; CUDA in nn/cuda/detection.cu), and the host code: anchor generation,
// NMS, batched NMS and RetinaNet's post-processing; Mask R-CNN's RoIAlign, level mapper,
// smooth-L1 and mask loss (kernels in nn/cpu/roi_align.cpp and nn/cpu/maskrcnn_losses.cpp, CUDA
// in nn/cuda/roi_align.cu and nn/cuda/maskrcnn_losses.cu).
//
// Note [Host-side NMS]
// NMS and post-processing run once per evaluated image on at most topk * levels (5000) boxes;
// they are host code for now, like torchvision's CPU kernel: a stable descending sort by score,
// then the greedy sweep that suppresses every later box of IoU > threshold. A CUDA input is
// copied to the host first. The IoU is computed in f32 in torchvision's order and compared in
// double with the threshold (torchvision's kernel takes the threshold as a double), so the kept
// indices are torchvision's exactly. batched_nms follows torchvision's CPU switch (MLPerf's copy,
// ssd/model/boxes.py, uses it on every device): the coordinate-offset trick up to 1000 boxes,
// per-class NMS above (the offsets change the f32 coordinates, so the two paths can differ on
// IoUs within an ulp of the threshold). Where torchvision sorts unstably (the per-class path's
// final sort, topk in post-processing), equal scores come out here in index order.

#include "benchhost/nn/detection.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"

namespace benchhost::nn {

namespace {

std::string describe_or_undefined(const Tensor& t) { return t.defined() ? t.describe() : std::string("undefined"); }

void check_boxes(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined() && t.dim() == 2 && t.size(1) == 4,
              "{}: {} must be [N, 4] boxes (x1, y1, x2, y2), got {}", op, what, describe_or_undefined(t));
  BH_CHECK_AS(Unsupported, t.dtype() == DType::f32, "{}: {} has dtype {}; boxes must be f32", op, what,
              dtype_name(t.dtype()));
}

void check_floating(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  const DType d = t.dtype();
  if (d != DType::f32 && d != DType::f16 && d != DType::bf16)
    BH_THROW(Unsupported, "{}: {} has dtype {}; f32, f16 and bf16 are implemented", op, what, dtype_name(d));
}

void check_index(const Tensor& t, std::int64_t n, const Tensor& like, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument,
              t.defined() && t.dtype() == DType::i64 && t.dim() == 1 && (n < 0 || t.size(0) == n) &&
                  t.device() == like.device(),
              "{}: {} must be i64 [{}] on {}, got {}", op, what, n < 0 ? std::string("G") : std::to_string(n),
              like.device().str(), describe_or_undefined(t));
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, a.device() == b.device(), "{}: {} is on {}, expected {}", op, what, b.device().str(),
              a.device().str());
}

Attrs coder_attrs(const std::array<float, 4>& w, const char* op) {
  for (float v : w)
    BH_CHECK_AS(InvalidArgument, v > 0 && std::isfinite(v), "{}: box coder weights must be positive, got ({}, {}, {}, {})",
                op, w[0], w[1], w[2], w[3]);
  Attrs a;
  a.set("wx", w[0]).set("wy", w[1]).set("ww", w[2]).set("wh", w[3]);
  return a;
}

Tensor host(const Tensor& t) { return t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous(); }
Tensor host_f32(const Tensor& t) {
  const Tensor h = host(t);
  return h.dtype() == DType::f32 ? h : h.to(DType::f32);
}

// ---- focal / box loss calls -------------------------------------------------------------------

OpCall focal_call(const Tensor& logits, const Tensor& matched, const Tensor& gt_labels, float alpha, float gamma,
                  const char* op) {
  check_floating(logits, op, "logits");
  BH_CHECK_AS(InvalidArgument, logits.dim() == 2 && logits.size(1) > 0, "{}: logits must be [A, K] with K >= 1, got {}",
              op, shape_str(logits.shape()));
  check_index(matched, logits.size(0), logits, op, "matched");
  check_index(gt_labels, -1, logits, op, "gt_labels");
  BH_CHECK_AS(InvalidArgument, alpha <= 1 && gamma >= 0, "{}: alpha must be <= 1 and gamma >= 0, got {} and {}", op,
              alpha, gamma);
  OpCall call;
  call.inputs = {logits.contiguous(), matched.contiguous(), gt_labels.contiguous()};
  call.attrs.set("alpha", alpha).set("gamma", gamma);
  return call;
}

OpCall box_loss_call(const Tensor& deltas, const Tensor& anchors, const Tensor& matched, const Tensor& gt_boxes,
                     const char* op) {
  check_floating(deltas, op, "deltas");
  BH_CHECK_AS(InvalidArgument, deltas.dim() == 2 && deltas.size(1) == 4, "{}: deltas must be [A, 4], got {}", op,
              shape_str(deltas.shape()));
  check_boxes(anchors, op, "anchors");
  check_boxes(gt_boxes, op, "gt_boxes");
  BH_CHECK_AS(InvalidArgument, anchors.size(0) == deltas.size(0), "{}: {} deltas but {} anchors", op, deltas.size(0),
              anchors.size(0));
  check_same_device(deltas, anchors, op, "anchors");
  check_same_device(deltas, gt_boxes, op, "gt_boxes");
  check_index(matched, deltas.size(0), deltas, op, "matched");
  OpCall call;
  call.inputs = {deltas.contiguous(), anchors.contiguous(), matched.contiguous(), gt_boxes.contiguous()};
  return call;
}

// ---- NMS kernels (Note [Host-side NMS]) --------------------------------------------------------

// Indices 0..n-1 sorted by score, descending, ties in index order.
std::vector<std::int64_t> order_by_score(const float* scores, std::int64_t n) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t i, std::int64_t j) { return scores[i] > scores[j]; });
  return order;
}

// Greedy NMS over `n` boxes (xyxy f32); kept indices in visiting order.
std::vector<std::int64_t> nms_host(const float* b, const float* scores, std::int64_t n, double threshold) {
  const std::vector<std::int64_t> order = order_by_score(scores, n);
  std::vector<float> area(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) area[static_cast<std::size_t>(i)] = (b[4 * i + 2] - b[4 * i]) * (b[4 * i + 3] - b[4 * i + 1]);
  std::vector<char> suppressed(static_cast<std::size_t>(n), 0);
  std::vector<std::int64_t> keep;
  for (std::size_t oi = 0; oi < order.size(); ++oi) {
    const std::int64_t i = order[oi];
    if (suppressed[static_cast<std::size_t>(i)]) continue;
    keep.push_back(i);
    const float* bi = b + 4 * i;
    const float ai = area[static_cast<std::size_t>(i)];
    for (std::size_t oj = oi + 1; oj < order.size(); ++oj) {
      const std::int64_t j = order[oj];
      if (suppressed[static_cast<std::size_t>(j)]) continue;
      const float* bj = b + 4 * j;
      const float w = std::max(0.0f, std::min(bi[2], bj[2]) - std::max(bi[0], bj[0]));
      const float h = std::max(0.0f, std::min(bi[3], bj[3]) - std::max(bi[1], bj[1]));
      const float inter = w * h;
      const float iou = inter / (ai + area[static_cast<std::size_t>(j)] - inter);
      if (static_cast<double>(iou) > threshold) suppressed[static_cast<std::size_t>(j)] = 1;
    }
  }
  return keep;
}

std::vector<std::int64_t> batched_nms_host(const float* b, const float* scores, const std::int64_t* cls, std::int64_t n,
                                           double threshold) {
  if (n == 0) return {};
  if (4 * n <= 4000) {
    // Coordinate trick: shift each class's boxes by class * (max coordinate + 1), one NMS.
    float max_coord = b[0];
    for (std::int64_t i = 1; i < 4 * n; ++i) max_coord = std::max(max_coord, b[i]);
    const float step = max_coord + 1.0f;
    std::vector<float> shifted(static_cast<std::size_t>(4 * n));
    for (std::int64_t i = 0; i < n; ++i) {
      const float off = static_cast<float>(cls[i]) * step;
      for (int k = 0; k < 4; ++k) shifted[static_cast<std::size_t>(4 * i + k)] = b[4 * i + k] + off;
    }
    return nms_host(shifted.data(), scores, n, threshold);
  }
  // Per class: NMS on each class's boxes (in index order), then all kept, sorted by score.
  std::vector<std::int64_t> classes(cls, cls + n);
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  std::vector<char> kept(static_cast<std::size_t>(n), 0);
  std::vector<float> sub_boxes, sub_scores;
  std::vector<std::int64_t> sub_index;
  for (std::int64_t c : classes) {
    sub_boxes.clear();
    sub_scores.clear();
    sub_index.clear();
    for (std::int64_t i = 0; i < n; ++i)
      if (cls[i] == c) {
        sub_index.push_back(i);
        sub_scores.push_back(scores[i]);
        sub_boxes.insert(sub_boxes.end(), b + 4 * i, b + 4 * i + 4);
      }
    for (std::int64_t k : nms_host(sub_boxes.data(), sub_scores.data(), static_cast<std::int64_t>(sub_index.size()), threshold))
      kept[static_cast<std::size_t>(sub_index[static_cast<std::size_t>(k)])] = 1;
  }
  std::vector<std::int64_t> keep;
  for (std::int64_t i = 0; i < n; ++i)
    if (kept[static_cast<std::size_t>(i)]) keep.push_back(i);
  std::stable_sort(keep.begin(), keep.end(), [&](std::int64_t i, std::int64_t j) { return scores[i] > scores[j]; });
  return keep;
}

Tensor index_tensor(const std::vector<std::int64_t>& v) {
  return Tensor::from_vector_i64(v, {static_cast<std::int64_t>(v.size())});
}

void check_nms_args(const Tensor& boxes, const Tensor& scores, float iou_threshold, const char* op) {
  check_boxes(boxes, op, "boxes");
  BH_CHECK_AS(InvalidArgument,
              scores.defined() && scores.dtype() == DType::f32 && scores.dim() == 1 && scores.size(0) == boxes.size(0),
              "{}: scores must be f32 [{}], got {}", op, boxes.size(0), describe_or_undefined(scores));
  BH_CHECK_AS(InvalidArgument, !std::isnan(iou_threshold), "{}: the IoU threshold is NaN", op);
}

}  // namespace

// ============================================================================================
// Anchors
// ============================================================================================

AnchorSpec retinanet_anchor_spec() {
  AnchorSpec spec;
  for (int x : {32, 64, 128, 256, 512}) {
    std::vector<double> level;
    for (int k = 0; k < 3; ++k) level.push_back(static_cast<double>(static_cast<int>(x * std::pow(2.0, k / 3.0))));
    spec.sizes.push_back(level);
  }
  return spec;
}

Tensor generate_anchors(const AnchorSpec& spec, std::int64_t image_h, std::int64_t image_w,
                        const std::vector<std::pair<std::int64_t, std::int64_t>>& grid_sizes) {
  const char* op = "generate_anchors";
  BH_CHECK_AS(InvalidArgument, spec.sizes.size() == grid_sizes.size() && !grid_sizes.empty(),
              "{}: {} levels of sizes but {} grid sizes (one per feature level, at least one)", op, spec.sizes.size(),
              grid_sizes.size());
  BH_CHECK_AS(InvalidArgument, !spec.aspect_ratios.empty(), "{}: no aspect ratios", op);
  for (double r : spec.aspect_ratios)
    BH_CHECK_AS(InvalidArgument, r > 0 && std::isfinite(r), "{}: aspect ratio {} must be positive", op, r);
  std::int64_t total = 0;
  for (std::size_t l = 0; l < grid_sizes.size(); ++l) {
    const auto [gh, gw] = grid_sizes[l];
    BH_CHECK_AS(InvalidArgument, gh > 0 && gw > 0 && gh <= image_h && gw <= image_w && !spec.sizes[l].empty(),
                "{}: level {} has grid {}x{} for a {}x{} image and {} sizes (needs 1 <= grid <= image, sizes)", op, l,
                gh, gw, image_h, image_w, spec.sizes[l].size());
    total += gh * gw * static_cast<std::int64_t>(spec.sizes[l].size() * spec.aspect_ratios.size());
  }
  Tensor out = Tensor::empty({total, 4});
  float* p = out.data<float>();
  for (std::size_t l = 0; l < grid_sizes.size(); ++l) {
    // Base anchors in f32, torchvision's order of operations: ratio outer, size inner.
    std::vector<float> base;
    for (double r : spec.aspect_ratios) {
      const float h_ratio = std::sqrt(static_cast<float>(r)), w_ratio = 1.0f / h_ratio;
      for (double s : spec.sizes[l]) {
        const float ws = w_ratio * static_cast<float>(s), hs = h_ratio * static_cast<float>(s);
        for (float v : {-ws, -hs, ws, hs}) base.push_back(std::nearbyint(v / 2.0f));  // round half to even
      }
    }
    const auto [gh, gw] = grid_sizes[l];
    const std::int64_t stride_h = image_h / gh, stride_w = image_w / gw;
    const std::size_t per_cell = base.size() / 4;
    for (std::int64_t y = 0; y < gh; ++y)
      for (std::int64_t x = 0; x < gw; ++x) {
        const auto sx = static_cast<float>(x * stride_w), sy = static_cast<float>(y * stride_h);
        for (std::size_t a = 0; a < per_cell; ++a) {
          *p++ = sx + base[4 * a];
          *p++ = sy + base[4 * a + 1];
          *p++ = sx + base[4 * a + 2];
          *p++ = sy + base[4 * a + 3];
        }
      }
  }
  return out;
}

// ============================================================================================
// IoU, matching, box coding
// ============================================================================================

Tensor box_iou(const Tensor& a, const Tensor& b) {
  check_boxes(a, "box_iou", "a");
  check_boxes(b, "box_iou", "b");
  check_same_device(a, b, "box_iou", "b");
  OpCall call;
  call.inputs = {a.contiguous(), b.contiguous()};
  call.outputs = {Tensor::empty({a.size(0), b.size(0)}, DType::f32, a.device())};
  dispatch("box_iou", call);
  return call.outputs[0];
}

Tensor match_anchors(const Tensor& iou, float high, float low, bool allow_low_quality) {
  const char* op = "match_anchors";
  BH_CHECK_AS(InvalidArgument, iou.defined() && iou.dim() == 2 && iou.dtype() == DType::f32,
              "{}: iou must be an f32 [G, A] matrix (GT rows, anchor columns), got {}", op, describe_or_undefined(iou));
  BH_CHECK_AS(InvalidArgument, low <= high, "{}: low threshold {} exceeds the high threshold {}", op, low, high);
  OpCall call;
  call.inputs = {iou.contiguous()};
  call.outputs = {Tensor::empty({iou.size(1)}, DType::i64, iou.device())};
  call.attrs.set("high", high).set("low", low).set("allow_low_quality", allow_low_quality ? 1.0 : 0.0);
  dispatch(op, call);
  return call.outputs[0];
}

Tensor encode_boxes(const Tensor& gt, const Tensor& anchors, std::array<float, 4> weights, bool legacy_plus_one) {
  const char* op = "encode_boxes";
  check_boxes(gt, op, "gt");
  check_boxes(anchors, op, "anchors");
  check_same_device(gt, anchors, op, "anchors");
  BH_CHECK_AS(InvalidArgument, gt.size(0) == anchors.size(0), "{}: {} boxes against {} anchors", op, gt.size(0),
              anchors.size(0));
  OpCall call;
  call.inputs = {gt.contiguous(), anchors.contiguous()};
  call.outputs = {Tensor::empty({gt.size(0), 4}, DType::f32, gt.device())};
  call.attrs = coder_attrs(weights, op);
  if (legacy_plus_one) call.attrs.set("plus_one", 1.0);
  dispatch(op, call);
  return call.outputs[0];
}

Tensor decode_boxes(const Tensor& deltas, const Tensor& anchors, std::array<float, 4> weights, bool legacy_plus_one) {
  const char* op = "decode_boxes";
  check_floating(deltas, op, "deltas");
  BH_CHECK_AS(InvalidArgument, deltas.dim() == 2 && deltas.size(1) == 4, "{}: deltas must be [N, 4], got {}", op,
              shape_str(deltas.shape()));
  check_boxes(anchors, op, "anchors");
  check_same_device(deltas, anchors, op, "anchors");
  BH_CHECK_AS(InvalidArgument, deltas.size(0) == anchors.size(0), "{}: {} deltas against {} anchors", op,
              deltas.size(0), anchors.size(0));
  OpCall call;
  call.inputs = {deltas.contiguous(), anchors.contiguous()};
  call.outputs = {Tensor::empty({deltas.size(0), 4}, DType::f32, deltas.device())};
  call.attrs = coder_attrs(weights, op);
  if (legacy_plus_one) call.attrs.set("plus_one", 1.0);
  dispatch(op, call);
  return call.outputs[0];
}

// ============================================================================================
// Losses
// ============================================================================================

FocalLossResult retinanet_focal_loss_forward(const Tensor& logits, const Tensor& matched, const Tensor& gt_labels,
                                             float alpha, float gamma) {
  OpCall call = focal_call(logits, matched, gt_labels, alpha, gamma, "retinanet_focal_loss_forward");
  call.outputs = {Tensor::empty({2}, DType::f32, logits.device())};
  dispatch("retinanet_focal_loss_forward", call);
  const Tensor out = host(call.outputs[0]);
  return FocalLossResult{out.data<float>()[0], static_cast<std::int64_t>(out.data<float>()[1])};
}

Tensor retinanet_focal_loss_backward(const Tensor& logits, const Tensor& matched, const Tensor& gt_labels, float alpha,
                                     float gamma, float dloss) {
  OpCall call = focal_call(logits, matched, gt_labels, alpha, gamma, "retinanet_focal_loss_backward");
  call.outputs = {Tensor::empty(logits.shape(), DType::f32, logits.device())};
  call.attrs.set("dloss", dloss);
  dispatch("retinanet_focal_loss_backward", call);
  return call.outputs[0];
}

float retinanet_box_loss_forward(const Tensor& deltas, const Tensor& anchors, const Tensor& matched,
                                 const Tensor& gt_boxes) {
  OpCall call = box_loss_call(deltas, anchors, matched, gt_boxes, "retinanet_box_loss_forward");
  call.outputs = {Tensor::empty({2}, DType::f32, deltas.device())};
  dispatch("retinanet_box_loss_forward", call);
  return host(call.outputs[0]).data<float>()[0];
}

Tensor retinanet_box_loss_backward(const Tensor& deltas, const Tensor& anchors, const Tensor& matched,
                                   const Tensor& gt_boxes, float dloss) {
  OpCall call = box_loss_call(deltas, anchors, matched, gt_boxes, "retinanet_box_loss_backward");
  call.outputs = {Tensor::empty(deltas.shape(), DType::f32, deltas.device())};
  call.attrs.set("dloss", dloss);
  dispatch("retinanet_box_loss_backward", call);
  return call.outputs[0];
}

// ============================================================================================
// NMS and post-processing (host code, Note [Host-side NMS])
// ============================================================================================

Tensor nms(const Tensor& boxes, const Tensor& scores, float iou_threshold) {
  check_nms_args(boxes, scores, iou_threshold, "nms");
  const Tensor b = host(boxes), s = host(scores);
  return index_tensor(nms_host(b.data<float>(), s.data<float>(), b.size(0), iou_threshold));
}

Tensor batched_nms(const Tensor& boxes, const Tensor& scores, const Tensor& classes, float iou_threshold) {
  check_nms_args(boxes, scores, iou_threshold, "batched_nms");
  BH_CHECK_AS(InvalidArgument,
              classes.defined() && classes.dtype() == DType::i64 && classes.dim() == 1 && classes.size(0) == boxes.size(0),
              "batched_nms: classes must be i64 [{}], got {}", boxes.size(0), describe_or_undefined(classes));
  const Tensor b = host(boxes), s = host(scores), c = host(classes);
  return index_tensor(batched_nms_host(b.data<float>(), s.data<float>(), c.data<std::int64_t>(), b.size(0), iou_threshold));
}

Detections retinanet_postprocess(const std::vector<Tensor>& level_logits, const std::vector<Tensor>& level_deltas,
                                 const std::vector<Tensor>& level_anchors, std::int64_t image_h, std::int64_t image_w,
                                 float score_thresh, std::int64_t topk, float nms_thresh,
                                 std::int64_t detections_per_img) {
  const char* op = "retinanet_postprocess";
  BH_CHECK_AS(InvalidArgument,
              level_logits.size() == level_deltas.size() && level_logits.size() == level_anchors.size() &&
                  !level_logits.empty(),
              "{}: {} logits, {} deltas and {} anchor levels (must be equal and non-zero)", op, level_logits.size(),
              level_deltas.size(), level_anchors.size());
  BH_CHECK_AS(InvalidArgument, topk > 0 && detections_per_img >= 0 && image_h > 0 && image_w > 0,
              "{}: topk {} must be positive, detections_per_img {} non-negative, image {}x{} non-empty", op, topk,
              detections_per_img, image_h, image_w);
  std::vector<float> boxes, scores;
  std::vector<std::int64_t> labels;
  const float clip_x = static_cast<float>(image_w), clip_y = static_cast<float>(image_h);
  const float clip = static_cast<float>(std::log(1000.0 / 16.0));
  for (std::size_t l = 0; l < level_logits.size(); ++l) {
    // Half-precision heads: to the host first (Tensor::to converts dtypes on the CPU only).
    const Tensor z = host_f32(level_logits[l]);
    const Tensor d = host_f32(level_deltas[l]);
    const Tensor a = host(level_anchors[l]);
    BH_CHECK_AS(InvalidArgument, z.dim() == 2 && z.size(1) > 0, "{}: level {} logits must be [A, K], got {}", op, l,
                shape_str(z.shape()));
    check_boxes(a, op, "anchors");
    BH_CHECK_AS(InvalidArgument, d.dim() == 2 && d.size(1) == 4 && d.size(0) == z.size(0) && a.size(0) == z.size(0),
                "{}: level {}: logits {}, deltas {} and anchors {} disagree on the anchor count", op, l,
                shape_str(z.shape()), shape_str(d.shape()), shape_str(a.shape()));
    const std::int64_t K = z.size(1), n = z.numel();
    const float* zp = z.data<float>();
    std::vector<std::int64_t> cand;
    std::vector<float> cand_score;
    for (std::int64_t i = 0; i < n; ++i) {
      const float p = 1.0f / (1.0f + std::exp(-zp[i]));
      if (p > score_thresh) {
        cand.push_back(i);
        cand_score.push_back(p);
      }
    }
    // topk: the best min(topk, candidates), descending, ties by flat index (stable).
    std::vector<std::int64_t> order(cand.size());
    std::iota(order.begin(), order.end(), std::int64_t{0});
    const auto take = static_cast<std::size_t>(std::min<std::int64_t>(topk, static_cast<std::int64_t>(cand.size())));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take), order.end(),
                      [&](std::int64_t i, std::int64_t j) {
                        return cand_score[static_cast<std::size_t>(i)] > cand_score[static_cast<std::size_t>(j)] ||
                               (cand_score[static_cast<std::size_t>(i)] == cand_score[static_cast<std::size_t>(j)] && i < j);
                      });
    const float* dp = d.data<float>();
    const float* ap = a.data<float>();
    for (std::size_t t = 0; t < take; ++t) {
      const std::int64_t flat = cand[static_cast<std::size_t>(order[t])];
      const std::int64_t anchor = flat / K;
      // BoxCoder.decode_single with weights (1, 1, 1, 1), in f32 (Note [Detection arithmetic in f32]).
      const float* an = ap + 4 * anchor;
      const float* de = dp + 4 * anchor;
      const float aw = an[2] - an[0], ah = an[3] - an[1];
      const float cx = an[0] + 0.5f * aw, cy = an[1] + 0.5f * ah;
      const float px = de[0] * aw + cx, py = de[1] * ah + cy;
      const float pw = std::exp(std::min(de[2], clip)) * aw, ph = std::exp(std::min(de[3], clip)) * ah;
      const float hw = 0.5f * pw, hh = 0.5f * ph;
      const float box[4] = {px - hw, py - hh, px + hw, py + hh};
      for (int k = 0; k < 4; ++k)
        boxes.push_back(std::min(std::max(box[k], 0.0f), k % 2 == 0 ? clip_x : clip_y));
      scores.push_back(cand_score[static_cast<std::size_t>(order[t])]);
      labels.push_back(flat % K);
    }
  }
  const auto n = static_cast<std::int64_t>(scores.size());
  std::vector<std::int64_t> keep = batched_nms_host(boxes.data(), scores.data(), labels.data(), n, nms_thresh);
  if (static_cast<std::int64_t>(keep.size()) > detections_per_img) keep.resize(static_cast<std::size_t>(detections_per_img));
  const auto D = static_cast<std::int64_t>(keep.size());
  Detections out{Tensor::empty({D, 4}), Tensor::empty({D}), Tensor::empty({D}, DType::i64)};
  for (std::int64_t i = 0; i < D; ++i) {
    const auto k = static_cast<std::size_t>(keep[static_cast<std::size_t>(i)]);
    for (int j = 0; j < 4; ++j) out.boxes.data<float>()[4 * i + j] = boxes[4 * k + static_cast<std::size_t>(j)];
    out.scores.data<float>()[i] = scores[k];
    out.labels.data<std::int64_t>()[i] = labels[k];
  }
  return out;
}

// ============================================================================================
// Mask R-CNN: RoIAlign, level mapper, smooth-L1, mask loss
// ============================================================================================

namespace {

// The op call shared by roi_align_forward and roi_align_backward: attrs and the levels tensor
// (zeros when undefined), after the checks both directions need.
Attrs roi_align_attrs(const RoIAlignSpec& spec, std::size_t levels, const char* op) {
  BH_CHECK_AS(InvalidArgument, spec.pooled_h > 0 && spec.pooled_w > 0, "{}: pooled size {}x{} must be positive", op,
              spec.pooled_h, spec.pooled_w);
  BH_CHECK_AS(InvalidArgument, levels >= 1 && spec.spatial_scales.size() == levels,
              "{}: {} feature levels but {} spatial scales (one per level)", op, levels, spec.spatial_scales.size());
  Attrs a;
  a.set("pooled_h", static_cast<double>(spec.pooled_h)).set("pooled_w", static_cast<double>(spec.pooled_w));
  a.set("sampling_ratio", static_cast<double>(spec.sampling_ratio)).set("aligned", spec.aligned ? 1.0 : 0.0);
  a.set("channels_last", spec.channels_last ? 1.0 : 0.0);
  for (std::size_t l = 0; l < levels; ++l) {
    const float s = spec.spatial_scales[l];
    BH_CHECK_AS(InvalidArgument, s > 0 && std::isfinite(s), "{}: spatial scale {} of level {} must be positive", op, s, l);
    a.set("scale" + std::to_string(l), s);
  }
  return a;
}

Tensor roi_levels_or_zeros(const Tensor& rois, const Tensor& levels, const char* op) {
  BH_CHECK_AS(InvalidArgument, rois.defined() && rois.dim() == 2 && rois.size(1) == 5 && rois.dtype() == DType::f32,
              "{}: rois must be f32 [K, 5] rows (batch index, x1, y1, x2, y2), got {}", op, describe_or_undefined(rois));
  if (!levels.defined()) return Tensor::zeros({rois.size(0)}, DType::i64, rois.device());
  check_index(levels, rois.size(0), rois, op, "levels");
  return levels.contiguous();
}

}  // namespace

Tensor roi_align_forward(const std::vector<Tensor>& features, const Tensor& rois, const Tensor& levels,
                         const RoIAlignSpec& spec) {
  const char* op = "roi_align_forward";
  OpCall call;
  call.attrs = roi_align_attrs(spec, features.size(), op);
  call.inputs = {Tensor(), roi_levels_or_zeros(rois, levels, op)};
  call.inputs[0] = rois.contiguous();
  for (std::size_t l = 0; l < features.size(); ++l) {
    check_floating(features[l], op, "features");
    check_same_device(rois, features[l], op, "features");
    BH_CHECK_AS(InvalidArgument, features[l].dim() == 4, "{}: level {} features must be 4-d ({}), got {}", op, l,
                spec.channels_last ? "N, H, W, C" : "N, C, H, W", shape_str(features[l].shape()));
    call.inputs.push_back(features[l].contiguous());
  }
  const Tensor& f0 = features[0];
  const std::int64_t C = spec.channels_last ? f0.size(3) : f0.size(1), K = rois.size(0);
  const Shape out = spec.channels_last ? Shape{K, spec.pooled_h, spec.pooled_w, C} : Shape{K, C, spec.pooled_h, spec.pooled_w};
  call.outputs = {Tensor::empty(out, f0.dtype(), f0.device())};
  dispatch(op, call);
  return call.outputs[0];
}

std::vector<Tensor> roi_align_backward(const Tensor& dout, const Tensor& rois, const Tensor& levels,
                                       const std::vector<Shape>& feature_shapes, const RoIAlignSpec& spec) {
  const char* op = "roi_align_backward";
  check_floating(dout, op, "dout");
  OpCall call;
  call.attrs = roi_align_attrs(spec, feature_shapes.size(), op);
  check_same_device(dout, rois, op, "rois");
  call.inputs = {dout.contiguous(), rois.contiguous(), roi_levels_or_zeros(rois, levels, op)};
  for (const Shape& s : feature_shapes) {
    BH_CHECK_AS(InvalidArgument, s.size() == 4, "{}: feature shapes must be 4-d, got {}", op, shape_str(s));
    call.outputs.push_back(Tensor::empty(s, DType::f32, dout.device()));
  }
  dispatch(op, call);
  return call.outputs;
}

Tensor map_roi_levels(const Tensor& rois, const LevelMapper& m) {
  const char* op = "map_roi_levels";
  BH_CHECK_AS(InvalidArgument,
              rois.defined() && rois.dim() == 2 && (rois.size(1) == 4 || rois.size(1) == 5) && rois.dtype() == DType::f32,
              "{}: rois must be f32 [K, 5] (batch, x1, y1, x2, y2) or [K, 4], got {}", op, describe_or_undefined(rois));
  BH_CHECK_AS(InvalidArgument, m.k_min <= m.k_max && m.canonical_scale > 0,
              "{}: levels {}..{} and canonical scale {} (needs k_min <= k_max, scale > 0)", op, m.k_min, m.k_max,
              m.canonical_scale);
  const Tensor h = host(rois);
  const std::int64_t K = h.size(0), cols = h.size(1);
  const float* p = h.data<float>() + (cols - 4);
  std::vector<std::int64_t> out(static_cast<std::size_t>(K));
  const float plus = m.legacy ? 1.0f : 0.0f;
  for (std::int64_t i = 0; i < K; ++i) {
    const float* b = p + cols * i;
    // f32 throughout, in the order of the reference's tensor expressions.
    const float area = (b[2] - b[0] + plus) * (b[3] - b[1] + plus);
    const float s = std::sqrt(area);
    const float lvl = m.legacy ? m.canonical_level + std::log2(s / m.canonical_scale + m.eps)
                               : m.canonical_level + std::log2(s / m.canonical_scale) + m.eps;
    const float f = std::floor(lvl);
    const float k = std::min(std::max(f, static_cast<float>(m.k_min)), static_cast<float>(m.k_max));
    out[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(k) - m.k_min;
  }
  Tensor levels = index_tensor(out);
  return rois.device().is_cpu() ? levels : levels.to(rois.device());
}

namespace {

OpCall smooth_l1_call(const Tensor& input, const Tensor& target, float beta, float scale, const char* op) {
  check_floating(input, op, "input");
  check_floating(target, op, "target");
  check_same_device(input, target, op, "target");
  BH_CHECK_AS(InvalidArgument, input.numel() == target.numel(), "{}: input {} and target {} differ in size", op,
              shape_str(input.shape()), shape_str(target.shape()));
  BH_CHECK_AS(InvalidArgument, beta >= 0 && std::isfinite(beta) && std::isfinite(scale),
              "{}: beta {} must be finite and >= 0, scale {} finite", op, beta, scale);
  OpCall call;
  call.inputs = {input.contiguous(), target.contiguous()};
  call.attrs.set("beta", beta).set("scale", scale);
  return call;
}

OpCall mask_bce_call(const Tensor& logits, const Tensor& labels, const Tensor& targets, const char* op) {
  check_floating(logits, op, "logits");
  check_floating(targets, op, "targets");
  BH_CHECK_AS(InvalidArgument, logits.dim() == 4 && logits.size(1) > 0, "{}: logits must be [R, C, M, M], got {}", op,
              shape_str(logits.shape()));
  const std::int64_t R = logits.size(0);
  BH_CHECK_AS(InvalidArgument,
              targets.dim() == 3 && targets.size(0) == R && targets.size(1) == logits.size(2) &&
                  targets.size(2) == logits.size(3),
              "{}: targets must be [{}, {}, {}] like the logits' masks, got {}", op, R, logits.size(2), logits.size(3),
              shape_str(targets.shape()));
  check_index(labels, R, logits, op, "labels");
  check_same_device(logits, targets, op, "targets");
  OpCall call;
  call.inputs = {logits.contiguous(), labels.contiguous(), targets.contiguous()};
  return call;
}

}  // namespace

float smooth_l1_loss_forward(const Tensor& input, const Tensor& target, float beta, float scale) {
  OpCall call = smooth_l1_call(input, target, beta, scale, "smooth_l1_loss_forward");
  call.outputs = {Tensor::empty({1}, DType::f32, input.device())};
  dispatch("smooth_l1_loss_forward", call);
  return host(call.outputs[0]).data<float>()[0];
}

Tensor smooth_l1_loss_backward(const Tensor& input, const Tensor& target, float beta, float scale, float dloss) {
  OpCall call = smooth_l1_call(input, target, beta, scale, "smooth_l1_loss_backward");
  call.attrs.set("dloss", dloss);
  call.outputs = {Tensor::empty(input.shape(), DType::f32, input.device())};
  dispatch("smooth_l1_loss_backward", call);
  return call.outputs[0];
}

float mask_bce_loss_forward(const Tensor& logits, const Tensor& labels, const Tensor& targets) {
  OpCall call = mask_bce_call(logits, labels, targets, "mask_bce_loss_forward");
  call.outputs = {Tensor::empty({1}, DType::f32, logits.device())};
  dispatch("mask_bce_loss_forward", call);
  return host(call.outputs[0]).data<float>()[0];
}

Tensor mask_bce_loss_backward(const Tensor& logits, const Tensor& labels, const Tensor& targets, float dloss) {
  OpCall call = mask_bce_call(logits, labels, targets, "mask_bce_loss_backward");
  call.attrs.set("dloss", dloss);
  call.outputs = {Tensor::empty(logits.shape(), DType::f32, logits.device())};
  dispatch("mask_bce_loss_backward", call);
  return call.outputs[0];
}

}  // namespace benchhost::nn
