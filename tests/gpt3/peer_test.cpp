// A few training steps of the plugin's GPT-3 on CPU match tools/peers/gpt3_peer.py (PyTorch)
// started from the same weight file with the same batches and learning rates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>

#include "benchhost/nn/serialize.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/random.hpp"
#include "common/lm_peer.hpp"
#include "model.hpp"

using namespace benchhost;

namespace {

using test_support::have_torch;
using test_support::run_peer;

}  // namespace

TEST(Gpt3Peer, TrainingStepsMatchPyTorch) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch (apt-get install python3-torch)";
  lm::ModelShape s{.layers = 2, .hidden = 32, .heads = 4, .ffn = 64, .vocab = 53, .max_positions = 16, .seq_len = 12};
  gpt3::GptModel model({.shape = s}, 11);
  const std::int64_t B = 3, K = 4;
  optim::AdamOptions ao{.beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-8f, .weight_decay = 0.1f};
  optim::AdamW opt(model.parameters(), ao);
  optim::WarmupCosineSchedule sched({.base_lr = 1e-2f, .warmup_steps = 2, .total_steps = 10, .min_lr = 1e-3f});

  std::vector<nn::NamedTensor> file;
  for (auto* p : model.parameters()) file.push_back({p->name, p->value.clone()});
  Rng rng(5);
  std::vector<Tensor> tokens, targets;
  std::vector<float> lrs;
  for (std::int64_t k = 0; k < K; ++k) {
    if (k == K - 1) {  // the last step sees the first batch again: its loss must have dropped
      tokens.push_back(tokens.front());
      targets.push_back(targets.front());
      file.push_back({"batch." + std::to_string(k) + ".tokens", tokens.back()});
      file.push_back({"batch." + std::to_string(k) + ".targets", targets.back()});
      lrs.push_back(sched.lr(k));
      continue;
    }
    std::vector<std::int32_t> seq(B * (s.seq_len + 1)), in(B * s.seq_len), tgt(B * s.seq_len);
    for (auto& t : seq) t = static_cast<std::int32_t>(rng.below(s.vocab));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < s.seq_len; ++t) {
        in[b * s.seq_len + t] = seq[b * (s.seq_len + 1) + t];
        tgt[b * s.seq_len + t] = seq[b * (s.seq_len + 1) + t + 1];
      }
    tokens.push_back(Tensor::from_vector_i32(in, {B, s.seq_len}));
    targets.push_back(Tensor::from_vector_i32(tgt, {B, s.seq_len}));
    file.push_back({"batch." + std::to_string(k) + ".tokens", tokens.back()});
    file.push_back({"batch." + std::to_string(k) + ".targets", targets.back()});
    lrs.push_back(sched.lr(k));
  }
  file.push_back({"lr", Tensor::from_vector(lrs, {K})});
  const std::string path = "/tmp/bh_gpt3_peer_" + std::to_string(::getpid()) + ".bhw";
  nn::save_tensors(path, file);

  std::vector<double> ours;
  for (std::int64_t k = 0; k < K; ++k) {
    ours.push_back(model.forward(tokens[k], targets[k], static_cast<std::uint64_t>(k)));
    model.backward();
    optim::clip_grad_norm(opt.parameters(), 1.0f);
    opt.step(sched);
    opt.zero_grad();
  }
  const std::string config = R"({"layers":2,"hidden":32,"heads":4,"ffn":64,"vocab":53,"max_positions":16,"seq_len":12,)"
                             R"("beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.1,"clip":1.0})";
  const auto theirs = run_peer("/usr/bin/python3 " + std::string(BENCHHOST_SOURCE_DIR) +
                               "/tools/peers/gpt3_peer.py check --steps 4 --threads 1 --input " + path + " --config '" + config + "'");
  std::remove(path.c_str());
  ASSERT_EQ(theirs.size(), ours.size());
  for (std::size_t k = 0; k < ours.size(); ++k) {
    std::printf("step %zu: benchhost %.6f  pytorch %.6f\n", k, ours[k], theirs[k]);
    EXPECT_NEAR(ours[k], theirs[k], 2e-4 * std::max(1.0, std::abs(theirs[k]))) << "step " << k;
  }
  EXPECT_LT(ours.back(), ours.front());  // it learns: the first batch again, lower loss
}
