// BERT (a small shape) on CUDA against the CPU: from the same seeded weights and batches (padded
// and packed, so key-padding and block-diagonal masks both run), a few LAMB steps with dropout
// must give the same losses, accuracies and weights within fp32 tolerance. Skipped visibly
// without a GPU.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "common/gradcheck.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "data.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;

struct TrainRun {
  std::vector<bert::BertOutput> outputs;
  std::vector<std::vector<float>> weights;
};

TrainRun train(Device device, const bert::BertConfig& cfg, const std::vector<bert::BertBatch>& batches) {
  bert::BertModel model(cfg, 5);
  model.to(device);
  optim::LambOptions lo;
  optim::Lamb opt(model.parameters(), lo);
  TrainRun r;
  std::uint64_t step = 0;
  for (const auto& b : batches) {
    model.train(true);
    r.outputs.push_back(model.forward(bert::batch_to(b, device), step++));
    model.backward();
    opt.step(1e-3f);
    opt.zero_grad();
  }
  for (auto* p : model.parameters()) r.weights.push_back(p->value.to_float_vector());
  return r;
}

TEST(BertCuda, LambStepsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const lm::ModelShape shape{.layers = 2, .hidden = 64, .heads = 4, .ffn = 256, .vocab = 200,
                             .max_positions = 64, .seq_len = 32};
  const bert::BertConfig cfg{.shape = shape, .hidden_dropout = 0.1f, .attention_dropout = 0.1f};
  const text::BertSamples s = bert::synthetic_samples(16, 32, 5, 200, 3);
  std::vector<std::int64_t> order(16);
  for (int i = 0; i < 16; ++i) order[i] = i;
  std::vector<bert::BertBatch> batches;
  batches.push_back(bert::make_batch(s, order, 0, 8, 8, false, 1, nullptr));
  batches.push_back(bert::make_batch(s, order, 8, 8, 8, true, 2, nullptr));
  batches.push_back(bert::make_batch(s, order, 0, 8, 8, false, 1, nullptr));
  const TrainRun cpu = train(Device::cpu(), cfg, batches);
  const TrainRun gpu = train(Device::cuda(0), cfg, batches);
  for (std::size_t i = 0; i < cpu.outputs.size(); ++i) {
    EXPECT_NEAR(gpu.outputs[i].loss, cpu.outputs[i].loss, 1e-4 * std::fabs(cpu.outputs[i].loss)) << "step " << i;
    EXPECT_EQ(gpu.outputs[i].mlm_count, cpu.outputs[i].mlm_count);
    EXPECT_EQ(gpu.outputs[i].nsp_count, cpu.outputs[i].nsp_count);
  }
  EXPECT_LE(benchhost::testing::relative_l2(gpu.weights, cpu.weights), 1e-5) << "relative L2 distance of all weights";
}

}  // namespace
