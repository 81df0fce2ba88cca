// RoIAlign forward and backward over one or more feature levels (Note [Legacy RoIAlign] in
// nn/detection.hpp): the op declarations, the oneTBB CPU kernels and the plain-loop references.
// The Tensor-level functions are in nn/detection.cpp; the CUDA kernels in nn/cuda/roi_align.cu.
//
// Ops (rois f32 [K, 5] = batch index, x1, y1, x2, y2; levels i64 [K] in [0, L)):
//   roi_align_forward   {rois, levels, features_0 .. features_{L-1}} -> {out [K, C, ph, pw]}
//   roi_align_backward  {dout, rois, levels} -> {dfeatures_0 .. dfeatures_{L-1}} (overwritten)
//   attrs pooled_h, pooled_w, sampling_ratio, aligned, channels_last, scale0 .. scale{L-1}
// With channels_last the features are [N, H, W, C] and out/dout [K, ph, pw, C].
//
// Note [RoIAlign sample tables]
// Every RoI's bilinear samples depend only on the RoI, not on the channel: for each bin
// (ph, pw) and sample (iy, ix) the four neighbour offsets in the H x W plane and their weights.
// The fast kernels build that table once per RoI (torchvision's pre_calc) and then run the
// channels over it: NCHW walks one plane per channel, NHWC runs the innermost loop over the
// contiguous channels (it vectorises). The backward gives each thread a range of channels and
// walks all RoIs in order, so no two threads write the same gradient element and every
// element's sum is formed in the reference's order: the result does not depend on the thread
// count. (The vectorised NHWC loops may fuse multiply-adds, so NHWC and NCHW results agree to
// f32 rounding, not bit for bit.)

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

struct RoiGeo {
  std::int64_t k = 0, n = 0, c = 0, levels = 0;
  std::int64_t ph = 0, pw = 0, sampling = 2;
  bool aligned = false, nhwc = false;
  std::vector<float> scale;
  std::vector<std::int64_t> h, w;
};

// Geometry from the call: features (forward) or gradient buffers (backward) give the levels.
RoiGeo roi_geo(const OpCall& c, bool backward) {
  const char* op = backward ? "roi_align_backward" : "roi_align_forward";
  const Tensor& rois = c.inputs[backward ? 1 : 0];
  const Tensor& levels = c.inputs[backward ? 2 : 1];
  const std::vector<Tensor> feats(backward ? c.outputs.begin() : c.inputs.begin() + 2,
                                  backward ? c.outputs.end() : c.inputs.end());
  const Tensor& out = backward ? c.inputs[0] : c.outputs[0];
  RoiGeo g;
  g.nhwc = c.attrs.get_bool("channels_last");
  g.aligned = c.attrs.get_bool("aligned");
  g.ph = c.attrs.get_int("pooled_h", 7);
  g.pw = c.attrs.get_int("pooled_w", 7);
  g.sampling = c.attrs.get_int("sampling_ratio", 2);
  g.levels = static_cast<std::int64_t>(feats.size());
  BH_CHECK_AS(InvalidArgument, rois.dim() == 2 && rois.size(1) == 5 && rois.dtype() == DType::f32,
              "{}: rois must be f32 [K, 5] (batch index, x1, y1, x2, y2), got {}", op, rois.describe());
  g.k = rois.size(0);
  BH_CHECK_AS(InvalidArgument, levels.dtype() == DType::i64 && levels.numel() == g.k,
              "{}: levels must be i64 [{}], got {}", op, g.k, levels.describe());
  BH_CHECK_AS(InvalidArgument, g.levels >= 1 && g.ph > 0 && g.pw > 0, "{}: {} levels, pooled {}x{} (needs >= 1, > 0)",
              op, g.levels, g.ph, g.pw);
  for (std::int64_t l = 0; l < g.levels; ++l) {
    const Tensor& f = feats[static_cast<std::size_t>(l)];
    BH_CHECK_AS(InvalidArgument, f.dim() == 4, "{}: level {} features must be 4-d, got {}", op, l, f.describe());
    const std::int64_t n = f.size(0), ch = g.nhwc ? f.size(3) : f.size(1);
    if (l == 0) {
      g.n = n;
      g.c = ch;
    }
    BH_CHECK_AS(InvalidArgument, n == g.n && ch == g.c, "{}: level {} has batch {} and {} channels, level 0 {} and {}",
                op, l, n, ch, g.n, g.c);
    g.h.push_back(g.nhwc ? f.size(1) : f.size(2));
    g.w.push_back(g.nhwc ? f.size(2) : f.size(3));
    const std::string key = "scale" + std::to_string(l);
    g.scale.push_back(static_cast<float>(c.attrs.get(key)));
  }
  const Shape want = g.nhwc ? Shape{g.k, g.ph, g.pw, g.c} : Shape{g.k, g.c, g.ph, g.pw};
  BH_CHECK_AS(InvalidArgument, out.shape() == want, "{}: {} must be {}, got {}", op, backward ? "dout" : "output",
              shape_str(want), shape_str(out.shape()));
  const float* r = rois.data<float>();
  const std::int64_t* lv = levels.data<std::int64_t>();
  for (std::int64_t i = 0; i < g.k; ++i) {
    const float b = r[5 * i];
    if (!(b >= 0.0f && b < static_cast<float>(g.n)) || b != std::floor(b)) [[unlikely]]
      BH_THROW(DataError, "{}: RoI {} has batch index {}, outside [0, {}) or not an integer", op, i, b, g.n);
    if (lv[i] < 0 || lv[i] >= g.levels) [[unlikely]]
      BH_THROW(DataError, "{}: RoI {} has level {}, outside [0, {})", op, i, lv[i], g.levels);
  }
  return g;
}

// One bilinear sample: offsets of the four neighbours in the H x W plane and their weights
// (weights 0 and offsets 0 for a sample outside the map).
struct Sample {
  std::int64_t o1, o2, o3, o4;
  float w1, w2, w3, w4;
};

// The sample at (y, x) of an H x W map, torchvision's bilinear_interpolate exactly.
inline Sample sample_at(float y, float x, std::int64_t H, std::int64_t W) {
  if (y < -1.0f || y > static_cast<float>(H) || x < -1.0f || x > static_cast<float>(W)) return {0, 0, 0, 0, 0, 0, 0, 0};
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  auto y_low = static_cast<std::int64_t>(y), x_low = static_cast<std::int64_t>(x);
  std::int64_t y_high, x_high;
  if (y_low >= H - 1) {
    y_high = y_low = H - 1;
    y = static_cast<float>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= W - 1) {
    x_high = x_low = W - 1;
    x = static_cast<float>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const float ly = y - static_cast<float>(y_low), lx = x - static_cast<float>(x_low);
  const float hy = 1.0f - ly, hx = 1.0f - lx;
  return {y_low * W + x_low, y_low * W + x_high, y_high * W + x_low, y_high * W + x_high,
          hy * hx,           hy * lx,           ly * hx,           ly * lx};
}

// One RoI's placement: its level, batch, start, bin size and sample grid (torchvision's order).
struct RoiBox {
  std::int64_t level, batch, grid_h, grid_w;
  float start_h, start_w, bin_h, bin_w, count;
};

inline RoiBox roi_box(const RoiGeo& g, const float* r, std::int64_t level) {
  const float scale = g.scale[static_cast<std::size_t>(level)];
  const float offset = g.aligned ? 0.5f : 0.0f;
  RoiBox b;
  b.level = level;
  b.batch = static_cast<std::int64_t>(r[0]);
  b.start_w = r[1] * scale - offset;
  b.start_h = r[2] * scale - offset;
  float roi_w = r[3] * scale - offset - b.start_w, roi_h = r[4] * scale - offset - b.start_h;
  if (!g.aligned) {
    roi_w = std::max(roi_w, 1.0f);
    roi_h = std::max(roi_h, 1.0f);
  }
  b.bin_h = roi_h / static_cast<float>(g.ph);
  b.bin_w = roi_w / static_cast<float>(g.pw);
  b.grid_h = g.sampling > 0 ? g.sampling : static_cast<std::int64_t>(std::ceil(roi_h / static_cast<float>(g.ph)));
  b.grid_w = g.sampling > 0 ? g.sampling : static_cast<std::int64_t>(std::ceil(roi_w / static_cast<float>(g.pw)));
  b.count = static_cast<float>(std::max<std::int64_t>(b.grid_h * b.grid_w, 1));
  return b;
}

// Sample coordinate iy of bin ph: start + ph * bin + (iy + 0.5) * bin / grid, torchvision's order.
inline float sample_coord(float start, std::int64_t p, float bin, std::int64_t i, std::int64_t grid) {
  return start + static_cast<float>(p) * bin + (static_cast<float>(i) + 0.5f) * bin / static_cast<float>(grid);
}

// The sample table of one RoI (Note [RoIAlign sample tables]): bins in (ph, pw) order, samples
// within a bin in (iy, ix) order.
void sample_table(const RoiGeo& g, const RoiBox& b, std::vector<Sample>& table) {
  const std::int64_t H = g.h[static_cast<std::size_t>(b.level)], W = g.w[static_cast<std::size_t>(b.level)];
  table.clear();
  for (std::int64_t ph = 0; ph < g.ph; ++ph)
    for (std::int64_t pw = 0; pw < g.pw; ++pw)
      for (std::int64_t iy = 0; iy < b.grid_h; ++iy) {
        const float y = sample_coord(b.start_h, ph, b.bin_h, iy, b.grid_h);
        for (std::int64_t ix = 0; ix < b.grid_w; ++ix)
          table.push_back(sample_at(y, sample_coord(b.start_w, pw, b.bin_w, ix, b.grid_w), H, W));
      }
}

const float* level_data(const OpCall& c, std::int64_t l) { return c.inputs[static_cast<std::size_t>(2 + l)].data<float>(); }

BH_CPU_KERNEL void pool_nhwc(const float* __restrict f, const Sample* s, std::int64_t per_bin, std::int64_t C,
                             float count, float* __restrict out) {
  for (std::int64_t c = 0; c < C; ++c) out[c] = 0.0f;
  for (std::int64_t i = 0; i < per_bin; ++i) {
    const Sample& q = s[i];
    const float* p1 = f + q.o1 * C;
    const float* p2 = f + q.o2 * C;
    const float* p3 = f + q.o3 * C;
    const float* p4 = f + q.o4 * C;
    for (std::int64_t c = 0; c < C; ++c) out[c] += q.w1 * p1[c] + q.w2 * p2[c] + q.w3 * p3[c] + q.w4 * p4[c];
  }
  for (std::int64_t c = 0; c < C; ++c) out[c] /= count;
}

void forward_tbb(OpCall& call) {
  const RoiGeo g = roi_geo(call, false);
  const float* rois = call.inputs[0].data<float>();
  const std::int64_t* lv = call.inputs[1].data<std::int64_t>();
  float* out = call.outputs[0].data<float>();
  const std::int64_t bins = g.ph * g.pw;
  parallel_range(g.k, 1, [&](std::int64_t k0, std::int64_t k1) {
    std::vector<Sample> table;
    for (std::int64_t k = k0; k < k1; ++k) {
      const RoiBox b = roi_box(g, rois + 5 * k, lv[k]);
      sample_table(g, b, table);
      const std::int64_t H = g.h[static_cast<std::size_t>(b.level)], W = g.w[static_cast<std::size_t>(b.level)];
      const std::int64_t per_bin = b.grid_h * b.grid_w;
      const float* f = level_data(call, b.level) + b.batch * H * W * g.c;
      if (g.nhwc) {
        for (std::int64_t bin = 0; bin < bins; ++bin)
          pool_nhwc(f, table.data() + bin * per_bin, per_bin, g.c, b.count, out + (k * bins + bin) * g.c);
        continue;
      }
      for (std::int64_t c = 0; c < g.c; ++c) {
        const float* plane = f + c * H * W;
        float* o = out + (k * g.c + c) * bins;
        for (std::int64_t bin = 0; bin < bins; ++bin) {
          float v = 0.0f;
          for (const Sample* q = table.data() + bin * per_bin; q != table.data() + (bin + 1) * per_bin; ++q)
            v += q->w1 * plane[q->o1] + q->w2 * plane[q->o2] + q->w3 * plane[q->o3] + q->w4 * plane[q->o4];
          o[bin] = v / b.count;
        }
      }
    }
  });
}

// Channels [c0, c1) of every level's gradient, RoIs in order (Note [RoIAlign sample tables]).
void backward_channels(const OpCall& call, const RoiGeo& g, std::int64_t c0, std::int64_t c1) {
  const float* dout = call.inputs[0].data<float>();
  const float* rois = call.inputs[1].data<float>();
  const std::int64_t* lv = call.inputs[2].data<std::int64_t>();
  const std::int64_t bins = g.ph * g.pw;
  std::vector<Sample> table;
  for (std::int64_t k = 0; k < g.k; ++k) {
    const RoiBox b = roi_box(g, rois + 5 * k, lv[k]);
    sample_table(g, b, table);
    const std::int64_t H = g.h[static_cast<std::size_t>(b.level)], W = g.w[static_cast<std::size_t>(b.level)];
    const std::int64_t per_bin = b.grid_h * b.grid_w;
    float* df = call.outputs[static_cast<std::size_t>(b.level)].data<float>() + b.batch * H * W * g.c;
    for (std::int64_t bin = 0; bin < bins; ++bin)
      for (const Sample* q = table.data() + bin * per_bin; q != table.data() + (bin + 1) * per_bin; ++q) {
        if (q->w1 == 0.0f && q->w2 == 0.0f && q->w3 == 0.0f && q->w4 == 0.0f) continue;
        if (g.nhwc) {
          const float* go = dout + (k * bins + bin) * g.c;
          for (std::int64_t c = c0; c < c1; ++c) {
            const float d = go[c] / b.count;
            df[q->o1 * g.c + c] += d * q->w1;
            df[q->o2 * g.c + c] += d * q->w2;
            df[q->o3 * g.c + c] += d * q->w3;
            df[q->o4 * g.c + c] += d * q->w4;
          }
        } else {
          for (std::int64_t c = c0; c < c1; ++c) {
            const float d = dout[(k * g.c + c) * bins + bin] / b.count;
            float* plane = df + c * H * W;
            plane[q->o1] += d * q->w1;
            plane[q->o2] += d * q->w2;
            plane[q->o3] += d * q->w3;
            plane[q->o4] += d * q->w4;
          }
        }
      }
  }
}

void zero_outputs(OpCall& call) {
  for (Tensor& t : call.outputs) std::fill(t.data<float>(), t.data<float>() + t.numel(), 0.0f);
}

void backward_tbb(OpCall& call) {
  const RoiGeo g = roi_geo(call, true);
  zero_outputs(call);
  // Channel ranges of at least 8 (or all channels when fewer): every range walks all RoIs.
  const std::int64_t grain = std::max<std::int64_t>(8, g.c / 64);
  parallel_range(g.c, grain, [&](std::int64_t c0, std::int64_t c1) { backward_channels(call, g, c0, c1); });
}

// ---------------------------------------------------------------------------------------------
// References: torchvision's CPU loops literally, one output element (or one dout element) at a
// time, the bilinear weights recomputed for every sample.
// ---------------------------------------------------------------------------------------------

std::int64_t feature_index(const RoiGeo& g, std::int64_t level, std::int64_t n, std::int64_t c, std::int64_t y,
                           std::int64_t x) {
  const std::int64_t H = g.h[static_cast<std::size_t>(level)], W = g.w[static_cast<std::size_t>(level)];
  return g.nhwc ? ((n * H + y) * W + x) * g.c + c : ((n * g.c + c) * H + y) * W + x;
}

std::int64_t pooled_index(const RoiGeo& g, std::int64_t k, std::int64_t c, std::int64_t ph, std::int64_t pw) {
  return g.nhwc ? ((k * g.ph + ph) * g.pw + pw) * g.c + c : ((k * g.c + c) * g.ph + ph) * g.pw + pw;
}

// Calls f(feature index, weight) for the four neighbours of sample (y, x), or not at all.
template <class F>
void for_neighbours(const RoiGeo& g, std::int64_t level, std::int64_t n, std::int64_t c, float y, float x, F&& f) {
  const std::int64_t H = g.h[static_cast<std::size_t>(level)], W = g.w[static_cast<std::size_t>(level)];
  const Sample s = sample_at(y, x, H, W);
  if (s.w1 == 0.0f && s.w2 == 0.0f && s.w3 == 0.0f && s.w4 == 0.0f) return;
  const std::int64_t o[4] = {s.o1, s.o2, s.o3, s.o4};
  const float w[4] = {s.w1, s.w2, s.w3, s.w4};
  for (int i = 0; i < 4; ++i) f(feature_index(g, level, n, c, o[i] / W, o[i] % W), w[i]);
}

void forward_ref(OpCall& call) {
  const RoiGeo g = roi_geo(call, false);
  const float* rois = call.inputs[0].data<float>();
  const std::int64_t* lv = call.inputs[1].data<std::int64_t>();
  float* out = call.outputs[0].data<float>();
  for (std::int64_t k = 0; k < g.k; ++k) {
    const RoiBox b = roi_box(g, rois + 5 * k, lv[k]);
    const float* f = level_data(call, b.level);
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t ph = 0; ph < g.ph; ++ph)
        for (std::int64_t pw = 0; pw < g.pw; ++pw) {
          float v = 0.0f;
          for (std::int64_t iy = 0; iy < b.grid_h; ++iy)
            for (std::int64_t ix = 0; ix < b.grid_w; ++ix) {
              float sample = 0.0f;
              for_neighbours(g, b.level, b.batch, c, sample_coord(b.start_h, ph, b.bin_h, iy, b.grid_h),
                             sample_coord(b.start_w, pw, b.bin_w, ix, b.grid_w),
                             [&](std::int64_t i, float w) { sample += w * f[i]; });
              v += sample;
            }
          out[pooled_index(g, k, c, ph, pw)] = v / b.count;
        }
  }
}

void backward_ref(OpCall& call) {
  const RoiGeo g = roi_geo(call, true);
  zero_outputs(call);
  const float* dout = call.inputs[0].data<float>();
  const float* rois = call.inputs[1].data<float>();
  const std::int64_t* lv = call.inputs[2].data<std::int64_t>();
  for (std::int64_t k = 0; k < g.k; ++k) {
    const RoiBox b = roi_box(g, rois + 5 * k, lv[k]);
    float* df = call.outputs[static_cast<std::size_t>(b.level)].data<float>();
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t ph = 0; ph < g.ph; ++ph)
        for (std::int64_t pw = 0; pw < g.pw; ++pw) {
          const float d = dout[pooled_index(g, k, c, ph, pw)] / b.count;
          for (std::int64_t iy = 0; iy < b.grid_h; ++iy)
            for (std::int64_t ix = 0; ix < b.grid_w; ++ix)
              for_neighbours(g, b.level, b.batch, c, sample_coord(b.start_h, ph, b.bin_h, iy, b.grid_h),
                             sample_coord(b.start_w, pw, b.bin_w, ix, b.grid_w),
                             [&](std::int64_t i, float w) { df[i] += d * w; });
        }
  }
}

// ---------------------------------------------------------------------------------------------
// accepts() and example cases
// ---------------------------------------------------------------------------------------------

std::string accepts(const OpCall& c) {
  std::string why = require_floating_f32(c);
  if (!why.empty()) return why;
  for (const auto* list : {&c.inputs, &c.outputs})
    for (const Tensor& t : *list)
      if (t.defined() && (!t.device().is_cpu() || !t.is_contiguous())) return "tensors must be contiguous cpu tensors";
  return {};
}

// k RoIs over a batch of n images of image x image pixels: boxes of 1 to 1.2 * image pixels that
// may leave the image by up to a tenth (samples beyond the map's border), some tiny (the
// 1-pixel minimum), and levels uniformly in [0, levels).
void case_rois(std::int64_t k, std::int64_t n, float image, std::int64_t levels, std::uint64_t seed, Tensor& rois,
               Tensor& lv) {
  rois = Tensor::empty({k, 5});
  lv = Tensor::empty({k}, DType::i64);
  Rng r(seed, 31);
  float* p = rois.data<float>();
  for (std::int64_t i = 0; i < k; ++i) {
    const float x = r.uniform(-0.1f * image, image), y = r.uniform(-0.1f * image, image);
    const float big = r.uniform(0.0f, 1.0f) < 0.8f ? 1.2f * image : 2.0f;
    p[5 * i] = static_cast<float>(r.below(static_cast<std::uint64_t>(n)));
    p[5 * i + 1] = x;
    p[5 * i + 2] = y;
    p[5 * i + 3] = x + r.uniform(0.5f, big);
    p[5 * i + 4] = y + r.uniform(0.5f, big);
    lv.data<std::int64_t>()[i] = static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(levels)));
  }
}

struct RoiCase {
  std::int64_t k, n, c, levels, ph, sampling;
  bool aligned, nhwc;
};

std::vector<OpCall> roi_cases(std::uint64_t seed, bool backward) {
  const RoiCase kCases[] = {{6, 2, 3, 1, 7, 2, false, false},   {40, 2, 16, 4, 7, 2, false, false},
                            {25, 3, 8, 4, 14, 2, false, true},  {12, 1, 5, 2, 5, 0, false, false},
                            {10, 2, 4, 1, 3, 2, true, true},    {0, 1, 4, 2, 7, 2, false, false}};
  std::vector<OpCall> out;
  for (const RoiCase& rc : kCases) {
    OpCall c;
    Tensor rois, lv;
    const float image = 64.0f;
    case_rois(rc.k, rc.n, image, rc.levels, seed + static_cast<std::uint64_t>(rc.k), rois, lv);
    c.attrs.set("pooled_h", static_cast<double>(rc.ph)).set("pooled_w", static_cast<double>(rc.ph + 1 - rc.ph % 2));
    c.attrs.set("sampling_ratio", static_cast<double>(rc.sampling)).set("aligned", rc.aligned ? 1.0 : 0.0);
    c.attrs.set("channels_last", rc.nhwc ? 1.0 : 0.0);
    const std::int64_t pw = rc.ph + 1 - rc.ph % 2;
    std::vector<Tensor> feats;
    for (std::int64_t l = 0; l < rc.levels; ++l) {
      const std::int64_t side = 16 >> l;  // image 64: scales 1/4, 1/8, ...
      c.attrs.set("scale" + std::to_string(l), 1.0 / static_cast<double>(4 << l));
      const Shape s = rc.nhwc ? Shape{rc.n, side, side + 1, rc.c} : Shape{rc.n, rc.c, side, side + 1};
      feats.push_back(case_tensor(s, seed + 100 + static_cast<std::uint64_t>(l)));
    }
    const Shape pooled = rc.nhwc ? Shape{rc.k, rc.ph, pw, rc.c} : Shape{rc.k, rc.c, rc.ph, pw};
    if (backward) {
      c.inputs = {case_tensor(pooled, seed + 7), rois, lv};
      for (const Tensor& f : feats) c.outputs.push_back(Tensor::zeros(f.shape()));
    } else {
      c.inputs = {rois, lv};
      for (const Tensor& f : feats) c.inputs.push_back(f);
      c.outputs = {Tensor::empty(pooled)};
    }
    out.push_back(std::move(c));
  }
  return out;
}

const char* kForwardDoc =
    "inputs {rois [K, 5] (batch, x1, y1, x2, y2), levels i64 [K], features_0..features_{L-1} [N, C, H, W]}, "
    "outputs {out [K, C, ph, pw]}; attrs pooled_h, pooled_w, sampling_ratio, aligned, channels_last (NHWC), "
    "scale0..scale{L-1}";
const char* kBackwardDoc =
    "inputs {dout [K, C, ph, pw], rois [K, 5], levels i64 [K]}, outputs {dfeatures_0..dfeatures_{L-1}} "
    "(overwritten); attrs as roi_align_forward";

const bool registered =
    register_op(OpDef{"roi_align_forward", kForwardDoc, [](std::uint64_t s) { return roi_cases(s, false); }, 1e-6, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, forward_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, forward_ref, true}}}) &&
    // The backward scatter-adds up to 4 * sampling^2 contributions of many RoIs into each feature
    // element, atomically in a different order on a GPU: an element where contributions cancel
    // keeps the absolute rounding of the larger terms (H100: 2.4e-6 on 0.0154).
    register_op(OpDef{"roi_align_backward", kBackwardDoc, [](std::uint64_t s) { return roi_cases(s, true); }, 1e-5,
                      1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, backward_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, backward_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
