// RetinaNet forward/backward (see model.hpp, Note [RetinaNet architecture] and Note [Frozen
// layers]).
//
// The backbone's convolutions are nn::Conv2d layers used once per forward. The FPN and the head
// use nn::Conv2d only as the holders of their named parameters and run the functional
// convolutions of nn/conv.hpp themselves: the head runs on five levels per forward (and the FPN
// output convs on three), so the activations are kept per level here, and a parameter's
// gradient accumulates (+=) over the levels.

#include "model.hpp"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/init.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/resample.hpp"
#include "benchhost/nn/serialize.hpp"
#include "benchhost/precision.hpp"

namespace benchhost::retinanet {

using nn::Conv2d;
using nn::Conv2dSpec;
using nn::FrozenBatchNorm2d;
using nn::FrozenBatchNormSpec;

namespace {

constexpr int kLevels = 5;  // P3..P7

Conv2dSpec conv_spec(const RetinaNetConfig& c, std::int64_t stride, std::int64_t pad,
                     std::int64_t groups = 1) {
  Conv2dSpec s;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.groups = groups;
  s.layout = c.layout;
  return s;
}

FrozenBatchNormSpec bn_spec(const RetinaNetConfig& c, bool relu) {
  FrozenBatchNormSpec s;
  s.fuse_relu = relu;
  s.layout = c.layout;
  return s;
}

std::int64_t stage_width(const RetinaNetConfig& c, std::size_t s) {
  return (c.width_per_group * c.groups) << s;
}
std::int64_t stage_out(const RetinaNetConfig& c, std::size_t s) { return (c.stem_channels << s) * 4; }

/// Layer `keep`s its input for backward: Conv2d::forward; otherwise Conv2d::apply (the same
/// convolution under the policy, keeping nothing).
Tensor run_conv(Conv2d& c, const Tensor& x, bool keep) {
  return keep ? c.forward(x) : c.apply(x);
}

bool cpu_f32(const Tensor& a, const Tensor& b) {
  return a.device().is_cpu() && a.dtype() == DType::f32 && b.dtype() == DType::f32 &&
         a.is_contiguous() && b.is_contiguous();
}

/// relu(a + b) (a fresh tensor `a` is overwritten where possible).
Tensor add_relu(Tensor a, const Tensor& b) {
  BH_CHECK_AS(InvalidArgument, a.shape() == b.shape(), "RetinaNet: residual shapes {} and {} differ",
              shape_str(a.shape()), shape_str(b.shape()));
  if (!cpu_f32(a, b)) return nn::relu(nn::add(a, b));
  float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = pa[i] + pb[i];
    pa[i] = v > 0.0f ? v : 0.0f;
  }
  return a;
}

/// dy where out > 0, else 0 (the gradient through a ReLU from its output).
Tensor relu_mask(const Tensor& dy, const Tensor& out) {
  return nn::activation_backward(dy, out, nn::Activation::relu);
}

/// a += b (fresh contiguous a).
void accumulate(Tensor& a, const Tensor& b) {
  if (!a.defined()) {
    a = b;
    return;
  }
  nn::add_(a, b);
}

std::int64_t conv_params(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t groups,
                         bool bias) {
  return out * (in / groups) * k * k + (bias ? out : 0);
}

bool stage_trainable(const RetinaNetConfig& c, std::size_t s) {
  // torchvision: ["layer4", "layer3", "layer2", "layer1", "conv1"][:trainable_layers]
  return static_cast<std::int64_t>(3 - s) < c.trainable_layers;
}

void check_config(const RetinaNetConfig& c) {
  BH_CHECK_AS(InvalidArgument, c.blocks.size() == 4,
              "RetinaNet: blocks must list 4 stages (C2..C5), got {}", c.blocks.size());
  for (std::int64_t b : c.blocks)
    BH_CHECK_AS(InvalidArgument, b > 0, "RetinaNet: every stage needs at least one block");
  BH_CHECK_AS(InvalidArgument,
              c.groups > 0 && c.width_per_group > 0 && c.stem_channels > 0 && c.fpn_channels > 0 &&
                  c.num_classes > 0 && c.num_anchors > 0 && c.head_convs >= 0,
              "RetinaNet: channel counts, classes and anchors must be positive");
  BH_CHECK_AS(InvalidArgument, c.trainable_layers >= 0 && c.trainable_layers <= 5,
              "RetinaNet: trainable_layers must be in [0, 5], got {}", c.trainable_layers);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Bottleneck
// ---------------------------------------------------------------------------------------------

Bottleneck::Bottleneck(std::int64_t in, std::int64_t width, std::int64_t out, std::int64_t stride,
                       const RetinaNetConfig& c) {
  conv1_ = &register_module("conv1", std::make_unique<Conv2d>(in, width, 1, 1, conv_spec(c, 1, 0)));
  bn1_ = &register_module("bn1", std::make_unique<FrozenBatchNorm2d>(width, bn_spec(c, true)));
  conv2_ = &register_module(
      "conv2", std::make_unique<Conv2d>(width, width, 3, 3, conv_spec(c, stride, 1, c.groups)));
  bn2_ = &register_module("bn2", std::make_unique<FrozenBatchNorm2d>(width, bn_spec(c, true)));
  conv3_ = &register_module("conv3", std::make_unique<Conv2d>(width, out, 1, 1, conv_spec(c, 1, 0)));
  bn3_ = &register_module("bn3", std::make_unique<FrozenBatchNorm2d>(out, bn_spec(c, false)));
  if (stride != 1 || in != out) {
    auto& ds = register_module("downsample", std::make_unique<nn::Module>());
    proj_conv_ = &ds.register_module(
        "0", std::make_unique<Conv2d>(in, out, 1, 1, conv_spec(c, stride, 0)));
    proj_bn_ = &ds.register_module("1", std::make_unique<FrozenBatchNorm2d>(out, bn_spec(c, false)));
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
  out = add_relu(std::move(out), shortcut);
  out_ = keep ? out : Tensor();
  return out;
}

Tensor Bottleneck::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, !frozen_ && out_.defined(),
              "Bottleneck '{}': backward() needs a training forward() of a trainable block", name());
  const Tensor d = relu_mask(dy, out_);
  out_ = Tensor();
  Tensor dx = conv1_->backward(bn1_->backward(
      conv2_->backward(bn2_->backward(conv3_->backward(bn3_->backward(d))))));
  if (proj_conv_) {
    const Tensor dshort = proj_conv_->backward(proj_bn_->backward(d));
    if (input_grad_) nn::add_(dx, dshort);
  } else if (input_grad_) {
    nn::add_(dx, d);
  }
  return input_grad_ ? dx : Tensor();
}

// ---------------------------------------------------------------------------------------------
// RetinaNet
// ---------------------------------------------------------------------------------------------

RetinaNet::RetinaNet(const RetinaNetConfig& c) : config_(c) {
  check_config(c);
  auto& backbone = register_module("backbone", std::make_unique<nn::Module>());
  auto& body = backbone.register_module("body", std::make_unique<nn::Module>());
  stem_conv_ = &body.register_module(
      "conv1", std::make_unique<Conv2d>(3, c.stem_channels, 7, 7, conv_spec(c, 2, 3)));
  stem_conv_->set_input_grad(false);
  stem_bn_ = &body.register_module("bn1",
                                   std::make_unique<FrozenBatchNorm2d>(c.stem_channels, bn_spec(c, true)));
  nn::Pool2dSpec p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  p.layout = c.layout;
  stem_pool_ = &body.register_module("maxpool", std::make_unique<nn::MaxPool2d>(p));
  std::int64_t in = c.stem_channels;
  const int first = first_trainable_stage();
  for (std::size_t s = 0; s < 4; ++s) {
    auto& stage = body.register_module(fmt::format("layer{}", s + 1), std::make_unique<nn::Module>());
    stages_.emplace_back();
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      Bottleneck& block = stage.register_module(
          std::to_string(b), std::make_unique<Bottleneck>(in, stage_width(c, s), stage_out(c, s), stride, c));
      block.set_frozen(!stage_trainable(c, s));
      // The lowest trainable block's input gradient is not needed unless the stem trains.
      if (static_cast<int>(s) == first && b == 0 && c.trainable_layers < 5) block.set_input_grad(false);
      stages_.back().push_back(&block);
      in = stage_out(c, s);
    }
  }

  auto& fpn = backbone.register_module("fpn", std::make_unique<nn::Module>());
  auto& inner = fpn.register_module("inner_blocks", std::make_unique<nn::Module>());
  auto& layer = fpn.register_module("layer_blocks", std::make_unique<nn::Module>());
  const std::int64_t F = c.fpn_channels;
  for (std::size_t l = 0; l < 3; ++l) {
    inner_.push_back(&inner.register_module(std::to_string(l), std::make_unique<nn::Module>())
                          .register_module("0", std::make_unique<Conv2d>(stage_out(c, l + 1), F, 1, 1,
                                                                         conv_spec(c, 1, 0), true)));
    layer_.push_back(&layer.register_module(std::to_string(l), std::make_unique<nn::Module>())
                          .register_module("0", std::make_unique<Conv2d>(F, F, 3, 3, conv_spec(c, 1, 1), true)));
  }
  auto& extra = fpn.register_module("extra_blocks", std::make_unique<nn::Module>());
  p6_ = &extra.register_module("p6", std::make_unique<Conv2d>(F, F, 3, 3, conv_spec(c, 2, 1), true));
  p7_ = &extra.register_module("p7", std::make_unique<Conv2d>(F, F, 3, 3, conv_spec(c, 2, 1), true));

  auto& head = register_module("head", std::make_unique<nn::Module>());
  for (int which = 0; which < 2; ++which) {
    auto& h = head.register_module(which == 0 ? "classification_head" : "regression_head",
                                   std::make_unique<nn::Module>());
    auto& tower = h.register_module("conv", std::make_unique<nn::Module>());
    auto& convs = which == 0 ? cls_convs_ : box_convs_;
    for (std::int64_t i = 0; i < c.head_convs; ++i)
      convs.push_back(&tower.register_module(std::to_string(i), std::make_unique<nn::Module>())
                           .register_module("0", std::make_unique<Conv2d>(F, F, 3, 3, conv_spec(c, 1, 1), true)));
    if (which == 0)
      cls_logits_ = &h.register_module("cls_logits", std::make_unique<Conv2d>(
                                                         F, c.num_anchors * c.num_classes, 3, 3, conv_spec(c, 1, 1), true));
    else
      bbox_reg_ = &h.register_module("bbox_reg", std::make_unique<Conv2d>(F, c.num_anchors * 4, 3, 3,
                                                                          conv_spec(c, 1, 1), true));
  }
}

int RetinaNet::first_trainable_stage() const {
  for (int s = 0; s < 4; ++s)
    if (stage_trainable(config_, static_cast<std::size_t>(s))) return s;
  return 4;
}

// Note [RetinaNet architecture]: [N, H*W*A, per_anchor] in (y, x, anchor) order.
Tensor RetinaNet::head_output(const Tensor& y, std::int64_t per_anchor) const {
  const nn::ImageDims d = nn::image_dims(y.shape(), config_.layout, "RetinaNet head");
  const std::int64_t A = config_.num_anchors;
  if (config_.layout == nn::ImageLayout::nhwc) return y.reshape({d.n, d.h * d.w * A, per_anchor});
  return y.view({d.n, A, per_anchor, d.h, d.w})
      .permute({0, 3, 4, 1, 2})
      .contiguous()
      .view({d.n, d.h * d.w * A, per_anchor});
}

Tensor RetinaNet::head_grad(const Tensor& g, std::int64_t h, std::int64_t w, std::int64_t per_anchor) const {
  const std::int64_t A = config_.num_anchors;
  const std::int64_t n = g.size(0);
  BH_CHECK_AS(InvalidArgument, g.dim() == 3 && g.size(1) == h * w * A && g.size(2) == per_anchor,
              "RetinaNet::backward: gradient {} does not match the output [N, {}, {}]",
              shape_str(g.shape()), h * w * A, per_anchor);
  if (config_.layout == nn::ImageLayout::nhwc) return g.contiguous().view({n, h, w, A * per_anchor});
  return g.contiguous()
      .view({n, h, w, A, per_anchor})
      .permute({0, 3, 4, 1, 2})
      .contiguous()
      .view({n, A * per_anchor, h, w});
}

HeadOutputs RetinaNet::forward(const Tensor& images) {
  const RetinaNetConfig& c = config_;
  const nn::ImageDims d = nn::image_dims(images.shape(), c.layout, "RetinaNet::forward");
  BH_CHECK_AS(InvalidArgument, d.c == 3, "RetinaNet::forward: images must have 3 channels, got {}",
              shape_str(images.shape()));
  const bool train = is_training();
  have_forward_ = false;
  const bool stem_trains = train && c.trainable_layers >= 5;
  // Frozen parts keep nothing (Note [Frozen layers]); train() on the model re-enables them.
  if (train)
    for (std::size_t s = 0; s < 4; ++s)
      if (!stage_trainable(c, s))
        for (Bottleneck* b : stages_[s]) b->train(false);
  if (!stem_trains) {
    stem_bn_->train(false);
    stem_pool_->train(false);
  }

  Tensor h = stem_pool_->forward(stem_bn_->forward(run_conv(*stem_conv_, images, stem_trains)));
  std::vector<Tensor> feats;
  for (std::size_t s = 0; s < 4; ++s) {
    for (Bottleneck* b : stages_[s]) h = b->forward(h);
    if (s > 0) feats.push_back(h);
  }

  // FPN, top-down.
  std::vector<Tensor> merged(3), p(kLevels);
  Tensor last = inner_[2]->apply(feats[2]);
  merged[2] = last;
  p[2] = layer_[2]->apply(last);
  for (int l = 1; l >= 0; --l) {
    Tensor lateral = inner_[l]->apply(feats[l]);
    const nn::ImageDims ld = nn::image_dims(lateral.shape(), c.layout, "RetinaNet FPN");
    nn::add_(lateral, nn::upsample_nearest2d_forward(last, ld.h, ld.w, c.layout));
    last = lateral;
    merged[l] = last;
    p[l] = layer_[l]->apply(last);
  }
  p[3] = p6_->apply(p[2]);
  const Tensor relu_p6 = nn::relu(p[3]);
  p[4] = p7_->apply(relu_p6);

  HeadOutputs out;
  std::vector<std::vector<Tensor>> cls_acts(kLevels), box_acts(kLevels);
  for (int l = 0; l < kLevels; ++l) {
    const nn::ImageDims pd = nn::image_dims(p[l].shape(), c.layout, "RetinaNet head");
    out.grid_sizes.emplace_back(pd.h, pd.w);
    for (int which = 0; which < 2; ++which) {
      auto& acts = which == 0 ? cls_acts[l] : box_acts[l];
      const auto& convs = which == 0 ? cls_convs_ : box_convs_;
      Tensor t = p[l];
      acts.push_back(t);
      for (Conv2d* cv : convs) {
        t = nn::relu(cv->apply(t));
        acts.push_back(t);
      }
      if (which == 0)
        out.cls_logits.push_back(head_output(cls_logits_->apply(t), c.num_classes));
      else
        out.bbox_deltas.push_back(head_output(bbox_reg_->apply(t), 4));
    }
  }
  if (train) {
    c_ = std::move(feats);
    merged_ = std::move(merged);
    p5_ = p[2];
    relu_p6_ = relu_p6;
    cls_acts_ = std::move(cls_acts);
    box_acts_ = std::move(box_acts);
    grids_ = out.grid_sizes;
    have_forward_ = true;
  }
  return out;
}

void RetinaNet::backward(const std::vector<Tensor>& dcls, const std::vector<Tensor>& dbox) {
  const RetinaNetConfig& c = config_;
  BH_CHECK_AS(InvalidArgument, have_forward_,
              "RetinaNet::backward: needs a forward() in training mode before it");
  BH_CHECK_AS(InvalidArgument, dcls.size() == kLevels && dbox.size() == kLevels,
              "RetinaNet::backward: expected {} levels of gradients, got {} and {}", kLevels,
              dcls.size(), dbox.size());
  have_forward_ = false;

  // Head, per level; the shared parameters' gradients accumulate over the levels.
  std::vector<Tensor> dp(kLevels);
  for (int l = 0; l < kLevels; ++l) {
    const auto [gh, gw] = grids_[static_cast<std::size_t>(l)];
    for (int which = 0; which < 2; ++which) {
      auto& acts = which == 0 ? cls_acts_[l] : box_acts_[l];
      const auto& convs = which == 0 ? cls_convs_ : box_convs_;
      const Tensor g = which == 0 ? head_grad(dcls[l], gh, gw, c.num_classes) : head_grad(dbox[l], gh, gw, 4);
      Tensor dt = (which == 0 ? *cls_logits_ : *bbox_reg_).apply_backward(g, acts.back(), true);
      for (std::size_t i = convs.size(); i-- > 0;) {
        dt = relu_mask(dt, acts[i + 1]);
        dt = convs[i]->apply_backward(dt, acts[i], true);
      }
      accumulate(dp[l], dt);
    }
  }
  cls_acts_.clear();
  box_acts_.clear();

  // FPN extra levels: P7 = p7(relu(P6)), P6 = p6(P5).
  Tensor drelu6 = p7_->apply_backward(dp[4], relu_p6_, true);
  accumulate(dp[3], relu_mask(drelu6, relu_p6_));
  accumulate(dp[2], p6_->apply_backward(dp[3], p5_, true));
  relu_p6_ = p5_ = Tensor();

  // FPN top-down path in reverse: merged[l] = lateral(C_l) + up(merged[l + 1]).
  std::vector<Tensor> dc(3);
  Tensor dmerged;  // gradient reaching merged[l] from the finer level
  for (int l = 0; l < 3; ++l) {
    Tensor dm = layer_[l]->apply_backward(dp[l], merged_[l], true);
    if (dmerged.defined()) nn::add_(dm, dmerged);
    dc[l] = inner_[l]->apply_backward(dm, c_[l], stage_trainable(c, static_cast<std::size_t>(l + 1)));
    if (l < 2) dmerged = nn::upsample_nearest2d_backward(dm, merged_[l + 1].shape(), c.layout);
  }
  merged_.clear();
  c_.clear();

  // Backbone, from layer4 down to the lowest trainable stage (Note [Frozen layers]).
  const int first = first_trainable_stage();
  Tensor d;
  for (int s = 3; s >= first; --s) {
    if (s >= 1) accumulate(d, dc[static_cast<std::size_t>(s - 1)]);
    for (auto it = stages_[static_cast<std::size_t>(s)].rbegin(); it != stages_[static_cast<std::size_t>(s)].rend(); ++it)
      d = (*it)->backward(d);
  }
  if (c.trainable_layers >= 5) stem_conv_->backward(stem_bn_->backward(stem_pool_->backward(d)));
  // The backbone's Conv2d layers mark their own parameters; the FPN's and head's are final now.
  for (nn::Parameter* p : parameters())
    if (p->name.rfind("backbone.fpn.", 0) == 0 || p->name.rfind("head.", 0) == 0) p->mark_grad_ready();
}

std::vector<nn::Parameter*> RetinaNet::trainable_parameters() {
  std::vector<nn::Parameter*> out;
  for (nn::Parameter* p : parameters()) {
    if (p->name == "backbone.body.conv1.weight" && config_.trainable_layers < 5) continue;
    bool frozen = false;
    for (std::size_t s = 0; s < 4; ++s)
      if (!stage_trainable(config_, s) &&
          p->name.rfind(fmt::format("backbone.body.layer{}.", s + 1), 0) == 0)
        frozen = true;
    if (!frozen) out.push_back(p);
  }
  return out;
}

void RetinaNet::initialize(std::uint64_t seed) {
  auto ends_with = [](const std::string& s, const char* suffix) {
    const std::string t(suffix);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  const float prior = 0.01f;
  for (nn::Parameter* p : parameters()) {
    Rng rng = nn::init::rng_for(seed, p->name);
    const bool bias = ends_with(p->name, ".bias");
    if (p->name.rfind("backbone.body.", 0) == 0) {
      nn::init::kaiming_normal_(p->value, rng, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu);
    } else if (p->name.rfind("backbone.fpn.", 0) == 0) {
      if (bias)
        nn::init::zeros_(p->value);
      else  // kaiming_uniform_(a=1): gain sqrt(2 / (1 + 1)) = 1, fan_in
        nn::init::kaiming_uniform_(p->value, rng, nn::init::FanMode::fan_in,
                                   nn::init::Nonlinearity::leaky_relu, 1.0f);
    } else if (bias) {
      const bool cls = p->name == "head.classification_head.cls_logits.bias";
      nn::init::constant_(p->value, cls ? -std::log((1.0f - prior) / prior) : 0.0f);
    } else {
      nn::init::normal_(p->value, rng, 0.0f, 0.01f);
    }
  }
  for (auto& [name, buffer] : buffers()) {
    const bool one = ends_with(name, ".running_var") || ends_with(name, ".weight");
    nn::init::constant_(*buffer, one ? 1.0f : 0.0f);
  }
}

void RetinaNet::load_backbone(const std::string& path) {
  nn::load_pretrained_part(*this, path, "backbone.body.", "RetinaNet::load_backbone (torchvision resnext50_32x4d state_dict names)");
}

double RetinaNet::forward_macs(std::int64_t h, std::int64_t w) const { return count_macs(h, w, false); }

double RetinaNet::frozen_forward_macs(std::int64_t h, std::int64_t w) const { return count_macs(h, w, true); }

// All multiply-adds of the forward pass, or only those of the frozen backbone part: the stem when
// trainable_layers < 5, and stage s (layer s+1) when s < 4 - trainable_layers (torchvision's
// layers_to_train order: layer4, layer3, layer2, layer1, conv1).
double RetinaNet::count_macs(std::int64_t h, std::int64_t w, bool frozen_only) const {
  const RetinaNetConfig& c = config_;
  auto out = [](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t pad) {
    return (in + 2 * pad - k) / s + 1;
  };
  auto conv_macs = [](std::int64_t oh, std::int64_t ow, std::int64_t in, std::int64_t o, std::int64_t k,
                      std::int64_t groups) {
    return static_cast<double>(oh) * ow * o * (in / groups) * k * k;
  };
  double macs = 0, frozen = 0;
  h = out(h, 7, 2, 3);
  w = out(w, 7, 2, 3);
  macs += conv_macs(h, w, 3, c.stem_channels, 7, 1);
  if (c.trainable_layers < 5) frozen = macs;
  h = out(h, 3, 2, 1);
  w = out(w, 3, 2, 1);
  std::int64_t in = c.stem_channels;
  std::vector<std::pair<std::int64_t, std::int64_t>> grid;
  for (std::size_t s = 0; s < 4; ++s) {
    const std::int64_t width = stage_width(c, s), o = stage_out(c, s);
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      const std::int64_t oh = out(h, 3, stride, 1), ow = out(w, 3, stride, 1);
      double block = conv_macs(h, w, in, width, 1, 1);
      block += conv_macs(oh, ow, width, width, 3, c.groups);
      block += conv_macs(oh, ow, width, o, 1, 1);
      if (stride != 1 || in != o) block += conv_macs(oh, ow, in, o, 1, 1);
      macs += block;
      if (static_cast<std::int64_t>(s) < 4 - c.trainable_layers) frozen += block;
      h = oh;
      w = ow;
      in = o;
    }
    if (s > 0) {
      const std::int64_t F = c.fpn_channels;
      macs += conv_macs(h, w, o, F, 1, 1) + conv_macs(h, w, F, F, 3, 1);  // lateral + output
      grid.emplace_back(h, w);
    }
  }
  for (int e = 0; e < 2; ++e) {  // P6, P7
    const std::int64_t oh = out(grid.back().first, 3, 2, 1), ow = out(grid.back().second, 3, 2, 1);
    macs += conv_macs(oh, ow, c.fpn_channels, c.fpn_channels, 3, 1);
    grid.emplace_back(oh, ow);
  }
  const std::int64_t F = c.fpn_channels;
  for (const auto& [gh, gw] : grid) {
    macs += 2.0 * static_cast<double>(c.head_convs) * conv_macs(gh, gw, F, F, 3, 1);
    macs += conv_macs(gh, gw, F, c.num_anchors * c.num_classes, 3, 1);
    macs += conv_macs(gh, gw, F, c.num_anchors * 4, 3, 1);
  }
  return frozen_only ? frozen : macs;
}

// ---------------------------------------------------------------------------------------------

namespace {

std::int64_t count(const RetinaNetConfig& c, bool trainable_only) {
  check_config(c);
  std::int64_t n = 0;
  if (!trainable_only || c.trainable_layers >= 5) n += conv_params(3, c.stem_channels, 7, 1, false);
  std::int64_t in = c.stem_channels;
  for (std::size_t s = 0; s < 4; ++s) {
    const std::int64_t width = stage_width(c, s), o = stage_out(c, s);
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      std::int64_t block = conv_params(in, width, 1, 1, false) + conv_params(width, width, 3, c.groups, false) +
                           conv_params(width, o, 1, 1, false);
      if (stride != 1 || in != o) block += conv_params(in, o, 1, 1, false);
      if (!trainable_only || stage_trainable(c, s)) n += block;
      in = o;
    }
  }
  const std::int64_t F = c.fpn_channels;
  for (std::size_t s = 1; s < 4; ++s) n += conv_params(stage_out(c, s), F, 1, 1, true) + conv_params(F, F, 3, 1, true);
  n += 2 * conv_params(F, F, 3, 1, true);
  n += 2 * c.head_convs * conv_params(F, F, 3, 1, true);
  n += conv_params(F, c.num_anchors * c.num_classes, 3, 1, true) + conv_params(F, c.num_anchors * 4, 3, 1, true);
  return n;
}

}  // namespace

std::int64_t count_parameters(const RetinaNetConfig& config) { return count(config, false); }
std::int64_t count_trainable_parameters(const RetinaNetConfig& config) { return count(config, true); }

}  // namespace benchhost::retinanet
