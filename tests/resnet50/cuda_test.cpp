// ResNet-50 v1.5 on CUDA against the same model on the CPU: from the same weights and batch, a
// few SGD steps must give the same losses and weights within fp32 tolerance (both devices run
// exact f32 math; TF32 is off by default). Skipped visibly without a GPU.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "common/gradcheck.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::resnet;

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;  // every parameter, then every buffer, after the steps
};

TrainRun train(Device device, const ResNetConfig& config, const Tensor& images, const Tensor& labels, int steps) {
  ResNet model(config);
  model.initialize(7);
  model.to(device);
  optim::SgdOptions so;
  so.momentum = 0.9f;
  so.weight_decay = 5e-5f;
  optim::Sgd sgd(model.parameters(), so);
  const Tensor x = images.to(device), y = labels.to(device);
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    const Tensor logits = model.forward(x);
    const auto ce = nn::softmax_cross_entropy_forward(logits, y, 0.1f);
    model.backward(nn::softmax_cross_entropy_backward(ce, y, 0.1f));
    sgd.step(0.02f);
    sgd.zero_grad();
    r.losses.push_back(ce.loss);
  }
  for (auto* p : model.parameters()) r.weights.push_back(p->value.to_float_vector());
  for (auto& [name, t] : model.buffers()) r.weights.push_back(t->to_float_vector());
  return r;
}

TEST(ResNet50Cuda, SgdStepsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  // The full ResNet-50 (every stride and shortcut) on small NHWC images, zero-initialised last
  // BN gamma (well-conditioned steps, Note [Judging fp32 against PyTorch] in peer_test.cpp).
  ResNetConfig config = ResNetConfig::resnet50(1000);
  config.zero_init_last_bn_gamma = true;
  const std::int64_t n = 4, hw = 64;
  const Tensor images = benchhost::testing::random_tensor({n, hw, hw, 3}, 11, -2.0f, 2.0f);
  const Tensor labels = Tensor::from_vector_i64({3, 141, 592, 653}, {n});
  const TrainRun cpu = train(Device::cpu(), config, images, labels, 3);
  const TrainRun gpu = train(Device::cuda(0), config, images, labels, 3);
  ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
  for (std::size_t s = 0; s < cpu.losses.size(); ++s)
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-4 * std::fabs(cpu.losses[s]) + 1e-5) << "step " << s;
  EXPECT_LE(benchhost::testing::relative_l2(gpu.weights, cpu.weights), 1e-4) << "relative L2 distance of all weights and running stats";
}

}  // namespace
