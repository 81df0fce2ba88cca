// RetinaNet on CUDA against the same model on the CPU: from the same weights and batch, the head
// outputs, the batch loss (anchors, matching, focal and L1 losses on the device) and a few Adam
// steps must agree within fp32 tolerance. Skipped visibly without a GPU.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "common/gradcheck.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::retinanet;

TEST(RetinaNetCuda, AdamStepsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  RetinaNetConfig c;
  c.blocks = {1, 1, 1, 1};
  c.groups = 4;
  c.width_per_group = 4;
  c.stem_channels = 16;
  c.fpn_channels = 32;
  c.head_convs = 2;
  c.num_classes = 4;
  c.trainable_layers = 5;
  const std::int64_t s = 128;
  const Tensor images = benchhost::testing::random_tensor({2, s, s, 3}, 5, -2.0f, 2.0f);
  const Tensor boxes = Tensor::from_vector({10, 12, 60, 70, 70, 20, 120, 64, 5, 5, 40, 40, 0, 0, 0, 0}, {2, 2, 4});
  const Tensor labels = Tensor::from_vector_i64({1, 3, 2, -1}, {2, 2});
  const Tensor counts = Tensor::from_vector_i64({2, 1}, {2});
  nn::AnchorSpec spec = nn::retinanet_anchor_spec();
  for (auto& sizes : spec.sizes)
    for (double& v : sizes) v *= 0.5;
  auto run = [&](Device device) {
    RetinaNet model(c);
    model.initialize(3);
    model.to(device);
    optim::Adam adam(model.trainable_parameters(), {});
    std::vector<double> losses;
    Tensor anchors;
    for (int k = 0; k < 3; ++k) {
      const HeadOutputs out = model.forward(images.to(device));
      if (!anchors.defined()) anchors = nn::generate_anchors(spec, s, s, out.grid_sizes).to(device);
      const BatchLoss l = retinanet_batch_loss(out, anchors, boxes.to(device), labels.to(device), counts, 1.0f);
      model.backward(l.dcls, l.dbox);
      adam.step(1e-3f);
      adam.zero_grad();
      losses.push_back(l.total());
    }
    std::vector<std::vector<float>> weights;
    for (auto* p : model.trainable_parameters()) weights.push_back(p->value.to_float_vector());
    return std::make_pair(losses, weights);
  };
  const auto cpu = run(Device::cpu());
  const auto gpu = run(Device::cuda(0));
  for (std::size_t k = 0; k < cpu.first.size(); ++k)
    EXPECT_NEAR(gpu.first[k], cpu.first[k], 1e-4 * std::fabs(cpu.first[k]) + 1e-5) << "step " << k;
  EXPECT_LE(benchhost::testing::relative_l2(gpu.second, cpu.second), 1e-4);
}

std::uint64_t conv_forward_promotions() {
  for (const auto& [op, n] : nn::OpRegistry::instance().promotion_counts())
    if (op == "conv2d_forward") return n;
  return 0;
}

// Under bf16 the FPN and head convolutions run in bf16 on the device, as the backbone's do: the
// only convolutions promoted to f32 are those cuDNN's half kernels cannot take (channel counts
// that are not multiples of 8): the stem's 3 input channels and each level's box regression
// output (9 anchors x 4 = 36 channels). The FPN and head passed their f32 master weights with
// bf16 activations, and every one of them (8 FPN + 6 per level here) was promoted.
TEST(RetinaNetCuda, BfloatForwardPromotesOnlyTheConvolutionsCudnnCannotTake) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  RetinaNetConfig c;
  c.blocks = {1, 1, 1, 1};
  c.groups = 1;
  c.width_per_group = 16;
  c.stem_channels = 16;
  c.fpn_channels = 32;
  c.head_convs = 2;
  c.num_classes = 8;  // 72 class logits per position: a multiple of 8
  c.trainable_layers = 5;
  RetinaNet model(c);
  model.initialize(3);
  model.to(Device::cuda(0));
  model.set_precision(PrecisionPolicy::create("bf16", Device::cuda(0)));
  const Tensor images = benchhost::testing::random_tensor({2, 64, 64, 3}, 5, -2.0f, 2.0f).to(Device::cuda(0));
  const std::uint64_t before = conv_forward_promotions();
  const HeadOutputs out = model.forward(images);
  EXPECT_EQ(conv_forward_promotions() - before, 1u + 5u) << "the stem and the five box-regression outputs only";
  ASSERT_EQ(out.cls_logits.size(), 5u);
}

}  // namespace
