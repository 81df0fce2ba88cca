// Mask R-CNN's RPN proposals and the balanced positive/negative sampler (nn/detection.hpp), host
// code in maskrcnn_benchmark's conventions (Note [Legacy box convention]).
//
// Note [Proposals on the host]
// Proposal generation runs once per step on at most pre_nms_top_n * levels * images boxes
// (2000 * 5 * 2 in MLPerf's runs): after a top-k the work is the NMS sweep, which is host code
// here as in nn/detection.cpp's Note [Host-side NMS]. CUDA heads are copied to the host. Every
// sort is stable (ties in index order) where torch's topk and sort leave ties unspecified, so
// the proposals are deterministic; arithmetic is f32 in the reference's order of operations.

#include <algorithm>
#include <cmath>
#include <numeric>

#include "benchhost/error.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/random.hpp"

namespace benchhost::nn {

namespace {

Tensor host_f32(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
  return h.dtype() == DType::f32 ? h : h.to(DType::f32);
}

// Indices 0..n-1 with the k highest values first (descending, ties by index), truncated to k.
std::vector<std::int64_t> top_k(const float* v, std::int64_t n, std::int64_t k) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  const auto take = static_cast<std::ptrdiff_t>(std::min(n, std::max<std::int64_t>(k, 0)));
  std::partial_sort(order.begin(), order.begin() + take, order.end(),
                    [&](std::int64_t i, std::int64_t j) { return v[i] > v[j] || (v[i] == v[j] && i < j); });
  order.resize(static_cast<std::size_t>(take));
  return order;
}

// Greedy NMS with +1 areas (maskrcnn_benchmark's CUDA kernel: suppress IoU > threshold, f32).
std::vector<std::int64_t> nms_plus_one(const float* b, const float* scores, std::int64_t n, float threshold) {
  const std::vector<std::int64_t> order = top_k(scores, n, n);
  std::vector<float> area(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    area[static_cast<std::size_t>(i)] = (b[4 * i + 2] - b[4 * i] + 1) * (b[4 * i + 3] - b[4 * i + 1] + 1);
  std::vector<char> suppressed(static_cast<std::size_t>(n), 0);
  std::vector<std::int64_t> keep;
  for (std::size_t oi = 0; oi < order.size(); ++oi) {
    const std::int64_t i = order[oi];
    if (suppressed[static_cast<std::size_t>(i)]) continue;
    keep.push_back(i);
    const float* p = b + 4 * i;
    for (std::size_t oj = oi + 1; oj < order.size(); ++oj) {
      const std::int64_t j = order[oj];
      if (suppressed[static_cast<std::size_t>(j)]) continue;
      const float* q = b + 4 * j;
      const float w = std::max(std::min(p[2], q[2]) - std::max(p[0], q[0]) + 1, 0.0f);
      const float h = std::max(std::min(p[3], q[3]) - std::max(p[1], q[1]) + 1, 0.0f);
      const float inter = w * h;
      if (inter / (area[static_cast<std::size_t>(i)] + area[static_cast<std::size_t>(j)] - inter) > threshold)
        suppressed[static_cast<std::size_t>(j)] = 1;
    }
  }
  return keep;
}

// maskrcnn_benchmark BoxCoder.decode with weights (1, 1, 1, 1) and the +1 convention.
void decode_legacy(const float* d, const float* a, float clip, float* out) {
  const float w = a[2] - a[0] + 1, h = a[3] - a[1] + 1;
  const float cx = a[0] + 0.5f * w, cy = a[1] + 0.5f * h;
  const float px = d[0] * w + cx, py = d[1] * h + cy;
  const float pw = std::exp(std::min(d[2], clip)) * w, ph = std::exp(std::min(d[3], clip)) * h;
  out[0] = px - 0.5f * pw;
  out[1] = py - 0.5f * ph;
  out[2] = px + 0.5f * pw - 1;
  out[3] = py + 0.5f * ph - 1;
}

struct Candidates {
  std::vector<float> boxes, scores;
};

}  // namespace

Tensor generate_anchors_legacy(const std::vector<double>& sizes, const std::vector<std::int64_t>& strides,
                               const std::vector<double>& aspect_ratios,
                               const std::vector<std::pair<std::int64_t, std::int64_t>>& grid_sizes) {
  const char* op = "generate_anchors_legacy";
  BH_CHECK_AS(InvalidArgument, !sizes.empty() && sizes.size() == strides.size() && sizes.size() == grid_sizes.size(),
              "{}: {} sizes, {} strides and {} grids (one each per level, at least one)", op, sizes.size(),
              strides.size(), grid_sizes.size());
  BH_CHECK_AS(InvalidArgument, !aspect_ratios.empty(), "{}: no aspect ratios", op);
  std::int64_t total = 0;
  for (std::size_t l = 0; l < sizes.size(); ++l) {
    BH_CHECK_AS(InvalidArgument, sizes[l] > 0 && strides[l] > 0 && grid_sizes[l].first >= 0 && grid_sizes[l].second >= 0,
                "{}: level {} has size {}, stride {} and grid {}x{} (needs positive sizes and strides)", op, l, sizes[l],
                strides[l], grid_sizes[l].first, grid_sizes[l].second);
    total += grid_sizes[l].first * grid_sizes[l].second * static_cast<std::int64_t>(aspect_ratios.size());
  }
  Tensor out = Tensor::empty({total, 4});
  float* p = out.data<float>();
  for (std::size_t l = 0; l < sizes.size(); ++l) {
    // Cell anchors in f64 as the reference's numpy code, then f32.
    const auto stride = static_cast<double>(strides[l]);
    const double ctr = 0.5 * (stride - 1);
    const double scale = sizes[l] / stride;
    std::vector<float> cell;
    for (double r : aspect_ratios) {
      BH_CHECK_AS(InvalidArgument, r > 0 && std::isfinite(r), "{}: aspect ratio {} must be positive", op, r);
      const double ws = std::nearbyint(std::sqrt(stride * stride / r));
      const double hs = std::nearbyint(ws * r);
      // _mkanchors about the base window's centre, then _scale_enum about the new one's (the same).
      const double x1 = ctr - 0.5 * (ws - 1), y1 = ctr - 0.5 * (hs - 1);
      const double w = ws * scale, h = hs * scale;
      const double cx = x1 + 0.5 * (ws - 1), cy = y1 + 0.5 * (hs - 1);
      for (double v : {cx - 0.5 * (w - 1), cy - 0.5 * (h - 1), cx + 0.5 * (w - 1), cy + 0.5 * (h - 1)})
        cell.push_back(static_cast<float>(v));
    }
    const auto [gh, gw] = grid_sizes[l];
    for (std::int64_t y = 0; y < gh; ++y)
      for (std::int64_t x = 0; x < gw; ++x) {
        const auto sx = static_cast<float>(x * strides[l]), sy = static_cast<float>(y * strides[l]);
        for (std::size_t a = 0; a < cell.size(); a += 4) {
          *p++ = sx + cell[a];
          *p++ = sy + cell[a + 1];
          *p++ = sx + cell[a + 2];
          *p++ = sy + cell[a + 3];
        }
      }
  }
  return out;
}

Tensor anchor_visibility(const Tensor& anchors, std::int64_t image_h, std::int64_t image_w, float straddle_thresh) {
  BH_CHECK_AS(InvalidArgument, anchors.defined() && anchors.dim() == 2 && anchors.size(1) == 4,
              "anchor_visibility: anchors must be [A, 4], got {}",
              anchors.defined() ? anchors.describe() : std::string("undefined"));
  const Tensor a = host_f32(anchors);
  const std::int64_t A = a.size(0);
  Tensor out = Tensor::empty({A}, DType::u8);
  const float t = straddle_thresh, w = static_cast<float>(image_w), h = static_cast<float>(image_h);
  for (std::int64_t i = 0; i < A; ++i) {
    const float* b = a.data<float>() + 4 * i;
    out.data<std::uint8_t>()[i] =
        t < 0 || (b[0] >= -t && b[1] >= -t && b[2] < w + t && b[3] < h + t) ? 1 : 0;
  }
  return out;
}

Tensor nms_legacy(const Tensor& boxes, const Tensor& scores, float iou_threshold) {
  const char* op = "nms_legacy";
  BH_CHECK_AS(InvalidArgument, boxes.defined() && boxes.dim() == 2 && boxes.size(1) == 4 && boxes.dtype() == DType::f32,
              "{}: boxes must be f32 [N, 4], got {}", op, boxes.defined() ? boxes.describe() : std::string("undefined"));
  BH_CHECK_AS(InvalidArgument,
              scores.defined() && scores.dtype() == DType::f32 && scores.dim() == 1 && scores.size(0) == boxes.size(0),
              "{}: scores must be f32 [{}], got {}", op, boxes.size(0),
              scores.defined() ? scores.describe() : std::string("undefined"));
  BH_CHECK_AS(InvalidArgument, !std::isnan(iou_threshold), "{}: the IoU threshold is NaN", op);
  const Tensor b = host_f32(boxes), s = host_f32(scores);
  const std::vector<std::int64_t> keep = nms_plus_one(b.data<float>(), s.data<float>(), b.size(0), iou_threshold);
  return Tensor::from_vector_i64(keep, {static_cast<std::int64_t>(keep.size())});
}

std::vector<Proposals> generate_proposals(const std::vector<Tensor>& objectness, const std::vector<Tensor>& deltas,
                                          const std::vector<Tensor>& anchors,
                                          const std::vector<std::pair<std::int64_t, std::int64_t>>& image_sizes,
                                          const std::vector<Tensor>& gt_boxes, const ProposalSpec& spec) {
  const char* op = "generate_proposals";
  const std::size_t L = objectness.size();
  const auto N = static_cast<std::int64_t>(image_sizes.size());
  BH_CHECK_AS(InvalidArgument, L >= 1 && deltas.size() == L && anchors.size() == L,
              "{}: {} objectness, {} deltas and {} anchor levels (must be equal and non-zero)", op, L, deltas.size(),
              anchors.size());
  BH_CHECK_AS(InvalidArgument, gt_boxes.empty() || static_cast<std::int64_t>(gt_boxes.size()) == N,
              "{}: {} ground-truth lists for {} images (one per image, or none)", op, gt_boxes.size(), N);
  BH_CHECK_AS(InvalidArgument, spec.pre_nms_top_n >= 0 && spec.post_nms_top_n >= 0 && spec.fpn_post_nms_top_n >= 0,
              "{}: top-n counts must be non-negative ({}, {}, {})", op, spec.pre_nms_top_n, spec.post_nms_top_n,
              spec.fpn_post_nms_top_n);
  const float clip = static_cast<float>(std::log(1000.0 / 16.0));
  std::vector<Candidates> per_image(static_cast<std::size_t>(N));
  for (std::size_t l = 0; l < L; ++l) {
    const Tensor o = host_f32(objectness[l]), d = host_f32(deltas[l]), a = host_f32(anchors[l]);
    BH_CHECK_AS(InvalidArgument, o.dim() == 4 && o.size(0) == N,
                "{}: level {} objectness must be [{}, A, H, W] (one row per image), got {}", op, l, N,
                shape_str(o.shape()));
    const std::int64_t A = o.size(1), H = o.size(2), W = o.size(3), count = A * H * W;
    BH_CHECK_AS(InvalidArgument, d.shape() == (Shape{N, 4 * A, H, W}) && a.shape() == (Shape{count, 4}),
                "{}: level {}: objectness {} needs deltas [{}, {}, {}, {}] and anchors [{}, 4], got {} and {}", op, l,
                shape_str(o.shape()), N, 4 * A, H, W, count, shape_str(d.shape()), shape_str(a.shape()));
    std::vector<float> score(static_cast<std::size_t>(count));
    for (std::int64_t n = 0; n < N; ++n) {
      const auto [im_h, im_w] = image_sizes[static_cast<std::size_t>(n)];
      // permute_and_flatten: (y, x, anchor) order, then the sigmoid.
      const float* on = o.data<float>() + n * count;
      for (std::int64_t y = 0; y < H; ++y)
        for (std::int64_t x = 0; x < W; ++x)
          for (std::int64_t k = 0; k < A; ++k)
            score[static_cast<std::size_t>((y * W + x) * A + k)] = 1.0f / (1.0f + std::exp(-on[(k * H + y) * W + x]));
      const std::vector<std::int64_t> top = top_k(score.data(), count, spec.pre_nms_top_n);
      std::vector<float> boxes, scores;
      const float* dn = d.data<float>() + n * 4 * count;
      const float max_x = static_cast<float>(im_w - 1), max_y = static_cast<float>(im_h - 1);
      for (std::int64_t i : top) {
        const std::int64_t k = i % A, cell = i / A;
        const float de[4] = {dn[(4 * k) * H * W + cell], dn[(4 * k + 1) * H * W + cell], dn[(4 * k + 2) * H * W + cell],
                             dn[(4 * k + 3) * H * W + cell]};
        float b[4];
        decode_legacy(de, a.data<float>() + 4 * i, clip, b);
        // clip_to_image(remove_empty=False), then remove_small_boxes(min_size).
        b[0] = std::min(std::max(b[0], 0.0f), max_x);
        b[1] = std::min(std::max(b[1], 0.0f), max_y);
        b[2] = std::min(std::max(b[2], 0.0f), max_x);
        b[3] = std::min(std::max(b[3], 0.0f), max_y);
        if (!(b[2] - b[0] + 1 >= spec.min_size && b[3] - b[1] + 1 >= spec.min_size)) continue;
        boxes.insert(boxes.end(), b, b + 4);
        scores.push_back(score[static_cast<std::size_t>(i)]);
      }
      std::vector<std::int64_t> keep =
          nms_plus_one(boxes.data(), scores.data(), static_cast<std::int64_t>(scores.size()), spec.nms_thresh);
      if (static_cast<std::int64_t>(keep.size()) > spec.post_nms_top_n) keep.resize(static_cast<std::size_t>(spec.post_nms_top_n));
      Candidates& c = per_image[static_cast<std::size_t>(n)];
      for (std::int64_t i : keep) {
        c.boxes.insert(c.boxes.end(), boxes.begin() + 4 * i, boxes.begin() + 4 * i + 4);
        c.scores.push_back(scores[static_cast<std::size_t>(i)]);
      }
    }
  }
  // select_over_all_levels.
  std::vector<std::vector<std::int64_t>> chosen(static_cast<std::size_t>(N));
  if (spec.training) {
    std::vector<float> all;
    std::vector<std::pair<std::int64_t, std::int64_t>> where;  // (image, index)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::size_t i = 0; i < per_image[static_cast<std::size_t>(n)].scores.size(); ++i) {
        all.push_back(per_image[static_cast<std::size_t>(n)].scores[i]);
        where.emplace_back(n, static_cast<std::int64_t>(i));
      }
    std::vector<std::int64_t> top = top_k(all.data(), static_cast<std::int64_t>(all.size()), spec.fpn_post_nms_top_n);
    std::sort(top.begin(), top.end());  // the reference keeps a mask: the original order survives
    for (std::int64_t t : top) chosen[static_cast<std::size_t>(where[static_cast<std::size_t>(t)].first)].push_back(
        where[static_cast<std::size_t>(t)].second);
  } else {
    for (std::int64_t n = 0; n < N; ++n) {
      const Candidates& c = per_image[static_cast<std::size_t>(n)];
      chosen[static_cast<std::size_t>(n)] =
          top_k(c.scores.data(), static_cast<std::int64_t>(c.scores.size()), spec.fpn_post_nms_top_n);
    }
  }
  std::vector<Proposals> out;
  for (std::int64_t n = 0; n < N; ++n) {
    const Candidates& c = per_image[static_cast<std::size_t>(n)];
    std::vector<float> boxes, scores;
    for (std::int64_t i : chosen[static_cast<std::size_t>(n)]) {
      boxes.insert(boxes.end(), c.boxes.begin() + 4 * i, c.boxes.begin() + 4 * i + 4);
      scores.push_back(c.scores[static_cast<std::size_t>(i)]);
    }
    if (spec.training && !gt_boxes.empty()) {
      const Tensor g = host_f32(gt_boxes[static_cast<std::size_t>(n)]);
      BH_CHECK_AS(InvalidArgument, g.numel() == 0 || (g.dim() == 2 && g.size(1) == 4),
                  "{}: ground truth of image {} must be [G, 4], got {}", op, n, shape_str(g.shape()));
      boxes.insert(boxes.end(), g.data<float>(), g.data<float>() + g.numel());
      scores.insert(scores.end(), static_cast<std::size_t>(g.numel() / 4), 1.0f);
    }
    const auto P = static_cast<std::int64_t>(scores.size());
    out.push_back(Proposals{Tensor::from_vector(boxes, {P, 4}), Tensor::from_vector(scores, {P})});
  }
  return out;
}

Detections maskrcnn_postprocess(const Tensor& class_logits, const Tensor& box_regression, const Tensor& proposals,
                                std::int64_t image_h, std::int64_t image_w, float score_thresh, float nms_thresh,
                                std::int64_t detections_per_img, std::array<float, 4> weights) {
  const char* op = "maskrcnn_postprocess";
  const Tensor z = host_f32(class_logits), d = host_f32(box_regression), p = host_f32(proposals);
  BH_CHECK_AS(InvalidArgument, z.dim() == 2 && z.size(1) >= 2, "{}: class logits must be [R, K] with K >= 2, got {}", op,
              shape_str(z.shape()));
  const std::int64_t R = z.size(0), K = z.size(1);
  BH_CHECK_AS(InvalidArgument, d.shape() == (Shape{R, 4 * K}) && p.shape() == (Shape{R, 4}),
              "{}: box regression must be [{}, {}] and proposals [{}, 4], got {} and {}", op, R, 4 * K, R,
              shape_str(d.shape()), shape_str(p.shape()));
  BH_CHECK_AS(InvalidArgument, image_h > 0 && image_w > 0, "{}: image {}x{} is empty", op, image_h, image_w);
  // Softmax per RoI (f32: max-shifted exponentials over their sum).
  std::vector<float> prob(static_cast<std::size_t>(R * K));
  for (std::int64_t r = 0; r < R; ++r) {
    const float* row = z.data<float>() + r * K;
    const float mx = *std::max_element(row, row + K);
    float sum = 0.0f;
    for (std::int64_t k = 0; k < K; ++k) sum += prob[static_cast<std::size_t>(r * K + k)] = std::exp(row[k] - mx);
    for (std::int64_t k = 0; k < K; ++k) prob[static_cast<std::size_t>(r * K + k)] /= sum;
  }
  // Every class's box for every RoI: the registry's decode_boxes with the +1 convention.
  Tensor rep = Tensor::empty({R * K, 4});
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t k = 0; k < K; ++k) std::copy_n(p.data<float>() + 4 * r, 4, rep.data<float>() + 4 * (r * K + k));
  const Tensor boxes = decode_boxes(d.reshape({R * K, 4}), rep, weights, true);
  float* b = boxes.data<float>();
  const float max_x = static_cast<float>(image_w - 1), max_y = static_cast<float>(image_h - 1);
  for (std::int64_t i = 0; i < R * K; ++i) {
    b[4 * i] = std::min(std::max(b[4 * i], 0.0f), max_x);
    b[4 * i + 1] = std::min(std::max(b[4 * i + 1], 0.0f), max_y);
    b[4 * i + 2] = std::min(std::max(b[4 * i + 2], 0.0f), max_x);
    b[4 * i + 3] = std::min(std::max(b[4 * i + 3], 0.0f), max_y);
  }
  std::vector<float> out_boxes, out_scores;
  std::vector<std::int64_t> out_labels;
  std::vector<float> cb, cs;
  for (std::int64_t k = 1; k < K; ++k) {
    cb.clear();
    cs.clear();
    for (std::int64_t r = 0; r < R; ++r) {
      const float s = prob[static_cast<std::size_t>(r * K + k)];
      if (!(s > score_thresh)) continue;
      cb.insert(cb.end(), b + 4 * (r * K + k), b + 4 * (r * K + k) + 4);
      cs.push_back(s);
    }
    for (std::int64_t i : nms_plus_one(cb.data(), cs.data(), static_cast<std::int64_t>(cs.size()), nms_thresh)) {
      out_boxes.insert(out_boxes.end(), cb.begin() + 4 * i, cb.begin() + 4 * i + 4);
      out_scores.push_back(cs[static_cast<std::size_t>(i)]);
      out_labels.push_back(k);
    }
  }
  auto n = static_cast<std::int64_t>(out_scores.size());
  if (detections_per_img > 0 && n > detections_per_img) {
    // kthvalue(scores, n - detections_per_img + 1): the detections_per_img-th highest score.
    std::vector<float> sorted = out_scores;
    std::nth_element(sorted.begin(), sorted.begin() + (n - detections_per_img), sorted.end());
    const float thresh = sorted[static_cast<std::size_t>(n - detections_per_img)];
    std::vector<float> kb, ks;
    std::vector<std::int64_t> kl;
    for (std::int64_t i = 0; i < n; ++i)
      if (out_scores[static_cast<std::size_t>(i)] >= thresh) {
        kb.insert(kb.end(), out_boxes.begin() + 4 * i, out_boxes.begin() + 4 * i + 4);
        ks.push_back(out_scores[static_cast<std::size_t>(i)]);
        kl.push_back(out_labels[static_cast<std::size_t>(i)]);
      }
    out_boxes.swap(kb);
    out_scores.swap(ks);
    out_labels.swap(kl);
    n = static_cast<std::int64_t>(out_scores.size());
  }
  return Detections{Tensor::from_vector(out_boxes, {n, 4}), Tensor::from_vector(out_scores, {n}),
                    Tensor::from_vector_i64(out_labels, {n})};
}

BalancedSample balanced_sample(const Tensor& labels, std::int64_t batch_size_per_image, float positive_fraction,
                               std::uint64_t seed, std::uint64_t stream) {
  const char* op = "balanced_sample";
  BH_CHECK_AS(InvalidArgument, labels.defined() && labels.dtype() == DType::i64 && labels.dim() == 1,
              "{}: labels must be i64 [A] (>= 1 positive, 0 negative, < 0 ignored), got {}", op,
              labels.defined() ? labels.describe() : std::string("undefined"));
  BH_CHECK_AS(InvalidArgument, batch_size_per_image >= 0 && positive_fraction >= 0 && positive_fraction <= 1,
              "{}: batch size {} must be >= 0 and the positive fraction {} in [0, 1]", op, batch_size_per_image,
              positive_fraction);
  const Tensor h = labels.device().is_cpu() ? labels.contiguous() : labels.to(Device::cpu()).contiguous();
  std::vector<std::int64_t> pos, neg;
  const std::int64_t* l = h.data<std::int64_t>();
  for (std::int64_t i = 0; i < h.numel(); ++i) {
    if (l[i] >= 1) pos.push_back(i);
    else if (l[i] == 0) neg.push_back(i);
  }
  // int(batch * fraction) as the reference computes it (Python float product, truncated).
  const auto want_pos = static_cast<std::int64_t>(static_cast<double>(batch_size_per_image) * positive_fraction);
  const std::int64_t num_pos = std::min<std::int64_t>(static_cast<std::int64_t>(pos.size()), want_pos);
  const std::int64_t num_neg = std::min<std::int64_t>(static_cast<std::int64_t>(neg.size()), batch_size_per_image - num_pos);
  Rng rng(seed, stream);
  auto draw = [&](std::vector<std::int64_t>& v, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      const auto j = i + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(static_cast<std::int64_t>(v.size()) - i)));
      std::swap(v[static_cast<std::size_t>(i)], v[static_cast<std::size_t>(j)]);
    }
    v.resize(static_cast<std::size_t>(n));
    return Tensor::from_vector_i64(v, {n});
  };
  BalancedSample s;
  s.positive = draw(pos, num_pos);
  s.negative = draw(neg, num_neg);
  return s;
}

}  // namespace benchhost::nn
