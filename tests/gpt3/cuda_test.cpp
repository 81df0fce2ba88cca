// GPT-3 (a small shape) on CUDA against the CPU: from the same seeded weights and tokens, a few
// AdamW steps with gradient clipping must give the same losses and weights within fp32 tolerance.
// Dropout is on, so the CUDA dropout masks must match the CPU's bit for bit (Note [Dropout
// randomness]). Skipped visibly without a GPU.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "common/gradcheck.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/random.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::gpt3;

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;
};

TrainRun train(Device device, const GptConfig& cfg, const std::vector<std::int32_t>& tokens, int steps) {
  GptModel model(cfg, 5);
  model.to(device);
  optim::AdamOptions ao;
  ao.weight_decay = 0.1f;
  optim::AdamW opt(model.parameters(), ao);
  const std::int64_t B = 2, T = cfg.shape.seq_len;
  std::vector<std::int32_t> in(B * T), tgt(B * T);
  for (std::int64_t i = 0; i < B * T; ++i) {
    in[i] = tokens[i];
    tgt[i] = tokens[i + 1];
  }
  const Tensor x = Tensor::from_vector_i32(in, {B, T}, device), y = Tensor::from_vector_i32(tgt, {B, T}, device);
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    model.train(true);
    r.losses.push_back(model.forward(x, y, static_cast<std::uint64_t>(s)));
    model.backward();
    optim::clip_grad_norm(opt.parameters(), 1.0f);
    opt.step(1e-3f);
    opt.zero_grad();
  }
  for (auto* p : model.parameters()) r.weights.push_back(p->value.to_float_vector());
  return r;
}

TEST(Gpt3Cuda, AdamWStepsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  GptConfig cfg;
  cfg.shape = {.layers = 2, .hidden = 64, .heads = 4, .ffn = 256, .vocab = 300, .max_positions = 64, .seq_len = 32};
  cfg.hidden_dropout = 0.1f;
  cfg.attention_dropout = 0.1f;
  Rng rng(9, 1);
  std::vector<std::int32_t> tokens(2 * 32 + 1);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(300));
  const TrainRun cpu = train(Device::cpu(), cfg, tokens, 3);
  const TrainRun gpu = train(Device::cuda(0), cfg, tokens, 3);
  for (std::size_t s = 0; s < cpu.losses.size(); ++s)
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-4 * std::fabs(cpu.losses[s])) << "step " << s;
  EXPECT_LE(benchhost::testing::relative_l2(gpu.weights, cpu.weights), 1e-5) << "relative L2 distance of all weights";
}

}  // namespace
