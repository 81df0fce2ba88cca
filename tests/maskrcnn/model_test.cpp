// The Mask R-CNN model: the reference's parameter count and names, the frozen layers, and the
// explicit backward against finite differences on a small configuration.

#include <cmath>
#include <cstdlib>
#include <map>

#include <gtest/gtest.h>

#include "benchhost/nn/ops.hpp"
#include "benchhost/random.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::maskrcnn;

TEST(MaskRcnnModel, ParameterCountIsTheReference) {
  // MLPerf's e2e_mask_rcnn_R_50_FPN_1x: 44,347,573 parameters, 44,125,173 trained (the stem and
  // res2 frozen): body convs 23,454,912, FPN 3,344,384, RPN 593,935, box head 14,310,805, mask
  // head 2,643,537.
  const MaskRcnnConfig c;
  EXPECT_EQ(count_parameters(c), 44347573);
  EXPECT_EQ(count_trainable_parameters(c), 44125173);
  MaskRcnn m(c);
  EXPECT_EQ(m.num_parameters(), 44347573);
  std::int64_t trained = 0;
  std::map<std::string, std::int64_t> part;
  for (nn::Parameter* p : m.trainable_parameters()) trained += p->value.numel();
  for (nn::Parameter* p : m.parameters()) {
    const std::string& n = p->name;
    const std::string key = n.rfind("backbone.body.", 0) == 0 ? "body"
                            : n.rfind("backbone.fpn.", 0) == 0 ? "fpn"
                            : n.rfind("rpn.", 0) == 0          ? "rpn"
                            : n.rfind("roi_heads.box.", 0) == 0 ? "box"
                                                                : "mask";
    part[key] += p->value.numel();
  }
  EXPECT_EQ(trained, 44125173);
  EXPECT_EQ(part["body"], 23454912);
  EXPECT_EQ(part["fpn"], 3344384);
  EXPECT_EQ(part["rpn"], 593935);
  EXPECT_EQ(part["box"], 14310805);
  EXPECT_EQ(part["mask"], 2643537);
  std::map<std::string, Shape> shapes;
  for (nn::Parameter* p : m.parameters()) shapes[p->name] = p->value.shape();
  // maskrcnn_benchmark's state_dict names and shapes (STRIDE_IN_1X1: layer2's stride is in conv1).
  EXPECT_EQ(shapes.at("backbone.body.stem.conv1.weight"), (Shape{64, 3, 7, 7}));
  EXPECT_EQ(shapes.at("backbone.body.layer2.0.conv1.weight"), (Shape{128, 256, 1, 1}));
  EXPECT_EQ(shapes.at("backbone.body.layer4.2.conv3.weight"), (Shape{2048, 512, 1, 1}));
  EXPECT_EQ(shapes.at("backbone.body.layer3.0.downsample.0.weight"), (Shape{1024, 512, 1, 1}));
  EXPECT_EQ(shapes.at("backbone.fpn.fpn_inner4.weight"), (Shape{256, 2048, 1, 1}));
  EXPECT_EQ(shapes.at("backbone.fpn.fpn_layer1.bias"), (Shape{256}));
  EXPECT_EQ(shapes.at("rpn.head.cls_logits.weight"), (Shape{3, 256, 1, 1}));
  EXPECT_EQ(shapes.at("rpn.head.bbox_pred.weight"), (Shape{12, 256, 1, 1}));
  EXPECT_EQ(shapes.at("roi_heads.box.feature_extractor.fc6.weight"), (Shape{1024, 12544}));
  EXPECT_EQ(shapes.at("roi_heads.box.predictor.bbox_pred.weight"), (Shape{324, 1024}));
  EXPECT_EQ(shapes.at("roi_heads.mask.feature_extractor.mask_fcn4.weight"), (Shape{256, 256, 3, 3}));
  EXPECT_EQ(shapes.at("roi_heads.mask.predictor.conv5_mask.weight"), (Shape{256, 256, 2, 2}));
  EXPECT_EQ(shapes.at("roi_heads.mask.predictor.mask_fcn_logits.weight"), (Shape{81, 256, 1, 1}));
  std::int64_t buffers = 0;
  for (auto& [name, t] : m.buffers()) buffers += name.find(".bn") != std::string::npos || name.find("downsample.1") != std::string::npos;
  EXPECT_EQ(buffers, 53 * 4);  // FrozenBatchNorm2d: weight, bias, running_mean, running_var, buffers
}

MaskRcnnConfig small() {
  MaskRcnnConfig c;
  c.blocks = {1, 1, 1, 1};
  c.stem_channels = 4;
  c.fpn_channels = 6;
  c.num_classes = 3;
  c.representation_size = 8;
  c.mask_convs = 1;
  c.mask_channels = 5;
  c.box_resolution = 3;
  c.mask_resolution = 4;
  c.freeze_at = 0;
  return c;
}

Tensor random(const Shape& s, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(s);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(lo, hi);
  return t;
}

double dot(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  double s = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) s += static_cast<double>(x.data<float>()[i]) * y.data<float>()[i];
  return s;
}

// L = sum of fixed random weights times every output (RPN on five levels, both heads on fixed
// RoIs); its gradient through backward() against central differences of L.
TEST(MaskRcnnModel, BackwardMatchesFiniteDifferences) {
  MaskRcnn m(small());
  m.initialize(5);
  Rng rng(11, 0);
  // Finite differences of a network of ReLUs and max pools only agree with its gradient away
  // from the kinks; with positive images, weights and biases every unit is active, so the
  // function is smooth where it is probed (the ReLU masks have their own tests in nn_ops).
  for (nn::Parameter* p : m.parameters()) {
    const bool bias = p->name.size() > 5 && p->name.compare(p->name.size() - 5, 5, ".bias") == 0;
    for (std::int64_t i = 0; i < p->value.numel(); ++i) {
      float& x = p->value.data<float>()[i];
      // Mean 1 / fan-in: every layer keeps its inputs' magnitude (f32 noise stays small).
      if (bias) {
        x = rng.uniform(0.0f, 0.1f);
        continue;
      }
      const auto fan_in = static_cast<float>(p->value.numel() / p->value.size(p->name.find("conv5_mask") != std::string::npos ? 1 : 0));
      x = rng.uniform(0.0f, 2.0f / fan_in);
    }
  }
  for (auto& [name, t] : m.buffers())
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) t->copy_(random(t->shape(), rng, 0.0f, 0.1f));
  const Tensor images = random({2, 3, 64, 64}, rng, 0.1f, 1.0f);
  const Tensor box_rois = Tensor::from_vector({0, 3, 4, 40, 30, 1, 10, 12, 60, 63, 0, 20, 1, 29, 50, 1, 0, 0, 63, 63}, {4, 5});
  const Tensor mask_rois = Tensor::from_vector({1, 5, 6, 33, 41, 0, 12, 2, 62, 24}, {2, 5});
  m.train(true);
  RpnOutputs out = m.forward(images);
  BoxHeadOutputs bo = m.box_head(box_rois);
  Tensor ml = m.mask_head(mask_rois);
  std::vector<Tensor> wo, wd;
  for (std::size_t l = 0; l < out.objectness.size(); ++l) {
    wo.push_back(random(out.objectness[l].shape(), rng));
    wd.push_back(random(out.deltas[l].shape(), rng));
  }
  const Tensor wc = random(bo.class_logits.shape(), rng), wb = random(bo.box_regression.shape(), rng),
               wm = random(ml.shape(), rng);
  auto loss = [&]() {
    m.train(false);
    const RpnOutputs o = m.forward(images);
    const BoxHeadOutputs b = m.box_head(box_rois);
    const Tensor k = m.mask_head(mask_rois);
    double s = dot(b.class_logits, wc) + dot(b.box_regression, wb) + dot(k, wm);
    for (std::size_t l = 0; l < o.objectness.size(); ++l) s += dot(o.objectness[l], wo[l]) + dot(o.deltas[l], wd[l]);
    return s;
  };
  m.zero_grad();
  m.backward(wo, wd, wc, wb, wm);
  // Directional derivatives: per parameter tensor, L along a random +-1 direction v against
  // sum(grad * v) (a single element's finite difference drowns in f32 noise and ReLU kinks).
  // The step: the difference's noise is the loss's f32 rounding divided by it. At 1e-2 that noise
  // was 4% of fpn_inner2.weight's small directional derivative (-0.58) on one AVX-512 machine
  // (estimates -0.54, -0.57 and -0.60 at 1x, 2x and 4x that step); 2e-2 keeps every tensor within
  // 1.8% there.
  int checked = 0, bad = 0;
  const float eps = 2e-2f;
  for (nn::Parameter* p : m.parameters()) {
    Tensor& v = p->value;
    const Tensor keep = v.clone();
    Tensor dir = Tensor::empty(v.shape());
    for (std::int64_t i = 0; i < dir.numel(); ++i) dir.data<float>()[i] = rng.uniform() < 0.5f ? -1.0f : 1.0f;
    const float step = eps / std::sqrt(static_cast<float>(v.numel()));
    auto moved = [&](float t) {
      for (std::int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = keep.data<float>()[i] + t * dir.data<float>()[i];
      return loss();
    };
    const double fd = (moved(step) - moved(-step)) / (2.0 * step);
    v.copy_(keep);
    const double an = dot(p->grad, dir);
    ++checked;
    if (std::fabs(fd - an) > 3e-2 * std::max(1.0, std::fabs(fd))) {
      ++bad;
      ADD_FAILURE() << p->name << ": backward " << an << ", finite difference " << fd;
    }
  }
  EXPECT_GT(checked, 30);
  EXPECT_EQ(bad, 0);
}

TEST(MaskRcnnModel, FrozenLayersGetNoGradient) {
  MaskRcnnConfig c = small();
  c.freeze_at = 2;
  MaskRcnn m(c);
  m.initialize(3);
  for (nn::Parameter* p : m.trainable_parameters()) {
    EXPECT_NE(p->name.rfind("backbone.body.stem.", 0), 0u) << p->name;
    EXPECT_NE(p->name.rfind("backbone.body.layer1.", 0), 0u) << p->name;
  }
  EXPECT_EQ(count_trainable_parameters(c), [&] {
    std::int64_t n = 0;
    for (nn::Parameter* p : m.trainable_parameters()) n += p->value.numel();
    return n;
  }());
  Rng rng(2, 0);
  m.train(true);
  const RpnOutputs out = m.forward(random({1, 3, 64, 64}, rng));
  std::vector<Tensor> dobj, ddel;
  for (std::size_t l = 0; l < out.objectness.size(); ++l) {
    dobj.push_back(random(out.objectness[l].shape(), rng));
    ddel.push_back(random(out.deltas[l].shape(), rng));
  }
  m.zero_grad();
  m.backward(dobj, ddel, Tensor(), Tensor(), Tensor());
  for (nn::Parameter* p : m.parameters()) {
    const bool frozen = p->name.rfind("backbone.body.stem.", 0) == 0 || p->name.rfind("backbone.body.layer1.", 0) == 0;
    double s = 0;
    for (std::int64_t i = 0; i < p->grad.numel(); ++i) s += std::fabs(p->grad.data<float>()[i]);
    if (frozen) EXPECT_EQ(s, 0.0) << p->name;
    if (p->name == "backbone.body.layer2.0.conv1.weight" || p->name == "rpn.head.conv.weight") EXPECT_GT(s, 0.0) << p->name;
  }
}

// Note [Mask R-CNN layout]: the channels-last model computes what the NCHW one does, through the
// same NCHW interface: RPN outputs, both heads, and every trainable gradient (the frozen stem and
// res2 included on the way, as MLPerf freezes them).
TEST(MaskRcnnModel, ChannelsLastComputesWhatNchwDoes) {
  struct Result {
    std::vector<Tensor> outputs, grads;
    std::vector<std::string> names;
  };
  Rng rng(21, 0);
  const Tensor images = random({2, 3, 64, 96}, rng, 0.0f, 1.0f);
  const Tensor box_rois = Tensor::from_vector({0, 3, 4, 40, 30, 1, 10, 12, 90, 63, 0, 20, 1, 29, 50, 1, 0, 0, 95, 63}, {4, 5});
  const Tensor mask_rois = Tensor::from_vector({1, 5, 6, 33, 41, 0, 12, 2, 92, 24}, {2, 5});
  auto run = [&](nn::ImageLayout layout) {
    MaskRcnnConfig c = small();
    c.freeze_at = 2;
    c.layout = layout;
    MaskRcnn m(c);
    m.initialize(7);
    m.train(true);
    const RpnOutputs out = m.forward(images);
    const BoxHeadOutputs bo = m.box_head(box_rois);
    const Tensor ml = m.mask_head(mask_rois);
    Rng g(5, 0);
    Result r;
    std::vector<Tensor> dobj, ddel;
    for (std::size_t l = 0; l < out.objectness.size(); ++l) {
      r.outputs.push_back(out.objectness[l]);
      r.outputs.push_back(out.deltas[l]);
      dobj.push_back(random(out.objectness[l].shape(), g));
      ddel.push_back(random(out.deltas[l].shape(), g));
    }
    r.outputs.insert(r.outputs.end(), {bo.class_logits, bo.box_regression, ml});
    m.zero_grad();
    m.backward(dobj, ddel, random(bo.class_logits.shape(), g), random(bo.box_regression.shape(), g),
               random(ml.shape(), g));
    for (nn::Parameter* p : m.trainable_parameters()) {
      r.grads.push_back(p->grad);
      r.names.push_back(p->name);
    }
    return r;
  };
  const Result a = run(nn::ImageLayout::nchw), b = run(nn::ImageLayout::nhwc);
  auto close = [](const Tensor& x, const Tensor& y) {
    EXPECT_EQ(x.shape(), y.shape());
    if (x.shape() != y.shape()) return false;
    double worst = 0, scale = 1e-6;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(x.data<float>()[i]) - y.data<float>()[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(x.data<float>()[i])));
    }
    return worst <= 1e-4 * scale;  // the same sums in another order
  };
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (std::size_t i = 0; i < a.outputs.size(); ++i) EXPECT_TRUE(close(a.outputs[i], b.outputs[i])) << "output " << i;
  ASSERT_EQ(a.names, b.names);
  for (std::size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(close(a.grads[i], b.grads[i])) << a.names[i];
}

}  // namespace
