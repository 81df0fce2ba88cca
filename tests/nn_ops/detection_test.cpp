// The detection toolkit (nn/detection.hpp): anchors, IoU, the matcher, the box coder, RetinaNet's
// losses and their gradients, NMS and post-processing, checked against hand computations,
// finite differences and torchvision 0.14 itself (tools/peers/detection_peer.py, run with
// /usr/bin/python3 when it has torch and torchvision; those tests skip visibly otherwise), and,
// on a machine with a GPU, the CUDA kernels against the CPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "benchhost/device.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/random.hpp"
#include "benchhost/nn/registry.hpp"
#include "common/gradcheck.hpp"
#include "nn_ops/torchvision_peer.hpp"
#include "nn_ops/registry_walk.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;
using benchhost::testing::PeerDir;

namespace fs = std::filesystem;

const std::vector<std::pair<std::int64_t, std::int64_t>> kRetinaGrids = {{100, 100}, {50, 50}, {25, 25}, {13, 13}, {7, 7}};

Tensor boxes_of(const std::vector<float>& v) { return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size() / 4), 4}); }

std::vector<std::int64_t> i64_values(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  return std::vector<std::int64_t>(c.data<std::int64_t>(), c.data<std::int64_t>() + c.numel());
}

// n random boxes with corners in [0, extent) and sizes in [2, max_size); `snap` puts corners on
// a grid of 4 pixels so that IoU ties and exact thresholds occur.
Tensor random_boxes(std::int64_t n, std::uint64_t seed, float extent = 300.0f, float max_size = 120.0f,
                    bool snap = false) {
  Tensor t = Tensor::empty({n, 4});
  Rng r(seed, 21);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    float x = r.uniform(0.0f, extent), y = r.uniform(0.0f, extent);
    float w = r.uniform(2.0f, max_size), h = r.uniform(2.0f, max_size);
    if (snap) {
      x = std::round(x / 4) * 4;
      y = std::round(y / 4) * 4;
      w = std::round(w / 4) * 4 + 4;
      h = std::round(h / 4) * 4 + 4;
    }
    p[4 * i] = x;
    p[4 * i + 1] = y;
    p[4 * i + 2] = x + w;
    p[4 * i + 3] = y + h;
  }
  return t;
}

Tensor random_labels(std::int64_t n, std::int64_t k, std::uint64_t seed) {
  Rng r(seed, 23);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(k)));
  return Tensor::from_vector_i64(v, {n});
}

// ============================================================================================
// Anchors
// ============================================================================================

TEST(DetectionAnchors, RetinaNetSpecSizes) {
  const AnchorSpec spec = retinanet_anchor_spec();
  const std::vector<std::vector<double>> want = {
      {32, 40, 50}, {64, 80, 101}, {128, 161, 203}, {256, 322, 406}, {512, 645, 812}};
  EXPECT_EQ(spec.sizes, want);
  EXPECT_EQ(spec.aspect_ratios, (std::vector<double>{0.5, 1.0, 2.0}));
}

TEST(DetectionAnchors, RetinaNetCountStridesAndFirstAnchors) {
  const Tensor anchors = generate_anchors(retinanet_anchor_spec(), 800, 800, kRetinaGrids);
  ASSERT_EQ(anchors.shape(), Shape({120087, 4}));
  const float* p = anchors.data<float>();
  const std::int64_t strides[5] = {8, 16, 32, 61, 114};
  // Level l's first anchor (ratio 0.5, smallest size), computed by hand: w = size * sqrt(2),
  // h = size / sqrt(2), halves rounded; e.g. 32: (45.25 / 2, 22.63 / 2) -> (23, 11).
  const float first[5][4] = {{-23, -11, 23, 11}, {-45, -23, 45, 23}, {-91, -45, 91, 45}, {-181, -91, 181, 91},
                             {-362, -181, 362, 181}};
  std::int64_t offset = 0;
  for (int l = 0; l < 5; ++l) {
    SCOPED_TRACE(fmt::format("level {}", l));
    const std::int64_t g = kRetinaGrids[static_cast<std::size_t>(l)].first, A = 9;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(p[4 * offset + k], first[l][k]);
    // Cell (0, 1) is shifted by the stride in x, cell (1, 0) by the stride in y; no half-stride offset.
    const std::int64_t right = offset + A, down = offset + g * A;
    EXPECT_EQ(p[4 * right] - p[4 * offset], static_cast<float>(strides[l]));
    EXPECT_EQ(p[4 * right + 1], p[4 * offset + 1]);
    EXPECT_EQ(p[4 * down + 1] - p[4 * offset + 1], static_cast<float>(strides[l]));
    EXPECT_EQ(p[4 * down], p[4 * offset]);
    // The last cell's anchors sit at ((g - 1) * stride, (g - 1) * stride).
    const std::int64_t last = offset + (g * g - 1) * A;
    EXPECT_EQ(p[4 * last], first[l][0] + static_cast<float>((g - 1) * strides[l]));
    offset += g * g * A;
  }
  // torch.round rounds halves to even: 101 / 2 = 50.5 -> 50, 161 / 2 -> 80, 203 / 2 -> 102
  // (square anchors, index 5 of level 1 and 4, 5 of level 2).
  const std::int64_t l1 = 100 * 100 * 9, l2 = l1 + 50 * 50 * 9;
  EXPECT_EQ(p[4 * (l1 + 5)], -50.0f);
  EXPECT_EQ(p[4 * (l1 + 5) + 3], 50.0f);
  EXPECT_EQ(p[4 * (l2 + 4)], -80.0f);
  EXPECT_EQ(p[4 * (l2 + 5) + 2], 102.0f);
}

TEST(DetectionAnchors, RejectsBadArguments) {
  AnchorSpec spec = retinanet_anchor_spec();
  EXPECT_THROW(generate_anchors(spec, 800, 800, {{100, 100}}), InvalidArgument);
  EXPECT_THROW(generate_anchors(spec, 800, 800, {{100, 100}, {50, 50}, {25, 25}, {13, 13}, {0, 7}}), InvalidArgument);
  spec.aspect_ratios = {};
  EXPECT_THROW(generate_anchors(spec, 800, 800, kRetinaGrids), InvalidArgument);
}

// ============================================================================================
// IoU, matcher, box coder
// ============================================================================================

TEST(DetectionIou, HandComputedPairs) {
  const Tensor a = boxes_of({0, 0, 10, 10, 0, 0, 4, 4});
  const Tensor b = boxes_of({5, 5, 15, 15, 0, 0, 10, 10, 20, 20, 30, 30, 2, 0, 6, 4});
  const Tensor iou = box_iou(a, b);
  ASSERT_EQ(iou.shape(), Shape({2, 4}));
  const float* v = iou.data<float>();
  EXPECT_FLOAT_EQ(v[0], 25.0f / 175.0f);
  EXPECT_FLOAT_EQ(v[1], 1.0f);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_FLOAT_EQ(v[3], 16.0f / 100.0f);
  EXPECT_EQ(v[4], 0.0f);  // touching corners: zero intersection
  EXPECT_FLOAT_EQ(v[5], 16.0f / 100.0f);
  EXPECT_EQ(v[6], 0.0f);
  EXPECT_FLOAT_EQ(v[7], 8.0f / 24.0f);
  EXPECT_EQ(box_iou(boxes_of({}), b).shape(), Shape({0, 4}));
  EXPECT_THROW(box_iou(Tensor::zeros({3, 5}), b), InvalidArgument);
}

TEST(DetectionMatcher, ThresholdsBetweenAndLowQualityTies) {
  // GT rows, anchor columns. Row maxima: GT0 0.9 (anchor 0), GT1 0.45 (anchor 1, where GT0 ties
  // at 0.45 and wins the column as the first maximum), GT2 0.25 (anchors 3, 4, 5: a tie).
  const Tensor iou = Tensor::from_vector({0.9f, 0.45f, 0.1f, 0.3f, 0.2f, 0.05f,    //
                                          0.3f, 0.45f, 0.35f, 0.38f, 0.38f, 0.05f,  //
                                          0.1f, 0.1f, 0.2f, 0.25f, 0.25f, 0.25f},
                                         {3, 6});
  // Without low-quality matches: 0.9 matched, 0.45 between (-2), the rest below 0.4 (-1).
  EXPECT_EQ(i64_values(match_anchors(iou, 0.5f, 0.4f, false)), (std::vector<std::int64_t>{0, -2, -1, -1, -1, -1}));
  // With them, every anchor that reaches some GT's best IoU gets back its own best GT (torchvision
  // restores all_matches, the column's argmax): anchor 1 -> GT0 (not GT1), anchors 3, 4 -> GT1
  // (not GT2), anchor 5 -> GT2; ties in a row's maximum are all restored.
  EXPECT_EQ(i64_values(match_anchors(iou, 0.5f, 0.4f, true)), (std::vector<std::int64_t>{0, 0, -1, 1, 1, 2}));
  // Exactly at the thresholds: >= high matches, >= low is between.
  const Tensor edge = Tensor::from_vector({0.5f, 0.4f, 0.39999998f, 1.0f}, {1, 4});
  EXPECT_EQ(i64_values(match_anchors(edge, 0.5f, 0.4f, false)), (std::vector<std::int64_t>{0, -2, -1, 0}));
  // No GT: every anchor is background.
  EXPECT_EQ(i64_values(match_anchors(Tensor::empty({0, 3}), 0.5f, 0.4f, true)), (std::vector<std::int64_t>{-1, -1, -1}));
  EXPECT_THROW(match_anchors(iou, 0.3f, 0.4f), InvalidArgument);
}

TEST(DetectionBoxCoder, HandExampleRoundTripAndClamp) {
  const Tensor anchor = boxes_of({0, 0, 10, 20});
  const Tensor gt = boxes_of({2, 4, 12, 24});
  // Centres (5, 10) and (7, 14), same size: dx = 2 / 10, dy = 4 / 20, dw = dh = 0.
  EXPECT_TRUE(tensors_close(encode_boxes(gt, anchor), Tensor::from_vector({0.2f, 0.2f, 0.0f, 0.0f}, {1, 4}), 1e-7, 0));
  EXPECT_TRUE(tensors_close(encode_boxes(gt, anchor, {10, 10, 5, 5}), Tensor::from_vector({2.0f, 2.0f, 0.0f, 0.0f}, {1, 4}),
                            1e-6, 0));
  const Tensor g2 = boxes_of({0, 0, 20, 5});  // width x2, height / 4
  const Tensor e2 = encode_boxes(g2, anchor);
  EXPECT_NEAR(e2.data<float>()[2], std::log(2.0), 1e-6);
  EXPECT_NEAR(e2.data<float>()[3], std::log(0.25), 1e-6);

  for (std::array<float, 4> w : {std::array<float, 4>{1, 1, 1, 1}, std::array<float, 4>{10, 10, 5, 5}}) {
    const Tensor a = random_boxes(500, 31), g = random_boxes(500, 32);
    EXPECT_TRUE(tensors_close(decode_boxes(encode_boxes(g, a, w), a, w), g, 2e-4, 1e-5));
  }
  // dw, dh clamp at log(1000 / 16): a 16-pixel anchor grows to at most 1000 pixels.
  const Tensor a16 = boxes_of({0, 0, 16, 16});
  const Tensor big = decode_boxes(Tensor::from_vector({0, 0, 10, 4}, {1, 4}), a16);
  EXPECT_NEAR(big.data<float>()[0], 8 - 500.0, 1e-3);
  EXPECT_NEAR(big.data<float>()[2], 8 + 500.0, 1e-3);
  EXPECT_NEAR(big.data<float>()[3] - big.data<float>()[1], 16 * std::exp(4.0), 1e-3);
}

// ============================================================================================
// Losses
// ============================================================================================

double focal_term(double x, bool target, double alpha = 0.25, double gamma = 2.0) {
  const double p = 1 / (1 + std::exp(-x));
  return target ? -alpha * std::pow(1 - p, gamma) * std::log(p) : -(1 - alpha) * std::pow(p, gamma) * std::log(1 - p);
}

TEST(DetectionLosses, FocalLossHandExample) {
  // Anchors: 0 foreground (GT1, class 2), 1 background, 2 ignored, 3 foreground (GT0, class 0).
  const Tensor logits = Tensor::from_vector({0.5f, -1.0f, 2.0f, -3.0f, 0.0f, 1.0f, 9.0f, 9.0f, 9.0f, 1.5f, -0.5f, -2.0f},
                                            {4, 3});
  const Tensor matched = Tensor::from_vector_i64({1, -1, -2, 0}, {4});
  const Tensor labels = Tensor::from_vector_i64({0, 2}, {2});
  double want = focal_term(0.5, false) + focal_term(-1.0, false) + focal_term(2.0, true) + focal_term(-3.0, false) +
                focal_term(0.0, false) + focal_term(1.0, false) + focal_term(1.5, true) + focal_term(-0.5, false) +
                focal_term(-2.0, false);
  want /= 2;  // two foreground anchors
  const FocalLossResult r = retinanet_focal_loss_forward(logits, matched, labels);
  EXPECT_NEAR(r.loss, want, 1e-6);
  EXPECT_EQ(r.num_foreground, 2);
  // Ignored rows get a zero gradient.
  const Tensor g = retinanet_focal_loss_backward(logits, matched, labels);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(g.data<float>()[6 + k], 0.0f);
  // No foreground: divided by 1.
  const Tensor bg = Tensor::from_vector_i64({-1, -1, -2, -1}, {4});
  EXPECT_NEAR(retinanet_focal_loss_forward(logits, bg, labels).loss,
              focal_term(0.5, false) + focal_term(-1.0, false) + focal_term(2.0, false) + focal_term(-3.0, false) +
                  focal_term(0.0, false) + focal_term(1.0, false) + focal_term(1.5, false) + focal_term(-0.5, false) +
                  focal_term(-2.0, false),
              1e-6);
  // Bad data names the value.
  EXPECT_THROW(retinanet_focal_loss_forward(logits, Tensor::from_vector_i64({2, -1, -2, 0}, {4}), labels), DataError);
  EXPECT_THROW(retinanet_focal_loss_forward(logits, matched, Tensor::from_vector_i64({0, 3}, {2})), DataError);
  EXPECT_THROW(retinanet_focal_loss_forward(logits, Tensor::from_vector_i64({0, 0, 0}, {3}), labels), InvalidArgument);
}

TEST(DetectionLosses, FocalLossGradientByFiniteDifferences) {
  for (float gamma : {2.0f, 1.5f}) {
    SCOPED_TRACE(fmt::format("gamma {}", gamma));
    const std::int64_t A = 40, K = 5, G = 3;
    Tensor logits = random_tensor({A, K}, 41, -4.0f, 3.0f);
    Rng r(42, 1);
    std::vector<std::int64_t> m(A);
    for (auto& v : m) v = static_cast<std::int64_t>(r.below(G + 2)) - 2;
    const Tensor matched = Tensor::from_vector_i64(m, {A});
    const Tensor labels = random_labels(G, K, 43);
    const float dloss = 0.7f;
    const Tensor g = retinanet_focal_loss_backward(logits, matched, labels, 0.25f, gamma, dloss);
    const double h = 1e-2;
    int bad = 0;
    for (std::int64_t i = 0; i < A * K; ++i) {
      float& x = logits.data<float>()[i];
      const float x0 = x;
      x = static_cast<float>(x0 + h);
      const double up = retinanet_focal_loss_forward(logits, matched, labels, 0.25f, gamma).loss;
      x = static_cast<float>(x0 - h);
      const double down = retinanet_focal_loss_forward(logits, matched, labels, 0.25f, gamma).loss;
      x = x0;
      const double fd = dloss * (up - down) / (2 * h);
      if (std::fabs(fd - g.data<float>()[i]) > 1e-4 + 2e-3 * std::fabs(fd) && bad++ < 5)
        ADD_FAILURE() << "logit " << i << ": backward " << g.data<float>()[i] << ", finite difference " << fd;
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(DetectionLosses, BoxLossHandExample) {
  const Tensor anchors = boxes_of({0, 0, 10, 20, 0, 0, 10, 10, 5, 5, 15, 15});
  const Tensor gt = boxes_of({2, 4, 12, 24});
  const Tensor matched = Tensor::from_vector_i64({0, -1, -2}, {3});
  // Target of anchor 0 is (0.2, 0.2, 0, 0).
  const Tensor deltas = Tensor::from_vector({0.5f, 0.1f, -0.25f, 0.0f, 9, 9, 9, 9, 7, 7, 7, 7}, {3, 4});
  EXPECT_NEAR(retinanet_box_loss_forward(deltas, anchors, matched, gt), 0.3 + 0.1 + 0.25 + 0.0, 1e-6);
  const Tensor g = retinanet_box_loss_backward(deltas, anchors, matched, gt, 2.0f);
  EXPECT_TRUE(tensors_close(g, Tensor::from_vector({2, -2, -2, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {3, 4}), 0, 0));
  // Two foreground anchors: the sum is halved.
  const Tensor m2 = Tensor::from_vector_i64({0, 0, -1}, {3});
  const Tensor t1 = encode_boxes(gt, boxes_of({0, 0, 10, 10}));
  double l1 = 0;
  for (int j = 0; j < 4; ++j) l1 += std::fabs(9.0 - t1.data<float>()[j]);
  EXPECT_NEAR(retinanet_box_loss_forward(deltas, anchors, m2, gt), (0.65 + l1) / 2, 1e-5);
  EXPECT_THROW(retinanet_box_loss_forward(deltas, anchors, Tensor::from_vector_i64({1, 0, 0}, {3}), gt), DataError);
}

// The fast CPU focal loss at RetinaNet's size (120,087 anchors x 264 classes) agrees with the
// reference op and says how long it takes.
TEST(DetectionLosses, FocalLossAtRetinaNetScale) {
  const std::int64_t A = 120087, K = 264, G = 12;
  const Tensor logits = random_tensor({A, K}, 51, -9.0f, 2.0f);
  const Tensor anchors = generate_anchors(retinanet_anchor_spec(), 800, 800, kRetinaGrids);
  const Tensor gt = random_boxes(G, 52, 700.0f, 300.0f);
  const Tensor matched = match_anchors(box_iou(gt, anchors));
  const Tensor labels = random_labels(G, K, 53);
  // One untimed backward first: the first touch of a fresh 127 MB output costs page faults.
  (void)retinanet_focal_loss_backward(logits, matched, labels);
  const auto t0 = std::chrono::steady_clock::now();
  const FocalLossResult r = retinanet_focal_loss_forward(logits, matched, labels);
  const auto t1 = std::chrono::steady_clock::now();
  const Tensor g = retinanet_focal_loss_backward(logits, matched, labels);
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("[ timing   ] focal loss %lld x %lld: forward %.1f ms, backward %.1f ms (%lld foreground)\n",
              static_cast<long long>(A), static_cast<long long>(K),
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count(), static_cast<long long>(r.num_foreground));
  EXPECT_GT(r.num_foreground, G);
  // Reference: the plain-loop op on the same call.
  const OpImpl* ref = cpu_reference(OpRegistry::instance().get("retinanet_focal_loss_forward"));
  ASSERT_NE(ref, nullptr);
  OpCall call;
  call.inputs = {logits, matched, labels};
  call.outputs = {Tensor::empty({2})};
  call.attrs.set("alpha", 0.25).set("gamma", 2.0);
  ref->run(call);
  EXPECT_NEAR(r.loss, call.outputs[0].data<float>()[0], 1e-5 * std::fabs(call.outputs[0].data<float>()[0]));
  EXPECT_EQ(g.shape(), logits.shape());
}

// ============================================================================================
// NMS and post-processing
// ============================================================================================

TEST(DetectionNms, HandExampleAndTies) {
  // Box 1 overlaps box 0 with IoU 81 / 119 = 0.68; box 2 is apart; box 3 overlaps box 2 by 1/3.
  const Tensor boxes = boxes_of({0, 0, 10, 10, 1, 1, 11, 11, 20, 20, 30, 30, 25, 20, 35, 30});
  const Tensor scores = Tensor::from_vector({0.9f, 0.8f, 0.7f, 0.95f}, {4});
  EXPECT_EQ(i64_values(nms(boxes, scores, 0.5f)), (std::vector<std::int64_t>{3, 0, 2}));
  EXPECT_EQ(i64_values(nms(boxes, scores, 0.3f)), (std::vector<std::int64_t>{3, 0}));
  EXPECT_EQ(i64_values(nms(boxes, scores, 0.7f)), (std::vector<std::int64_t>{3, 0, 1, 2}));
  // Equal scores: the lower index first (a stable sort), so identical boxes keep the first.
  const Tensor same = boxes_of({0, 0, 10, 10, 0, 0, 10, 10, 0, 0, 10, 10});
  const Tensor tie = Tensor::from_vector({0.5f, 0.5f, 0.5f}, {3});
  EXPECT_EQ(i64_values(nms(same, tie, 0.5f)), (std::vector<std::int64_t>{0}));
  // Classes never suppress each other.
  EXPECT_EQ(i64_values(batched_nms(same, tie, Tensor::from_vector_i64({1, 0, 1}, {3}), 0.5f)),
            (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(nms(boxes_of({}), Tensor::empty({0}), 0.5f).numel(), 0);
  EXPECT_EQ(batched_nms(boxes_of({}), Tensor::empty({0}), Tensor::empty({0}, DType::i64), 0.5f).numel(), 0);
}

// Both batched_nms paths (offsets up to 1000 boxes, per class above) agree with a plain
// per-class greedy NMS written here.
TEST(DetectionNms, BatchedPathsMatchPerClassGreedy) {
  for (std::int64_t n : {300, 2500}) {
    SCOPED_TRACE(fmt::format("{} boxes", n));
    const Tensor boxes = random_boxes(n, 61 + static_cast<std::uint64_t>(n));
    const Tensor scores = random_tensor({n}, 62, 0.0f, 1.0f);
    const Tensor classes = random_labels(n, 5, 63);
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    const float* s = scores.data<float>();
    const float* b = boxes.data<float>();
    const std::int64_t* c = classes.data<std::int64_t>();
    std::stable_sort(order.begin(), order.end(), [&](auto i, auto j) { return s[i] > s[j]; });
    std::vector<std::int64_t> keep;
    for (std::int64_t i : order) {
      bool ok = true;
      for (std::int64_t k : keep) {
        if (c[k] != c[i]) continue;
        const float w = std::max(0.0f, std::min(b[4 * i + 2], b[4 * k + 2]) - std::max(b[4 * i], b[4 * k]));
        const float h = std::max(0.0f, std::min(b[4 * i + 3], b[4 * k + 3]) - std::max(b[4 * i + 1], b[4 * k + 1]));
        const double inter = static_cast<double>(w) * h;
        const double uni = static_cast<double>(b[4 * i + 2] - b[4 * i]) * (b[4 * i + 3] - b[4 * i + 1]) +
                           static_cast<double>(b[4 * k + 2] - b[4 * k]) * (b[4 * k + 3] - b[4 * k + 1]) - inter;
        if (inter / uni > 0.5) ok = false;
      }
      if (ok) keep.push_back(i);
    }
    EXPECT_EQ(i64_values(batched_nms(boxes, scores, classes, 0.5f)), keep);
  }
}

TEST(DetectionPostprocess, HandExample) {
  // One level of 3 anchors and 2 classes. Scores sigmoid(z): anchor 0 class 1 (0.88), anchor 1
  // class 1 (0.82, overlaps anchor 0 with IoU 0.68: suppressed), anchor 2 class 0 (0.62, its box
  // leaves the image and is clipped); the rest are below 0.05.
  const Tensor anchors = boxes_of({0, 0, 10, 10, 1, 1, 11, 11, 95, 95, 105, 105});
  const Tensor logits = Tensor::from_vector({-5, 2, -5, 1.5f, 0.5f, -4}, {3, 2});
  const Tensor deltas = Tensor::zeros({3, 4});
  const Detections d = retinanet_postprocess({logits}, {deltas}, {anchors}, 100, 100);
  EXPECT_EQ(i64_values(d.labels), (std::vector<std::int64_t>{1, 0}));
  EXPECT_TRUE(tensors_close(d.scores, Tensor::from_vector({1 / (1 + std::exp(-2.0f)), 1 / (1 + std::exp(-0.5f))}, {2}),
                            1e-6, 0));
  EXPECT_TRUE(tensors_close(d.boxes, boxes_of({0, 0, 10, 10, 95, 95, 100, 100}), 1e-5, 0));
  // detections_per_img and topk cut.
  EXPECT_EQ(retinanet_postprocess({logits}, {deltas}, {anchors}, 100, 100, 0.05f, 1000, 0.5f, 1).scores.numel(), 1);
  EXPECT_EQ(retinanet_postprocess({logits}, {deltas}, {anchors}, 100, 100, 0.05f, 1, 0.5f, 300).scores.numel(), 1);
}

// ============================================================================================
// torchvision (tools/peers/detection_peer.py)
// ============================================================================================


TEST(DetectionTorchvision, AnchorsEqualAnchorGenerator) {
  SKIP_WITHOUT_TORCHVISION();
  PeerDir p("detection_peer.py", "anchors");
  const AnchorSpec spec = retinanet_anchor_spec();
  std::vector<std::string> sizes, grids;
  for (const auto& l : spec.sizes) sizes.push_back(fmt::format("[{}]", fmt::join(l, ", ")));
  for (const auto& g : kRetinaGrids) grids.push_back(fmt::format("[{}, {}]", g.first, g.second));
  p.extra = fmt::format("\"image_h\": 800, \"image_w\": 800, \"sizes\": [{}], \"aspect_ratios\": [0.5, 1.0, 2.0], "
                        "\"grids\": [{}], ",
                        fmt::join(sizes, ", "), fmt::join(grids, ", "));
  ASSERT_TRUE(p.run("anchors"));
  const Tensor ours = generate_anchors(spec, 800, 800, kRetinaGrids);
  EXPECT_TRUE(tensors_close(ours, p.floats("anchors", ours.shape()), 0, 0));
  // A non-square image and grids that do not divide it (strides 800 // 13 = 61, 600 // 9 = 66).
  PeerDir q("detection_peer.py", "anchors2");
  q.extra = "\"image_h\": 600, \"image_w\": 800, \"sizes\": [[32, 48], [100]], \"aspect_ratios\": [0.5, 1.0, 2.0], "
            "\"grids\": [[75, 100], [9, 13]], ";
  ASSERT_TRUE(q.run("anchors"));
  AnchorSpec s2;
  s2.sizes = {{32, 48}, {100}};
  const Tensor ours2 = generate_anchors(s2, 600, 800, {{75, 100}, {9, 13}});
  EXPECT_TRUE(tensors_close(ours2, q.floats("anchors", ours2.shape()), 0, 0));
}

TEST(DetectionTorchvision, IouMatcherAndBoxCoder) {
  SKIP_WITHOUT_TORCHVISION();
  for (bool snap : {false, true}) {
    SCOPED_TRACE(snap ? "boxes on a grid (ties)" : "random boxes");
    PeerDir p("detection_peer.py", "ops");
    const std::int64_t G = 9, A = 3000;
    const Tensor a = random_boxes(G, 71, 300.0f, 120.0f, snap), b = random_boxes(A, 72, 300.0f, 120.0f, snap);
    const Tensor gt = random_boxes(500, 73), ref = random_boxes(500, 74);
    const Tensor deltas = random_tensor({500, 4}, 75, -5.0f, 5.0f);
    p.put("a", a);
    p.put("b", b);
    p.put("gt", gt);
    p.put("ref", ref);
    p.put("deltas", deltas);
    p.extra = "\"high\": 0.5, \"low\": 0.4, \"weights\": [10.0, 10.0, 5.0, 5.0], ";
    ASSERT_TRUE(p.run("ops"));
    const Tensor iou = box_iou(a, b);
    EXPECT_TRUE(tensors_close(iou, p.floats("iou", {G, A}), 0, 0));
    EXPECT_EQ(i64_values(match_anchors(iou, 0.5f, 0.4f, true)), p.ints("matched"));
    EXPECT_EQ(i64_values(match_anchors(iou, 0.5f, 0.4f, false)), p.ints("matched_nolq"));
    const std::array<float, 4> w{10, 10, 5, 5};
    EXPECT_TRUE(tensors_close(encode_boxes(gt, ref, w), p.floats("enc", {500, 4}), 1e-6, 1e-6));
    EXPECT_TRUE(tensors_close(decode_boxes(deltas, ref, w), p.floats("dec", {500, 4}), 1e-4, 1e-6));
  }
}

TEST(DetectionTorchvision, LossesAndGradientsMatchAutograd) {
  SKIP_WITHOUT_TORCHVISION();
  for (float lo : {-6.0f, -2.0f}) {
    SCOPED_TRACE(fmt::format("logits from {}", lo));
    PeerDir p("detection_peer.py", "losses");
    const std::int64_t A = 2000, K = 13, G = 6;
    const Tensor anchors = random_boxes(A, 81, 300.0f, 100.0f, true);
    const Tensor gt = random_boxes(G, 82, 250.0f, 100.0f, true);
    const Tensor matched = match_anchors(box_iou(gt, anchors), 0.5f, 0.4f, true);
    const Tensor labels = random_labels(G, K, 83);
    const Tensor logits = random_tensor({A, K}, 84, lo, 4.0f), deltas = random_tensor({A, 4}, 85, -1.0f, 1.0f);
    p.put("logits", logits);
    p.put("deltas", deltas);
    p.put("anchors", anchors);
    p.put("matched", matched);
    p.put("gt_boxes", gt);
    p.put("gt_labels", labels);
    ASSERT_TRUE(p.run("losses"));
    const FocalLossResult f = retinanet_focal_loss_forward(logits, matched, labels);
    EXPECT_NEAR(f.loss, p.floats("focal64", {1}).data<float>()[0], 2e-6 * std::fabs(f.loss) + 1e-7);
    EXPECT_NEAR(f.loss, p.floats("focal", {1}).data<float>()[0], 1e-5 * std::fabs(f.loss));
    EXPECT_TRUE(tensors_close(retinanet_focal_loss_backward(logits, matched, labels), p.floats("dlogits64", {A, K}),
                              1e-9, 1e-5));
    EXPECT_TRUE(tensors_close(retinanet_focal_loss_backward(logits, matched, labels), p.floats("dlogits", {A, K}),
                              1e-8, 1e-4));
    EXPECT_NEAR(retinanet_box_loss_forward(deltas, anchors, matched, gt), p.floats("box", {1}).data<float>()[0],
                1e-5 * p.floats("box", {1}).data<float>()[0]);
    EXPECT_TRUE(tensors_close(retinanet_box_loss_backward(deltas, anchors, matched, gt), p.floats("ddeltas", {A, 4}), 1e-9, 1e-6));
  }
}

TEST(DetectionTorchvision, NmsAndBatchedNmsKeepTheSameIndices) {
  SKIP_WITHOUT_TORCHVISION();
  // 600 boxes: batched_nms takes the offset path; 3000: the per-class path. Scores on a coarse grid
  // produce ties, which both sides break by index (stable sort).
  for (auto [n, thr, coarse] : {std::tuple{600, 0.5f, false}, std::tuple{600, 0.3f, true}, std::tuple{3000, 0.5f, true},
                                std::tuple{3000, 0.7f, false}}) {
    SCOPED_TRACE(fmt::format("{} boxes, threshold {}, tied scores {}", n, thr, coarse));
    PeerDir p("detection_peer.py", "nms");
    const Tensor boxes = random_boxes(n, 91 + static_cast<std::uint64_t>(n), 500.0f, 150.0f);
    Tensor scores = random_tensor({n}, 92, 0.0f, 1.0f);
    if (coarse)
      for (std::int64_t i = 0; i < n; ++i) scores.data<float>()[i] = std::round(scores.data<float>()[i] * 20) / 20;
    const Tensor classes = random_labels(n, 7, 93);
    p.put("boxes", boxes);
    p.put("scores", scores);
    p.put("classes", classes);
    // The threshold as the double nearest our f32 value, which is what our comparison uses.
    p.extra = fmt::format("\"iou_threshold\": {}, ", static_cast<double>(thr));
    ASSERT_TRUE(p.run("nms"));
    EXPECT_EQ(i64_values(nms(boxes, scores, thr)), p.ints("keep"));
    const std::vector<std::int64_t> ours = i64_values(batched_nms(boxes, scores, classes, thr));
    const std::vector<std::int64_t> theirs = p.ints("keep_batched");
    if (n <= 1000 || !coarse) {
      EXPECT_EQ(ours, theirs);
    } else {
      // Above 1000 boxes torchvision merges the classes with an unstable sort
      // (scores[keep].sort(descending=True)), whose order among equal scores is unspecified: the
      // same indices, the same score sequence, ours with ties in index order.
      std::vector<std::int64_t> a = ours, b = theirs;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b);
      ASSERT_EQ(ours.size(), theirs.size());
      for (std::size_t i = 0; i < ours.size(); ++i) {
        EXPECT_EQ(scores.data<float>()[ours[i]], scores.data<float>()[theirs[i]]) << "position " << i;
        if (i > 0 && scores.data<float>()[ours[i]] == scores.data<float>()[ours[i - 1]]) EXPECT_LT(ours[i - 1], ours[i]);
      }
    }
  }
}

TEST(DetectionTorchvision, PostprocessMatchesRetinaNet) {
  SKIP_WITHOUT_TORCHVISION();
  PeerDir p("detection_peer.py", "post");
  const std::int64_t K = 11;
  const std::vector<std::pair<std::int64_t, std::int64_t>> grids = {{32, 32}, {16, 16}, {8, 8}};
  AnchorSpec spec;
  spec.sizes = {{32, 40}, {64, 80}, {128, 160}};
  const Tensor all = generate_anchors(spec, 256, 256, grids);
  std::vector<Tensor> logits, deltas, anchors;
  std::int64_t offset = 0;
  for (std::size_t l = 0; l < grids.size(); ++l) {
    const std::int64_t n = grids[l].first * grids[l].second * 6;
    anchors.push_back(all.slice(0, offset, offset + n).contiguous());
    offset += n;
    // Mostly low logits, so that the score threshold and topk (1000 of up to 6144 x 11) both cut.
    logits.push_back(random_tensor({n, K}, 101 + l, -7.0f, 1.0f));
    deltas.push_back(random_tensor({n, 4}, 111 + l, -0.5f, 0.5f));
    p.put(fmt::format("logits{}", l), logits.back());
    p.put(fmt::format("deltas{}", l), deltas.back());
    p.put(fmt::format("anchors{}", l), anchors.back());
  }
  p.extra = "\"levels\": 3, \"image_h\": 200, \"image_w\": 256, \"score_thresh\": 0.05, \"topk\": 1000, "
            "\"nms_thresh\": 0.5, \"detections_per_img\": 300, ";
  ASSERT_TRUE(p.run("post"));
  const Detections d = retinanet_postprocess(logits, deltas, anchors, 200, 256);
  const std::vector<std::int64_t> want_labels = p.ints("post_labels");
  ASSERT_EQ(d.labels.numel(), static_cast<std::int64_t>(want_labels.size()));
  EXPECT_EQ(d.labels.numel(), 300);
  EXPECT_EQ(i64_values(d.labels), want_labels);
  EXPECT_TRUE(tensors_close(d.scores, p.floats("post_scores", d.scores.shape()), 1e-7, 1e-6));
  EXPECT_TRUE(tensors_close(d.boxes, p.floats("post_boxes", d.boxes.shape()), 1e-4, 1e-6));
}

// ============================================================================================
// CUDA against the CPU
// ============================================================================================

TEST(DetectionCuda, KernelsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Device gpu = Device::cuda(0);
  const Device cpu = Device::cpu();
  const Tensor anchors = generate_anchors(retinanet_anchor_spec(), 800, 800, kRetinaGrids);
  const std::int64_t A = anchors.size(0), K = 264, G = 15;
  const Tensor gt = random_boxes(G, 121, 700.0f, 300.0f, true);
  const Tensor iou = box_iou(gt, anchors), iou_g = box_iou(gt.to(gpu), anchors.to(gpu));
  EXPECT_TRUE(tensors_close(iou_g.to(cpu), iou, 0, 0));
  for (bool lq : {true, false}) {
    EXPECT_EQ(i64_values(match_anchors(iou_g, 0.5f, 0.4f, lq)), i64_values(match_anchors(iou, 0.5f, 0.4f, lq)));
  }
  EXPECT_EQ(i64_values(match_anchors(Tensor::empty({0, 5}, DType::f32, gpu))), (std::vector<std::int64_t>(5, -1)));
  const Tensor matched = match_anchors(iou);
  const Tensor gt_all = random_boxes(A, 122);
  EXPECT_TRUE(tensors_close(encode_boxes(gt_all.to(gpu), anchors.to(gpu), {10, 10, 5, 5}).to(cpu),
                            encode_boxes(gt_all, anchors, {10, 10, 5, 5}), 1e-6, 1e-6));
  const Tensor deltas = random_tensor({A, 4}, 123, -5.0f, 5.0f);
  EXPECT_TRUE(tensors_close(decode_boxes(deltas.to(gpu), anchors.to(gpu)).to(cpu), decode_boxes(deltas, anchors), 1e-3,
                            1e-6));

  const Tensor logits = random_tensor({A, K}, 124, -9.0f, 3.0f);
  const Tensor labels = random_labels(G, K, 125);
  for (float gamma : {2.0f, 1.5f}) {
    const FocalLossResult fc = retinanet_focal_loss_forward(logits, matched, labels, 0.25f, gamma);
    const FocalLossResult fg =
        retinanet_focal_loss_forward(logits.to(gpu), matched.to(gpu), labels.to(gpu), 0.25f, gamma);
    EXPECT_NEAR(fg.loss, fc.loss, 1e-5 * std::fabs(fc.loss));
    EXPECT_EQ(fg.num_foreground, fc.num_foreground);
    EXPECT_TRUE(tensors_close(
        retinanet_focal_loss_backward(logits.to(gpu), matched.to(gpu), labels.to(gpu), 0.25f, gamma, 0.5f).to(cpu),
        retinanet_focal_loss_backward(logits, matched, labels, 0.25f, gamma, 0.5f), 1e-9, 1e-5));
  }
  const Tensor small = random_tensor({A, 4}, 126, -0.5f, 0.5f);
  EXPECT_NEAR(retinanet_box_loss_forward(small.to(gpu), anchors.to(gpu), matched.to(gpu), gt.to(gpu)),
              retinanet_box_loss_forward(small, anchors, matched, gt), 1e-5);
  EXPECT_TRUE(tensors_close(retinanet_box_loss_backward(small.to(gpu), anchors.to(gpu), matched.to(gpu), gt.to(gpu)).to(cpu),
                            retinanet_box_loss_backward(small, anchors, matched, gt), 0, 0));
  // Bad data throws from the forward, as on the CPU.
  Tensor bad = matched.clone();
  bad.data<std::int64_t>()[77] = G;
  EXPECT_THROW(retinanet_focal_loss_forward(logits.to(gpu), bad.to(gpu), labels.to(gpu)), DataError);
  EXPECT_THROW(retinanet_box_loss_forward(small.to(gpu), anchors.to(gpu), bad.to(gpu), gt.to(gpu)), DataError);
  // NMS on CUDA inputs runs on the host.
  const Tensor s = random_tensor({G}, 127, 0.0f, 1.0f);
  EXPECT_EQ(i64_values(nms(gt.to(gpu), s.to(gpu), 0.5f)), i64_values(nms(gt, s, 0.5f)));
}

}  // namespace
}  // namespace benchhost::nn
