// The RetinaNet model (plugins/retinanet/model.hpp): sizes against the reference's published
// counts, grid sizes at 800x800, output layout, the composed backward against finite
// differences on a tiny configuration in both layouts (frozen parts get no gradient), weights
// loading, and the PyTorch peer comparison (tools/peers/retinanet_peer.py; skipped visibly
// without torch/torchvision).

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "benchhost/nn/init.hpp"
#include "benchhost/nn/serialize.hpp"
#include "common/gradcheck.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::retinanet;
using benchhost::testing::random_tensor;
namespace fs = std::filesystem;

RetinaNetConfig tiny(nn::ImageLayout layout) {
  RetinaNetConfig c;
  c.blocks = {1, 1, 1, 1};
  c.groups = 4;
  c.width_per_group = 2;
  c.stem_channels = 8;
  c.fpn_channels = 8;
  c.num_classes = 3;
  c.num_anchors = 2;
  c.head_convs = 1;
  c.layout = layout;
  return c;
}

std::int64_t count_prefix(RetinaNet& m, const std::string& prefix) {
  std::int64_t n = 0;
  for (nn::Parameter* p : m.parameters())
    if (p->name.rfind(prefix, 0) == 0) n += p->value.numel();
  return n;
}

TEST(RetinaNetModel, ReferenceParameterCounts) {
  const RetinaNetConfig c;
  EXPECT_EQ(count_parameters(c), 37060652);
  EXPECT_EQ(count_trainable_parameters(c), 36849004);
  RetinaNet m(c);
  EXPECT_EQ(m.num_parameters(), 37060652);
  std::int64_t trainable = 0;
  for (nn::Parameter* p : m.trainable_parameters()) trainable += p->value.numel();
  EXPECT_EQ(trainable, 36849004);
  EXPECT_EQ(count_prefix(m, "backbone.fpn."), 3868672);
  EXPECT_EQ(count_prefix(m, "head."), 10280300);
  EXPECT_EQ(count_prefix(m, "backbone.body.layer1.") + count_prefix(m, "backbone.body.conv1."), 211648);
  std::int64_t buffer_values = 0;
  for (auto& [name, t] : m.buffers())
    if (name.size() > 7 && (name.ends_with(".weight") || name.ends_with(".bias"))) buffer_values += t->numel();
  EXPECT_EQ(buffer_values, 68224);  // FrozenBN affine values (the reference doc)
  // torchvision's names.
  std::set<std::string> names;
  for (nn::Parameter* p : m.parameters()) names.insert(p->name);
  for (const char* n : {"backbone.body.conv1.weight", "backbone.body.layer2.0.conv2.weight",
                        "backbone.body.layer2.0.downsample.0.weight", "backbone.fpn.inner_blocks.0.0.weight",
                        "backbone.fpn.inner_blocks.2.0.bias", "backbone.fpn.layer_blocks.1.0.weight",
                        "backbone.fpn.extra_blocks.p6.weight", "backbone.fpn.extra_blocks.p7.bias",
                        "head.classification_head.conv.0.0.weight", "head.classification_head.conv.3.0.bias",
                        "head.classification_head.cls_logits.bias", "head.regression_head.bbox_reg.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  std::set<std::string> buffers;
  for (auto& [name, t] : m.buffers()) buffers.insert(name);
  EXPECT_TRUE(buffers.count("backbone.body.bn1.running_mean"));
  EXPECT_TRUE(buffers.count("backbone.body.layer3.5.bn2.weight"));
  // Grouped 3x3: layer2's width 256 in 32 groups.
  for (nn::Parameter* p : m.parameters())
    if (p->name == "backbone.body.layer2.0.conv2.weight") EXPECT_EQ(p->value.shape(), (Shape{256, 8, 3, 3}));
}

TEST(RetinaNetModel, TinyCountsAgree) {
  // torchvision's count of the same pieces (retinanet_peer.py count with the tiny options).
  EXPECT_EQ(count_parameters(tiny(nn::ImageLayout::nhwc)), 97974);
  EXPECT_EQ(count_trainable_parameters(tiny(nn::ImageLayout::nhwc)), 96078);
  for (std::int64_t t : {0, 3, 5}) {
    RetinaNetConfig c = tiny(nn::ImageLayout::nhwc);
    c.trainable_layers = t;
    RetinaNet m(c);
    EXPECT_EQ(m.num_parameters(), count_parameters(c));
    std::int64_t trainable = 0;
    for (nn::Parameter* p : m.trainable_parameters()) trainable += p->value.numel();
    EXPECT_EQ(trainable, count_trainable_parameters(c)) << t;
  }
}

TEST(RetinaNetModel, GridSizesAt800AndForwardMacs) {
  // The full model at 800x800 costs a lot of CPU time; the grids follow from the convolution
  // arithmetic, checked here on a narrow model with the same strides.
  RetinaNetConfig c = tiny(nn::ImageLayout::nhwc);
  RetinaNet m(c);
  m.initialize(1);
  m.train(false);
  const HeadOutputs out = m.forward(random_tensor({1, 800, 800, 3}, 2));
  const std::vector<std::pair<std::int64_t, std::int64_t>> want{{100, 100}, {50, 50}, {25, 25}, {13, 13}, {7, 7}};
  EXPECT_EQ(out.grid_sizes, want);
  std::int64_t anchors = 0;
  for (std::size_t l = 0; l < 5; ++l) {
    anchors += out.cls_logits[l].size(1);
    EXPECT_EQ(out.cls_logits[l].shape(), (Shape{1, want[l].first * want[l].second * 2, 3}));
    EXPECT_EQ(out.bbox_deltas[l].shape(), (Shape{1, want[l].first * want[l].second * 2, 4}));
  }
  EXPECT_EQ(anchors / 2 * 9, 120087);  // sum H*W*9 with the reference's 9 anchors
  // The reference's MACs at 800x800: 201,208,394,752, counted by forward hooks on every
  // nn.Conv2d of the torchvision model (tools/peers/retinanet_peer.py macs --size 800,800);
  // RetinaNetPeer.ForwardMacsMatchTorchvisionHooks checks other sizes and configs when torch is
  // installed.
  EXPECT_EQ(RetinaNet(RetinaNetConfig{}).forward_macs(800, 800), 201208394752.0);
}

void randomize(RetinaNet& m, std::uint64_t seed);

// The nearest upsampling inside the FPN at an odd ratio, seen through the outputs: at 400x400
// C5 is 13x13 and C4 25x25. With the lateral conv of C4 zero, the FPN output convs of P4 and P5
// identities (centre tap), no head convs and bbox_reg passing channel j to every anchor's
// coordinate j, the regression output at level P4 (y, x) equals P5's at (s(y), s(x)) exactly,
// with s torch's rule: rows 22, 23 read row 11 and row 24 reads row 12.
TEST(RetinaNetModel, OddUpsamplingInsideTheFpn) {
  for (nn::ImageLayout layout : {nn::ImageLayout::nchw, nn::ImageLayout::nhwc}) {
    RetinaNetConfig c = tiny(layout);
    c.head_convs = 0;
    RetinaNet m(c);
    randomize(m, 3);
    const std::int64_t F = c.fpn_channels, A = c.num_anchors;
    auto identity = [&](Tensor& w, std::int64_t out_per_in) {  // w [O, F, 3, 3]
      nn::init::zeros_(w);
      float* p = w.data<float>();
      for (std::int64_t o = 0; o < w.size(0); ++o) p[((o * F + o / out_per_in) * 3 + 1) * 3 + 1] = 1.0f;
    };
    for (nn::Parameter* p : m.parameters()) {
      const std::string& n = p->name;
      if (n.rfind("backbone.fpn.inner_blocks.1.", 0) == 0 || n == "backbone.fpn.layer_blocks.1.0.bias" ||
          n == "backbone.fpn.layer_blocks.2.0.bias" || n == "head.regression_head.bbox_reg.bias")
        nn::init::zeros_(p->value);
      if (n == "backbone.fpn.layer_blocks.1.0.weight" || n == "backbone.fpn.layer_blocks.2.0.weight")
        identity(p->value, 1);
      if (n == "head.regression_head.bbox_reg.weight") {  // output a*4 + j <- channel j
        nn::init::zeros_(p->value);
        float* w = p->value.data<float>();
        for (std::int64_t a = 0; a < A; ++a)
          for (std::int64_t j = 0; j < 4; ++j) w[(((a * 4 + j) * F + j) * 3 + 1) * 3 + 1] = 1.0f;
      }
    }
    m.train(false);
    const HeadOutputs out = m.forward(random_tensor(nn::image_shape({1, 3, 400, 400}, layout), 4));
    ASSERT_EQ(out.grid_sizes[1], (std::pair<std::int64_t, std::int64_t>{25, 25}));
    ASSERT_EQ(out.grid_sizes[2], (std::pair<std::int64_t, std::int64_t>{13, 13}));
    const Tensor& p4 = out.bbox_deltas[1];
    const Tensor& p5 = out.bbox_deltas[2];
    const std::int64_t rows[] = {0, 1, 2, 11, 12, 13, 21, 22, 23, 24};
    const std::int64_t src[] = {0, 0, 1, 5, 6, 6, 10, 11, 11, 12};  // torch: floor(d * float(13/25))
    for (std::size_t r = 0; r < 10; ++r)
      for (std::size_t q = 0; q < 10; ++q)
        for (std::int64_t a = 0; a < A; ++a)
          for (std::int64_t j = 0; j < 4; ++j)
            ASSERT_EQ(p4.item({0, (rows[r] * 25 + rows[q]) * A + a, j}), p5.item({0, (src[r] * 13 + src[q]) * A + a, j}))
                << nn::image_layout_name(layout) << " P4 (" << rows[r] << ", " << rows[q] << ")";
    // Rows 11 and 12 of P5 differ, so reading 11 (torch) rather than 12 (the half-pixel rule,
    // floor((23 + 0.5) * 13 / 25) = 12) for P4's row 23 is a visible choice.
    bool differs = false;
    for (std::int64_t x = 0; x < 13; ++x)
      differs |= p5.item({0, (11 * 13 + x) * A, 0}) != p5.item({0, (12 * 13 + x) * A, 0});
    EXPECT_TRUE(differs);
  }
}

// Set every parameter and FrozenBN buffer to well-scaled random values (initialize()'s head
// weights of std 0.01 would make the finite differences tiny).
void randomize(RetinaNet& m, std::uint64_t seed) {
  for (nn::Parameter* p : m.parameters()) {
    Rng rng = nn::init::rng_for(seed, p->name);
    if (p->value.dim() == 1) {
      nn::init::uniform_(p->value, rng, -0.1f, 0.1f);
    } else {
      nn::init::kaiming_uniform_(p->value, rng, nn::init::FanMode::fan_in, nn::init::Nonlinearity::relu);
    }
  }
  for (auto& [name, b] : m.buffers()) {
    Rng rng = nn::init::rng_for(seed, name);
    if (name.ends_with("running_var") || name.ends_with(".weight"))
      nn::init::uniform_(*b, rng, 0.6f, 1.4f);
    else
      nn::init::uniform_(*b, rng, -0.2f, 0.2f);
  }
}

double weighted_loss(const HeadOutputs& o, const std::vector<Tensor>& rc, const std::vector<Tensor>& rb) {
  double s = 0;
  for (std::size_t l = 0; l < 5; ++l) {
    const float* a = o.cls_logits[l].contiguous().data<float>();
    const float* b = o.bbox_deltas[l].contiguous().data<float>();
    for (std::int64_t i = 0; i < rc[l].numel(); ++i) s += double(a[i]) * rc[l].data<float>()[i];
    for (std::int64_t i = 0; i < rb[l].numel(); ++i) s += double(b[i]) * rb[l].data<float>()[i];
  }
  return s;
}

void check_gradients(nn::ImageLayout layout) {
  RetinaNetConfig c = tiny(layout);
  RetinaNet m(c);
  randomize(m, 5);
  // 48x48: C3 6x6, C4 3x3, C5 2x2, so the top-down path upsamples 2 -> 3 and 3 -> 6 (odd
  // ratios); one small image keeps the ReLU kinks few (Note [Piecewise-linear finite differences]).
  const Tensor img = random_tensor(nn::image_shape({1, 3, 48, 48}, layout), 6);
  m.train(true);
  HeadOutputs out = m.forward(img);
  std::vector<Tensor> rc, rb;
  for (std::size_t l = 0; l < 5; ++l) {
    rc.push_back(random_tensor(out.cls_logits[l].shape(), 100 + l));
    rb.push_back(random_tensor(out.bbox_deltas[l].shape(), 200 + l));
  }
  m.zero_grad();
  m.backward(rc, rb);

  std::set<std::string> trainable;
  for (nn::Parameter* p : m.trainable_parameters()) trainable.insert(p->name);
  int checked_params = 0;
  std::int64_t checks_total = 0, mismatches = 0;
  double err2 = 0, ref2 = 0;
  for (nn::Parameter* p : m.parameters()) {
    const std::vector<float> g = p->grad.to_float_vector();
    if (!trainable.count(p->name)) {  // frozen: conv1, layer1
      for (float v : g) ASSERT_EQ(v, 0.0f) << p->name;
      EXPECT_TRUE(p->name.rfind("backbone.body.conv1.", 0) == 0 || p->name.rfind("backbone.body.layer1.", 0) == 0)
          << p->name;
      continue;
    }
    ++checked_params;
    // Note [Finite differences through many ReLUs]
    // The loss is piecewise linear in any one weight (with the ReLU pattern fixed, every output
    // is affine in it), with kinks wherever a unit downstream changes sign. A backbone weight
    // feeds thousands of units, so a step of 1e-2 crosses a few kinks and its central
    // difference is off by those units' contributions (a few elements in a hundred, by 5-30%);
    // smaller steps drown in f32 rounding (the loss, ~140, moves ~2e-5 between evaluations, so a
    // 5e-4 step is already 3% noise). So each element is checked at 1e-2 with fp32 tolerances,
    // and the test asks that almost all agree and that the aggregate error is small: a wrong
    // backward (a missing term, a transposed layout, an unaccumulated level) moves most
    // elements of a parameter, not a few.
    float* w = p->value.data<float>();
    const std::int64_t n = p->value.numel();
    const std::int64_t checks = std::min<std::int64_t>(n, 6);
    for (std::int64_t k = 0; k < checks; ++k) {
      const std::int64_t i = (k * 7919 + 13) % n;
      const float saved = w[i];
      const float eps = 1e-2f;
      w[i] = saved + eps;
      const double up = static_cast<double>(w[i]) - saved;  // the steps actually taken in f32
      const double lp = weighted_loss(m.forward(img), rc, rb);
      w[i] = saved - eps;
      const double down = saved - static_cast<double>(w[i]);
      const double lm = weighted_loss(m.forward(img), rc, rb);
      w[i] = saved;
      const double numeric = (lp - lm) / (up + down);
      ++checks_total;
      err2 += (g[i] - numeric) * (g[i] - numeric);
      ref2 += numeric * numeric;
      if (std::fabs(g[i] - numeric) > 5e-3 + 3e-2 * std::fabs(numeric)) {
        ++mismatches;
        fmt::print("  (kink?) {}[{}] {}: analytic {:.6g}, central difference {:.6g}\n", p->name, i,
                   nn::image_layout_name(layout), g[i], numeric);
      }
    }
  }
  EXPECT_LE(mismatches * 20, checks_total) << mismatches << " of " << checks_total << " elements disagree";
  EXPECT_LT(std::sqrt(err2 / ref2), 3e-2) << "relative L2 error over " << checks_total << " elements";
  EXPECT_EQ(checked_params, static_cast<int>(trainable.size()));
  EXPECT_GT(checked_params, 20);
}

TEST(RetinaNetModel, BackwardMatchesFiniteDifferencesNhwc) { check_gradients(nn::ImageLayout::nhwc); }
TEST(RetinaNetModel, BackwardMatchesFiniteDifferencesNchw) { check_gradients(nn::ImageLayout::nchw); }

TEST(RetinaNetModel, LayoutsAgree) {
  RetinaNet a(tiny(nn::ImageLayout::nchw)), b(tiny(nn::ImageLayout::nhwc));
  randomize(a, 8);
  randomize(b, 8);
  const Tensor img = random_tensor({2, 3, 48, 40}, 9);
  a.train(false);
  b.train(false);
  const HeadOutputs oa = a.forward(img), ob = b.forward(img.permute({0, 2, 3, 1}).contiguous());
  for (std::size_t l = 0; l < 5; ++l) {
    EXPECT_LT(benchhost::testing::max_abs_diff(oa.cls_logits[l], ob.cls_logits[l]), 1e-4) << l;
    EXPECT_LT(benchhost::testing::max_abs_diff(oa.bbox_deltas[l], ob.bbox_deltas[l]), 1e-4) << l;
  }
}

TEST(RetinaNetModel, InitializationMatchesReference) {
  RetinaNet m(RetinaNetConfig{});
  m.initialize(7);
  for (nn::Parameter* p : m.parameters()) {
    const std::vector<float> v = p->value.to_float_vector();
    double sum = 0, sq = 0;
    for (float x : v) {
      sum += x;
      sq += double(x) * x;
    }
    const double mean = sum / v.size(), stdev = std::sqrt(std::max(0.0, sq / v.size() - mean * mean));
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    if (p->name == "head.classification_head.cls_logits.bias") {
      EXPECT_NEAR(v[0], -std::log(99.0), 1e-5);
      EXPECT_EQ(*lo, *hi);
    } else if (p->name == "head.regression_head.bbox_reg.weight" || p->name == "head.classification_head.conv.2.0.weight") {
      EXPECT_NEAR(stdev, 0.01, 5e-4) << p->name;
    } else if (p->name == "backbone.fpn.layer_blocks.0.0.weight") {
      EXPECT_NEAR(stdev, 1.0 / std::sqrt(256.0 * 9.0), 2e-4) << p->name;  // U(+-sqrt(3/fan_in))
    } else if (p->name == "backbone.body.layer3.0.conv3.weight") {
      EXPECT_NEAR(stdev, std::sqrt(2.0 / 1024.0), 2e-3) << p->name;  // fan_out = 1024 * 1 * 1
    } else if (p->name.ends_with(".bias")) {
      EXPECT_EQ(*lo, 0.0f) << p->name;
      EXPECT_EQ(*hi, 0.0f) << p->name;
    }
  }
  for (auto& [name, t] : m.buffers()) {
    const float want = (name.ends_with(".weight") || name.ends_with("running_var")) ? 1.0f : 0.0f;
    for (float x : t->to_float_vector()) ASSERT_EQ(x, want) << name;
  }
}

TEST(RetinaNetModel, LoadBackboneFromTorchvisionNames) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_retinanet_model_{}", ::getpid());
  fs::create_directories(dir);
  RetinaNetConfig c = tiny(nn::ImageLayout::nhwc);
  RetinaNet src(c), dst(c);
  randomize(src, 11);
  dst.initialize(12);
  std::vector<nn::NamedTensor> file;
  const std::string prefix = "backbone.body.";
  for (nn::Parameter* p : src.parameters())
    if (p->name.rfind(prefix, 0) == 0) file.push_back({p->name.substr(prefix.size()), p->value});
  for (auto& [name, t] : src.buffers())
    if (name.rfind(prefix, 0) == 0) file.push_back({name.substr(prefix.size()), *t});
  file.push_back({"fc.weight", random_tensor({10, 256}, 1)});
  const std::string path = (dir / "backbone.bhw").string();
  nn::save_tensors(path, file);
  dst.load_backbone(path);
  std::map<std::string, Tensor*> dst_buffers;
  for (auto& [name, t] : dst.buffers()) dst_buffers[name] = t;
  for (auto& [name, t] : src.buffers())
    EXPECT_EQ(benchhost::testing::max_abs_diff(*t, *dst_buffers[name]), 0.0) << name;
  auto params_of = [](RetinaNet& m) {
    std::map<std::string, Tensor> out;
    for (nn::Parameter* p : m.parameters()) out[p->name] = p->value;
    return out;
  };
  auto ps = params_of(src), pd = params_of(dst);
  for (auto& [name, t] : ps)
    if (name.rfind(prefix, 0) == 0) EXPECT_EQ(benchhost::testing::max_abs_diff(t, pd[name]), 0.0) << name;
    else EXPECT_GT(benchhost::testing::max_abs_diff(t, pd[name]), 0.0) << name;  // FPN/head untouched

  // A missing tensor and a wrong shape: DataError naming the file and the tensor.
  file.erase(file.begin() + 3);
  nn::save_tensors(path, file);
  try {
    dst.load_backbone(path);
    FAIL() << "no error for a missing tensor";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  file.push_back({"conv1.weight", random_tensor({1, 2}, 1)});
  file.erase(file.begin());  // the real conv1.weight
  nn::save_tensors(path, file);
  EXPECT_THROW(dst.load_backbone(path), DataError);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// The PyTorch peer
// ---------------------------------------------------------------------------------------------

bool python_has_torchvision() {
  return std::system("/usr/bin/python3 -c 'import torch, torchvision' > /dev/null 2>&1") == 0;
}

std::string peer_options(const RetinaNetConfig& c) {
  return fmt::format("--blocks {},{},{},{} --groups {} --width-per-group {} --stem-channels {} --fpn-channels {} "
                     "--num-classes {} --num-anchors {} --head-convs {} --trainable-layers {}",
                     c.blocks[0], c.blocks[1], c.blocks[2], c.blocks[3], c.groups, c.width_per_group,
                     c.stem_channels, c.fpn_channels, c.num_classes, c.num_anchors, c.head_convs, c.trainable_layers);
}

double rel_l2(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_float_vector(), vb = b.to_float_vector();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    num += (double(va[i]) - vb[i]) * (double(va[i]) - vb[i]);
    den += double(vb[i]) * vb[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Our forward against the peer's; with `backward`, also every trainable parameter's gradient
// from the same random output gradients (autograd there, our explicit backward here).
void compare_with_peer(const RetinaNetConfig& c, std::int64_t n, std::int64_t hw, const char* tag,
                       bool backward = false) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_retinanet_peer_{}_{}", tag, ::getpid());
  fs::create_directories(dir);
  RetinaNet m(c);
  randomize(m, 21);
  const std::string weights = (dir / "weights.bhw").string();
  nn::save_weights(m, weights);
  const Tensor images = random_tensor({n, 3, hw, hw}, 22, -2.0f, 2.0f);  // NCHW for the peer
  const std::string images_path = (dir / "images.bhw").string();
  nn::save_tensors(images_path, {{"images", images}});
  const fs::path script = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "retinanet_peer.py";
  const std::string out_path = (dir / "out.bhw").string();
  const std::string cmd = fmt::format(
      "/usr/bin/python3 '{}' forward --weights '{}' --images '{}' --out '{}' {}", script.string(), weights,
      images_path, out_path, peer_options(c));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, Tensor> peer;
  for (auto& t : nn::load_tensors(out_path)) peer[t.name] = t.tensor;
  m.train(false);
  const Tensor input = c.layout == nn::ImageLayout::nhwc ? images.permute({0, 2, 3, 1}).contiguous() : images;
  const HeadOutputs ours = m.forward(input);
  for (std::size_t l = 0; l < 5; ++l) {
    for (int which = 0; which < 2; ++which) {
      const Tensor& a = which == 0 ? ours.cls_logits[l] : ours.bbox_deltas[l];
      const std::string name = fmt::format("{}.{}", which == 0 ? "cls_logits" : "bbox_regression", l);
      ASSERT_TRUE(peer.count(name)) << name;
      const Tensor& b = peer[name];
      ASSERT_EQ(a.shape(), b.shape()) << name;
      const std::vector<float> va = a.to_float_vector(), vb = b.to_float_vector();
      double num = 0, den = 0;
      for (std::size_t i = 0; i < va.size(); ++i) {
        num += (double(va[i]) - vb[i]) * (double(va[i]) - vb[i]);
        den += double(vb[i]) * vb[i];
      }
      EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-4) << tag << " " << name;
    }
  }
  if (backward) {
    m.train(true);
    const HeadOutputs o = m.forward(input);
    std::vector<Tensor> dcls, dbox;
    std::vector<nn::NamedTensor> grads;
    for (std::size_t l = 0; l < 5; ++l) {
      dcls.push_back(random_tensor(o.cls_logits[l].shape(), 300 + l));
      dbox.push_back(random_tensor(o.bbox_deltas[l].shape(), 400 + l));
      grads.push_back({fmt::format("cls_logits.{}", l), dcls.back()});
      grads.push_back({fmt::format("bbox_regression.{}", l), dbox.back()});
    }
    m.zero_grad();
    m.backward(dcls, dbox);
    const std::string grads_path = (dir / "grads.bhw").string(), pgrads_path = (dir / "param_grads.bhw").string();
    nn::save_tensors(grads_path, grads);
    const std::string bcmd = fmt::format(
        "/usr/bin/python3 '{}' backward --weights '{}' --images '{}' --grads '{}' --out '{}' {}", script.string(),
        weights, images_path, grads_path, pgrads_path, peer_options(c));
    ASSERT_EQ(std::system(bcmd.c_str()), 0) << bcmd;
    std::map<std::string, Tensor> pg;
    for (auto& t : nn::load_tensors(pgrads_path)) pg[t.name] = t.tensor;
    std::set<std::string> trainable;
    for (nn::Parameter* p : m.trainable_parameters()) trainable.insert(p->name);
    EXPECT_EQ(pg.size(), trainable.size());
    for (nn::Parameter* p : m.parameters()) {
      if (!trainable.count(p->name)) {
        EXPECT_FALSE(pg.count(p->name)) << p->name << " is frozen here but trained by the peer";
        EXPECT_EQ(benchhost::testing::max_abs_diff(p->grad, Tensor::zeros(p->grad.shape())), 0.0) << p->name;
        continue;
      }
      ASSERT_TRUE(pg.count(p->name)) << p->name;
      EXPECT_LT(rel_l2(p->grad, pg[p->name]), 1e-3) << tag << " gradient of " << p->name;
    }
  }
  fs::remove_all(dir);
}

TEST(RetinaNetPeer, TinyConfigMatchesTorchvision) {
  if (!python_has_torchvision()) GTEST_SKIP() << "/usr/bin/python3 has no torch/torchvision: peer comparison skipped";
  // 96: C5 3 -> C4 6 -> C3 12; 80: C5 3 -> C4 5 (an odd ratio) -> C3 10.
  compare_with_peer(tiny(nn::ImageLayout::nhwc), 2, 96, "tiny_nhwc", true);
  compare_with_peer(tiny(nn::ImageLayout::nchw), 2, 80, "tiny_nchw", true);
  RetinaNetConfig all = tiny(nn::ImageLayout::nhwc);
  all.trainable_layers = 5;
  compare_with_peer(all, 1, 64, "tiny_all_trainable", true);
  RetinaNetConfig none = tiny(nn::ImageLayout::nchw);
  none.trainable_layers = 0;
  compare_with_peer(none, 1, 64, "tiny_backbone_frozen", true);
}

TEST(RetinaNetPeer, ForwardMacsMatchTorchvisionHooks) {
  if (!python_has_torchvision()) GTEST_SKIP() << "/usr/bin/python3 has no torch/torchvision: peer comparison skipped";
  const fs::path script = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "retinanet_peer.py";
  const fs::path out = fs::temp_directory_path() / fmt::format("bh_retinanet_macs_{}.json", ::getpid());
  for (const auto& [c, h, w] : {std::tuple{tiny(nn::ImageLayout::nhwc), 120, 200}, std::tuple{RetinaNetConfig{}, 333, 257}}) {
    const std::string cmd = fmt::format("/usr/bin/python3 '{}' macs --size {},{} {} > '{}'", script.string(), h, w,
                                        peer_options(c), out.string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(out);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto pos = text.find(':');
    ASSERT_NE(pos, std::string::npos) << text;
    EXPECT_EQ(RetinaNet(c).forward_macs(h, w), std::stod(text.substr(pos + 1))) << h << "x" << w;
  }
  fs::remove(out);
}

TEST(RetinaNetPeer, FullModelAt120MatchesTorchvision) {
  if (!python_has_torchvision()) GTEST_SKIP() << "/usr/bin/python3 has no torch/torchvision: peer comparison skipped";
  // 120x120: C3 15, C4 8, C5 4, so the top-down path upsamples 4 -> 8 and 8 -> 15.
  compare_with_peer(RetinaNetConfig{}, 1, 120, "full", true);
}

}  // namespace
