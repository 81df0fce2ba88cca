// DLRM-DCNv2 (a small shape) on CUDA against the CPU: from the same seeded weights and batches, a
// few Adagrad steps (sparse rows for the tables) must give the same losses and weights within
// fp32 tolerance, and the model in evaluation the same logits. Skipped visibly without a GPU.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/random.hpp"
#include "common/gradcheck.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;

struct Batch {
  Tensor dense, labels;
  std::vector<Tensor> sparse;
};

Batch make_batch(const dlrm::DlrmConfig& c, std::int64_t rows, std::uint64_t seed) {
  Rng rng(seed, 3);
  std::vector<float> dense(static_cast<std::size_t>(rows * c.num_dense)), labels(static_cast<std::size_t>(rows));
  for (auto& d : dense) d = std::log(1.0f + 10.0f * rng.uniform());
  for (auto& l : labels) l = rng.uniform() < 0.3f ? 1.0f : 0.0f;
  Batch b{Tensor::from_vector(dense, {rows, c.num_dense}), Tensor::from_vector(labels, {rows}), {}};
  for (std::size_t k = 0; k < c.table_sizes.size(); ++k) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(rows * c.hotness[k]));
    for (auto& i : ids) i = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(c.table_sizes[k])));
    b.sparse.push_back(Tensor::from_vector_i32(ids, {rows, c.hotness[k]}));
  }
  return b;
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;
  std::vector<float> eval_logits;
};

TrainRun train(Device device, const dlrm::DlrmConfig& c, const std::vector<Batch>& batches) {
  dlrm::DlrmDcnV2 model(c);
  model.initialize(7);
  model.to(device);
  optim::AdagradOptions ao;
  ao.epsilon = 1e-10f;
  optim::Adagrad opt(model.parameters(), ao);
  TrainRun r;
  auto on = [&](const std::vector<Tensor>& xs) {
    std::vector<Tensor> out;
    for (const auto& x : xs) out.push_back(x.to(device));
    return out;
  };
  for (std::size_t s = 0; s + 1 < batches.size(); ++s) {
    const Batch& b = batches[s];
    model.train(true);
    const Tensor logits = model.forward(b.dense.to(device), on(b.sparse));
    const Tensor labels = b.labels.to(device);
    r.losses.push_back(nn::bce_with_logits_forward(logits, labels));
    model.backward(nn::bce_with_logits_backward(logits, labels));
    opt.step(0.05f);
    model.zero_grad_fast();
  }
  for (auto* p : model.parameters()) r.weights.push_back(p->value.to_float_vector());
  model.train(false);
  r.eval_logits = model.forward(batches.back().dense.to(device), on(batches.back().sparse)).to_float_vector();
  return r;
}

TEST(DlrmCuda, AdagradStepsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  dlrm::DlrmConfig c;
  c.table_sizes = {50, 7, 200, 31};
  c.hotness = {3, 1, 12, 2};
  c.embedding_dim = 16;
  c.bottom_mlp = {32, 16};
  c.top_mlp = {64, 32, 1};
  c.cross_layers = 2;
  c.cross_rank = 24;
  std::vector<Batch> batches;
  for (std::uint64_t s = 0; s < 4; ++s) batches.push_back(make_batch(c, 64, s));
  const TrainRun cpu = train(Device::cpu(), c, batches);
  const TrainRun gpu = train(Device::cuda(0), c, batches);
  for (std::size_t s = 0; s < cpu.losses.size(); ++s)
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-5 * std::fabs(cpu.losses[s]) + 1e-6) << "step " << s;
  EXPECT_LE(benchhost::testing::relative_l2(gpu.weights, cpu.weights), 1e-4) << "relative L2 distance of all weights";
  EXPECT_LE(benchhost::testing::relative_l2({gpu.eval_logits}, {cpu.eval_logits}), 1e-4) << "evaluation logits";
}

}  // namespace
