// Mask R-CNN R-50-FPN forward/backward (see model.hpp, Note [Mask R-CNN architecture] and Note
// [Mask R-CNN frozen layers]).
//
// The backbone and the mask head are nn::Conv2d layers used once per forward. The FPN and the
// RPN head use nn::Conv2d only as holders of their named parameters and run the functional
// convolutions themselves (the RPN head runs on five levels, so its activations are kept per
// level and its gradients accumulate over them). The box head's Linear layers keep their own
// inputs. RoIAlign's backward scatters into per-level gradients of P2..P5.

#include "model.hpp"

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/init.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/resample.hpp"
#include "benchhost/nn/serialize.hpp"
#include "benchhost/precision.hpp"

namespace benchhost::maskrcnn {

using nn::Conv2d;
using nn::Conv2dSpec;
using nn::FrozenBatchNorm2d;
using nn::FrozenBatchNormSpec;

namespace {

constexpr int kLevels = 5;     // P2..P6
constexpr int kRoiLevels = 4;  // P2..P5

Conv2dSpec conv_spec(std::int64_t stride, std::int64_t pad, nn::ImageLayout layout) {
  Conv2dSpec s;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.layout = layout;
  return s;
}

// maskrcnn_benchmark's FrozenBatchNorm2d: scale = weight * running_var.rsqrt(), no epsilon.
FrozenBatchNormSpec bn_spec(bool relu, nn::ImageLayout layout) {
  FrozenBatchNormSpec s;
  s.eps = 0.0;
  s.fuse_relu = relu;
  s.layout = layout;
  return s;
}

nn::Pool2dSpec p6_spec(nn::ImageLayout layout) {  // LastLevelMaxPool: max_pool2d(P5, 1, 2, 0)
  nn::Pool2dSpec p;
  p.kernel_h = p.kernel_w = 1;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 0;
  p.layout = layout;
  return p;
}

// Height and width of an activation in `layout`.
std::int64_t image_h(const Tensor& t, nn::ImageLayout l) { return t.size(l == nn::ImageLayout::nhwc ? 1 : 2); }
std::int64_t image_w(const Tensor& t, nn::ImageLayout l) { return t.size(l == nn::ImageLayout::nhwc ? 2 : 3); }

std::int64_t stage_width(const MaskRcnnConfig& c, std::size_t s) { return c.stem_channels << s; }
std::int64_t stage_out(const MaskRcnnConfig& c, std::size_t s) { return (c.stem_channels << s) * 4; }

// A frozen convolution (keep false) keeps nothing but runs under the policy as the others do.
Tensor run_conv(Conv2d& c, const Tensor& x, bool keep) { return keep ? c.forward(x) : c.apply(x); }

Tensor relu_mask(const Tensor& dy, const Tensor& out) { return nn::activation_backward(dy, out, nn::Activation::relu); }

void accumulate(Tensor& a, const Tensor& b) {
  if (!b.defined()) return;
  if (!a.defined()) {
    a = b;
    return;
  }
  nn::add_(a, b);
}

std::int64_t conv_params(std::int64_t in, std::int64_t out, std::int64_t k, bool bias) {
  return out * in * k * k + (bias ? out : 0);
}

void check_config(const MaskRcnnConfig& c) {
  BH_CHECK_AS(InvalidArgument, c.blocks.size() == 4, "Mask R-CNN: blocks must list 4 stages (C2..C5), got {}",
              c.blocks.size());
  for (std::int64_t b : c.blocks) BH_CHECK_AS(InvalidArgument, b > 0, "Mask R-CNN: every stage needs at least one block");
  BH_CHECK_AS(InvalidArgument,
              c.stem_channels > 0 && c.fpn_channels > 0 && c.num_classes > 1 && c.num_anchors > 0 &&
                  c.representation_size > 0 && c.mask_convs >= 0 && c.mask_channels > 0 && c.box_resolution > 0 &&
                  c.mask_resolution > 0,
              "Mask R-CNN: channel counts, resolutions and anchors must be positive and classes at least 2 "
              "(the background and one)");
  BH_CHECK_AS(InvalidArgument, c.freeze_at >= 0 && c.freeze_at <= 5, "Mask R-CNN: freeze_at must be in [0, 5], got {}",
              c.freeze_at);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Bottleneck (STRIDE_IN_1X1)
// ---------------------------------------------------------------------------------------------

Bottleneck::Bottleneck(std::int64_t in, std::int64_t width, std::int64_t out, std::int64_t stride,
                       nn::ImageLayout layout) {
  conv1_ = &register_module("conv1", std::make_unique<Conv2d>(in, width, 1, 1, conv_spec(stride, 0, layout)));
  bn1_ = &register_module("bn1", std::make_unique<FrozenBatchNorm2d>(width, bn_spec(true, layout)));
  conv2_ = &register_module("conv2", std::make_unique<Conv2d>(width, width, 3, 3, conv_spec(1, 1, layout)));
  bn2_ = &register_module("bn2", std::make_unique<FrozenBatchNorm2d>(width, bn_spec(true, layout)));
  conv3_ = &register_module("conv3", std::make_unique<Conv2d>(width, out, 1, 1, conv_spec(1, 0, layout)));
  bn3_ = &register_module("bn3", std::make_unique<FrozenBatchNorm2d>(out, bn_spec(false, layout)));
  if (stride != 1 || in != out) {
    auto& ds = register_module("downsample", std::make_unique<nn::Module>());
    proj_conv_ = &ds.register_module("0", std::make_unique<Conv2d>(in, out, 1, 1, conv_spec(stride, 0, layout)));
    proj_bn_ = &ds.register_module("1", std::make_unique<FrozenBatchNorm2d>(out, bn_spec(false, layout)));
  }
}

void Bottleneck::set_input_grad(bool on) {
  input_grad_ = on;
  conv1_->set_input_grad(on);
  if (proj_conv_) proj_conv_->set_input_grad(on);
}

Tensor Bottleneck::forward(const Tensor& x) {
  const bool keep = is_training() && !frozen_;
  Tensor h = bn1_->forward(run_conv(*conv1_, x, keep));
  h = bn2_->forward(run_conv(*conv2_, h, keep));
  Tensor out = bn3_->forward(run_conv(*conv3_, h, keep));
  const Tensor shortcut = proj_conv_ ? proj_bn_->forward(run_conv(*proj_conv_, x, keep)) : x;
  nn::add_(out, shortcut);
  out = nn::relu(out);
  out_ = keep ? out : Tensor();
  return out;
}

Tensor Bottleneck::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, !frozen_ && out_.defined(),
              "Bottleneck '{}': backward() needs a training forward() of a trainable block", name());
  const Tensor d = relu_mask(dy, out_);
  out_ = Tensor();
  Tensor dx = conv1_->backward(
      bn1_->backward(conv2_->backward(bn2_->backward(conv3_->backward(bn3_->backward(d))))));
  if (proj_conv_) {
    const Tensor dshort = proj_conv_->backward(proj_bn_->backward(d));
    if (input_grad_) nn::add_(dx, dshort);
  } else if (input_grad_) {
    nn::add_(dx, d);
  }
  return input_grad_ ? dx : Tensor();
}

// ---------------------------------------------------------------------------------------------
// MaskRcnn
// ---------------------------------------------------------------------------------------------

MaskRcnn::MaskRcnn(const MaskRcnnConfig& c) : config_(c) {
  check_config(c);
  auto& backbone = register_module("backbone", std::make_unique<nn::Module>());
  auto& body = backbone.register_module("body", std::make_unique<nn::Module>());
  auto& stem = body.register_module("stem", std::make_unique<nn::Module>());
  stem_conv_ = &stem.register_module("conv1",
                                     std::make_unique<Conv2d>(3, c.stem_channels, 7, 7, conv_spec(2, 3, c.layout)));
  stem_conv_->set_input_grad(false);
  stem_bn_ = &stem.register_module("bn1",
                                   std::make_unique<FrozenBatchNorm2d>(c.stem_channels, bn_spec(true, c.layout)));
  nn::Pool2dSpec p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  p.layout = c.layout;
  stem_pool_ = &stem.register_module("maxpool", std::make_unique<nn::MaxPool2d>(p));
  std::int64_t in = c.stem_channels;
  const int first = first_trainable_stage();
  for (std::size_t s = 0; s < 4; ++s) {
    auto& stage = body.register_module(fmt::format("layer{}", s + 1), std::make_unique<nn::Module>());
    stages_.emplace_back();
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      Bottleneck& block = stage.register_module(
          std::to_string(b), std::make_unique<Bottleneck>(in, stage_width(c, s), stage_out(c, s), stride, c.layout));
      block.set_frozen(!stage_trainable(s));
      if (static_cast<int>(s) == first && b == 0 && c.freeze_at > 0) block.set_input_grad(false);
      stages_.back().push_back(&block);
      in = stage_out(c, s);
    }
  }

  auto& fpn = backbone.register_module("fpn", std::make_unique<nn::Module>());
  const std::int64_t F = c.fpn_channels;
  for (std::size_t l = 0; l < 4; ++l) {
    inner_.push_back(&fpn.register_module(
        fmt::format("fpn_inner{}", l + 1),
        std::make_unique<Conv2d>(stage_out(c, l), F, 1, 1, conv_spec(1, 0, c.layout), true)));
    layer_.push_back(&fpn.register_module(fmt::format("fpn_layer{}", l + 1),
                                          std::make_unique<Conv2d>(F, F, 3, 3, conv_spec(1, 1, c.layout), true)));
  }

  auto& rpn = register_module("rpn", std::make_unique<nn::Module>()).register_module("head", std::make_unique<nn::Module>());
  rpn_conv_ = &rpn.register_module("conv", std::make_unique<Conv2d>(F, F, 3, 3, conv_spec(1, 1, c.layout), true));
  rpn_cls_ = &rpn.register_module("cls_logits",
                                  std::make_unique<Conv2d>(F, c.num_anchors, 1, 1, conv_spec(1, 0, c.layout), true));
  rpn_box_ = &rpn.register_module("bbox_pred",
                                  std::make_unique<Conv2d>(F, 4 * c.num_anchors, 1, 1, conv_spec(1, 0, c.layout), true));

  auto& heads = register_module("roi_heads", std::make_unique<nn::Module>());
  auto& box = heads.register_module("box", std::make_unique<nn::Module>());
  auto& fe = box.register_module("feature_extractor", std::make_unique<nn::Module>());
  const std::int64_t R = c.representation_size;
  fc6_ = &fe.register_module("fc6", std::make_unique<nn::Linear>(F * c.box_resolution * c.box_resolution, R, true,
                                                                 nn::Activation::relu));
  fc7_ = &fe.register_module("fc7", std::make_unique<nn::Linear>(R, R, true, nn::Activation::relu));
  auto& pred = box.register_module("predictor", std::make_unique<nn::Module>());
  cls_score_ = &pred.register_module("cls_score", std::make_unique<nn::Linear>(R, c.num_classes, true));
  bbox_pred_ = &pred.register_module("bbox_pred", std::make_unique<nn::Linear>(R, 4 * c.num_classes, true));

  auto& mask = heads.register_module("mask", std::make_unique<nn::Module>());
  auto& mfe = mask.register_module("feature_extractor", std::make_unique<nn::Module>());
  std::int64_t mc = F;
  for (std::int64_t i = 0; i < c.mask_convs; ++i) {
    mask_fcn_.push_back(&mfe.register_module(
        fmt::format("mask_fcn{}", i + 1),
        std::make_unique<Conv2d>(mc, c.mask_channels, 3, 3, conv_spec(1, 1, c.layout), true)));
    mc = c.mask_channels;
  }
  auto& mpred = mask.register_module("predictor", std::make_unique<nn::Module>());
  conv5_mask_ = &mpred.register_module(
      "conv5_mask", std::make_unique<nn::ConvTranspose2d>(mc, c.mask_channels, 2, 2, conv_spec(2, 0, c.layout), true));
  mask_logits_ = &mpred.register_module(
      "mask_fcn_logits",
      std::make_unique<Conv2d>(c.mask_channels, c.num_classes, 1, 1, conv_spec(1, 0, c.layout), true));
}

bool MaskRcnn::stage_trainable(std::size_t s) const {
  // FREEZE_CONV_BODY_AT = f: the stem (stage index 1) and stages 2..f are frozen; layer s+1 is
  // stage index s + 2.
  return static_cast<std::int64_t>(s) + 2 > config_.freeze_at;
}

int MaskRcnn::first_trainable_stage() const {
  for (int s = 0; s < 4; ++s)
    if (stage_trainable(static_cast<std::size_t>(s))) return s;
  return 4;
}

nn::RoIAlignSpec MaskRcnn::roi_spec(std::int64_t resolution) const {
  nn::RoIAlignSpec s;
  s.pooled_h = s.pooled_w = resolution;
  s.spatial_scales = {0.25f, 0.125f, 0.0625f, 0.03125f};
  s.sampling_ratio = 2;
  s.aligned = false;
  s.channels_last = nhwc();
  return s;
}

Tensor MaskRcnn::from_nchw(const Tensor& t) const {
  return nhwc() && t.defined() ? nn::permute_copy(t, {0, 2, 3, 1}) : t;
}

Tensor MaskRcnn::to_nchw(const Tensor& t) const {
  return nhwc() && t.defined() ? nn::permute_copy(t, {0, 3, 1, 2}) : t;
}

RpnOutputs MaskRcnn::forward(const Tensor& images) {
  const MaskRcnnConfig& c = config_;
  BH_CHECK_AS(InvalidArgument, images.dim() == 4 && images.size(1) == 3,
              "Mask R-CNN: images must be [N, 3, H, W], got {}", shape_str(images.shape()));
  BH_CHECK_AS(InvalidArgument, images.size(2) % 32 == 0 && images.size(3) % 32 == 0,
              "Mask R-CNN: the padded image size {}x{} must be a multiple of 32 (SIZE_DIVISIBILITY)", images.size(2),
              images.size(3));
  const bool train = is_training();
  have_forward_ = have_box_ = have_mask_ = false;
  const bool stem_trains = train && c.freeze_at == 0;
  if (train)
    for (std::size_t s = 0; s < 4; ++s)
      if (!stage_trainable(s))
        for (Bottleneck* b : stages_[s]) b->train(false);
  if (!stem_trains) {
    stem_bn_->train(false);
    stem_pool_->train(false);
  }

  Tensor h = stem_pool_->forward(stem_bn_->forward(run_conv(*stem_conv_, from_nchw(images), stem_trains)));
  std::vector<Tensor> feats;
  for (std::size_t s = 0; s < 4; ++s) {
    for (Bottleneck* b : stages_[s]) h = b->forward(h);
    feats.push_back(h);
  }

  // FPN, top-down (fpn.py: interpolate(scale_factor=2, nearest); sizes are exact multiples here).
  std::vector<Tensor> merged(4), p(kLevels);
  Tensor last = inner_[3]->apply(feats[3]);
  merged[3] = last;
  p[3] = layer_[3]->apply(last);
  for (int l = 2; l >= 0; --l) {
    Tensor lateral = inner_[static_cast<std::size_t>(l)]->apply(feats[static_cast<std::size_t>(l)]);
    nn::add_(lateral,
             nn::upsample_nearest2d_forward(last, image_h(lateral, c.layout), image_w(lateral, c.layout), c.layout));
    last = lateral;
    merged[static_cast<std::size_t>(l)] = last;
    p[static_cast<std::size_t>(l)] = layer_[static_cast<std::size_t>(l)]->apply(last);
  }
  p[4] = nn::max_pool2d_forward(p[3], p6_spec(c.layout));

  RpnOutputs out;
  std::vector<Tensor> ts;
  for (int l = 0; l < kLevels; ++l) {
    const Tensor t = nn::relu(rpn_conv_->apply(p[static_cast<std::size_t>(l)]));
    out.objectness.push_back(to_nchw(rpn_cls_->apply(t)));
    out.deltas.push_back(to_nchw(rpn_box_->apply(t)));
    out.grid_sizes.emplace_back(image_h(t, c.layout), image_w(t, c.layout));
    if (train) ts.push_back(t);
  }
  p_ = std::move(p);
  if (train) {
    c_ = std::move(feats);
    merged_ = std::move(merged);
    rpn_t_ = std::move(ts);
    have_forward_ = true;
  }
  return out;
}

BoxHeadOutputs MaskRcnn::box_head(const Tensor& rois) {
  BH_CHECK_AS(InvalidArgument, p_.size() == kLevels, "Mask R-CNN: box_head() needs a forward() first");
  BH_CHECK_AS(InvalidArgument, rois.dim() == 2 && rois.size(1) == 5, "Mask R-CNN: rois must be [R, 5], got {}",
              shape_str(rois.shape()));
  const std::vector<Tensor> levels(p_.begin(), p_.begin() + kRoiLevels);
  const Tensor lv = nn::map_roi_levels(rois);
  // Flattened in (C, h, w) order whatever the layout: fc6's weights are the reference's.
  const Tensor pooled = to_nchw(nn::roi_align_forward(levels, rois, lv, roi_spec(config_.box_resolution)));
  const Tensor x = pooled.reshape({rois.size(0), pooled.numel() / std::max<std::int64_t>(1, rois.size(0))});
  const Tensor h = fc7_->forward(fc6_->forward(x));
  BoxHeadOutputs out{cls_score_->forward(h), bbox_pred_->forward(h)};
  if (is_training()) {
    box_rois_ = rois;
    box_levels_ = lv;
    have_box_ = true;
  }
  return out;
}

Tensor MaskRcnn::mask_head(const Tensor& rois) {
  BH_CHECK_AS(InvalidArgument, p_.size() == kLevels, "Mask R-CNN: mask_head() needs a forward() first");
  BH_CHECK_AS(InvalidArgument, rois.dim() == 2 && rois.size(1) == 5, "Mask R-CNN: rois must be [P, 5], got {}",
              shape_str(rois.shape()));
  const std::vector<Tensor> levels(p_.begin(), p_.begin() + kRoiLevels);
  const Tensor lv = nn::map_roi_levels(rois);
  Tensor x = nn::roi_align_forward(levels, rois, lv, roi_spec(config_.mask_resolution));
  const bool train = is_training();
  std::vector<Tensor> acts;
  for (Conv2d* cv : mask_fcn_) {
    x = nn::relu(cv->forward(x));
    if (train) acts.push_back(x);
  }
  x = nn::relu(conv5_mask_->forward(x));
  if (train) acts.push_back(x);
  Tensor logits = to_nchw(mask_logits_->forward(x));
  if (train) {
    mask_rois_ = rois;
    mask_levels_ = lv;
    mask_acts_ = std::move(acts);
    have_mask_ = true;
  }
  return logits;
}

void MaskRcnn::backward(const std::vector<Tensor>& dobj, const std::vector<Tensor>& ddelta, const Tensor& dcls,
                        const Tensor& dbox, const Tensor& dmask) {
  const MaskRcnnConfig& c = config_;
  BH_CHECK_AS(InvalidArgument, have_forward_, "Mask R-CNN: backward() needs a forward() in training mode before it");
  BH_CHECK_AS(InvalidArgument, dobj.size() == kLevels && ddelta.size() == kLevels,
              "Mask R-CNN: backward() expects {} levels of RPN gradients, got {} and {}", kLevels, dobj.size(),
              ddelta.size());
  have_forward_ = false;
  std::vector<Tensor> dp(kLevels);
  std::vector<Shape> roi_shapes;
  for (int l = 0; l < kRoiLevels; ++l) roi_shapes.push_back(p_[static_cast<std::size_t>(l)].shape());

  // Box head: fc7 output feeds both predictors.
  const bool ran_box = have_box_ && dcls.defined(), ran_mask = have_mask_ && dmask.defined();
  if (ran_box) {
    Tensor dh = cls_score_->backward(dcls);
    nn::add_(dh, bbox_pred_->backward(dbox));
    const Tensor dx = fc6_->backward(fc7_->backward(dh));
    const std::int64_t r = box_rois_.size(0), res = c.box_resolution;
    const Tensor dpooled = from_nchw(dx.reshape({r, c.fpn_channels, res, res}));
    const std::vector<Tensor> d = nn::roi_align_backward(dpooled, box_rois_, box_levels_, roi_shapes, roi_spec(res));
    for (int l = 0; l < kRoiLevels; ++l) accumulate(dp[static_cast<std::size_t>(l)], d[static_cast<std::size_t>(l)]);
  }
  have_box_ = false;
  box_rois_ = box_levels_ = Tensor();

  // Mask head.
  if (ran_mask) {
    Tensor d = mask_logits_->backward(from_nchw(dmask));
    d = conv5_mask_->backward(relu_mask(d, mask_acts_.back()));
    for (std::size_t i = mask_fcn_.size(); i-- > 0;) d = mask_fcn_[i]->backward(relu_mask(d, mask_acts_[i]));
    const std::vector<Tensor> dl =
        nn::roi_align_backward(d, mask_rois_, mask_levels_, roi_shapes, roi_spec(c.mask_resolution));
    for (int l = 0; l < kRoiLevels; ++l) accumulate(dp[static_cast<std::size_t>(l)], dl[static_cast<std::size_t>(l)]);
  }
  have_mask_ = false;
  mask_rois_ = mask_levels_ = Tensor();
  mask_acts_.clear();

  // RPN head, per level; its parameters' gradients accumulate over the levels.
  for (int l = 0; l < kLevels; ++l) {
    const auto li = static_cast<std::size_t>(l);
    const Tensor& t = rpn_t_[li];
    Tensor dt = rpn_cls_->apply_backward(from_nchw(dobj[li]), t, true);
    nn::add_(dt, rpn_box_->apply_backward(from_nchw(ddelta[li]), t, true));
    accumulate(dp[li], rpn_conv_->apply_backward(relu_mask(dt, t), p_[li], true));
  }
  rpn_t_.clear();

  // P6 = max_pool(P5, 1, 2).
  accumulate(dp[3], nn::max_pool2d_backward(dp[4], p_[3], p_[4], p6_spec(c.layout)));

  // FPN top-down in reverse: merged[l] = inner(C_l) + up(merged[l + 1]).
  std::vector<Tensor> dc(4);
  Tensor dmerged;
  for (int l = 0; l < 4; ++l) {
    const auto li = static_cast<std::size_t>(l);
    Tensor dm = dp[li].defined() ? layer_[li]->apply_backward(dp[li], merged_[li], true) : Tensor();
    if (!dm.defined()) dm = Tensor::zeros(merged_[li].shape(), merged_[li].dtype(), merged_[li].device());
    if (dmerged.defined()) nn::add_(dm, dmerged);
    dc[li] = inner_[li]->apply_backward(dm, c_[li], stage_trainable(li));
    if (l < 3) dmerged = nn::upsample_nearest2d_backward(dm, merged_[li + 1].shape(), c.layout);
  }
  merged_.clear();
  c_.clear();

  // Backbone from layer4 down to the lowest trainable stage.
  const int first = first_trainable_stage();
  Tensor d;
  for (int s = 3; s >= first; --s) {
    accumulate(d, dc[static_cast<std::size_t>(s)]);
    for (auto it = stages_[static_cast<std::size_t>(s)].rbegin(); it != stages_[static_cast<std::size_t>(s)].rend(); ++it)
      d = (*it)->backward(d);
  }
  if (c.freeze_at == 0) stem_conv_->backward(stem_bn_->backward(stem_pool_->backward(d)));
  // The FPN and RPN run functional convolutions; a head that got no RoIs this step has a zero
  // gradient, which is final too (data parallelism waits for every trainable parameter).
  for (nn::Parameter* p : parameters())
    if (p->name.rfind("backbone.fpn.", 0) == 0 || p->name.rfind("rpn.", 0) == 0 ||
        (!ran_box && p->name.rfind("roi_heads.box.", 0) == 0) || (!ran_mask && p->name.rfind("roi_heads.mask.", 0) == 0))
      p->mark_grad_ready();
}

std::vector<nn::Parameter*> MaskRcnn::trainable_parameters() {
  std::vector<nn::Parameter*> out;
  for (nn::Parameter* p : parameters()) {
    if (p->name.rfind("backbone.body.stem.", 0) == 0 && config_.freeze_at >= 1) continue;
    bool frozen = false;
    for (std::size_t s = 0; s < 4; ++s)
      if (!stage_trainable(s) && p->name.rfind(fmt::format("backbone.body.layer{}.", s + 1), 0) == 0) frozen = true;
    if (!frozen) out.push_back(p);
  }
  return out;
}

void MaskRcnn::initialize(std::uint64_t seed) {
  auto ends_with = [](const std::string& s, const char* suffix) {
    const std::string t(suffix);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  auto starts = [](const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; };
  for (nn::Parameter* p : parameters()) {
    Rng rng = nn::init::rng_for(seed, p->name);
    if (ends_with(p->name, ".bias")) {
      nn::init::zeros_(p->value);
    } else if (starts(p->name, "backbone.") || starts(p->name, "roi_heads.box.feature_extractor.")) {
      // resnet.py, fpn.py (make_conv), make_fc: kaiming_uniform_(a=1)
      nn::init::kaiming_uniform_(p->value, rng, nn::init::FanMode::fan_in, nn::init::Nonlinearity::leaky_relu, 1.0f);
    } else if (starts(p->name, "rpn.") || p->name == "roi_heads.box.predictor.cls_score.weight") {
      nn::init::normal_(p->value, rng, 0.0f, 0.01f);
    } else if (p->name == "roi_heads.box.predictor.bbox_pred.weight") {
      nn::init::normal_(p->value, rng, 0.0f, 0.001f);
    } else {  // the mask head (make_conv3x3 and the predictor): kaiming_normal_(fan_out, relu)
      nn::init::kaiming_normal_(p->value, rng, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu);
    }
  }
  for (auto& [name, buffer] : buffers()) {
    const bool one = ends_with(name, ".running_var") || ends_with(name, ".weight");
    nn::init::constant_(*buffer, one ? 1.0f : 0.0f);
  }
}

void MaskRcnn::load_backbone(const std::string& path) {
  nn::load_pretrained_part(*this, path, "backbone.body.", "Mask R-CNN backbone weights");
}

double MaskRcnn::forward_macs(std::int64_t h, std::int64_t w) const { return count_macs(h, w, false); }
double MaskRcnn::frozen_forward_macs(std::int64_t h, std::int64_t w) const { return count_macs(h, w, true); }

double MaskRcnn::box_head_macs_per_roi() const {
  const MaskRcnnConfig& c = config_;
  const double in = static_cast<double>(c.fpn_channels * c.box_resolution * c.box_resolution);
  const double r = static_cast<double>(c.representation_size);
  return in * r + r * r + r * static_cast<double>(5 * c.num_classes);
}

double MaskRcnn::count_macs(std::int64_t h, std::int64_t w, bool frozen_only) const {
  const MaskRcnnConfig& c = config_;
  auto out = [](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t pad) { return (in + 2 * pad - k) / s + 1; };
  auto conv_macs = [](std::int64_t oh, std::int64_t ow, std::int64_t in, std::int64_t o, std::int64_t k) {
    return static_cast<double>(oh) * static_cast<double>(ow) * static_cast<double>(o * in * k * k);
  };
  double macs = 0, frozen = 0;
  h = out(h, 7, 2, 3);
  w = out(w, 7, 2, 3);
  macs += conv_macs(h, w, 3, c.stem_channels, 7);
  if (c.freeze_at >= 1) frozen = macs;
  h = out(h, 3, 2, 1);
  w = out(w, 3, 2, 1);
  std::int64_t in = c.stem_channels;
  std::vector<std::pair<std::int64_t, std::int64_t>> grid;
  const std::int64_t F = c.fpn_channels;
  for (std::size_t s = 0; s < 4; ++s) {
    const std::int64_t width = stage_width(c, s), o = stage_out(c, s);
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      const std::int64_t oh = out(h, 1, stride, 0), ow = out(w, 1, stride, 0);
      double block = conv_macs(oh, ow, in, width, 1) + conv_macs(oh, ow, width, width, 3) + conv_macs(oh, ow, width, o, 1);
      if (stride != 1 || in != o) block += conv_macs(oh, ow, in, o, 1);
      macs += block;
      if (!stage_trainable(s)) frozen += block;
      h = oh;
      w = ow;
      in = o;
    }
    macs += conv_macs(h, w, o, F, 1) + conv_macs(h, w, F, F, 3);
    grid.emplace_back(h, w);
  }
  grid.emplace_back((grid.back().first + 1) / 2, (grid.back().second + 1) / 2);  // P6
  for (const auto& [gh, gw] : grid)
    macs += conv_macs(gh, gw, F, F, 3) + conv_macs(gh, gw, F, c.num_anchors * 5, 1);
  return frozen_only ? frozen : macs;
}

namespace {

std::int64_t count(const MaskRcnnConfig& c, bool trainable_only) {
  check_config(c);
  std::int64_t n = 0;
  if (!trainable_only || c.freeze_at == 0) n += conv_params(3, c.stem_channels, 7, false);
  std::int64_t in = c.stem_channels;
  for (std::size_t s = 0; s < 4; ++s) {
    const std::int64_t width = stage_width(c, s), o = stage_out(c, s);
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      std::int64_t block = conv_params(in, width, 1, false) + conv_params(width, width, 3, false) + conv_params(width, o, 1, false);
      if (stride != 1 || in != o) block += conv_params(in, o, 1, false);
      if (!trainable_only || static_cast<std::int64_t>(s) + 2 > c.freeze_at) n += block;
      in = o;
    }
  }
  const std::int64_t F = c.fpn_channels, K = c.num_classes, R = c.representation_size;
  for (std::size_t s = 0; s < 4; ++s) n += conv_params(stage_out(c, s), F, 1, true) + conv_params(F, F, 3, true);
  n += conv_params(F, F, 3, true) + conv_params(F, c.num_anchors, 1, true) + conv_params(F, 4 * c.num_anchors, 1, true);
  n += F * c.box_resolution * c.box_resolution * R + R + R * R + R + R * K + K + R * 4 * K + 4 * K;
  std::int64_t mc = F;
  for (std::int64_t i = 0; i < c.mask_convs; ++i, mc = c.mask_channels) n += conv_params(mc, c.mask_channels, 3, true);
  n += mc * c.mask_channels * 4 + c.mask_channels;  // conv5_mask
  n += conv_params(c.mask_channels, K, 1, true);
  return n;
}

}  // namespace

std::int64_t count_parameters(const MaskRcnnConfig& config) { return count(config, false); }
std::int64_t count_trainable_parameters(const MaskRcnnConfig& config) { return count(config, true); }

}  // namespace benchhost::maskrcnn
