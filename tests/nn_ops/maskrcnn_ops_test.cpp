// Mask R-CNN's SDK ops (nn/detection.hpp, the Mask R-CNN section): RoIAlign forward and
// backward (single and multi-level, NCHW and NHWC), the FPN level mapper, smooth-L1 and the mask
// loss, checked against hand computations, the adjoint identity of the linear RoIAlign,
// torchvision 0.14 and PyTorch autograd (tools/peers/maskrcnn_peer.py, run with /usr/bin/python3
// when it has torch and torchvision; those tests skip visibly otherwise), and, on a machine
// with a GPU, the CUDA kernels against the CPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "benchhost/device.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/random.hpp"
#include "common/gradcheck.hpp"
#include "nn_ops/torchvision_peer.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::GradcheckOptions;
using benchhost::testing::max_abs_diff;
using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;
using benchhost::testing::PeerDir;

namespace fs = std::filesystem;

std::vector<std::int64_t> i64_values(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  return std::vector<std::int64_t>(c.data<std::int64_t>(), c.data<std::int64_t>() + c.numel());
}

double dot(const Tensor& a, const Tensor& b) {
  const auto va = a.to_float_vector(), vb = b.to_float_vector();
  double s = 0;
  for (std::size_t i = 0; i < va.size(); ++i) s += static_cast<double>(va[i]) * vb[i];
  return s;
}

// k RoIs over `images` images of extent x extent pixels, sorted by image (torchvision's
// MultiScaleRoIAlign concatenates per-image box lists), sizes from 1 to max_size pixels, some
// crossing the border.
Tensor random_rois(std::int64_t k, std::int64_t images, float extent, float max_size, std::uint64_t seed) {
  Rng r(seed, 51);
  std::vector<float> v;
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t i = 0; i < k / images; ++i) {
      const float x = r.uniform(-0.05f * extent, extent), y = r.uniform(-0.05f * extent, extent);
      const float w = r.uniform(1.0f, max_size), h = r.uniform(1.0f, max_size);
      v.insert(v.end(), {static_cast<float>(b), x, y, x + w, y + h});
    }
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size() / 5), 5});
}

// NCHW <-> NHWC copies.
Tensor to_nhwc(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); }
Tensor to_nchw(const Tensor& t) { return t.permute({0, 3, 1, 2}).contiguous(); }

// ============================================================================================
// RoIAlign by hand and by identities
// ============================================================================================

// On f(y, x) = x + 10 y bilinear interpolation is exact and the 2 x 2 samples of a bin sit
// symmetrically about its centre, so every bin's value is f at the bin centre.
TEST(RoIAlign, LinearFeatureGivesBinCentres) {
  const std::int64_t H = 8, W = 8;
  std::vector<float> f;
  for (std::int64_t y = 0; y < H; ++y)
    for (std::int64_t x = 0; x < W; ++x) f.push_back(static_cast<float>(x) + 10.0f * static_cast<float>(y));
  const Tensor feat = Tensor::from_vector(f, {1, 1, H, W});
  // Image pixels at scale 1/2: feature box (1, 1.5) .. (5, 3.5), 2 x 2 bins of 2 x 1.
  const Tensor rois = Tensor::from_vector({0, 2, 3, 10, 7}, {1, 5});
  RoIAlignSpec spec;
  spec.pooled_h = spec.pooled_w = 2;
  spec.spatial_scales = {0.5f};
  const Tensor out = roi_align_forward({feat}, rois, Tensor(), spec);
  const std::vector<float> want = {2 + 20, 4 + 20, 2 + 30, 4 + 30};
  EXPECT_TRUE(tensors_close(out, Tensor::from_vector(want, {1, 1, 2, 2}), 1e-5, 0));
  // The legacy 1-pixel minimum: a point RoI at (3, 4) becomes a 1 x 1 box from there.
  const Tensor point = Tensor::from_vector({0, 6, 8, 6, 8}, {1, 5});
  spec.pooled_h = spec.pooled_w = 1;
  EXPECT_NEAR(roi_align_forward({feat}, point, Tensor(), spec).data<float>()[0], 3.5f + 10.0f * 4.5f, 1e-5);
  // A RoI wholly beyond the map (samples with x > W) pools zeros.
  const Tensor outside = Tensor::from_vector({0, 40, 40, 60, 60}, {1, 5});
  EXPECT_EQ(roi_align_forward({feat}, outside, Tensor(), spec).data<float>()[0], 0.0f);
}

// RoIAlign is linear in the features, so its backward is its adjoint: <dout, F x> = <B dout, x>.
TEST(RoIAlign, BackwardIsTheAdjointOfForward) {
  for (bool nhwc : {false, true})
    for (std::int64_t sampling : {2, 0}) {
      SCOPED_TRACE(fmt::format("{} sampling {}", nhwc ? "NHWC" : "NCHW", sampling));
      RoIAlignSpec spec;
      spec.pooled_h = 7;
      spec.pooled_w = 5;
      spec.sampling_ratio = sampling;
      spec.channels_last = nhwc;
      spec.spatial_scales = {0.25f, 0.125f, 0.0625f};
      const std::int64_t N = 2, C = 6;
      std::vector<Tensor> feats;
      std::vector<Shape> shapes;
      for (std::int64_t l = 0; l < 3; ++l) {
        const std::int64_t side = 32 >> l;
        const Shape s = nhwc ? Shape{N, side, side + 3, C} : Shape{N, C, side, side + 3};
        feats.push_back(random_tensor(s, 60 + static_cast<std::uint64_t>(l)));
        shapes.push_back(s);
      }
      const Tensor rois = random_rois(30, N, 128.0f, 140.0f, 61);
      LevelMapper m;
      m.k_min = 2;
      m.k_max = 4;
      m.canonical_scale = 56.0f;  // small RoIs, all three levels used
      const Tensor levels = map_roi_levels(rois, m);
      const Tensor out = roi_align_forward(feats, rois, levels, spec);
      const Tensor dout = random_tensor(out.shape(), 62);
      const std::vector<Tensor> grads = roi_align_backward(dout, rois, levels, shapes, spec);
      double rhs = 0;
      for (std::size_t l = 0; l < feats.size(); ++l) rhs += dot(grads[l], feats[l]);
      const double lhs = dot(dout, out);
      EXPECT_NEAR(lhs, rhs, 1e-5 * (std::fabs(lhs) + 1.0));
      const std::vector<std::int64_t> lv = i64_values(levels);
      for (std::int64_t l = 0; l < 3; ++l) EXPECT_GT(std::count(lv.begin(), lv.end(), l), 0) << "level " << l;
    }
}

TEST(RoIAlign, ChannelsLastEqualsChannelsFirst) {
  RoIAlignSpec spec;
  spec.pooled_h = spec.pooled_w = 14;
  spec.spatial_scales = {0.25f, 0.125f};
  const Tensor f0 = random_tensor({2, 16, 24, 20}, 70), f1 = random_tensor({2, 16, 12, 10}, 71);
  const Tensor rois = random_rois(20, 2, 90.0f, 60.0f, 72);
  const Tensor levels = map_roi_levels(rois, LevelMapper{2, 3, 224.0f, 4.0f, 1e-6f, true});
  const Tensor a = roi_align_forward({f0, f1}, rois, levels, spec);
  RoIAlignSpec last = spec;
  last.channels_last = true;
  const Tensor b = roi_align_forward({to_nhwc(f0), to_nhwc(f1)}, rois, levels, last);
  // The NHWC channel loop is vectorised (and may fuse multiply-adds): equal up to f32 rounding.
  EXPECT_TRUE(tensors_close(to_nchw(b), a, 1e-7, 1e-6));
  const Tensor dout = random_tensor(a.shape(), 73);
  const auto ga = roi_align_backward(dout, rois, levels, {f0.shape(), f1.shape()}, spec);
  const auto gb = roi_align_backward(to_nhwc(dout), rois, levels, {to_nhwc(f0).shape(), to_nhwc(f1).shape()}, last);
  for (int l = 0; l < 2; ++l) EXPECT_TRUE(tensors_close(to_nchw(gb[static_cast<std::size_t>(l)]), ga[static_cast<std::size_t>(l)], 1e-7, 1e-6));
}

// Mask R-CNN's box-head pooling at the mini's scale and a slice of the reference's: printed, not
// asserted (bench numbers come from tools/bench_maskrcnn.sh).
TEST(RoIAlign, TimingAtMaskRcnnScale) {
  RoIAlignSpec spec;
  spec.spatial_scales = {0.25f, 0.125f, 0.0625f, 0.03125f};
  std::vector<Tensor> feats;
  std::vector<Shape> shapes;
  for (std::int64_t l = 0; l < 4; ++l) {
    const std::int64_t h = 200 >> l, w = 272 >> l;
    feats.push_back(Tensor::zeros({1, 64, h, w}));
    shapes.push_back(feats.back().shape());
  }
  const Tensor rois = random_rois(512, 1, 800.0f, 500.0f, 180);
  const Tensor levels = map_roi_levels(rois);
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor out = roi_align_forward(feats, rois, levels, spec);
  const auto t1 = std::chrono::steady_clock::now();
  const auto grads = roi_align_backward(out, rois, levels, shapes, spec);
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("[ roi_align timing ] 512 RoIs x 64 channels x 7x7 over P2-P5 of 800x1088: forward %.2f ms, backward %.2f ms\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  EXPECT_EQ(grads.size(), 4u);
}

TEST(RoIAlign, RejectsBadArguments) {
  RoIAlignSpec spec;
  const Tensor f = random_tensor({1, 3, 8, 8}, 80);
  EXPECT_THROW(roi_align_forward({f}, Tensor::from_vector({0, 1, 1, 4, 4}, {1, 5}), Tensor(),
                                 RoIAlignSpec{7, 7, {0.25f, 0.125f}}),
               InvalidArgument);  // two scales, one level
  EXPECT_THROW(roi_align_forward({f}, Tensor::from_vector({1, 1, 1, 4, 4}, {1, 5}), Tensor(), spec), DataError);
  EXPECT_THROW(roi_align_forward({f}, Tensor::from_vector({0, 1, 1, 4}, {1, 4}), Tensor(), spec), InvalidArgument);
  EXPECT_THROW(roi_align_forward({f}, Tensor::from_vector({0, 1, 1, 4, 4}, {1, 5}), Tensor::from_vector_i64({1}, {1}),
                                 spec),
               DataError);  // level 1 of a single level
}

// maskrcnn_benchmark's LevelMapper on hand-picked boxes (the +1 area): a 224-pixel box is on the
// canonical level 4, a 112-pixel box exactly one level down (eps keeps log2(1/2) from rounding to
// just below -1), and the clamps at 2 and 5.
TEST(RoIAlign, LegacyLevelMapperHandCases) {
  const Tensor rois = Tensor::from_vector({0, 0, 0, 223, 223,  0, 10, 10, 121, 121,  0, 0, 0, 447, 447,
                                           0, 0, 0, 15, 15,    0, 0, 0, 2000, 2000,  0, 5, 5, 5, 5},
                                          {6, 5});
  EXPECT_EQ(i64_values(map_roi_levels(rois)), (std::vector<std::int64_t>{2, 1, 3, 0, 3, 0}));
  // torchvision's convention (no +1): the 224 box above is 223 wide, just below level 4.
  LevelMapper tv;
  tv.legacy = false;
  EXPECT_EQ(i64_values(map_roi_levels(rois, tv)), (std::vector<std::int64_t>{1, 0, 2, 0, 3, 0}));
}

// ============================================================================================
// smooth-L1 and the mask loss by hand
// ============================================================================================

TEST(MaskRcnnLosses, SmoothL1HandExample) {
  // d = 0.05 (quadratic at beta 1/9), -0.5 and 2 (linear), 0.
  const Tensor x = Tensor::from_vector({0.05f, -0.5f, 3.0f, 1.0f}, {1, 4});
  const Tensor t = Tensor::from_vector({0.0f, 0.0f, 1.0f, 1.0f}, {1, 4});
  const double beta = 1.0 / 9.0;
  const double want = 0.5 * 0.05 * 0.05 / beta + (0.5 - 0.5 * beta) + (2.0 - 0.5 * beta);
  EXPECT_NEAR(smooth_l1_loss_forward(x, t, static_cast<float>(beta), 0.25f), 0.25 * want, 1e-6);
  const Tensor g = smooth_l1_loss_backward(x, t, static_cast<float>(beta), 0.25f, 2.0f);
  const std::vector<float> gw = {static_cast<float>(0.5 * 0.05 / beta), -0.5f, 0.5f, 0.0f};
  EXPECT_TRUE(tensors_close(g, Tensor::from_vector(gw, {1, 4}), 1e-6, 1e-5));
  // beta 0 is L1.
  EXPECT_NEAR(smooth_l1_loss_forward(x, t, 0.0f), 0.05 + 0.5 + 2.0, 1e-6);
}

// Central finite differences (tests/common/gradcheck.hpp) of both losses and of RoIAlign.
TEST(MaskRcnnLosses, GradientsByFiniteDifferences) {
  using V = std::vector<Tensor>;
  const float beta = 1.0f / 9.0f;
  Tensor x = random_tensor({12, 4}, 190, -1.0f, 1.0f);
  const Tensor t = random_tensor({12, 4}, 191, -1.0f, 1.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) {  // keep |x - t| away from beta and 0 (the kinks)
    const float d = std::fabs(x.data<float>()[i] - t.data<float>()[i]);
    if (std::fabs(d - beta) < 0.03f || d < 0.03f) x.data<float>()[i] += 0.1f;
  }
  EXPECT_GRADCHECK([&](const V& in) { return V{Tensor::from_vector({smooth_l1_loss_forward(in[0], t, beta, 0.3f)}, {1})}; },
                   [&](const V& in, const V& d) {
                     return V{smooth_l1_loss_backward(in[0], t, beta, 0.3f, d[0].data<float>()[0])};
                   },
                   {x}, GradcheckOptions{1e-3, 1e-4, 1e-2});
  const Tensor z = random_tensor({3, 4, 5, 5}, 192, -3.0f, 3.0f);
  const Tensor labels = Tensor::from_vector_i64({1, 3, 1}, {3});
  const Tensor targets = random_tensor({3, 5, 5}, 193, 0.0f, 1.0f);
  EXPECT_GRADCHECK([&](const V& in) { return V{Tensor::from_vector({mask_bce_loss_forward(in[0], labels, targets)}, {1})}; },
                   [&](const V& in, const V& d) {
                     return V{mask_bce_loss_backward(in[0], labels, targets, d[0].data<float>()[0])};
                   },
                   {z}, GradcheckOptions{1e-2, 1e-4, 1e-2});
  RoIAlignSpec spec;
  spec.pooled_h = spec.pooled_w = 3;
  spec.spatial_scales = {0.5f};
  const Tensor rois = random_rois(6, 2, 20.0f, 16.0f, 194);
  EXPECT_GRADCHECK([&](const V& in) { return V{roi_align_forward({in[0]}, rois, Tensor(), spec)}; },
                   [&](const V& in, const V& d) { return V{roi_align_backward(d[0], rois, Tensor(), {in[0].shape()}, spec)[0]}; },
                   {random_tensor({2, 3, 10, 12}, 195)}, GradcheckOptions{1e-2, 1e-4, 1e-3, 200});
}

TEST(MaskRcnnLosses, MaskLossUsesOnlyTheLabelledChannel) {
  const std::int64_t R = 2, C = 3, M = 2;
  Tensor z = Tensor::full({R, C, M, M}, 50.0);  // other channels would dominate the loss
  const float vals[2][4] = {{0.0f, 1.0f, -1.0f, 2.0f}, {3.0f, -2.0f, 0.5f, 0.0f}};
  const std::int64_t labels[2] = {2, 0};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 4; ++i) z.data<float>()[(r * C + labels[r]) * M * M + i] = vals[r][i];
  const Tensor t = Tensor::from_vector({1, 0, 1, 0, 0, 1, 1, 0}, {R, M, M});
  const Tensor l = Tensor::from_vector_i64({2, 0}, {R});
  double want = 0;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 4; ++i) {
      const double x = vals[r][i], y = t.data<float>()[r * 4 + i];
      want += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x)));
    }
  EXPECT_NEAR(mask_bce_loss_forward(z, l, t), want / 8.0, 1e-6);
  const Tensor g = mask_bce_loss_backward(z, l, t, 1.0f);
  for (int r = 0; r < 2; ++r)
    for (std::int64_t c = 0; c < C; ++c)
      for (int i = 0; i < 4; ++i) {
        const float got = g.data<float>()[(r * C + c) * 4 + i];
        if (c != labels[r]) EXPECT_EQ(got, 0.0f);
        else EXPECT_NEAR(got, (1.0 / (1.0 + std::exp(-vals[r][i])) - t.data<float>()[r * 4 + i]) / 8.0, 1e-7);
      }
  // No positive RoI: loss 0 and a zero gradient (the reference's mask_logits.sum() * 0).
  EXPECT_EQ(mask_bce_loss_forward(Tensor::empty({0, C, M, M}), Tensor::empty({0}, DType::i64), Tensor::empty({0, M, M})), 0.0f);
  EXPECT_THROW(mask_bce_loss_forward(z, Tensor::from_vector_i64({2, 3}, {R}), t), DataError);
}

// ============================================================================================
// Proposals and the balanced sampler by hand
// ============================================================================================

// One level, one anchor per cell on a 1 x 4 grid: logits, deltas and anchors laid out as the RPN
// head writes them ([N, A, H, W] and [N, 4A, H, W]).
struct RpnCase {
  std::vector<Tensor> objectness, deltas, anchors;
};

RpnCase one_level(const std::vector<float>& logits_per_image, const std::vector<float>& anchor_boxes,
                  const std::vector<float>& deltas_per_image, std::int64_t images) {
  const auto W = static_cast<std::int64_t>(anchor_boxes.size() / 4);
  RpnCase c;
  c.objectness = {Tensor::from_vector(logits_per_image, {images, 1, 1, W})};
  // deltas given per image as [W, 4] rows; the head's layout is [N, 4, 1, W].
  std::vector<float> d(deltas_per_image.size());
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t x = 0; x < W; ++x)
      for (std::int64_t j = 0; j < 4; ++j)
        d[static_cast<std::size_t>((n * 4 + j) * W + x)] = deltas_per_image[static_cast<std::size_t>((n * W + x) * 4 + j)];
  c.deltas = {Tensor::from_vector(d, {images, 4, 1, W})};
  c.anchors = {Tensor::from_vector(anchor_boxes, {W, 4})};
  return c;
}

std::vector<float> floats_of(const Tensor& t) { return t.to_float_vector(); }

TEST(MaskRcnnAnchors, LegacyFpnAnchorsAndVisibility) {
  // Detectron's P2 cell anchors (stride 4, size 32): ratio 0.5 -> ws = round(sqrt(32)) = 6, hs = 3,
  // scaled by 8 about the centre 1.5: (-22, -10, 25, 13); ratio 1 -> (-14, -14, 17, 17); ratio 2 ->
  // ws = round(sqrt(8)) = 3, hs = 6: (-10, -22, 13, 25).
  const Tensor a = generate_anchors_legacy({32, 64}, {4, 8}, {0.5, 1.0, 2.0}, {{2, 3}, {1, 2}});
  ASSERT_EQ(a.shape(), (Shape{2 * 3 * 3 + 1 * 2 * 3, 4}));
  const std::vector<float> v = a.to_float_vector();
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 12),
            (std::vector<float>{-22, -10, 25, 13, -14, -14, 17, 17, -10, -22, 13, 25}));
  // Cell (y 1, x 2) of P2, ratio 0.5, is shifted by (8, 4). P3's first anchor (stride 8, size 64,
  // ratio 0.5): ws = round(sqrt(128)) = 11, hs = round(5.5) = 6 (half to even), 88 x 48 about the
  // centre 3.5: (3.5 - 43.5, 3.5 - 23.5, 3.5 + 43.5, 3.5 + 23.5).
  EXPECT_EQ(std::vector<float>(v.begin() + 4 * 15, v.begin() + 4 * 16), (std::vector<float>{-14, -6, 33, 17}));
  EXPECT_EQ(std::vector<float>(v.begin() + 4 * 18, v.begin() + 4 * 19), (std::vector<float>{-40, -20, 47, 27}));
  // Visibility with straddle threshold 0 in a 40 x 40 image.
  const Tensor boxes = Tensor::from_vector({0, 0, 39, 39, -1, 0, 10, 10, 0, 0, 40, 10, 5, 5, 6, 39.5f}, {4, 4});
  EXPECT_EQ(i64_values(anchor_visibility(boxes, 40, 40).to(DType::i64)), (std::vector<std::int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(i64_values(anchor_visibility(boxes, 40, 40, -1.0f).to(DType::i64)), (std::vector<std::int64_t>{1, 1, 1, 1}));
}

TEST(MaskRcnnProposals, DecodeClipNmsAndTopN) {
  // Anchors (legacy +1 widths): 0 and 1 overlap (+1 IoU 0.81), 2 leaves the 100 x 60 image, 3 is tiny.
  const std::vector<float> anchors = {10, 10, 29, 29, 12, 10, 31, 29, 90, 50, 119, 69, 40, 40, 40.5f, 40.5f};
  const std::vector<float> logits = {2.0f, 3.0f, 1.0f, 0.5f};
  std::vector<float> deltas(16, 0.0f);
  deltas[4 * 3 + 0] = 0.5f;  // anchor 3 (+1 width 1.5, centre 40.75) moves right by 0.75
  const RpnCase c = one_level(logits, anchors, deltas, 1);
  ProposalSpec spec;
  spec.training = false;
  const auto p = generate_proposals(c.objectness, c.deltas, c.anchors, {{60, 100}}, {}, spec);
  ASSERT_EQ(p.size(), 1u);
  // Anchor 1 (best) suppresses anchor 0; anchor 2 is clipped to x <= 99, y <= 59; anchor 3 decoded.
  const float s1 = 1.0f / (1.0f + std::exp(-3.0f)), s2 = 1.0f / (1.0f + std::exp(-1.0f)),
              s3 = 1.0f / (1.0f + std::exp(-0.5f));
  EXPECT_EQ(floats_of(p[0].objectness), (std::vector<float>{s1, s2, s3}));
  EXPECT_EQ(floats_of(p[0].boxes), (std::vector<float>{12, 10, 31, 29, 90, 50, 99, 59, 40.75f, 40, 41.25f, 40.5f}));
  // min_size 2 removes the tiny box (+1 width 1.5), a looser NMS keeps anchor 0.
  spec.min_size = 2.0f;
  spec.nms_thresh = 0.9f;
  const auto q = generate_proposals(c.objectness, c.deltas, c.anchors, {{60, 100}}, {}, spec);
  EXPECT_EQ(q[0].objectness.numel(), 3);
  // pre_nms_top_n 2 looks at anchors 1 and 0 only; post_nms_top_n 1 keeps the best after NMS.
  spec = ProposalSpec{};
  spec.training = false;
  spec.pre_nms_top_n = 2;
  spec.nms_thresh = 0.9f;
  EXPECT_EQ(generate_proposals(c.objectness, c.deltas, c.anchors, {{60, 100}}, {}, spec)[0].objectness.numel(), 2);
  spec.post_nms_top_n = 1;
  EXPECT_EQ(floats_of(generate_proposals(c.objectness, c.deltas, c.anchors, {{60, 100}}, {}, spec)[0].boxes),
            (std::vector<float>{12, 10, 31, 29}));
  // dw beyond log(1000/16) is clamped: a 20-pixel anchor (centre 22) grows at most 62.5 times,
  // to x2 = 22 + 625 - 1 (x1 = 22 - 625 is clipped to 0).
  std::vector<float> big(16, 0.0f);
  big[4 * 1 + 2] = 10.0f;
  const RpnCase g = one_level(logits, anchors, big, 1);
  const auto r = generate_proposals(g.objectness, g.deltas, g.anchors, {{10000, 10000}}, {}, ProposalSpec{2000, 2000, 2000, 0.7f, 0.0f, false});
  EXPECT_NEAR(floats_of(r[0].boxes)[2], 646.0f, 1e-3);
  EXPECT_EQ(floats_of(r[0].boxes)[0], 0.0f);
}

TEST(MaskRcnnProposals, TrainingTakesTopNOverTheBatchAndAppendsGroundTruth) {
  // Two images, four disjoint anchors; image 0's scores all beat image 1's.
  const std::vector<float> anchors = {0, 0, 9, 9, 20, 0, 29, 9, 40, 0, 49, 9, 60, 0, 69, 9};
  const std::vector<float> logits = {4, 6, 5, 3, /* image 1 */ 1, 2, -1, 0};
  const RpnCase c = one_level(logits, anchors, std::vector<float>(32, 0.0f), 2);
  const Tensor gt0 = Tensor::from_vector({1, 2, 3, 4}, {1, 4});
  const Tensor gt1 = Tensor::from_vector({5, 6, 7, 8, 9, 10, 11, 12}, {2, 4});
  ProposalSpec spec;
  spec.fpn_post_nms_top_n = 5;
  const auto p = generate_proposals(c.objectness, c.deltas, c.anchors, {{100, 100}, {100, 100}}, {gt0, gt1}, spec);
  // Image 0 keeps all four in NMS order (by score), image 1 its best one; then the ground truth.
  const auto sig = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  EXPECT_EQ(floats_of(p[0].objectness), (std::vector<float>{sig(6), sig(5), sig(4), sig(3), 1.0f}));
  EXPECT_EQ(floats_of(p[1].objectness), (std::vector<float>{sig(2), 1.0f, 1.0f}));
  EXPECT_EQ(floats_of(p[1].boxes), (std::vector<float>{20, 0, 29, 9, 5, 6, 7, 8, 9, 10, 11, 12}));
  // Test mode: the best 2 per image, no ground truth.
  spec.training = false;
  spec.fpn_post_nms_top_n = 2;
  const auto t = generate_proposals(c.objectness, c.deltas, c.anchors, {{100, 100}, {100, 100}}, {gt0, gt1}, spec);
  EXPECT_EQ(floats_of(t[1].objectness), (std::vector<float>{sig(2), sig(1)}));
  EXPECT_EQ(floats_of(t[0].boxes), (std::vector<float>{20, 0, 29, 9, 40, 0, 49, 9}));
}

TEST(MaskRcnnPostprocess, SoftmaxDecodeClassNmsAndTopK) {
  // Three RoIs, classes 0 (background), 1 and 2; zero deltas decode every class's box to its RoI
  // (+1 widths). Class 1 scores RoIs 0 and 1 (0.95 and 0.88), which overlap with +1 IoU 360 / 440 >
  // 0.5: NMS keeps RoI 0. Class 2 scores RoI 2 only (0.98), its box clipped to (119, 79).
  const Tensor rois = Tensor::from_vector({10, 10, 29, 29, 12, 10, 31, 29, 50, 50, 200, 90}, {3, 4});
  const Tensor logits = Tensor::from_vector({0, 3, -5, /**/ 0, 2, -5, /**/ 0, -5, 4}, {3, 3});
  const Tensor deltas = Tensor::zeros({3, 12});
  const Detections d = maskrcnn_postprocess(logits, deltas, rois, 80, 120);
  EXPECT_EQ(i64_values(d.labels), (std::vector<std::int64_t>{1, 2}));
  EXPECT_TRUE(tensors_close(d.boxes, Tensor::from_vector({10, 10, 29, 29, 50, 50, 119, 79}, {2, 4}), 1e-5, 0));
  const double e3 = std::exp(3.0), e4 = std::exp(4.0);
  EXPECT_NEAR(d.scores.data<float>()[0], e3 / (1 + e3 + std::exp(-5.0)), 1e-6);
  EXPECT_NEAR(d.scores.data<float>()[1], e4 / (1 + e4 + std::exp(-5.0)), 1e-6);
  // One detection per image keeps the best (kthvalue), a loose NMS keeps RoI 1's class-1 box too.
  EXPECT_EQ(i64_values(maskrcnn_postprocess(logits, deltas, rois, 80, 120, 0.05f, 0.5f, 1).labels),
            (std::vector<std::int64_t>{2}));
  EXPECT_EQ(i64_values(maskrcnn_postprocess(logits, deltas, rois, 80, 120, 0.05f, 0.9f).labels),
            (std::vector<std::int64_t>{1, 1, 2}));
  // A class-specific delta moves only that class's box: dx = 1 (x10 weight) on class 2 of RoI 2.
  Tensor moved = Tensor::zeros({3, 12});
  moved.data<float>()[2 * 12 + 8] = 10.0f;  // RoI 2, class 2, dx * wx: shift by its +1 width, 151
  const Detections m = maskrcnn_postprocess(logits, moved, rois, 400, 400);
  EXPECT_NEAR(m.boxes.data<float>()[4], 201.0f, 1e-3);
}

TEST(MaskRcnnSampler, BalancedCountsSubsetsAndSeeds) {
  // 10 positives (labels 1 and 2), 100 negatives, 30 ignored.
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 140; ++i) labels.push_back(i < 10 ? 1 + i % 2 : (i < 110 ? 0 : -1));
  const Tensor l = Tensor::from_vector_i64(labels, {140});
  const BalancedSample s = balanced_sample(l, 64, 0.25f, 7);
  EXPECT_EQ(s.positive.numel(), 10);  // min(10, 16)
  EXPECT_EQ(s.negative.numel(), 54);  // 64 - 10
  for (std::int64_t i : i64_values(s.positive)) EXPECT_GE(labels[static_cast<std::size_t>(i)], 1);
  auto neg = i64_values(s.negative);
  for (std::int64_t i : neg) EXPECT_EQ(labels[static_cast<std::size_t>(i)], 0);
  std::sort(neg.begin(), neg.end());
  EXPECT_EQ(std::unique(neg.begin(), neg.end()), neg.end()) << "a negative drawn twice";
  EXPECT_EQ(i64_values(balanced_sample(l, 64, 0.25f, 7).negative), i64_values(s.negative));
  EXPECT_NE(i64_values(balanced_sample(l, 64, 0.25f, 8).negative), i64_values(s.negative));
  EXPECT_EQ(balanced_sample(l, 8, 0.5f, 1).positive.numel(), 4);
  EXPECT_EQ(balanced_sample(l, 512, 0.25f, 1).negative.numel(), 100);  // fewer negatives than asked
  // Uniform: over 2000 draws of 4 of the 10 positives each is picked about 800 times.
  std::vector<int> hits(10, 0);
  for (std::uint64_t seed = 0; seed < 2000; ++seed)
    for (std::int64_t i : i64_values(balanced_sample(l, 16, 0.25f, seed).positive)) ++hits[static_cast<std::size_t>(i)];
  for (int h : hits) EXPECT_NEAR(h, 800, 120);
  EXPECT_THROW(balanced_sample(l, 64, 1.5f, 1), InvalidArgument);
}

// ============================================================================================
// Masks: polygons, RLE, paste (hand-built cases; pycocotools semantics, Note [COCO RLE])
// ============================================================================================

// The pixels of a u8 [H, W] mask as "x,y" strings, for readable failures.
std::vector<std::pair<std::int64_t, std::int64_t>> pixels(const Tensor& m) {
  std::vector<std::pair<std::int64_t, std::int64_t>> v;
  for (std::int64_t y = 0; y < m.size(0); ++y)
    for (std::int64_t x = 0; x < m.size(1); ++x)
      if (m.data<std::uint8_t>()[y * m.size(1) + x]) v.emplace_back(x, y);
  return v;
}

TEST(MaskRle, SquarePolygonCountsAndString) {
  // The square (1, 1)-(4, 4) in a 6 x 6 image covers the pixels whose centres are inside:
  // columns and rows 1..3. Column-major runs: 7 zeros, then 3 ones / 3 zeros alternating, 14 zeros.
  const Rle r = rle_from_polygon({1, 1, 4, 1, 4, 4, 1, 4}, 6, 6);
  EXPECT_EQ(r.counts, (std::vector<std::uint32_t>{7, 3, 3, 3, 3, 3, 14}));
  EXPECT_EQ(rle_area(r), 9u);
  const Tensor m = rle_decode(r);
  std::vector<std::pair<std::int64_t, std::int64_t>> want;
  for (std::int64_t y = 1; y <= 3; ++y)
    for (std::int64_t x = 1; x <= 3; ++x) want.emplace_back(x, y);
  EXPECT_EQ(pixels(m), want);
  EXPECT_EQ(rle_encode(m).counts, r.counts);
  // Compressed: counts from the fourth on as differences to the count two before (3-3, 3-3,
  // 3-3, 14-3): "7", "3", "3", "0", "0", "0", ";" (11 + 48).
  EXPECT_EQ(rle_to_string(r), "733000;");
  EXPECT_EQ(rle_from_string("733000;", 6, 6).counts, r.counts);
  // The same square given clockwise, or starting at another vertex, is the same mask.
  EXPECT_EQ(rle_from_polygon({4, 4, 4, 1, 1, 1, 1, 4}, 6, 6).counts, r.counts);
}

TEST(MaskRle, TrianglePolygon) {
  // (0, 0), (8, 0), (0, 4): inside where x + 2y < 8 at pixel centres, x + 2y <= 6 for pixel (x, y);
  // the hypotenuse is at least a quarter pixel from every centre (vertically), more than the
  // 1/5-pixel grid can move it. Rows: 7, 5, 3 and 1 pixels.
  const Tensor m = rle_decode(rle_from_polygon({0, 0, 8, 0, 0, 4}, 6, 10));
  std::vector<std::pair<std::int64_t, std::int64_t>> want;
  for (std::int64_t y = 0; y < 6; ++y)
    for (std::int64_t x = 0; x < 10; ++x)
      if (x + 2 * y <= 6) want.emplace_back(x, y);
  EXPECT_EQ(pixels(m), want);
  EXPECT_EQ(want.size(), 16u);
  // Clipped at the image border: the same triangle shifted 3 pixels left keeps its columns >= 0.
  const Tensor c = rle_decode(rle_from_polygon({-3, 0, 5, 0, -3, 4}, 6, 10));
  std::vector<std::pair<std::int64_t, std::int64_t>> want_c;
  for (std::int64_t y = 0; y < 6; ++y)
    for (std::int64_t x = 0; x < 10; ++x)
      if (x + 3 + 2 * y <= 6) want_c.emplace_back(x, y);
  EXPECT_EQ(pixels(c), want_c);
}

TEST(MaskRle, MultiPartPolygonsAreOred) {
  // Two squares overlapping in pixel (3, 3), and a separate 1 x 2 rectangle: 9 + 9 - 1 + 2 pixels.
  const Rle r = rle_from_polygons({{1, 1, 4, 1, 4, 4, 1, 4}, {3, 3, 6, 3, 6, 6, 3, 6}, {7, 0, 8, 0, 8, 2, 7, 2}}, 8, 9);
  EXPECT_EQ(rle_area(r), 19u);
  const Tensor m = rle_decode(r);
  for (auto [x, y] : std::vector<std::pair<int, int>>{{1, 1}, {3, 3}, {5, 5}, {7, 0}, {7, 1}})
    EXPECT_EQ(m.data<std::uint8_t>()[y * 9 + x], 1) << x << "," << y;
  for (auto [x, y] : std::vector<std::pair<int, int>>{{4, 1}, {1, 4}, {6, 6}, {8, 0}, {7, 2}})
    EXPECT_EQ(m.data<std::uint8_t>()[y * 9 + x], 0) << x << "," << y;
  // Intersection of the two squares is the one shared pixel.
  EXPECT_EQ(rle_area(rle_merge({rle_from_polygon({1, 1, 4, 1, 4, 4, 1, 4}, 8, 9),
                                rle_from_polygon({3, 3, 6, 3, 6, 6, 3, 6}, 8, 9)}, true)), 1u);
}

// pycocotools' rule is "pixel centre inside the polygon" up to its 1/5-pixel boundary grid: on
// random star-shaped polygons every pixel whose centre is farther than 0.3 pixel from the
// boundary must follow an even-odd point-in-polygon test of its centre.
TEST(MaskRle, PolygonsFollowPixelCentresAwayFromTheBoundary) {
  Rng r(170, 3);
  std::int64_t checked = 0, near_boundary = 0;
  for (int shape = 0; shape < 20; ++shape) {
    const std::int64_t H = 48, W = 64;
    const double cx = r.uniform(15.0f, 49.0f), cy = r.uniform(12.0f, 36.0f);
    const int n = 5 + static_cast<int>(r.below(20));
    std::vector<double> xy;
    for (int i = 0; i < n; ++i) {
      const double a = 2.0 * M_PI * i / n, rad = r.uniform(4.0f, 22.0f);  // may leave the image
      xy.push_back(cx + rad * std::cos(a));
      xy.push_back(cy + rad * std::sin(a));
    }
    const Tensor m = rle_decode(rle_from_polygon(xy, H, W));
    for (std::int64_t y = 0; y < H; ++y)
      for (std::int64_t x = 0; x < W; ++x) {
        const double px = x + 0.5, py = y + 0.5;
        bool inside = false;
        double dist = 1e9;
        for (int i = 0, j = n - 1; i < n; j = i++) {
          const double xi = xy[2 * i], yi = xy[2 * i + 1], xj = xy[2 * j], yj = xy[2 * j + 1];
          if ((yi > py) != (yj > py) && px < (xj - xi) * (py - yi) / (yj - yi) + xi) inside = !inside;
          const double ex = xj - xi, ey = yj - yi, len2 = ex * ex + ey * ey;
          const double t = len2 > 0 ? std::clamp(((px - xi) * ex + (py - yi) * ey) / len2, 0.0, 1.0) : 0.0;
          dist = std::min(dist, std::hypot(px - (xi + t * ex), py - (yi + t * ey)));
        }
        if (dist < 0.3) {
          ++near_boundary;
          continue;
        }
        ++checked;
        EXPECT_EQ(m.data<std::uint8_t>()[y * W + x] != 0, inside) << "shape " << shape << " pixel " << x << "," << y;
      }
  }
  std::printf("[ polygons ] %lld pixels checked against centre-in-polygon, %lld within 0.3 px of an edge skipped\n",
              static_cast<long long>(checked), static_cast<long long>(near_boundary));
}

// Note [Hostile polygons]: what a file could hold is refused with a message naming it, before
// any allocation, and a polygon reaching a little past its image still rasterises.
TEST(MaskRle, HostilePolygonsAreRefused) {
  auto refused = [](const std::vector<double>& xy, std::int64_t h, std::int64_t w, const std::string& words) {
    try {
      (void)rle_from_polygon(xy, h, w);
      ADD_FAILURE() << "accepted " << xy.size() << " coordinates on " << h << "x" << w;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  refused({0, 0, nan, 5, 5, 5}, 10, 10, "not a finite number");
  refused({0, 0, inf, 5, 5, 5}, 10, 10, "not a finite number");
  refused({0, 0, 1e300, 5, 5, 5}, 10, 10, "not a finite number within");
  refused({0, 0, -2e6, 5, 5, 5}, 10, 10, "within");
  refused({0, 0, 1e6, 0, 1e6, 1e6, 0, 1e6}, 10, 10, "grid steps long");
  refused({0, 0, 5, 0, 5, 5}, 70000, 70000, "2^32 pixels");
  EXPECT_THROW((void)rle_from_polygons({}, std::int64_t{1} << 33, 1), InvalidArgument);
  const Rle over = rle_from_polygon({-3, -3, 12, -3, 12, 12, -3, 12}, 10, 10);
  EXPECT_EQ(over.counts, (std::vector<std::uint32_t>{0, 100}));  // the whole image, no wrap-around
}

TEST(MaskRle, CrowdRleDecodeIouAndStrings) {
  // A crowd region as COCO stores it: uncompressed counts over a 4 x 5 image (column-major):
  // column 0 empty, columns 1-2 rows 1-3 (the run of 4 ones goes on into column 3's row 0), column 4 empty.
  const Rle crowd{4, 5, {5, 3, 1, 4, 7}};
  const Tensor m = rle_decode(crowd);
  EXPECT_EQ(pixels(m), (std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 0}, {1, 1}, {2, 1}, {1, 2}, {2, 2}, {1, 3}, {2, 3}}));
  EXPECT_EQ(rle_area(crowd), 7u);
  EXPECT_EQ(rle_from_string(rle_to_string(crowd), 4, 5).counts, crowd.counts);
  // A detection covering column 1 (rows 0-3, 4 pixels, 3 of them in the region): against the
  // region as crowd the IoU is intersection / detection area, 3 / 4; as a normal object 3 / 8.
  Tensor det = Tensor::zeros({4, 5}, DType::u8);
  for (int y = 0; y < 4; ++y) det.data<std::uint8_t>()[y * 5 + 1] = 1;
  const Tensor iou = rle_iou({rle_encode(det)}, {crowd, crowd}, {true, false});
  EXPECT_DOUBLE_EQ(iou.data<double>()[0], 0.75);
  EXPECT_DOUBLE_EQ(iou.data<double>()[1], 3.0 / 8.0);
  // Counts that do not cover the image, and malformed strings, are data errors.
  EXPECT_THROW(rle_decode(Rle{4, 5, {5, 3}}), DataError);
  EXPECT_THROW(rle_from_string("7", 6, 6), DataError);
  EXPECT_THROW(rle_from_string("7\x7f", 6, 6), DataError);
  // Long counts and negative differences survive the round trip.
  const Rle big{1000, 1000, {123456, 70000, 5, 806539}};
  EXPECT_EQ(rle_from_string(rle_to_string(big), 1000, 1000).counts, big.counts);
}

TEST(MaskTargets, PolygonsCroppedToProposalsAt28) {
  // Object 0: the square (10, 10)-(24, 24); object 1: two parts, left and right halves of (40,
  // 0)-(68, 28) with a gap. Proposal 0 is object 0's box: its target is the full 28 x 28.
  // Proposal 1 covers the square's left half (10, 10)-(17, 24), so the square fills its whole
  // crop too. Proposal 2 is object 1's box (40, 0)-(68, 28) at scale 1: columns 0-11 and 16-27
  // set. Proposal 3 (10, 10)-(38, 38) holds the square in its top-left 14 x 14 quarter.
  const std::vector<Polygons> objects = {{{10, 10, 24, 10, 24, 24, 10, 24}},
                                         {{40, 0, 52, 0, 52, 28, 40, 28}, {56, 0, 68, 0, 68, 28, 56, 28}}};
  const Tensor proposals = Tensor::from_vector({10, 10, 24, 24, 10, 10, 17, 24, 40, 0, 68, 28, 10, 10, 38, 38}, {4, 4});
  const Tensor matched = Tensor::from_vector_i64({0, 0, 1, 0}, {4});
  const Tensor t = polygon_mask_targets(objects, proposals, matched);
  ASSERT_EQ(t.shape(), (Shape{4, 28, 28}));
  auto at = [&](std::int64_t p, std::int64_t y, std::int64_t x) { return t.data<float>()[(p * 28 + y) * 28 + x]; };
  double sum0 = 0, sum1 = 0;
  for (std::int64_t i = 0; i < 28 * 28; ++i) {
    sum0 += t.data<float>()[i];
    sum1 += t.data<float>()[28 * 28 + i];
  }
  EXPECT_EQ(sum0, 28.0 * 28.0);
  EXPECT_EQ(sum1, 28.0 * 28.0);
  for (std::int64_t x = 0; x < 28; ++x) EXPECT_EQ(at(2, 5, x), (x < 12 || x >= 16) ? 1.0f : 0.0f) << "column " << x;
  for (std::int64_t y = 0; y < 28; ++y)
    for (std::int64_t x = 0; x < 28; ++x) EXPECT_EQ(at(3, y, x), (x < 14 && y < 14) ? 1.0f : 0.0f) << x << "," << y;
  EXPECT_THROW(polygon_mask_targets(objects, proposals, Tensor::from_vector_i64({0, 0, 2, 0}, {4})), DataError);
}

TEST(MaskPaste, HandExample) {
  // A 2 x 2 mask of ones in box (10, 20)-(13, 23): padded to 4 x 4 (ones inside a ring of zeros),
  // the box grows by 4/2 about its centre (11.5, 21.5) to (8.5, 18.5)-(14.5, 24.5), truncated to
  // (8, 18)-(14, 24): a 7 x 7 resize whose samples i = 0..6 read the padded mask at
  // 4/7 (i + 0.5) - 0.5 = 0 (clamped), 0.36, 0.93, 1.5, 2.07, 2.64, 3.21, i.e. values 0, 0.36,
  // 0.93, 1, 0.93, 0.36, 0 per axis: the product exceeds 0.5 on the inner 3 x 3.
  const Tensor masks = Tensor::full({1, 2, 2}, 1.0);
  const Tensor boxes = Tensor::from_vector({10, 20, 13, 23}, {1, 4});
  const Tensor img = paste_masks_in_image(masks, boxes, 40, 30).reshape({40, 30});
  std::vector<std::pair<std::int64_t, std::int64_t>> want;
  for (std::int64_t y = 20; y <= 22; ++y)
    for (std::int64_t x = 10; x <= 12; ++x) want.emplace_back(x, y);
  EXPECT_EQ(pixels(img), want);
  // A box mostly outside the image is cut at the border: box (-16, -16)-(8, 8) after expansion,
  // 25 x 25, the ramps' product exceeds 0.5 only at (0, 0), (1, 0) and (0, 1) inside the image
  // (torchvision's paste gives the same three pixels).
  EXPECT_EQ(pixels(paste_masks_in_image(masks, Tensor::from_vector({-10, -10, 2, 2}, {1, 4}), 40, 30).reshape({40, 30})),
            (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 0}, {1, 0}, {0, 1}}));
  // Threshold 1 keeps nothing.
  EXPECT_TRUE(pixels(paste_masks_in_image(masks, boxes, 40, 30, 1.0f).reshape({40, 30})).empty());
}

// ============================================================================================
// torchvision and PyTorch autograd (tools/peers/maskrcnn_peer.py)
// ============================================================================================


// torchvision.ops.roi_align on the same inputs, forward and backward, NCHW and (transposed)
// NHWC, legacy (aligned=False, sampling 2, the reference) and the variants.
TEST(RoIAlignTorchvision, SingleLevelForwardAndBackward) {
  SKIP_WITHOUT_TORCHVISION();
  struct Case {
    std::int64_t pooled;
    std::int64_t sampling;
    bool aligned;
    float scale;
  };
  const std::vector<Case> cases = {{7, 2, false, 0.25f}, {14, 2, false, 0.125f}, {5, 0, false, 0.5f}, {7, 2, true, 0.25f}};
  PeerDir p("maskrcnn_peer.py", "roi");  // one peer run for every case (each start of torch costs seconds)
  const Tensor feat = random_tensor({2, 8, 40, 52}, 90);
  const Tensor rois = random_rois(64, 2, 200.0f, 150.0f, 91);
  p.put("features", feat);
  p.put("rois", rois);
  std::vector<RoIAlignSpec> specs;
  std::vector<Tensor> outs, douts;
  std::vector<std::string> meta;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    RoIAlignSpec spec;
    spec.pooled_h = spec.pooled_w = c.pooled;
    spec.sampling_ratio = c.sampling;
    spec.aligned = c.aligned;
    spec.spatial_scales = {c.scale};
    specs.push_back(spec);
    outs.push_back(roi_align_forward({feat}, rois, Tensor(), spec));
    douts.push_back(random_tensor(outs.back().shape(), 92 + i));
    p.put(fmt::format("dout_{}", i), douts.back());
    meta.push_back(fmt::format("{{\"pooled\": {}, \"scale\": {}, \"sampling_ratio\": {}, \"aligned\": {}}}", c.pooled,
                               c.scale, c.sampling, c.aligned ? "true" : "false"));
  }
  p.extra = fmt::format("\"cases\": [{}], ", fmt::join(meta, ", "));
  ASSERT_TRUE(p.run("roi_align"));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(fmt::format("pooled {} sampling {} aligned {} scale {}", c.pooled, c.sampling, c.aligned, c.scale));
    const Tensor& out = outs[i];
    const Tensor tv_out = p.floats(fmt::format("out_{}", i), out.shape());
    const Tensor tv_grad = p.floats(fmt::format("dfeatures_{}", i), feat.shape());
    const Tensor grad = roi_align_backward(douts[i], rois, Tensor(), {feat.shape()}, specs[i])[0];
    std::printf("[ roi_align vs torchvision ] pooled %lld sampling %lld aligned %d: forward max |diff| %.3g, "
                "backward max |diff| %.3g\n",
                static_cast<long long>(c.pooled), static_cast<long long>(c.sampling), c.aligned ? 1 : 0,
                max_abs_diff(out, tv_out), max_abs_diff(grad, tv_grad));
    EXPECT_TRUE(tensors_close(out, tv_out, 1e-6, 1e-5));
    EXPECT_TRUE(tensors_close(grad, tv_grad, 1e-6, 1e-5));
    RoIAlignSpec last = specs[i];
    last.channels_last = true;
    EXPECT_TRUE(tensors_close(to_nchw(roi_align_forward({to_nhwc(feat)}, rois, Tensor(), last)), tv_out, 1e-6, 1e-5));
    EXPECT_TRUE(tensors_close(
        to_nchw(roi_align_backward(to_nhwc(douts[i]), rois, Tensor(), {to_nhwc(feat).shape()}, last)[0]), tv_grad, 1e-6,
        1e-5));
  }
}

// torchvision.ops.MultiScaleRoIAlign: its levels (torchvision's mapper convention) equal ours
// with legacy = false, and pooling with them gives its output and input gradients.
TEST(RoIAlignTorchvision, MultiScaleRoIAlignForwardAndBackward) {
  SKIP_WITHOUT_TORCHVISION();
  PeerDir p("maskrcnn_peer.py", "multi");
  const std::int64_t N = 2, C = 4, image = 256;
  std::vector<Tensor> feats;
  std::vector<Shape> shapes;
  for (std::int64_t l = 0; l < 4; ++l) {
    const std::int64_t side = image >> (l + 2);
    feats.push_back(random_tensor({N, C, side, side}, 100 + static_cast<std::uint64_t>(l)));
    shapes.push_back(feats.back().shape());
    p.put(fmt::format("features_{}", l), feats.back());
  }
  const Tensor rois = random_rois(120, N, 240.0f, 600.0f, 104);
  RoIAlignSpec spec;  // 7 x 7, sampling 2, legacy
  spec.spatial_scales = {0.25f, 0.125f, 0.0625f, 0.03125f};
  LevelMapper tv;
  tv.legacy = false;
  const Tensor levels = map_roi_levels(rois, tv);
  const Tensor out = roi_align_forward(feats, rois, levels, spec);
  const Tensor dout = random_tensor(out.shape(), 105);
  p.put("rois", rois);
  p.put("dout", dout);
  p.extra = fmt::format("\"levels\": 4, \"pooled_h\": 7, \"pooled_w\": 7, \"sampling_ratio\": 2, "
                        "\"image_sizes\": [[{0}, {0}], [{0}, {0}]], ",
                        image);
  ASSERT_TRUE(p.run("multiscale"));
  EXPECT_TRUE(tensors_close(p.floats("scales", {4}), Tensor::from_vector(spec.spatial_scales, {4}), 0, 0));
  const std::vector<std::int64_t> lv = i64_values(levels);
  EXPECT_EQ(lv, p.ints("levels"));
  for (std::int64_t l = 0; l < 4; ++l) EXPECT_GT(std::count(lv.begin(), lv.end(), l), 0) << "no RoI on level " << l;
  EXPECT_TRUE(tensors_close(out, p.floats("out", out.shape()), 1e-6, 1e-5));
  const auto grads = roi_align_backward(dout, rois, levels, shapes, spec);
  double worst = 0;
  for (std::size_t l = 0; l < 4; ++l) {
    const Tensor g = p.floats(fmt::format("dfeatures_{}", l), shapes[l]);
    worst = std::max(worst, max_abs_diff(grads[l], g));
    EXPECT_TRUE(tensors_close(grads[l], g, 1e-6, 1e-5)) << "level " << l;
  }
  std::printf("[ MultiScaleRoIAlign ] forward max |diff| %.3g, backward max |diff| %.3g\n",
              max_abs_diff(out, p.floats("out", out.shape())), worst);
}

TEST(RoIAlignTorchvision, LegacyLevelMapperMatchesTheReferenceFormula) {
  SKIP_WITHOUT_TORCHVISION();
  PeerDir p("maskrcnn_peer.py", "levels");
  Tensor rois = random_rois(2000, 1, 1300.0f, 900.0f, 110);
  // Boxes on the level boundaries: (with +1) sides 112, 224, 448 and one pixel less.
  const float sides[] = {111, 112, 223, 224, 447, 448, 895, 896};
  for (int i = 0; i < 8; ++i) {
    float* r = rois.data<float>() + 5 * i;
    r[1] = 3;
    r[2] = 7;
    r[3] = 3 + sides[i] - 1;
    r[4] = 7 + sides[i] - 1;
  }
  p.put("rois", rois);
  p.extra = "\"k_min\": 2, \"k_max\": 5, \"canonical_scale\": 224, \"canonical_level\": 4, \"eps\": 1e-6, ";
  ASSERT_TRUE(p.run("legacy_levels"));
  EXPECT_EQ(i64_values(map_roi_levels(rois)), p.ints("levels"));
}

// The reference's +1 NMS equals torchvision.ops.nms on boxes widened by one pixel (boxes on a
// half-pixel grid so that both sides compute the same areas exactly).
TEST(MaskRcnnProposalsTorchvision, LegacyNmsMatchesTorchvisionOnWidenedBoxes) {
  SKIP_WITHOUT_TORCHVISION();
  PeerDir p("maskrcnn_peer.py", "nms");
  const std::int64_t n = 3000;
  Tensor boxes = random_rois(n, 1, 400.0f, 120.0f, 150).reshape({n, 5});
  std::vector<float> b;
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 1; j < 5; ++j) b.push_back(std::round(boxes.data<float>()[5 * i + j] * 2.0f) / 2.0f);
  const Tensor bx = Tensor::from_vector(b, {n, 4});
  Tensor scores = random_tensor({n}, 151, 0.0f, 1.0f);
  for (std::int64_t i = 0; i < n; ++i) scores.data<float>()[i] = std::round(scores.data<float>()[i] * 64.0f) / 64.0f;
  p.put("boxes", bx);
  p.put("scores", scores);
  p.extra = "\"threshold\": 0.7, ";
  ASSERT_TRUE(p.run("nms"));
  const std::vector<std::int64_t> ours = i64_values(nms_legacy(bx, scores, 0.7f));
  // torchvision's sort is not stable: compare the kept sets and the score order.
  std::vector<std::int64_t> tv = p.ints("keep");
  EXPECT_EQ(ours.size(), tv.size());
  std::vector<std::int64_t> a = ours, c = tv;
  std::sort(a.begin(), a.end());
  std::sort(c.begin(), c.end());
  EXPECT_EQ(a, c);
  std::printf("[ nms_legacy vs torchvision.ops.nms(+1) ] %zu of %lld boxes kept by both\n", ours.size(),
              static_cast<long long>(n));
}

// torchvision's paste_masks_in_image (the same Masker algorithm, padding 1) gives probabilities;
// ours thresholds them at 0.5: every pixel must agree except where torchvision's value is within
// a rounding of the threshold.
TEST(MaskPasteTorchvision, MatchesPasteMasksInImage) {
  SKIP_WITHOUT_TORCHVISION();
  PeerDir p("maskrcnn_peer.py", "paste");
  const std::int64_t D = 40, M = 28, H = 120, W = 160;
  const Tensor masks = random_tensor({D, M, M}, 160, -0.2f, 1.2f);
  // Boxes that start inside the image (torchvision's paste fails on a box wholly below or right of it).
  Tensor boxes = random_rois(D, 1, 100.0f, 80.0f, 161).reshape({D, 5});
  std::vector<float> b;
  for (std::int64_t i = 0; i < D; ++i)
    for (int j = 1; j < 5; ++j) b.push_back(boxes.data<float>()[5 * i + j]);
  const Tensor bx = Tensor::from_vector(b, {D, 4});
  p.put("masks", masks);
  p.put("boxes", bx);
  p.extra = fmt::format("\"image_h\": {}, \"image_w\": {}, ", H, W);
  ASSERT_TRUE(p.run("paste"));
  const Tensor tv = p.floats("pasted", {D, H, W});
  const Tensor ours = paste_masks_in_image(masks, bx, H, W);
  std::int64_t differ = 0, near = 0, set = 0;
  for (std::int64_t i = 0; i < D * H * W; ++i) {
    const float v = tv.data<float>()[i];
    const bool want = v > 0.5f;
    set += want ? 1 : 0;
    if ((ours.data<std::uint8_t>()[i] != 0) != want) {
      if (std::fabs(v - 0.5f) < 1e-6f) ++near;
      else ++differ;
    }
  }
  std::printf("[ paste vs torchvision ] %lld pixels set, %lld differ, %lld differ within 1e-6 of the threshold\n",
              static_cast<long long>(set), static_cast<long long>(differ), static_cast<long long>(near));
  EXPECT_EQ(differ, 0);
  EXPECT_GT(set, 1000);
}

TEST(MaskRcnnProposalsTorchvision, LegacyBoxCoderMatchesTheReferenceFormula) {
  SKIP_WITHOUT_TORCHVISION();
  PeerDir p("maskrcnn_peer.py", "coder");
  const Tensor gt = random_rois(500, 1, 300.0f, 120.0f, 200).reshape({500, 5});
  const Tensor ref = random_rois(500, 1, 300.0f, 120.0f, 201).reshape({500, 5});
  std::vector<float> g, r;
  for (std::int64_t i = 0; i < 500; ++i)
    for (int j = 1; j < 5; ++j) {
      g.push_back(gt.data<float>()[5 * i + j]);
      r.push_back(ref.data<float>()[5 * i + j]);
    }
  const Tensor gb = Tensor::from_vector(g, {500, 4}), rb = Tensor::from_vector(r, {500, 4});
  const Tensor deltas = random_tensor({500, 4}, 202, -5.0f, 5.0f);
  p.put("gt", gb);
  p.put("ref", rb);
  p.put("deltas", deltas);
  p.extra = "\"weights\": [10.0, 10.0, 5.0, 5.0], ";
  ASSERT_TRUE(p.run("legacy_coder"));
  const std::array<float, 4> w{10, 10, 5, 5};
  const Tensor enc = encode_boxes(gb, rb, w, true), dec = decode_boxes(deltas, rb, w, true);
  std::printf("[ legacy box coder vs maskrcnn_benchmark's formula ] encode max |diff| %.3g, decode max |diff| %.3g\n",
              max_abs_diff(enc, p.floats("enc", {500, 4})), max_abs_diff(dec, p.floats("dec", {500, 4})));
  EXPECT_TRUE(tensors_close(enc, p.floats("enc", {500, 4}), 1e-6, 1e-6));
  EXPECT_TRUE(tensors_close(dec, p.floats("dec", {500, 4}), 1e-4, 1e-6));
  // A hand case: anchor (0, 0)-(15, 15) is 16 wide, box (0, 0)-(31, 31) 32: dx = (16 - 8) / 16.
  const Tensor e = encode_boxes(Tensor::from_vector({0, 0, 31, 31}, {1, 4}), Tensor::from_vector({0, 0, 15, 15}, {1, 4}),
                                {1, 1, 1, 1}, true);
  EXPECT_NEAR(e.data<float>()[0], 0.5f, 1e-7);
  EXPECT_NEAR(e.data<float>()[2], std::log(2.0f), 1e-7);
  EXPECT_TRUE(tensors_close(decode_boxes(e, Tensor::from_vector({0, 0, 15, 15}, {1, 4}), {1, 1, 1, 1}, true),
                            Tensor::from_vector({0, 0, 31, 31}, {1, 4}), 1e-5, 0));
}

TEST(MaskRcnnLossesTorch, SmoothL1AndMaskLossMatchAutograd) {
  SKIP_WITHOUT_TORCHVISION();
  const std::vector<float> betas = {1.0f / 9.0f, 1.0f};  // the RPN's and the box head's
  PeerDir p("maskrcnn_peer.py", "loss");
  const Tensor x = random_tensor({300, 4}, 120, -1.0f, 1.0f), t = random_tensor({300, 4}, 121, -1.0f, 1.0f);
  const std::int64_t R = 37, C = 81, M = 28;
  const Tensor z = random_tensor({R, C, M, M}, 122, -6.0f, 6.0f);
  Tensor labels = Tensor::empty({R}, DType::i64);
  Tensor targets = Tensor::empty({R, M, M});
  Rng r(123, 1);
  for (std::int64_t i = 0; i < R; ++i) labels.data<std::int64_t>()[i] = static_cast<std::int64_t>(r.below(C));
  for (std::int64_t i = 0; i < targets.numel(); ++i) targets.data<float>()[i] = r.uniform(0.0f, 1.0f) < 0.5f ? 1.0f : 0.0f;
  p.put("input", x);
  p.put("target", t);
  p.put("logits", z);
  p.put("labels", labels);
  p.put("targets", targets);
  const float scale = 1.0f / 512.0f;
  p.extra = fmt::format("\"betas\": [{}], \"scale\": {}, ", fmt::join(betas, ", "), scale);
  ASSERT_TRUE(p.run("losses"));
  for (std::size_t i = 0; i < betas.size(); ++i) {
    SCOPED_TRACE(fmt::format("beta {}", betas[i]));
    const float ours = smooth_l1_loss_forward(x, t, betas[i], scale);
    const float ref = p.floats(fmt::format("smooth_{}", i), {1}).data<float>()[0];
    EXPECT_NEAR(ours, ref, 1e-5 * std::fabs(ours));
    EXPECT_NEAR(ours, p.floats(fmt::format("smooth_torch_{}", i), {1}).data<float>()[0], 1e-5 * std::fabs(ours));
    EXPECT_TRUE(tensors_close(smooth_l1_loss_backward(x, t, betas[i], scale), p.floats(fmt::format("dsmooth_{}", i), {300, 4}),
                              1e-9, 1e-5));
    std::printf("[ smooth-L1 vs maskrcnn_benchmark's formula in torch ] beta %.4f: %.7g vs %.7g\n", betas[i], ours, ref);
  }
  const float mask = mask_bce_loss_forward(z, labels, targets);
  EXPECT_NEAR(mask, p.floats("mask", {1}).data<float>()[0], 1e-5 * mask);
  const Tensor dz = mask_bce_loss_backward(z, labels, targets);
  const Tensor tv = p.floats("dmask", {R, C, M, M});
  std::printf("[ mask loss vs torch ] %.7g vs %.7g, dlogits max |diff| %.3g\n", mask, p.floats("mask", {1}).data<float>()[0],
              max_abs_diff(dz, tv));
  EXPECT_TRUE(tensors_close(dz, tv, 1e-10, 1e-5));
}

// ============================================================================================
// CUDA against the CPU
// ============================================================================================

TEST(MaskRcnnCuda, KernelsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Device gpu = Device::cuda(0);
  const Device cpu = Device::cpu();
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "NHWC" : "NCHW");
    RoIAlignSpec spec;
    spec.channels_last = nhwc;
    spec.spatial_scales = {0.25f, 0.125f, 0.0625f, 0.03125f};
    std::vector<Tensor> feats, feats_g;
    std::vector<Shape> shapes;
    for (std::int64_t l = 0; l < 4; ++l) {
      const std::int64_t side = 256 >> (l + 2);
      const Shape s = nhwc ? Shape{2, side, side, 32} : Shape{2, 32, side, side};
      feats.push_back(random_tensor(s, 130 + static_cast<std::uint64_t>(l)));
      feats_g.push_back(feats.back().to(gpu));
      shapes.push_back(s);
    }
    const Tensor rois = random_rois(256, 2, 240.0f, 250.0f, 135);
    const Tensor levels = map_roi_levels(rois);
    const Tensor out = roi_align_forward(feats, rois, levels, spec);
    const Tensor out_g = roi_align_forward(feats_g, rois.to(gpu), levels.to(gpu), spec);
    EXPECT_TRUE(tensors_close(out_g.to(cpu), out, 1e-6, 1e-6));
    const Tensor dout = random_tensor(out.shape(), 136);
    const auto g = roi_align_backward(dout, rois, levels, shapes, spec);
    const auto g_g = roi_align_backward(dout.to(gpu), rois.to(gpu), levels.to(gpu), shapes, spec);
    for (std::size_t l = 0; l < 4; ++l) EXPECT_TRUE(tensors_close(g_g[l].to(cpu), g[l], 1e-5, 1e-5)) << "level " << l;
  }
  const Tensor x = random_tensor({5000, 4}, 137, -1.0f, 1.0f), t = random_tensor({5000, 4}, 138, -1.0f, 1.0f);
  // A sum of 20,000 f32 terms near 121, reduced in a different order on each side: equal within
  // a few f32 roundings of the sum (H100: 6.1e-5 apart, 5e-7 relative).
  const double l1_cpu = smooth_l1_loss_forward(x, t, 1.0f / 9.0f, 0.01f);
  EXPECT_NEAR(smooth_l1_loss_forward(x.to(gpu), t.to(gpu), 1.0f / 9.0f, 0.01f), l1_cpu,
              4e-6 * std::abs(l1_cpu));
  EXPECT_TRUE(tensors_close(smooth_l1_loss_backward(x.to(gpu), t.to(gpu), 1.0f / 9.0f, 0.01f).to(cpu),
                            smooth_l1_loss_backward(x, t, 1.0f / 9.0f, 0.01f), 1e-9, 1e-6));
  const std::int64_t R = 64, C = 81, M = 28;
  const Tensor z = random_tensor({R, C, M, M}, 139, -6.0f, 6.0f);
  Tensor labels = Tensor::empty({R}, DType::i64);
  for (std::int64_t i = 0; i < R; ++i) labels.data<std::int64_t>()[i] = (i * 7) % C;
  const Tensor targets = random_tensor({R, M, M}, 140, 0.0f, 1.0f);
  EXPECT_NEAR(mask_bce_loss_forward(z.to(gpu), labels.to(gpu), targets.to(gpu)), mask_bce_loss_forward(z, labels, targets),
              1e-5);
  EXPECT_TRUE(tensors_close(mask_bce_loss_backward(z.to(gpu), labels.to(gpu), targets.to(gpu)).to(cpu),
                            mask_bce_loss_backward(z, labels, targets), 1e-10, 1e-5));
  Tensor bad = labels.clone();
  bad.data<std::int64_t>()[3] = C;
  EXPECT_THROW(mask_bce_loss_forward(z.to(gpu), bad.to(gpu), targets.to(gpu)), DataError);
}

}  // namespace
}  // namespace benchhost::nn
