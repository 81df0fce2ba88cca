// Mask R-CNN's targets and losses (plugins/maskrcnn/targets.hpp) on hand-made cases: the legacy
// IoU, the RPN's anchor labels and loss normalisation, RoI sampling with appended ground truth,
// the box-head loss and the mask targets.

#include <cmath>

#include <gtest/gtest.h>

#include "targets.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::maskrcnn;

TEST(MaskRcnnTargets, LegacyIouCountsPixels) {
  const Tensor a = Tensor::from_vector({0, 0, 9, 9}, {1, 4});
  const Tensor b = Tensor::from_vector({5, 5, 14, 14, 0, 0, 9, 9, 20, 20, 30, 30}, {3, 4});
  const Tensor iou = legacy_box_iou(a, b);
  EXPECT_FLOAT_EQ(iou.data<float>()[0], 25.0f / 175.0f);  // 5 x 5 pixels shared of 10 x 10 each
  EXPECT_FLOAT_EQ(iou.data<float>()[1], 1.0f);
  EXPECT_FLOAT_EQ(iou.data<float>()[2], 0.0f);
}

// One image, one level of 2 x 2 cells and one anchor each (boxes of 8 px at stride 8), one ground
// truth equal to the first anchor: it is the only positive; the anchor crossing the border is
// ignored; the objectness loss is the mean BCE over the sampled anchors and its gradient
// (sigmoid - label) / sampled; the box loss is zero (deltas equal the targets: both zero).
TEST(MaskRcnnTargets, RpnLossLabelsAndNormalises) {
  RpnOutputs out;
  out.objectness.push_back(Tensor::from_vector({0.5f, -1.0f, 2.0f, 0.0f}, {1, 1, 2, 2}));
  out.deltas.push_back(Tensor::zeros({1, 4, 2, 2}));
  out.grid_sizes = {{2, 2}};
  const Tensor anchors = Tensor::from_vector({0, 0, 7, 7, 8, 0, 15, 7, 0, 8, 7, 15, 8, 8, 17, 17}, {4, 4});
  ImageTargets t;
  t.boxes = Tensor::from_vector({0, 0, 7, 7}, {1, 4});
  t.labels = Tensor::from_vector_i64({1}, {1});
  t.height = t.width = 16;  // the last anchor ends at 17: outside, ignored
  const RpnLoss l = rpn_loss(out, {anchors}, {t}, RpnLossSpec{}, 1, 1.0f);
  EXPECT_EQ(l.positive, 1);
  EXPECT_EQ(l.sampled, 3);
  auto bce = [](double x, double y) { return std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x))); };
  EXPECT_NEAR(l.objectness, (bce(0.5, 1) + bce(-1, 0) + bce(2, 0)) / 3, 1e-6);
  EXPECT_NEAR(l.box, 0.0, 1e-9);
  const float* d = l.dobjectness[0].data<float>();
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  EXPECT_NEAR(d[0], (sig(0.5) - 1) / 3, 1e-6);
  EXPECT_NEAR(d[1], sig(-1.0) / 3, 1e-6);
  EXPECT_NEAR(d[2], sig(2.0) / 3, 1e-6);
  EXPECT_EQ(d[3], 0.0f);  // ignored
}

// Proposals with the ground truth appended: the GT matches itself (IoU 1), a far box is
// background; regression targets of the GT against itself are zero; the box loss: cross entropy
// over all sampled RoIs, smooth-L1 (beta 1) of the positive's class deltas over the RoI count.
TEST(MaskRcnnTargets, RoiSamplingAndBoxLoss) {
  ImageTargets t;
  t.boxes = Tensor::from_vector({10, 10, 40, 30}, {1, 4});
  t.labels = Tensor::from_vector_i64({2}, {1});
  t.polygons = {{{10, 10, 40, 10, 40, 30, 10, 30}}};
  t.height = t.width = 64;
  nn::Proposals p;
  p.boxes = Tensor::from_vector({50, 50, 60, 60, 10, 10, 40, 30}, {2, 4});
  p.objectness = Tensor::from_vector({0.9f, 1.0f}, {2});
  const RoiSample s = sample_rois({p}, {t}, RoiSampleSpec{}, 3);
  ASSERT_EQ(s.labels.numel(), 2);
  EXPECT_EQ(s.labels.data<std::int64_t>()[0], 0);
  EXPECT_EQ(s.labels.data<std::int64_t>()[1], 2);
  EXPECT_EQ(s.matched.data<std::int64_t>()[1], 0);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(s.regression_targets.data<float>()[4 + k], 0.0f, 1e-6);
  BoxHeadOutputs out{Tensor::zeros({2, 3}), Tensor::zeros({2, 12})};
  out.box_regression.data<float>()[12 + 8] = 2.0f;  // RoI 1, class 2, dx = 2
  const BoxLoss b = box_head_loss(out, s, 1.0f);
  EXPECT_NEAR(b.classifier, std::log(3.0), 1e-6);
  EXPECT_NEAR(b.box_reg, (2.0 - 0.5) / 2, 1e-6);  // |d| - beta / 2, over 2 RoIs
  EXPECT_NEAR(b.dbox_regression.data<float>()[12 + 8], 0.5f, 1e-6);  // sign(d) / 2
  EXPECT_EQ(b.dbox_regression.data<float>()[8], 0.0f);           // background RoI: no box loss
  const MaskTargets m = mask_targets(s, {t}, 28);
  ASSERT_EQ(m.rois.size(0), 1);
  EXPECT_EQ(m.labels.data<std::int64_t>()[0], 2);
  // The polygon is the RoI itself: the whole 28 x 28 target is set.
  double sum = 0;
  for (std::int64_t i = 0; i < m.targets.numel(); ++i) sum += m.targets.data<float>()[i];
  EXPECT_GT(sum, 0.9 * 28 * 28);
}

}  // namespace
