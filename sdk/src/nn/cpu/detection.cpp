// The detection ops of nn/detection.hpp that run per training step: box_iou, match_anchors,
// encode_boxes, decode_boxes, retinanet_focal_loss_forward/backward and
// retinanet_box_loss_forward/backward: the op declarations, the oneTBB CPU kernels and the
// plain-loop references. The public functions (and the host-side anchors, NMS and
// post-processing) are in nn/detection.cpp; the CUDA kernels in nn/cuda/detection.cu.
//
// Ops (boxes f32 [*, 4] xyxy; indices and labels i64):
//   box_iou                      {a [N, 4], b [M, 4]} -> {iou [N, M]}
//   match_anchors                {iou [G, A]} -> {matched i64 [A]}; attrs high, low, allow_low_quality
//   encode_boxes                 {gt [N, 4], anchors [N, 4]} -> {deltas [N, 4]}; attrs wx, wy, ww, wh,
//                                plus_one (maskrcnn_benchmark's +1 widths)
//   decode_boxes                 {deltas [N, 4], anchors [N, 4]} -> {boxes [N, 4]}; attrs wx, wy, ww, wh,
//                                plus_one (+1 widths, x2 and y2 one less)
//   retinanet_focal_loss_forward {logits [A, K], matched [A], gt_labels [G]} -> {out [2] = loss, num_fg};
//                                attrs alpha, gamma
//   retinanet_focal_loss_backward {same} -> {dlogits [A, K]}; attrs alpha, gamma, dloss
//   retinanet_box_loss_forward   {deltas [A, 4], anchors [A, 4], matched [A], gt_boxes [G, 4]} ->
//                                {out [2] = loss, num_fg}
//   retinanet_box_loss_backward  {same} -> {ddeltas [A, 4]}; attr dloss
//
// Note [Detection arithmetic in f32]
// IoU, encoding and decoding are computed in f32 with torchvision's operation order, one
// rounding per operation (the build has no FP contraction: -std=c++20 without GNU extensions),
// so boxes, IoUs and therefore matches and NMS decisions agree with torchvision's bit for bit,
// up to the last bit of exp/log in the box coder.
//
// Note [Focal loss in softplus form]
// For a logit x with e = exp(-|x|) and L = log1p(e): softplus(x) = max(x, 0) + L is the BCE of
// target 0 and softplus(-x) = max(-x, 0) + L that of target 1; p = sigmoid(x) is 1 / (1 + e) or
// e / (1 + e), p^g = exp(-g softplus(-x)) and (1 - p)^g = exp(-g softplus(x)). With alpha a:
//   target 0: loss = (1 - a) p^g softplus(x),        dloss/dx = (1 - a) p^g (p + g (1 - p) softplus(x))
//   target 1: loss = a (1 - p)^g softplus(-x),       dloss/dx = -a (1 - p)^g ((1 - p) + g p softplus(-x))
// (the derivative of torchvision's ce * (1 - p_t)^g * alpha_t for t in {0, 1}). Everything is a
// product of one exp, a log1p and a division, which vectorise (vec_math.hpp's vexp and vlog1p
// below); g = 2 uses p * p. The fast kernel computes the target-0 terms for a whole row of K
// classes in one vector loop and then replaces the single target-1 column of a foreground row.
// Rows are cut into fixed chunks of kFocalRows anchors (f32 sums within a chunk, f64 across in
// chunk order): the loss does not depend on the thread count.

#include <algorithm>
#include <array>
#include <tuple>
#include <vector>

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/vec_math.hpp"

namespace benchhost::nn::cpu {
namespace {

constexpr std::int64_t kFocalRows = 64;   // anchors per chunk of the focal loss (x K classes)
constexpr std::int64_t kBoxRows = 4096;   // anchors per chunk of the box ops

// ---------------------------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------------------------

void check_boxes(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined() && t.dim() == 2 && t.size(1) == 4 && t.dtype() == DType::f32,
              "{}: {} must be f32 [N, 4], got {}", op, what, t.defined() ? t.describe() : std::string("undefined"));
}

// Every matched value in [-2, G); throws DataError naming the first one outside.
void check_matched(const Tensor& matched, std::int64_t G, const char* op) {
  const std::int64_t* m = matched.data<std::int64_t>();
  for (std::int64_t a = 0; a < matched.numel(); ++a)
    if (m[a] < -2 || m[a] >= G) [[unlikely]]
      BH_THROW(DataError, "{}: matched index {} at anchor {} is outside [-2, {}) (-2 ignored, -1 background, else a GT)",
               op, m[a], a, G);
}

void check_labels(const Tensor& labels, std::int64_t K, const char* op) {
  const std::int64_t* l = labels.data<std::int64_t>();
  for (std::int64_t g = 0; g < labels.numel(); ++g)
    if (l[g] < 0 || l[g] >= K) [[unlikely]]
      BH_THROW(DataError, "{}: label {} of ground-truth box {} is outside [0, {}) (the logits' classes)", op, l[g], g,
               K);
}

std::int64_t count_foreground(const Tensor& matched) {
  const std::int64_t* m = matched.data<std::int64_t>();
  std::int64_t n = 0;
  for (std::int64_t a = 0; a < matched.numel(); ++a) n += m[a] >= 0 ? 1 : 0;
  return n;
}

std::array<float, 4> weights_of(const Attrs& a) {
  return {static_cast<float>(a.get("wx", 1.0)), static_cast<float>(a.get("wy", 1.0)),
          static_cast<float>(a.get("ww", 1.0)), static_cast<float>(a.get("wh", 1.0))};
}

// The clamp of decoded dw, dh (torchvision's bbox_xform_clip = log(1000 / 16), rounded to f32).
const float kXformClip = static_cast<float>(std::log(1000.0 / 16.0));

// ---------------------------------------------------------------------------------------------
// Box arithmetic (Note [Detection arithmetic in f32]); inlined into the kernels
// ---------------------------------------------------------------------------------------------

BH_INLINE float iou_one(const float* a, float area_a, const float* b, float area_b) {
  const float lt_x = std::max(a[0], b[0]), lt_y = std::max(a[1], b[1]);
  const float rb_x = std::min(a[2], b[2]), rb_y = std::min(a[3], b[3]);
  const float w = std::max(rb_x - lt_x, 0.0f), h = std::max(rb_y - lt_y, 0.0f);
  const float inter = w * h;
  return inter / (area_a + area_b - inter);
}

BH_INLINE float area_of(const float* b) { return (b[2] - b[0]) * (b[3] - b[1]); }

// `one` is 1 for maskrcnn_benchmark's +1 widths (Note [Legacy box convention] in nn/detection.hpp),
// else 0 (adding 0 changes no value: torchvision's results are unchanged).
BH_INLINE void encode_one(const float* g, const float* a, const std::array<float, 4>& w, float* out, float one = 0.0f) {
  const float aw = a[2] - a[0] + one, ah = a[3] - a[1] + one;
  const float ax = a[0] + 0.5f * aw, ay = a[1] + 0.5f * ah;
  const float gw = g[2] - g[0] + one, gh = g[3] - g[1] + one;
  const float gx = g[0] + 0.5f * gw, gy = g[1] + 0.5f * gh;
  out[0] = w[0] * (gx - ax) / aw;
  out[1] = w[1] * (gy - ay) / ah;
  out[2] = w[2] * std::log(gw / aw);
  out[3] = w[3] * std::log(gh / ah);
}

BH_INLINE void decode_one(const float* d, const float* a, const std::array<float, 4>& w, float* out, float one = 0.0f) {
  const float aw = a[2] - a[0] + one, ah = a[3] - a[1] + one;
  const float cx = a[0] + 0.5f * aw, cy = a[1] + 0.5f * ah;
  const float dx = d[0] / w[0], dy = d[1] / w[1];
  const float dw = std::min(d[2] / w[2], kXformClip), dh = std::min(d[3] / w[3], kXformClip);
  const float px = dx * aw + cx, py = dy * ah + cy;
  const float pw = std::exp(dw) * aw, ph = std::exp(dh) * ah;
  const float hw = 0.5f * pw, hh = 0.5f * ph;
  out[0] = px - hw;
  out[1] = py - hh;
  out[2] = px + hw - one;
  out[3] = py + hh - one;
}

// ---------------------------------------------------------------------------------------------
// box_iou
// ---------------------------------------------------------------------------------------------

void iou_geo(const OpCall& c, std::int64_t& n, std::int64_t& m) {
  check_boxes(c.inputs[0], "box_iou", "a");
  check_boxes(c.inputs[1], "box_iou", "b");
  n = c.inputs[0].size(0);
  m = c.inputs[1].size(0);
  BH_CHECK_AS(InvalidArgument, c.outputs[0].numel() == n * m, "box_iou: output has {} elements, needs {} x {}",
              c.outputs[0].numel(), n, m);
}

BH_CPU_KERNEL void iou_row(const float* a, float area_a, const float* b, const float* area_b, std::int64_t m,
                           float* out) {
  for (std::int64_t j = 0; j < m; ++j) out[j] = iou_one(a, area_a, b + 4 * j, area_b[j]);
}

void iou_tbb(OpCall& call) {
  std::int64_t n = 0, m = 0;
  iou_geo(call, n, m);
  const float* a = call.inputs[0].data<float>();
  const float* b = call.inputs[1].data<float>();
  float* out = call.outputs[0].data<float>();
  std::vector<float> area_b(static_cast<std::size_t>(m));
  for (std::int64_t j = 0; j < m; ++j) area_b[static_cast<std::size_t>(j)] = area_of(b + 4 * j);
  parallel_range(n, row_grain(m), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) iou_row(a + 4 * i, area_of(a + 4 * i), b, area_b.data(), m, out + i * m);
  });
}

void iou_ref(OpCall& call) {
  std::int64_t n = 0, m = 0;
  iou_geo(call, n, m);
  const float* a = call.inputs[0].data<float>();
  const float* b = call.inputs[1].data<float>();
  float* out = call.outputs[0].data<float>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) {
      const float* p = a + 4 * i;
      const float* q = b + 4 * j;
      const float w = std::max(std::min(p[2], q[2]) - std::max(p[0], q[0]), 0.0f);
      const float h = std::max(std::min(p[3], q[3]) - std::max(p[1], q[1]), 0.0f);
      const float inter = w * h;
      out[i * m + j] = inter / ((p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter);
    }
}

// ---------------------------------------------------------------------------------------------
// match_anchors (torchvision Matcher)
// ---------------------------------------------------------------------------------------------

struct MatchGeo {
  std::int64_t g = 0, a = 0;
  float high = 0.5f, low = 0.4f;
  bool low_quality = true;
};

MatchGeo match_geo(const OpCall& c) {
  const Tensor& iou = c.inputs[0];
  BH_CHECK_AS(InvalidArgument, iou.dim() == 2 && iou.dtype() == DType::f32, "match_anchors: iou must be f32 [G, A], got {}",
              iou.describe());
  MatchGeo m;
  m.g = iou.size(0);
  m.a = iou.size(1);
  m.high = static_cast<float>(c.attrs.get("high", 0.5));
  m.low = static_cast<float>(c.attrs.get("low", 0.4));
  m.low_quality = c.attrs.get_bool("allow_low_quality", true);
  BH_CHECK_AS(InvalidArgument, c.outputs[0].numel() == m.a && c.outputs[0].dtype() == DType::i64,
              "match_anchors: output must be i64 [{}], got {}", m.a, c.outputs[0].describe());
  return m;
}

// Column maxima (first index on ties) of anchors [a0, a1): best value and GT per anchor.
BH_CPU_KERNEL void column_best(const float* iou, std::int64_t G, std::int64_t A, std::int64_t a0, std::int64_t a1,
                               float* best, std::int64_t* arg) {
  for (std::int64_t a = a0; a < a1; ++a) {
    best[a - a0] = iou[a];
    arg[a - a0] = 0;
  }
  for (std::int64_t g = 1; g < G; ++g) {
    const float* row = iou + g * A;
    for (std::int64_t a = a0; a < a1; ++a) {
      const bool more = row[a] > best[a - a0];
      best[a - a0] = more ? row[a] : best[a - a0];
      arg[a - a0] = more ? g : arg[a - a0];
    }
  }
}

void match_tbb(OpCall& call) {
  const MatchGeo m = match_geo(call);
  std::int64_t* out = call.outputs[0].data<std::int64_t>();
  if (m.g == 0) {
    std::fill(out, out + m.a, std::int64_t{-1});
    return;
  }
  const float* iou = call.inputs[0].data<float>();
  // Each GT's highest IoU over the anchors.
  std::vector<float> row_max(static_cast<std::size_t>(m.g));
  parallel_range(m.g, 1, [&](std::int64_t g0, std::int64_t g1) {
    for (std::int64_t g = g0; g < g1; ++g) {
      const float* row = iou + g * m.a;
      float best = row[0];
      for (std::int64_t a = 1; a < m.a; ++a) best = row[a] > best ? row[a] : best;
      row_max[static_cast<std::size_t>(g)] = best;
    }
  });
  parallel_range(m.a, kBoxRows, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t a0 = b0; a0 < b1; a0 += kBoxRows) {
      const std::int64_t a1 = std::min(b1, a0 + kBoxRows);
      float best[kBoxRows];
      std::int64_t arg[kBoxRows];
      column_best(iou, m.g, m.a, a0, a1, best, arg);
      for (std::int64_t a = a0; a < a1; ++a) {
        const float v = best[a - a0];
        std::int64_t r = arg[a - a0];
        if (v < m.low) r = -1;
        else if (v < m.high) r = -2;
        if (m.low_quality && r < 0)
          for (std::int64_t g = 0; g < m.g; ++g)
            if (iou[g * m.a + a] == row_max[static_cast<std::size_t>(g)]) {
              r = arg[a - a0];
              break;
            }
        out[a] = r;
      }
    }
  });
}

void match_ref(OpCall& call) {
  const MatchGeo m = match_geo(call);
  std::int64_t* out = call.outputs[0].data<std::int64_t>();
  if (m.g == 0) {
    for (std::int64_t a = 0; a < m.a; ++a) out[a] = -1;
    return;
  }
  const float* iou = call.inputs[0].data<float>();
  // torchvision's steps, literally: max over dim 0, thresholds, then the low-quality restore.
  std::vector<float> vals(static_cast<std::size_t>(m.a));
  std::vector<std::int64_t> all(static_cast<std::size_t>(m.a));
  for (std::int64_t a = 0; a < m.a; ++a) {
    std::int64_t best = 0;
    for (std::int64_t g = 1; g < m.g; ++g)
      if (iou[g * m.a + a] > iou[best * m.a + a]) best = g;
    all[static_cast<std::size_t>(a)] = best;
    vals[static_cast<std::size_t>(a)] = iou[best * m.a + a];
    out[a] = best;
  }
  for (std::int64_t a = 0; a < m.a; ++a) {
    if (vals[static_cast<std::size_t>(a)] < m.low) out[a] = -1;
    if (vals[static_cast<std::size_t>(a)] >= m.low && vals[static_cast<std::size_t>(a)] < m.high) out[a] = -2;
  }
  if (!m.low_quality) return;
  for (std::int64_t g = 0; g < m.g; ++g) {
    float hq = iou[g * m.a];
    for (std::int64_t a = 1; a < m.a; ++a) hq = std::max(hq, iou[g * m.a + a]);
    for (std::int64_t a = 0; a < m.a; ++a)
      if (iou[g * m.a + a] == hq) out[a] = all[static_cast<std::size_t>(a)];
  }
}

// ---------------------------------------------------------------------------------------------
// encode_boxes / decode_boxes
// ---------------------------------------------------------------------------------------------

std::int64_t coder_rows(const OpCall& c, const char* op) {
  check_boxes(c.inputs[0], op, "input 0");
  check_boxes(c.inputs[1], op, "anchors");
  const std::int64_t n = c.inputs[0].size(0);
  BH_CHECK_AS(InvalidArgument, c.inputs[1].size(0) == n && c.outputs[0].numel() == 4 * n,
              "{}: {} boxes against {} anchors ({} outputs)", op, n, c.inputs[1].size(0), c.outputs[0].numel());
  return n;
}

template <bool kEncode>
void coder_run(OpCall& call, bool parallel) {
  const std::int64_t n = coder_rows(call, kEncode ? "encode_boxes" : "decode_boxes");
  const auto w = weights_of(call.attrs);
  const float one = call.attrs.get_bool("plus_one") ? 1.0f : 0.0f;
  const float* x = call.inputs[0].data<float>();
  const float* a = call.inputs[1].data<float>();
  float* out = call.outputs[0].data<float>();
  auto rows = [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      if constexpr (kEncode) encode_one(x + 4 * i, a + 4 * i, w, out + 4 * i, one);
      else decode_one(x + 4 * i, a + 4 * i, w, out + 4 * i, one);
    }
  };
  if (parallel) parallel_range(n, kBoxRows, rows);
  else rows(0, n);
}

void encode_tbb(OpCall& call) { coder_run<true>(call, true); }
void decode_tbb(OpCall& call) { coder_run<false>(call, true); }

// References: the same formulas in f64 (parity tolerances cover the f32 roundings).
void encode_ref(OpCall& call) {
  const std::int64_t n = coder_rows(call, "encode_boxes");
  const auto w = weights_of(call.attrs);
  const double one = call.attrs.get_bool("plus_one") ? 1.0 : 0.0;
  const float* g = call.inputs[0].data<float>();
  const float* a = call.inputs[1].data<float>();
  float* out = call.outputs[0].data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const float* gi = g + 4 * i;
    const float* ai = a + 4 * i;
    const double aw = static_cast<double>(ai[2]) - ai[0] + one, ah = static_cast<double>(ai[3]) - ai[1] + one;
    const double gw = static_cast<double>(gi[2]) - gi[0] + one, gh = static_cast<double>(gi[3]) - gi[1] + one;
    out[4 * i] = static_cast<float>(w[0] * ((gi[0] + 0.5 * gw) - (ai[0] + 0.5 * aw)) / aw);
    out[4 * i + 1] = static_cast<float>(w[1] * ((gi[1] + 0.5 * gh) - (ai[1] + 0.5 * ah)) / ah);
    out[4 * i + 2] = static_cast<float>(w[2] * std::log(gw / aw));
    out[4 * i + 3] = static_cast<float>(w[3] * std::log(gh / ah));
  }
}

void decode_ref(OpCall& call) {
  const std::int64_t n = coder_rows(call, "decode_boxes");
  const auto w = weights_of(call.attrs);
  const double one = call.attrs.get_bool("plus_one") ? 1.0 : 0.0;
  const double clip = std::log(1000.0 / 16.0);
  const float* d = call.inputs[0].data<float>();
  const float* a = call.inputs[1].data<float>();
  float* out = call.outputs[0].data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const float* di = d + 4 * i;
    const float* ai = a + 4 * i;
    const double aw = static_cast<double>(ai[2]) - ai[0] + one, ah = static_cast<double>(ai[3]) - ai[1] + one;
    const double cx = ai[0] + 0.5 * aw + di[0] / w[0] * aw, cy = ai[1] + 0.5 * ah + di[1] / w[1] * ah;
    const double pw = std::exp(std::min(di[2] / static_cast<double>(w[2]), clip)) * aw;
    const double ph = std::exp(std::min(di[3] / static_cast<double>(w[3]), clip)) * ah;
    out[4 * i] = static_cast<float>(cx - 0.5 * pw);
    out[4 * i + 1] = static_cast<float>(cy - 0.5 * ph);
    out[4 * i + 2] = static_cast<float>(cx + 0.5 * pw - one);
    out[4 * i + 3] = static_cast<float>(cy + 0.5 * ph - one);
  }
}

// ---------------------------------------------------------------------------------------------
// retinanet_focal_loss_forward / backward (Note [Focal loss in softplus form])
// ---------------------------------------------------------------------------------------------

// log1p(e) for e in [0, 1]: 2 atanh(s) with s = e / (2 + e) <= 1/3, series to s^15 (relative
// error below 2e-9 before rounding); plain arithmetic, so loops over it vectorise.
BH_INLINE float vlog1p_unit(float e) {
  const float s = e / (2.0f + e), s2 = s * s;
  float q = 1.0f / 15.0f;
  q = q * s2 + 1.0f / 13.0f;
  q = q * s2 + 1.0f / 11.0f;
  q = q * s2 + 1.0f / 9.0f;
  q = q * s2 + 1.0f / 7.0f;
  q = q * s2 + 1.0f / 5.0f;
  q = q * s2 + 1.0f / 3.0f;
  q = q * s2 + 1.0f;
  return 2.0f * s * q;
}

struct FocalGeo {
  std::int64_t a = 0, k = 0, g = 0;
  float alpha = 0.25f, gamma = 2.0f;
};

FocalGeo focal_geo(const OpCall& c, const char* op) {
  const Tensor& z = c.inputs[0];
  BH_CHECK_AS(InvalidArgument, z.dim() == 2 && z.dtype() == DType::f32, "{}: logits must be f32 [A, K], got {}", op,
              z.describe());
  FocalGeo f;
  f.a = z.size(0);
  f.k = z.size(1);
  f.g = c.inputs[2].numel();
  BH_CHECK_AS(InvalidArgument,
              c.inputs[1].dtype() == DType::i64 && c.inputs[1].numel() == f.a && c.inputs[2].dtype() == DType::i64,
              "{}: matched must be i64 [{}] and gt_labels i64 [G], got {} and {}", op, f.a, c.inputs[1].describe(),
              c.inputs[2].describe());
  f.alpha = static_cast<float>(c.attrs.get("alpha", 0.25));
  f.gamma = static_cast<float>(c.attrs.get("gamma", 2.0));
  check_matched(c.inputs[1], f.g, op);
  check_labels(c.inputs[2], f.k, op);
  return f;
}

// Target class of anchor a: its GT's label (foreground), -1 (background) or -2 (ignored).
inline std::int64_t target_class(const std::int64_t* matched, const std::int64_t* labels, std::int64_t a) {
  return matched[a] >= 0 ? labels[matched[a]] : matched[a];
}

// p^g from softplus(-x) (= -log p) without a pow call: exp(-g sp), or p * p for g = 2.
template <bool kGamma2>
BH_INLINE float power_of(float p, float sp, float gamma) {
  if constexpr (kGamma2) return p * p;
  else return vexp(-gamma * sp);
}

// One row's target-0 losses summed; the column `tc` (when >= 0) replaced by its target-1 loss.
template <bool kGamma2>
BH_INLINE float focal_row_loss(const float* x, std::int64_t K, std::int64_t tc, float alpha, float gamma) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (std::int64_t k = 0; k < K; ++k) {
    const float ax = std::fabs(x[k]);
    const float e = vexp(-ax), l = vlog1p_unit(e);
    const float sp_pos = (x[k] > 0.0f ? x[k] : 0.0f) + l;  // softplus(x)
    const float sp_neg = (x[k] < 0.0f ? -x[k] : 0.0f) + l; // softplus(-x)
    const float p = x[k] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    s += power_of<kGamma2>(p, sp_neg, gamma) * sp_pos;
  }
  s *= 1.0f - alpha;
  if (tc >= 0) {
    const float xv = x[tc], l = vlog1p_unit(vexp(-std::fabs(xv)));
    const float sp_pos = (xv > 0.0f ? xv : 0.0f) + l, sp_neg = (xv < 0.0f ? -xv : 0.0f) + l;
    const float e = vexp(-std::fabs(xv));
    const float p = xv >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    const float q = xv >= 0.0f ? e / (1.0f + e) : 1.0f / (1.0f + e);  // 1 - p without cancellation
    s -= (1.0f - alpha) * power_of<kGamma2>(p, sp_neg, gamma) * sp_pos;
    s += alpha * power_of<kGamma2>(q, sp_pos, gamma) * sp_neg;
  }
  return s;
}

template <bool kGamma2>
BH_INLINE void focal_row_grad(const float* __restrict x, std::int64_t K, std::int64_t tc, float alpha, float gamma,
                              float scale, float* __restrict dx) {
  const float c0 = (1.0f - alpha) * scale;
#pragma omp simd
  for (std::int64_t k = 0; k < K; ++k) {
    const float ax = std::fabs(x[k]);
    const float e = vexp(-ax), l = vlog1p_unit(e);
    const float sp_pos = (x[k] > 0.0f ? x[k] : 0.0f) + l;
    const float sp_neg = (x[k] < 0.0f ? -x[k] : 0.0f) + l;
    const float p = x[k] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    const float q = x[k] >= 0.0f ? e / (1.0f + e) : 1.0f / (1.0f + e);
    dx[k] = c0 * power_of<kGamma2>(p, sp_neg, gamma) * (p + gamma * q * sp_pos);
  }
  if (tc >= 0) {
    const float xv = x[tc], e = vexp(-std::fabs(xv)), l = vlog1p_unit(e);
    const float sp_pos = (xv > 0.0f ? xv : 0.0f) + l, sp_neg = (xv < 0.0f ? -xv : 0.0f) + l;
    const float p = xv >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    const float q = xv >= 0.0f ? e / (1.0f + e) : 1.0f / (1.0f + e);  // 1 - p without cancellation
    dx[tc] = -alpha * scale * power_of<kGamma2>(q, sp_pos, gamma) * (q + gamma * p * sp_neg);
  }
}

// BH_CPU_KERNEL must sit on non-template functions (Note [Kernel multiversioning]): one per gamma case.
BH_CPU_KERNEL double focal_chunk_loss_g2(const float* z, const std::int64_t* m, const std::int64_t* l,
                                         std::int64_t r0, std::int64_t r1, std::int64_t K, float alpha, float gamma) {
  float s = 0.0f;
  for (std::int64_t a = r0; a < r1; ++a) {
    const std::int64_t tc = target_class(m, l, a);
    if (tc != -2) s += focal_row_loss<true>(z + a * K, K, tc, alpha, gamma);
  }
  return s;
}
BH_CPU_KERNEL double focal_chunk_loss_gx(const float* z, const std::int64_t* m, const std::int64_t* l,
                                         std::int64_t r0, std::int64_t r1, std::int64_t K, float alpha, float gamma) {
  float s = 0.0f;
  for (std::int64_t a = r0; a < r1; ++a) {
    const std::int64_t tc = target_class(m, l, a);
    if (tc != -2) s += focal_row_loss<false>(z + a * K, K, tc, alpha, gamma);
  }
  return s;
}
BH_CPU_KERNEL void focal_chunk_grad_g2(const float* z, const std::int64_t* m, const std::int64_t* l, std::int64_t r0,
                                       std::int64_t r1, std::int64_t K, float alpha, float gamma, float scale,
                                       float* dz) {
  for (std::int64_t a = r0; a < r1; ++a) {
    const std::int64_t tc = target_class(m, l, a);
    if (tc == -2) std::fill(dz + a * K, dz + (a + 1) * K, 0.0f);
    else focal_row_grad<true>(z + a * K, K, tc, alpha, gamma, scale, dz + a * K);
  }
}
BH_CPU_KERNEL void focal_chunk_grad_gx(const float* z, const std::int64_t* m, const std::int64_t* l, std::int64_t r0,
                                       std::int64_t r1, std::int64_t K, float alpha, float gamma, float scale,
                                       float* dz) {
  for (std::int64_t a = r0; a < r1; ++a) {
    const std::int64_t tc = target_class(m, l, a);
    if (tc == -2) std::fill(dz + a * K, dz + (a + 1) * K, 0.0f);
    else focal_row_grad<false>(z + a * K, K, tc, alpha, gamma, scale, dz + a * K);
  }
}

void focal_fwd_tbb(OpCall& call) {
  const FocalGeo f = focal_geo(call, "retinanet_focal_loss_forward");
  const float* z = call.inputs[0].data<float>();
  const std::int64_t* m = call.inputs[1].data<std::int64_t>();
  const std::int64_t* l = call.inputs[2].data<std::int64_t>();
  const std::int64_t chunks = (f.a + kFocalRows - 1) / kFocalRows;
  std::vector<double> part(static_cast<std::size_t>(chunks), 0.0);
  const bool g2 = f.gamma == 2.0f;
  parallel_range(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const std::int64_t r0 = c * kFocalRows, r1 = std::min(f.a, r0 + kFocalRows);
      part[static_cast<std::size_t>(c)] = g2 ? focal_chunk_loss_g2(z, m, l, r0, r1, f.k, f.alpha, f.gamma)
                                             : focal_chunk_loss_gx(z, m, l, r0, r1, f.k, f.alpha, f.gamma);
    }
  });
  double total = 0.0;
  for (double p : part) total += p;
  const std::int64_t nfg = count_foreground(call.inputs[1]);
  float* out = call.outputs[0].data<float>();
  out[0] = static_cast<float>(total / static_cast<double>(std::max<std::int64_t>(1, nfg)));
  out[1] = static_cast<float>(nfg);
}

void focal_bwd_tbb(OpCall& call) {
  const FocalGeo f = focal_geo(call, "retinanet_focal_loss_backward");
  const float* z = call.inputs[0].data<float>();
  const std::int64_t* m = call.inputs[1].data<std::int64_t>();
  const std::int64_t* l = call.inputs[2].data<std::int64_t>();
  float* dz = call.outputs[0].data<float>();
  const std::int64_t nfg = count_foreground(call.inputs[1]);
  const float scale = static_cast<float>(call.attrs.get("dloss", 1.0) / static_cast<double>(std::max<std::int64_t>(1, nfg)));
  const bool g2 = f.gamma == 2.0f;
  parallel_range(f.a, kFocalRows, [&](std::int64_t r0, std::int64_t r1) {
    if (g2) focal_chunk_grad_g2(z, m, l, r0, r1, f.k, f.alpha, f.gamma, scale, dz);
    else focal_chunk_grad_gx(z, m, l, r0, r1, f.k, f.alpha, f.gamma, scale, dz);
  });
}

// References: torchvision's formula literally, in f64 (p, BCE with logits, p_t, alpha_t).
double focal_term_ref(double x, double t, double alpha, double gamma) {
  const double p = 1.0 / (1.0 + std::exp(-x));
  const double ce = std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::fabs(x)));
  const double p_t = p * t + (1.0 - p) * (1.0 - t);
  const double alpha_t = alpha * t + (1.0 - alpha) * (1.0 - t);
  return alpha_t * ce * std::pow(1.0 - p_t, gamma);
}

// d term / dx by the chain rule on torchvision's expression (not the simplified form above).
double focal_grad_ref(double x, double t, double alpha, double gamma) {
  const double p = 1.0 / (1.0 + std::exp(-x));
  const double ce = std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::fabs(x)));
  const double p_t = p * t + (1.0 - p) * (1.0 - t);
  const double alpha_t = alpha * t + (1.0 - alpha) * (1.0 - t);
  const double dp = p * (1.0 - p), dce = p - t, dpt = dp * (2.0 * t - 1.0);
  const double m = 1.0 - p_t;
  const double dpow = gamma == 0.0 ? 0.0 : gamma * std::pow(m, gamma - 1.0) * -dpt;
  return alpha_t * (dce * std::pow(m, gamma) + ce * dpow);
}

void focal_fwd_ref(OpCall& call) {
  const FocalGeo f = focal_geo(call, "retinanet_focal_loss_forward");
  const float* z = call.inputs[0].data<float>();
  const std::int64_t* m = call.inputs[1].data<std::int64_t>();
  const std::int64_t* l = call.inputs[2].data<std::int64_t>();
  double total = 0.0;
  std::int64_t nfg = 0;
  for (std::int64_t a = 0; a < f.a; ++a) {
    if (m[a] == -2) continue;
    nfg += m[a] >= 0 ? 1 : 0;
    for (std::int64_t k = 0; k < f.k; ++k) {
      const double t = m[a] >= 0 && l[m[a]] == k ? 1.0 : 0.0;
      total += focal_term_ref(z[a * f.k + k], t, f.alpha, f.gamma);
    }
  }
  float* out = call.outputs[0].data<float>();
  out[0] = static_cast<float>(total / static_cast<double>(std::max<std::int64_t>(1, nfg)));
  out[1] = static_cast<float>(nfg);
}

void focal_bwd_ref(OpCall& call) {
  const FocalGeo f = focal_geo(call, "retinanet_focal_loss_backward");
  const float* z = call.inputs[0].data<float>();
  const std::int64_t* m = call.inputs[1].data<std::int64_t>();
  const std::int64_t* l = call.inputs[2].data<std::int64_t>();
  float* dz = call.outputs[0].data<float>();
  const double scale =
      call.attrs.get("dloss", 1.0) / static_cast<double>(std::max<std::int64_t>(1, count_foreground(call.inputs[1])));
  for (std::int64_t a = 0; a < f.a; ++a)
    for (std::int64_t k = 0; k < f.k; ++k) {
      const double t = m[a] >= 0 && l[m[a]] == k ? 1.0 : 0.0;
      dz[a * f.k + k] = m[a] == -2 ? 0.0f : static_cast<float>(scale * focal_grad_ref(z[a * f.k + k], t, f.alpha, f.gamma));
    }
}

// ---------------------------------------------------------------------------------------------
// retinanet_box_loss_forward / backward
// ---------------------------------------------------------------------------------------------

std::int64_t box_loss_rows(const OpCall& c, const char* op) {
  check_boxes(c.inputs[0], op, "deltas");
  check_boxes(c.inputs[1], op, "anchors");
  check_boxes(c.inputs[3], op, "gt_boxes");
  const std::int64_t a = c.inputs[0].size(0);
  BH_CHECK_AS(InvalidArgument,
              c.inputs[1].size(0) == a && c.inputs[2].dtype() == DType::i64 && c.inputs[2].numel() == a,
              "{}: {} deltas need {} anchors and i64 matched [{}], got {} and {}", op, a, a, a, c.inputs[1].describe(),
              c.inputs[2].describe());
  check_matched(c.inputs[2], c.inputs[3].size(0), op);
  return a;
}

BH_INLINE float sign_of(float v) { return v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f); }

void box_fwd_run(OpCall& call, bool parallel) {
  const std::int64_t A = box_loss_rows(call, "retinanet_box_loss_forward");
  const float* d = call.inputs[0].data<float>();
  const float* an = call.inputs[1].data<float>();
  const std::int64_t* m = call.inputs[2].data<std::int64_t>();
  const float* gt = call.inputs[3].data<float>();
  const std::array<float, 4> w{1, 1, 1, 1};
  const std::int64_t chunks = (A + kBoxRows - 1) / kBoxRows;
  std::vector<double> part(static_cast<std::size_t>(chunks), 0.0);
  auto run = [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      float s = 0.0f;
      for (std::int64_t a = c * kBoxRows; a < std::min(A, (c + 1) * kBoxRows); ++a) {
        if (m[a] < 0) continue;
        float t[4];
        encode_one(gt + 4 * m[a], an + 4 * a, w, t);
        for (int j = 0; j < 4; ++j) s += std::fabs(d[4 * a + j] - t[j]);
      }
      part[static_cast<std::size_t>(c)] = s;
    }
  };
  if (parallel) parallel_range(chunks, 1, run);
  else run(0, chunks);
  double total = 0.0;
  for (double p : part) total += p;
  const std::int64_t nfg = count_foreground(call.inputs[2]);
  float* out = call.outputs[0].data<float>();
  out[0] = static_cast<float>(total / static_cast<double>(std::max<std::int64_t>(1, nfg)));
  out[1] = static_cast<float>(nfg);
}

void box_bwd_run(OpCall& call, bool parallel) {
  const std::int64_t A = box_loss_rows(call, "retinanet_box_loss_backward");
  const float* d = call.inputs[0].data<float>();
  const float* an = call.inputs[1].data<float>();
  const std::int64_t* m = call.inputs[2].data<std::int64_t>();
  const float* gt = call.inputs[3].data<float>();
  float* dd = call.outputs[0].data<float>();
  const std::array<float, 4> w{1, 1, 1, 1};
  const float scale = static_cast<float>(call.attrs.get("dloss", 1.0) /
                                         static_cast<double>(std::max<std::int64_t>(1, count_foreground(call.inputs[2]))));
  auto run = [&](std::int64_t a0, std::int64_t a1) {
    for (std::int64_t a = a0; a < a1; ++a) {
      if (m[a] < 0) {
        for (int j = 0; j < 4; ++j) dd[4 * a + j] = 0.0f;
        continue;
      }
      float t[4];
      encode_one(gt + 4 * m[a], an + 4 * a, w, t);
      for (int j = 0; j < 4; ++j) dd[4 * a + j] = scale * sign_of(d[4 * a + j] - t[j]);
    }
  };
  if (parallel) parallel_range(A, kBoxRows, run);
  else run(0, A);
}

void box_fwd_tbb(OpCall& call) { box_fwd_run(call, true); }
void box_bwd_tbb(OpCall& call) { box_bwd_run(call, true); }
// The references are the same f32 encoding (torchvision's, Note [Detection arithmetic in f32]) in
// one plain loop: the L1 sign at a tie must come out of the same target.
void box_fwd_ref(OpCall& call) { box_fwd_run(call, false); }
void box_bwd_ref(OpCall& call) { box_bwd_run(call, false); }

// ---------------------------------------------------------------------------------------------
// accepts() and example cases
// ---------------------------------------------------------------------------------------------

// f32 floating tensors (else promotion), everything contiguous on the CPU.
std::string accepts(const OpCall& c) {
  std::string why = require_floating_f32(c);
  if (!why.empty()) return why;
  for (const auto* list : {&c.inputs, &c.outputs})
    for (const Tensor& t : *list)
      if (t.defined() && (!t.device().is_cpu() || !t.is_contiguous())) return "tensors must be contiguous cpu tensors";
  return {};
}

// n random boxes of sizes [4, 60) inside a 200 x 200 image; with `snap`, corners on a grid of 4
// so that exact IoU ties occur.
Tensor case_boxes(std::int64_t n, std::uint64_t seed, bool snap = false) {
  Tensor t = Tensor::empty({n, 4});
  Rng r(seed, 11);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    float x = r.uniform(0.0f, 160.0f), y = r.uniform(0.0f, 160.0f);
    float w = r.uniform(4.0f, 60.0f), h = r.uniform(4.0f, 60.0f);
    if (snap) {
      x = std::round(x / 8.0f) * 8.0f;
      y = std::round(y / 8.0f) * 8.0f;
      w = std::round(w / 8.0f) * 8.0f + 8.0f;
      h = std::round(h / 8.0f) * 8.0f + 8.0f;
    }
    p[4 * i] = x;
    p[4 * i + 1] = y;
    p[4 * i + 2] = x + w;
    p[4 * i + 3] = y + h;
  }
  return t;
}

Tensor case_iou(std::int64_t g, std::int64_t a, std::uint64_t seed, bool snap) {
  OpCall c;
  c.inputs = {case_boxes(g, seed, snap), case_boxes(a, seed + 1, snap)};
  c.outputs = {Tensor::empty({g, a})};
  iou_ref(c);
  return c.outputs[0];
}

// matched i64 [a] from a real matching of random boxes (foreground, background and ignored).
Tensor case_matched(std::int64_t g, std::int64_t a, std::uint64_t seed) {
  OpCall c;
  c.inputs = {case_iou(g, a, seed, true)};
  c.outputs = {Tensor::empty({a}, DType::i64)};
  c.attrs.set("high", 0.5).set("low", 0.3).set("allow_low_quality", 1.0);
  match_ref(c);
  return c.outputs[0];
}

Tensor case_labels(std::int64_t g, std::int64_t k, std::uint64_t seed) {
  Tensor t = Tensor::empty({g}, DType::i64);
  Rng r(seed, 13);
  for (std::int64_t i = 0; i < g; ++i) t.data<std::int64_t>()[i] = static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(k)));
  return t;
}

std::vector<OpCall> iou_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (auto [n, m, snap] : {std::tuple{5, 7, false}, std::tuple{33, 300, true}, std::tuple{0, 4, false}}) {
    OpCall c;
    c.inputs = {case_boxes(n, seed + n, snap), case_boxes(m, seed + m + 1, snap)};
    c.outputs = {Tensor::empty({n, m})};
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> match_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  const std::tuple<int, int, double, double, bool> kCases[] = {
      {4, 50, 0.5, 0.4, true}, {7, 5000, 0.5, 0.4, true}, {7, 600, 0.5, 0.3, false}, {0, 20, 0.5, 0.4, true},
      {12, 9000, 0.6, 0.6, true}};
  for (const auto& [g, a, high, low, lq] : kCases) {
    OpCall c;
    c.inputs = {case_iou(g, a, seed + static_cast<std::uint64_t>(a), true)};
    c.outputs = {Tensor::empty({a}, DType::i64)};
    c.attrs.set("high", high).set("low", low).set("allow_low_quality", lq ? 1.0 : 0.0);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> coder_cases(std::uint64_t seed, bool encode) {
  std::vector<OpCall> out;
  for (auto [n, wx, ww, plus_one] : {std::tuple{9, 1.0, 1.0, false}, std::tuple{5000, 10.0, 5.0, false},
                                     std::tuple{700, 10.0, 5.0, true}}) {
    OpCall c;
    c.inputs = {encode ? case_boxes(n, seed + 3) : case_tensor({n, 4}, seed + 3, -6.0f, 6.0f), case_boxes(n, seed + 4)};
    c.outputs = {Tensor::empty({n, 4})};
    c.attrs.set("wx", wx).set("wy", wx).set("ww", ww).set("wh", ww);
    if (plus_one) c.attrs.set("plus_one", 1.0);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> focal_cases(std::uint64_t seed, bool backward) {
  std::vector<OpCall> out;
  const std::tuple<int, int, int, double, double> kCases[] = {
      {40, 6, 3, 0.25, 2.0}, {1000, 37, 9, 0.25, 2.0}, {300, 11, 4, 0.5, 1.5}, {50, 5, 0, 0.25, 2.0}};
  double dloss = 1.0;
  for (const auto& [a, k, g, alpha, gamma] : kCases) {
    OpCall c;
    c.inputs = {case_tensor({a, k}, seed + static_cast<std::uint64_t>(a), -8.0f, 6.0f),
                case_matched(g, a, seed + 7 * static_cast<std::uint64_t>(a)), case_labels(g, k, seed + 5)};
    c.outputs = {backward ? Tensor::empty({a, k}) : Tensor::empty({2})};
    c.attrs.set("alpha", alpha).set("gamma", gamma);
    if (backward) c.attrs.set("dloss", dloss);
    dloss *= 0.5;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> box_cases(std::uint64_t seed, bool backward) {
  std::vector<OpCall> out;
  for (auto [a, g] : {std::pair{60, 4}, std::pair{9000, 10}, std::pair{30, 0}}) {
    OpCall c;
    c.inputs = {case_tensor({a, 4}, seed + static_cast<std::uint64_t>(a), -1.0f, 1.0f), case_boxes(a, seed + 2, true),
                case_matched(g, a, seed + 2), case_boxes(g, seed + 2, true)};
    c.outputs = {backward ? Tensor::empty({a, 4}) : Tensor::empty({2})};
    if (backward) c.attrs.set("dloss", 0.75);
    out.push_back(std::move(c));
  }
  return out;
}

OpDef op_def(const char* name, const char* doc, OpCaseMaker cases, double atol, double rtol, void (*fast)(OpCall&),
             void (*ref)(OpCall&)) {
  return OpDef{name, doc, std::move(cases), atol, rtol,
               {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, fast, false},
                OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, ref, true}}};
}

const bool registered =
    register_op(op_def("box_iou", "inputs {a [N, 4], b [M, 4]} (xyxy), outputs {iou [N, M]}", iou_cases, 0.0, 0.0,
                       iou_tbb, iou_ref)) &&
    register_op(op_def("match_anchors",
                       "inputs {iou [G, A]}, outputs {matched i64 [A]: GT index, -1 below low, -2 between}; attrs "
                       "high, low, allow_low_quality",
                       match_cases, 0.0, 0.0, match_tbb, match_ref)) &&
    register_op(op_def("encode_boxes", "inputs {gt [N, 4], anchors [N, 4]}, outputs {deltas [N, 4]}; attrs wx wy ww wh plus_one",
                       [](std::uint64_t s) { return coder_cases(s, true); }, 1e-5, 1e-5, encode_tbb, encode_ref)) &&
    register_op(op_def("decode_boxes",
                       "inputs {deltas [N, 4], anchors [N, 4]}, outputs {boxes [N, 4]}; attrs wx wy ww wh plus_one (dw, "
                       "dh clamped at log(1000/16))",
                       [](std::uint64_t s) { return coder_cases(s, false); }, 1e-3, 1e-5, decode_tbb, decode_ref)) &&
    register_op(op_def("retinanet_focal_loss_forward",
                       "inputs {logits [A, K], matched i64 [A], gt_labels i64 [G]}, outputs {[loss, num_foreground]}; "
                       "attrs alpha, gamma",
                       [](std::uint64_t s) { return focal_cases(s, false); }, 1e-5, 1e-5, focal_fwd_tbb,
                       focal_fwd_ref)) &&
    register_op(op_def("retinanet_focal_loss_backward",
                       "inputs {logits [A, K], matched i64 [A], gt_labels i64 [G]}, outputs {dlogits [A, K]}; attrs "
                       "alpha, gamma, dloss",
                       [](std::uint64_t s) { return focal_cases(s, true); }, 1e-7, 1e-5, focal_bwd_tbb,
                       focal_bwd_ref)) &&
    register_op(op_def("retinanet_box_loss_forward",
                       "inputs {deltas [A, 4], anchors [A, 4], matched i64 [A], gt_boxes [G, 4]}, outputs {[loss, "
                       "num_foreground]} (L1 to the encoded targets, / max(1, num_foreground))",
                       [](std::uint64_t s) { return box_cases(s, false); }, 1e-5, 1e-5, box_fwd_tbb, box_fwd_ref)) &&
    register_op(op_def("retinanet_box_loss_backward",
                       "inputs {deltas, anchors, matched, gt_boxes}, outputs {ddeltas [A, 4]}; attr dloss",
                       [](std::uint64_t s) { return box_cases(s, true); }, 0.0, 0.0, box_bwd_tbb, box_bwd_ref));

}  // namespace
}  // namespace benchhost::nn::cpu
