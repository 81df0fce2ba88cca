// Mask R-CNN's targets and losses (see targets.hpp, Note [Mask R-CNN losses]).

#include "targets.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"

namespace benchhost::maskrcnn {

Tensor host_f32(const Tensor& t) { return nn::cast(t, DType::f32).to(Device::cpu()).contiguous(); }

namespace {

// i64 [K] from a vector.
Tensor i64_tensor(const std::vector<std::int64_t>& v) {
  return Tensor::from_vector_i64(v, {static_cast<std::int64_t>(v.size())});
}

// Rows idx of a CPU tensor (any dtype), as torch's index_select(0, idx).
Tensor rows_of(const Tensor& t_, const Tensor& idx) {
  const Tensor t = t_.to(Device::cpu()).contiguous();
  Shape shape = t.shape();
  const std::int64_t n = shape[0];
  shape[0] = idx.numel();
  Tensor out = Tensor::empty(shape, t.dtype());
  const std::size_t row = n > 0 ? static_cast<std::size_t>(t.nbytes() / static_cast<std::size_t>(n)) : 0;
  const auto* src = static_cast<const std::uint8_t*>(t.raw_data());
  auto* dst = static_cast<std::uint8_t*>(out.raw_data());
  for (std::int64_t i = 0; i < idx.numel(); ++i) {
    const std::int64_t k = idx.data<std::int64_t>()[i];
    BH_CHECK_AS(InvalidArgument, k >= 0 && k < n, "maskrcnn: row {} of a tensor of {} rows", k, n);
    std::memcpy(dst + static_cast<std::size_t>(i) * row, src + static_cast<std::size_t>(k) * row, row);
  }
  return out;
}

// Anchor labels of one image: 1 / 0 / -1 (Note [Mask R-CNN losses]) and the matched box per anchor.
void label_anchors(const Tensor& anchors, const ImageTargets& t, const RpnLossSpec& spec, std::vector<std::int64_t>& labels,
                   std::vector<std::int64_t>& matched) {
  const std::int64_t a = anchors.size(0), g = t.boxes.size(0);
  labels.assign(static_cast<std::size_t>(a), 0);
  matched.assign(static_cast<std::size_t>(a), -1);
  if (g > 0) {
    const Tensor m = nn::match_anchors(legacy_box_iou(t.boxes, anchors), spec.fg_iou, spec.bg_iou, true);
    const std::int64_t* pm = m.data<std::int64_t>();
    for (std::int64_t i = 0; i < a; ++i) {
      matched[static_cast<std::size_t>(i)] = pm[i];
      labels[static_cast<std::size_t>(i)] = pm[i] >= 0 ? 1 : (pm[i] == -1 ? 0 : -1);
    }
  }
  const Tensor vis = nn::anchor_visibility(anchors, t.height, t.width, spec.straddle_thresh);
  const std::uint8_t* v = vis.data<std::uint8_t>();
  for (std::int64_t i = 0; i < a; ++i)
    if (!v[i]) labels[static_cast<std::size_t>(i)] = -1;
}

}  // namespace

Tensor legacy_box_iou(const Tensor& a_, const Tensor& b_) {
  const Tensor a = host_f32(a_), b = host_f32(b_);
  BH_CHECK_AS(InvalidArgument, a.dim() == 2 && a.size(1) == 4 && b.dim() == 2 && b.size(1) == 4,
              "legacy_box_iou: boxes must be [N, 4] and [M, 4], got {} and {}", shape_str(a.shape()), shape_str(b.shape()));
  const std::int64_t n = a.size(0), m = b.size(0);
  Tensor out = Tensor::empty({n, m});
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const float* x = pa + 4 * i;
    const float area_a = (x[2] - x[0] + 1.0f) * (x[3] - x[1] + 1.0f);
    for (std::int64_t j = 0; j < m; ++j) {
      const float* y = pb + 4 * j;
      const float w = std::max(0.0f, std::min(x[2], y[2]) - std::max(x[0], y[0]) + 1.0f);
      const float h = std::max(0.0f, std::min(x[3], y[3]) - std::max(x[1], y[1]) + 1.0f);
      const float inter = w * h;
      const float area_b = (y[2] - y[0] + 1.0f) * (y[3] - y[1] + 1.0f);
      po[i * m + j] = inter / (area_a + area_b - inter);
    }
  }
  return out;
}

RpnLoss rpn_loss(const RpnOutputs& out, const std::vector<Tensor>& level_anchors, const std::vector<ImageTargets>& targets,
                 const RpnLossSpec& spec, std::uint64_t seed, float dloss) {
  const std::size_t levels = out.objectness.size();
  BH_CHECK_AS(InvalidArgument, levels == level_anchors.size() && levels == out.deltas.size(),
              "maskrcnn RPN loss: {} levels of outputs, {} of anchors", levels, level_anchors.size());
  const auto n = static_cast<std::int64_t>(targets.size());
  // The outputs as [N, H W A] and [N, H W A, 4] on the host, levels concatenated.
  std::vector<Tensor> obj, del;
  std::vector<std::int64_t> level_sizes;
  for (std::size_t l = 0; l < levels; ++l) {
    const Tensor o = host_f32(out.objectness[l]);
    BH_CHECK_AS(InvalidArgument, o.size(0) == n, "maskrcnn RPN loss: {} images of outputs, {} of targets", o.size(0), n);
    const std::int64_t A = o.size(1), H = o.size(2), W = o.size(3);
    BH_CHECK_AS(InvalidArgument, level_anchors[l].size(0) == H * W * A,
                "maskrcnn RPN loss: level {} has {} anchors for a {}x{}x{} output", l, level_anchors[l].size(0), H, W, A);
    obj.push_back(o.permute({0, 2, 3, 1}).contiguous().view({n, H * W * A}));
    del.push_back(host_f32(out.deltas[l]).view({n, A, 4, H, W}).permute({0, 3, 4, 1, 2}).contiguous().view({n, H * W * A, 4}));
    level_sizes.push_back(H * W * A);
  }
  const Tensor objectness = nn::concat(obj, 1), deltas = nn::concat(del, 1);
  const Tensor anchors = nn::concat(level_anchors, 0).to(Device::cpu()).contiguous();
  const std::int64_t a = anchors.size(0);

  // Labels and samples per image.
  std::vector<std::vector<std::int64_t>> pos(static_cast<std::size_t>(n)), neg(static_cast<std::size_t>(n));
  std::vector<std::vector<std::int64_t>> matched(static_cast<std::size_t>(n));
  RpnLoss r;
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::int64_t> labels;
    label_anchors(anchors, targets[static_cast<std::size_t>(i)], spec, labels, matched[static_cast<std::size_t>(i)]);
    const nn::BalancedSample s = nn::balanced_sample(i64_tensor(labels), spec.batch_size_per_image,
                                                     spec.positive_fraction, seed, 2 * targets[static_cast<std::size_t>(i)].sample_key);
    pos[static_cast<std::size_t>(i)].assign(s.positive.data<std::int64_t>(), s.positive.data<std::int64_t>() + s.positive.numel());
    neg[static_cast<std::size_t>(i)].assign(s.negative.data<std::int64_t>(), s.negative.data<std::int64_t>() + s.negative.numel());
    r.sampled += s.positive.numel() + s.negative.numel();
    r.positive += s.positive.numel();
  }
  Tensor dobj = Tensor::zeros({n, a}), ddel = Tensor::zeros({n, a, 4});
  if (r.sampled > 0) {
    const double inv = 1.0 / static_cast<double>(r.sampled);
    const float ginv = static_cast<float>(inv) * dloss;
    double bce = 0;
    std::vector<float> pred, target;
    std::vector<std::pair<std::int64_t, std::int64_t>> where;  // (image, anchor) of each positive
    for (std::int64_t i = 0; i < n; ++i) {
      const float* x = objectness.data<float>() + i * a;
      float* dx = dobj.data<float>() + i * a;
      for (int lab = 1; lab >= 0; --lab)
        for (std::int64_t k : (lab ? pos : neg)[static_cast<std::size_t>(i)]) {
          const float v = x[k], t = static_cast<float>(lab);
          bce += std::max(v, 0.0f) - v * t + std::log1p(std::exp(-std::fabs(v)));
          dx[k] = (1.0f / (1.0f + std::exp(-v)) - t) * ginv;
        }
      const ImageTargets& tg = targets[static_cast<std::size_t>(i)];
      std::vector<std::int64_t> rows, gts;
      for (std::int64_t k : pos[static_cast<std::size_t>(i)]) {
        rows.push_back(k);
        gts.push_back(matched[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)]);
        where.emplace_back(i, k);
      }
      if (!rows.empty()) {
        const Tensor enc = nn::encode_boxes(rows_of(tg.boxes, i64_tensor(gts)),
                                            rows_of(anchors, i64_tensor(rows)), {1, 1, 1, 1}, true);
        const Tensor pd = rows_of(deltas.select(0, i), i64_tensor(rows)).contiguous();
        pred.insert(pred.end(), pd.data<float>(), pd.data<float>() + pd.numel());
        target.insert(target.end(), enc.contiguous().data<float>(), enc.contiguous().data<float>() + enc.numel());
      }
    }
    r.objectness = bce * inv;
    if (!where.empty()) {
      const auto p = static_cast<std::int64_t>(where.size());
      const Tensor in = Tensor::from_vector(pred, {p, 4}), tg = Tensor::from_vector(target, {p, 4});
      r.box = nn::smooth_l1_loss_forward(in, tg, spec.beta, static_cast<float>(inv));
      const Tensor g = nn::smooth_l1_loss_backward(in, tg, spec.beta, static_cast<float>(inv), dloss);
      for (std::int64_t j = 0; j < p; ++j)
        std::copy_n(g.data<float>() + 4 * j, 4, ddel.data<float>() + (where[static_cast<std::size_t>(j)].first * a +
                                                                      where[static_cast<std::size_t>(j)].second) * 4);
    }
  }
  // Back to the outputs' layouts, per level.
  std::int64_t at = 0;
  for (std::size_t l = 0; l < levels; ++l) {
    const Tensor& o = out.objectness[l];
    const std::int64_t A = o.size(1), H = o.size(2), W = o.size(3), k = level_sizes[l];
    r.dobjectness.push_back(dobj.slice(1, at, at + k).contiguous().view({n, H, W, A}).permute({0, 3, 1, 2}).contiguous().to(o.dtype()).to(o.device()));
    r.ddeltas.push_back(ddel.slice(1, at, at + k)
                            .contiguous()
                            .view({n, H, W, A, 4})
                            .permute({0, 3, 4, 1, 2})
                            .contiguous()
                            .view({n, 4 * A, H, W})
                            .to(out.deltas[l].dtype())
                            .to(o.device()));
    at += k;
  }
  return r;
}

RoiSample sample_rois(const std::vector<nn::Proposals>& proposals, const std::vector<ImageTargets>& targets,
                      const RoiSampleSpec& spec, std::uint64_t seed) {
  BH_CHECK_AS(InvalidArgument, proposals.size() == targets.size(), "maskrcnn: {} images of proposals, {} of targets",
              proposals.size(), targets.size());
  std::vector<float> rois, reg;
  std::vector<std::int64_t> labels, matched_out;
  for (std::size_t i = 0; i < proposals.size(); ++i) {
    const Tensor boxes = proposals[i].boxes.contiguous();
    const ImageTargets& t = targets[i];
    const std::int64_t p = boxes.size(0), g = t.boxes.size(0);
    std::vector<std::int64_t> lab(static_cast<std::size_t>(p), 0), match(static_cast<std::size_t>(p), -1);
    if (g > 0 && p > 0) {
      const Tensor m = nn::match_anchors(legacy_box_iou(t.boxes, boxes), spec.fg_iou, spec.bg_iou, false);
      for (std::int64_t k = 0; k < p; ++k) {
        const std::int64_t v = m.data<std::int64_t>()[k];
        match[static_cast<std::size_t>(k)] = v;
        lab[static_cast<std::size_t>(k)] = v >= 0 ? t.labels.data<std::int64_t>()[v] : (v == -1 ? 0 : -1);
      }
    }
    const nn::BalancedSample s = nn::balanced_sample(i64_tensor(lab), spec.batch_size_per_image, spec.positive_fraction,
                                                     seed, 2 * t.sample_key + 1);
    std::vector<std::int64_t> keep(s.positive.data<std::int64_t>(), s.positive.data<std::int64_t>() + s.positive.numel());
    keep.insert(keep.end(), s.negative.data<std::int64_t>(), s.negative.data<std::int64_t>() + s.negative.numel());
    std::sort(keep.begin(), keep.end());
    std::vector<float> gt_rows, prop_rows;
    for (std::int64_t k : keep) {
      const float* b = boxes.data<float>() + 4 * k;
      rois.insert(rois.end(), {static_cast<float>(i), b[0], b[1], b[2], b[3]});
      const std::int64_t l = lab[static_cast<std::size_t>(k)];
      labels.push_back(l);
      const std::int64_t m = l > 0 ? match[static_cast<std::size_t>(k)] : 0;
      matched_out.push_back(l > 0 ? m : -1);
      if (g > 0) {
        const float* gb = t.boxes.data<float>() + 4 * m;
        gt_rows.insert(gt_rows.end(), gb, gb + 4);
      } else {
        gt_rows.insert(gt_rows.end(), b, b + 4);
      }
      prop_rows.insert(prop_rows.end(), b, b + 4);
    }
    if (!keep.empty()) {
      const auto k = static_cast<std::int64_t>(keep.size());
      const Tensor enc = nn::encode_boxes(Tensor::from_vector(gt_rows, {k, 4}), Tensor::from_vector(prop_rows, {k, 4}),
                                          {10, 10, 5, 5}, true)
                             .contiguous();
      reg.insert(reg.end(), enc.data<float>(), enc.data<float>() + enc.numel());
    }
  }
  const auto r = static_cast<std::int64_t>(labels.size());
  RoiSample out;
  out.rois = Tensor::from_vector(rois, {r, 5});
  out.labels = i64_tensor(labels);
  out.regression_targets = Tensor::from_vector(reg, {r, 4});
  out.matched = i64_tensor(matched_out);
  return out;
}

BoxLoss box_head_loss(const BoxHeadOutputs& out, const RoiSample& sample, float dloss) {
  const Tensor logits = host_f32(out.class_logits), reg = host_f32(out.box_regression);
  const std::int64_t r = logits.size(0), k = logits.size(1);
  BH_CHECK_AS(InvalidArgument, r == sample.labels.numel() && reg.size(1) == 4 * k,
              "maskrcnn box loss: outputs {} / {} for {} RoIs", shape_str(logits.shape()), shape_str(reg.shape()),
              sample.labels.numel());
  BoxLoss b;
  if (r == 0) return b;
  const nn::CrossEntropyResult ce = nn::softmax_cross_entropy_forward(logits, sample.labels);
  b.classifier = ce.loss;
  Tensor dcls = nn::softmax_cross_entropy_backward(ce, sample.labels, 0.0f, -100, dloss);
  Tensor dreg = Tensor::zeros({r, 4 * k});
  std::vector<float> pred, target;
  std::vector<std::int64_t> where;
  for (std::int64_t i = 0; i < r; ++i) {
    const std::int64_t l = sample.labels.data<std::int64_t>()[i];
    if (l <= 0) continue;
    BH_CHECK_AS(DataError, l < k, "maskrcnn box loss: class {} of RoI {} outside the model's {} classes", l, i, k);
    pred.insert(pred.end(), reg.data<float>() + i * 4 * k + 4 * l, reg.data<float>() + i * 4 * k + 4 * l + 4);
    target.insert(target.end(), sample.regression_targets.data<float>() + 4 * i,
                  sample.regression_targets.data<float>() + 4 * i + 4);
    where.push_back(i * 4 * k + 4 * l);
  }
  if (!where.empty()) {
    const auto p = static_cast<std::int64_t>(where.size());
    const Tensor in = Tensor::from_vector(pred, {p, 4}), tg = Tensor::from_vector(target, {p, 4});
    const float scale = 1.0f / static_cast<float>(r);
    b.box_reg = nn::smooth_l1_loss_forward(in, tg, 1.0f, scale);
    const Tensor g = nn::smooth_l1_loss_backward(in, tg, 1.0f, scale, dloss);
    for (std::int64_t j = 0; j < p; ++j) std::copy_n(g.data<float>() + 4 * j, 4, dreg.data<float>() + where[static_cast<std::size_t>(j)]);
  }
  b.dclass_logits = dcls.to(out.class_logits.dtype()).to(out.class_logits.device());
  b.dbox_regression = dreg.to(out.box_regression.dtype()).to(out.box_regression.device());
  return b;
}

MaskTargets mask_targets(const RoiSample& sample, const std::vector<ImageTargets>& targets, std::int64_t M) {
  const std::int64_t r = sample.labels.numel();
  std::vector<std::vector<std::int64_t>> rows(targets.size());
  for (std::int64_t i = 0; i < r; ++i)
    if (sample.labels.data<std::int64_t>()[i] > 0) {
      const auto img = static_cast<std::size_t>(sample.rois.data<float>()[5 * i]);
      BH_CHECK_AS(DataError, img < targets.size(), "maskrcnn: RoI {} of image {} in a batch of {}", i, img, targets.size());
      rows[img].push_back(i);
    }
  std::vector<Tensor> rois, labels, masks;
  for (std::size_t img = 0; img < targets.size(); ++img) {
    if (rows[img].empty()) continue;
    const Tensor idx = i64_tensor(rows[img]);
    const Tensor rr = rows_of(sample.rois, idx).contiguous();
    rois.push_back(rr);
    labels.push_back(rows_of(sample.labels, idx).contiguous());
    masks.push_back(nn::polygon_mask_targets(targets[img].polygons, rr.slice(1, 1, 5).contiguous(),
                                             rows_of(sample.matched, idx).contiguous(), M));
  }
  MaskTargets out;
  if (rois.empty()) {
    out.rois = Tensor::empty({0, 5});
    out.labels = Tensor::empty({0}, DType::i64);
    out.targets = Tensor::empty({0, M, M});
    return out;
  }
  out.rois = nn::concat(rois, 0);
  out.labels = nn::concat(labels, 0);
  out.targets = nn::concat(masks, 0);
  return out;
}

}  // namespace benchhost::maskrcnn
