// A few training steps of the plugin's BERT on CPU (padded and packed batches) match
// tools/peers/bert_peer.py (PyTorch) started from the same weight file with the same batches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>

#include "benchhost/nn/serialize.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "data.hpp"
#include "common/lm_peer.hpp"
#include "model.hpp"

using namespace benchhost;

namespace {

using test_support::have_torch;
using test_support::run_peer;

void add_batch(std::vector<nn::NamedTensor>& file, int k, const bert::BertBatch& b) {
  const std::string p = "batch." + std::to_string(k) + ".";
  file.push_back({p + "input_ids", b.input_ids});
  file.push_back({p + "segment_ids", b.segment_ids});
  file.push_back({p + "position_ids", b.position_ids});
  if (b.packed_mask.defined()) file.push_back({p + "packed_mask", b.packed_mask});
  else file.push_back({p + "key_padding", b.key_padding});
  file.push_back({p + "mlm_index", b.mlm_index});
  file.push_back({p + "mlm_labels", b.mlm_labels});
  file.push_back({p + "cls_index", b.cls_index});
  file.push_back({p + "nsp_labels", b.nsp_labels});
}

}  // namespace

TEST(BertPeer, TrainingStepsMatchPyTorch) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch (apt-get install python3-torch)";
  lm::ModelShape s{.layers = 2, .hidden = 32, .heads = 4, .ffn = 64, .vocab = 61, .max_positions = 24, .seq_len = 24};
  bert::BertModel model({.shape = s, .hidden_dropout = 0, .attention_dropout = 0}, 17);
  optim::Lamb opt(model.parameters(), {.beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-6f, .weight_decay = 0.01f});
  optim::WarmupPolySchedule sched({.base_lr = 5e-3f, .warmup_steps = 1, .total_steps = 10, .power = 1.0f, .end_lr = 0.0f});

  // Samples of varying length so that padding and packing both matter.
  text::BertSamples samples = bert::synthetic_samples(24, 24, 4, 61, 3);
  for (std::int64_t i = 0; i < samples.count; ++i) {
    const std::int64_t len = 10 + i % 14;
    for (std::int64_t t = len; t < 24; ++t) {
      samples.input_ids[i * 24 + t] = 0;
      samples.input_mask[i * 24 + t] = 0;
      samples.segment_ids[i * 24 + t] = 0;
    }
    samples.input_ids[i * 24 + len - 1] = 3;
  }
  std::vector<std::int64_t> order(24);
  for (int i = 0; i < 24; ++i) order[i] = (i * 7) % 24;
  std::vector<bert::BertBatch> batches;
  batches.push_back(bert::make_batch(samples, order, 0, 6, 6, false, 1, nullptr));
  batches.push_back(bert::make_batch(samples, order, 6, 6, 6, false, 1, nullptr));
  batches.push_back(bert::make_batch(samples, order, 12, 12, 6, true, 3, nullptr));  // packed
  batches.push_back(bert::make_batch(samples, order, 0, 6, 6, false, 1, nullptr));

  std::vector<nn::NamedTensor> file;
  for (auto* p : model.parameters()) file.push_back({p->name, p->value.clone()});
  std::vector<float> lrs;
  for (int k = 0; k < 4; ++k) {
    add_batch(file, k, batches[k]);
    lrs.push_back(sched.lr(k));
  }
  file.push_back({"lr", Tensor::from_vector(lrs, {4})});
  const std::string path = "/tmp/bh_bert_peer_" + std::to_string(::getpid()) + ".bhw";
  nn::save_tensors(path, file);

  std::vector<double> ours;
  for (int k = 0; k < 4; ++k) {
    ours.push_back(model.forward(batches[k], static_cast<std::uint64_t>(k)).loss);
    model.backward();
    optim::clip_grad_norm(opt.parameters(), 1.0f);
    opt.step(sched);
    opt.zero_grad();
  }
  const std::string config = R"({"layers":2,"hidden":32,"heads":4,"ffn":64,"vocab":61,"max_positions":24,)"
                             R"("beta1":0.9,"beta2":0.999,"eps":1e-6,"weight_decay":0.01,"clip":1.0})";
  const auto theirs = run_peer("/usr/bin/python3 " + std::string(BENCHHOST_SOURCE_DIR) +
                               "/tools/peers/bert_peer.py check --steps 4 --threads 1 --input " + path + " --config '" + config + "'");
  std::remove(path.c_str());
  ASSERT_EQ(theirs.size(), ours.size());
  for (std::size_t k = 0; k < ours.size(); ++k) {
    std::printf("step %zu: benchhost %.6f  pytorch %.6f\n", k, ours[k], theirs[k]);
    EXPECT_NEAR(ours[k], theirs[k], 2e-4 * std::max(1.0, std::abs(theirs[k]))) << "step " << k;
  }
}
