// RNN-T on CUDA against the same model on the CPU: from the same weights and batch, a few
// training steps (transducer loss, gradients, global-norm clip, LAMB with the reference's LR
// policy, EMA) must give the same losses and weights within fp32 tolerance (cuDNN LSTMs and our
// transducer kernels against oneDNN and the CPU kernels), and greedy decoding the same labels.
// Skipped visibly without a GPU.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/transducer.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/optim/ema.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/random.hpp"
#include "small_rnnt.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::rnnt;

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<std::int32_t>> decoded;
};

TrainRun train(Device device, int steps) {
  RnntConfig c;
  c.in_features = 12;
  c.enc_n_hid = 32;
  c.enc_pre_rnn_layers = 2;
  c.enc_post_rnn_layers = 2;
  c.pred_n_hid = 16;
  c.pred_rnn_layers = 2;
  c.joint_n_hid = 24;
  c.n_classes = 10;
  c.enc_dropout = c.pred_dropout = c.joint_dropout = 0;  // dropout masks are device-independent, but keep the check sharp
  Rnnt model(c, 3);
  model.to(device);
  for (nn::Parameter* p : model.parameters()) p->weight_decay = true;
  optim::LambOptions lo;
  lo.epsilon = 1e-9f;
  lo.weight_decay = 1e-3f;
  optim::Lamb lamb(model.parameters(), lo);
  optim::Ema ema(model.parameters(), 0.9f);
  const RnntLrSchedule schedule(0.01f, 1, 1, 0.9, 1e-5f, 2);
  const std::int64_t t = 11, b = 3;
  Rng rng(21, 0);
  Tensor x = Tensor::empty({t, b, c.in_features});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 2.0f * rng.uniform() - 1.0f;
  const Tensor labels = Tensor::from_vector_i32({1, 2, 3, 4, 5, 0, 8, 8, 0}, {b, 3}).to(device);
  const Tensor frames = Tensor::from_vector_i32({6, 4, 2}, {b}).to(device);
  const Tensor llen = Tensor::from_vector_i32({3, 2, 2}, {b}).to(device);
  const Tensor xd = x.to(device);
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    const Tensor logits = model.forward(xd, labels);
    nn::TransducerLossSaved saved;
    const Tensor loss = nn::transducer_loss_forward(logits, labels, frames, llen, {}, &saved);
    model.backward(nn::transducer_loss_backward(saved, 1.0f));
    optim::clip_grad_norm(lamb.parameters(), 1.0f);
    lamb.step(schedule);
    ema.update();
    lamb.zero_grad();
    r.losses.push_back(loss.to(Device::cpu()).item({0}));
  }
  for (nn::Parameter* p : model.parameters()) r.weights.push_back(p->value.to(Device::cpu()).to_float_vector());
  model.train(false);
  r.decoded = model.greedy_decode(xd, {11, 8, 3}, 30, 300);
  return r;
}

TEST(RnntCuda, TrainStepsAndDecodingMatchCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const TrainRun cpu = train(Device::cpu(), 4);
  const TrainRun gpu = train(Device::cuda(0), 4);
  for (std::size_t s = 0; s < cpu.losses.size(); ++s)
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-4 * std::fabs(cpu.losses[s])) << "step " << s;
  double worst = 0;
  for (std::size_t i = 0; i < cpu.weights.size(); ++i)
    for (std::size_t k = 0; k < cpu.weights[i].size(); ++k)
      worst = std::max(worst, static_cast<double>(std::fabs(cpu.weights[i][k] - gpu.weights[i][k])));
  EXPECT_LT(worst, 1e-4) << "largest weight difference after 4 steps";
  EXPECT_EQ(gpu.decoded, cpu.decoded);
  std::printf("losses cpu %.6f gpu %.6f (last step); largest weight difference %.2e\n", cpu.losses.back(), gpu.losses.back(), worst);
}

// Every precision the workload declares trains on the device through the workload (synthetic
// batches): finite losses, fp16's loss scale, the joint's logits in the storage type, decoding.
class RnntCudaPrecision : public ::testing::TestWithParam<std::string> {};

TEST_P(RnntCudaPrecision, TrainStepsRunOnTheDevice) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  RnntWorkload w;
  w.setup(test::small_context(GetParam(), Device::cuda(0)));
  for (int s = 0; s < 3; ++s) {
    w.prepare_batch();
    const StepResult r = w.train_step();
    EXPECT_TRUE(std::isfinite(r.loss)) << "step " << s;
    if (GetParam() == "fp16") EXPECT_GT(r.loss_scale, 1.0);
  }
  const DType storage = GetParam() == "bf16" ? DType::bf16 : GetParam() == "fp16" ? DType::f16 : DType::f32;
  w.model().train(false);
  const Tensor x = Tensor::zeros({9, 2, w.model().config().in_features}).to(Device::cuda(0));
  const Tensor labels = Tensor::from_vector_i32({1, 2, 3, 4}, {2, 2}).to(Device::cuda(0));
  EXPECT_EQ(w.model().forward(x, labels).dtype(), storage);
  EXPECT_EQ(w.model().greedy_decode(x, {9, 5}, 30, 300).size(), 2u);
  w.teardown();
}

INSTANTIATE_TEST_SUITE_P(Precisions, RnntCudaPrecision, ::testing::Values("fp32", "tf32", "bf16", "fp16"),
                         [](const auto& i) { return i.param; });

}  // namespace
