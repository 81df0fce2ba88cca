// Mask R-CNN on CUDA against the same model on the CPU: from the same weights, images and RoIs,
// the RPN, box-head and mask-head outputs and every gradient agree within fp32 tolerance; and the
// workload's training steps run on the device (targets and proposals on the host). Skipped
// visibly without a GPU.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "benchhost/random.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::maskrcnn;

Tensor random(const Shape& s, Rng& rng) {
  Tensor t = Tensor::empty(s);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(-1.0f, 1.0f);
  return t;
}

double rel_l2(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_float_vector(), y = b.to_float_vector();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(y[i]) * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(MaskRcnnCuda, OutputsAndGradientsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  MaskRcnnConfig c;
  c.blocks = {1, 1, 1, 1};
  c.stem_channels = 16;
  c.fpn_channels = 32;
  c.num_classes = 5;
  c.representation_size = 64;
  c.mask_convs = 2;
  c.mask_channels = 16;
  c.freeze_at = 0;
  Rng rng(4, 2);
  const Tensor images = random({2, 3, 128, 160}, rng);
  const Tensor rois = Tensor::from_vector({0, 3, 4, 40, 30, 1, 10, 12, 150, 120, 0, 20, 1, 29, 50, 1, 0, 0, 159, 127}, {4, 5});
  struct Result {
    std::vector<Tensor> outputs, grads;
  };
  auto run = [&](Device device) {
    MaskRcnn m(c);
    m.initialize(9);
    m.to(device);
    m.train(true);
    const RpnOutputs out = m.forward(images.to(device));
    const BoxHeadOutputs bo = m.box_head(rois.to(device));
    const Tensor ml = m.mask_head(rois.to(device));
    Rng g(8, 0);
    std::vector<Tensor> dobj, ddel;
    Result r;
    for (std::size_t l = 0; l < out.objectness.size(); ++l) {
      dobj.push_back(random(out.objectness[l].shape(), g).to(device));
      ddel.push_back(random(out.deltas[l].shape(), g).to(device));
      r.outputs.push_back(out.objectness[l].to(Device::cpu()));
      r.outputs.push_back(out.deltas[l].to(Device::cpu()));
    }
    const Tensor dc = random(bo.class_logits.shape(), g).to(device), db = random(bo.box_regression.shape(), g).to(device),
                 dm = random(ml.shape(), g).to(device);
    r.outputs.push_back(bo.class_logits.to(Device::cpu()));
    r.outputs.push_back(bo.box_regression.to(Device::cpu()));
    r.outputs.push_back(ml.to(Device::cpu()));
    m.zero_grad();
    m.backward(dobj, ddel, dc, db, dm);
    for (nn::Parameter* p : m.trainable_parameters()) r.grads.push_back(p->grad.to(Device::cpu()));
    return r;
  };
  const Result cpu = run(Device::cpu()), gpu = run(Device::cuda(0));
  ASSERT_EQ(cpu.outputs.size(), gpu.outputs.size());
  for (std::size_t i = 0; i < cpu.outputs.size(); ++i) EXPECT_LT(rel_l2(gpu.outputs[i], cpu.outputs[i]), 1e-4) << "output " << i;
  ASSERT_EQ(cpu.grads.size(), gpu.grads.size());
  for (std::size_t i = 0; i < cpu.grads.size(); ++i) EXPECT_LT(rel_l2(gpu.grads[i], cpu.grads[i]), 1e-3) << "gradient " << i;
}

// Every precision the workload declares trains on the device: finite losses, a mask loss, the
// heads' outputs in the policy's storage type (fp16 with its loss scale).
class MaskRcnnCudaPrecision : public ::testing::TestWithParam<std::string> {};

TEST_P(MaskRcnnCudaPrecision, TrainStepsRunOnTheDevice) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  RunContext ctx;
  ctx.mode = "train";
  ctx.device = Device::cuda(0);
  ctx.precision = GetParam();
  ctx.seed = 3;
  ctx.num_threads = 2;
  ctx.synthetic_data = true;
  ctx.options = declared_options<MaskRcnnWorkload>({{"blocks", "1,1,1,1"}, {"stem-channels", "16"}, {"fpn-channels", "32"},
                                                    {"num-classes", "5"}, {"representation-size", "64"},
                                                    {"mask-convs", "2"}, {"mask-channels", "16"}, {"freeze-at", "0"},
                                                    {"min-size", "128"}, {"pixel-std", "57"}, {"batch-size", "4"},
                                                    {"pretrained-backbone", "false"}});
  MaskRcnnWorkload w;
  w.setup(ctx);
  for (int k = 0; k < 3; ++k) {
    w.prepare_batch();
    const StepResult r = w.train_step();
    EXPECT_TRUE(std::isfinite(r.loss)) << "step " << k;
    EXPECT_GT(w.last_losses().mask, 0.0) << "step " << k;
    if (GetParam() == "fp16") EXPECT_GT(r.loss_scale, 1.0);
  }
  const DType storage = GetParam() == "bf16" ? DType::bf16 : GetParam() == "fp16" ? DType::f16 : DType::f32;
  w.model().train(false);
  const RpnOutputs probe = w.model().forward(Tensor::zeros({1, 3, 128, 128}).to(Device::cuda(0)));
  EXPECT_EQ(probe.objectness[0].dtype(), storage);
  EXPECT_TRUE(probe.objectness[0].device().is_cuda());
  w.teardown();
}

INSTANTIATE_TEST_SUITE_P(Precisions, MaskRcnnCudaPrecision, ::testing::Values("fp32", "tf32", "bf16", "fp16"),
                         [](const auto& i) { return i.param; });

}  // namespace
