// 3D U-Net on CUDA against the same model on the CPU: from the same weights and batch, a few SGD
// (Nesterov) steps on the DiceCE loss must give the same losses and weights within fp32
// tolerance, in both layouts (cuDNN Nd convolutions and our instance-norm and loss kernels
// against oneDNN and the CPU kernels). Skipped visibly without a GPU.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/segmentation.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "common/gradcheck.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::unet3d;

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;
};

TrainRun train(Device device, const UNet3dConfig& config, const Tensor& images, const Tensor& labels, int steps) {
  UNet3d model(config);
  model.initialize(7);
  model.to(device);
  optim::SgdOptions so;
  so.momentum = 0.9f;
  so.nesterov = true;
  optim::Sgd sgd(model.parameters(), so);
  const Tensor x = images.to(device), y = labels.to(device);
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    const Tensor logits = model.forward(x);
    const nn::DiceCeResult l = nn::dice_ce_loss_forward(logits, y, config.layout);
    model.backward(nn::dice_ce_loss_backward(l, y, config.layout));
    sgd.step(0.05f);
    sgd.zero_grad();
    r.losses.push_back(l.loss);
  }
  for (auto* p : model.parameters()) r.weights.push_back(p->value.to_float_vector());
  return r;
}

TEST(UNet3dCuda, SgdStepsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (nn::VolumeLayout layout : {nn::VolumeLayout::ndhwc, nn::VolumeLayout::ncdhw}) {
    SCOPED_TRACE(nn::volume_layout_name(layout));
    UNet3dConfig config;
    config.filters = {8, 16, 32, 64};
    config.layout = layout;
    const std::int64_t n = 2, s = 32;
    const Shape xs = layout == nn::VolumeLayout::ncdhw ? Shape{n, 1, s, s, s} : Shape{n, s, s, s, 1};
    const Tensor images = benchhost::testing::random_tensor(xs, 11, -2.0f, 2.0f);
    Tensor labels = Tensor::empty({n, s, s, s}, DType::u8);
    auto* l = labels.data<std::uint8_t>();
    for (std::int64_t i = 0; i < labels.numel(); ++i) l[i] = static_cast<std::uint8_t>((i / 7 + i / 1000) % 3);
    const TrainRun cpu = train(Device::cpu(), config, images, labels, 3);
    const TrainRun gpu = train(Device::cuda(0), config, images, labels, 3);
    ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
    for (std::size_t k = 0; k < cpu.losses.size(); ++k)
      EXPECT_NEAR(gpu.losses[k], cpu.losses[k], 1e-4 * std::fabs(cpu.losses[k]) + 1e-5) << "step " << k;
    EXPECT_LE(benchhost::testing::relative_l2(gpu.weights, cpu.weights), 1e-4) << "relative L2 distance of all weights";
  }
}

}  // namespace
