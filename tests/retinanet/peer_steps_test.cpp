// Training steps against torchvision: the same RetinaNet weights and batch through our model,
// the detection toolkit's anchors, matcher and losses (retinanet_batch_loss, as train_step uses
// it), Adam and the reference's iteration warm-up, beside tools/peers/retinanet_peer.py steps
// (torchvision 0.14's AnchorGenerator, Matcher, RetinaNetHead.compute_loss, torch.optim.Adam).
// Each step's classification and box losses and every parameter after the last step must agree.
// Skipped visibly without torch/torchvision.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "benchhost/nn/detection.hpp"
#include "benchhost/nn/serialize.hpp"
#include "common/gradcheck.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::retinanet;
namespace fs = std::filesystem;

bool python_has_torchvision() {
  return std::system("/usr/bin/python3 -c 'import torch, torchvision' > /dev/null 2>&1") == 0;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// A narrow model with the reference's 9 anchors per location (3 sizes x 3 ratios), so the
// anchors, the matcher and both losses run as in the MLPerf configuration; the anchors are
// scaled down by 4 (sizes 8..128) so the 96x96 images' boxes find foreground anchors on every
// level that matters.
RetinaNetConfig narrow(nn::ImageLayout layout, std::int64_t trainable_layers) {
  RetinaNetConfig c;
  c.blocks = {1, 1, 1, 1};
  c.groups = 4;
  c.width_per_group = 2;
  c.stem_channels = 8;
  c.fpn_channels = 16;
  c.num_classes = 5;
  c.num_anchors = 9;
  c.head_convs = 2;
  c.trainable_layers = trainable_layers;
  c.layout = layout;
  return c;
}

std::string peer_options(const RetinaNetConfig& c) {
  return fmt::format("--blocks {},{},{},{} --groups {} --width-per-group {} --stem-channels {} --fpn-channels {} "
                     "--num-classes {} --num-anchors {} --head-convs {} --trainable-layers {}",
                     c.blocks[0], c.blocks[1], c.blocks[2], c.blocks[3], c.groups, c.width_per_group,
                     c.stem_channels, c.fpn_channels, c.num_classes, c.num_anchors, c.head_convs, c.trainable_layers);
}

void steps_match_torchvision(const RetinaNetConfig& c, const char* tag) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_retinanet_steps_{}_{}", tag, ::getpid());
  fs::create_directories(dir);
  const std::int64_t n = 3, s = 96, max_boxes = 4, steps = 4, warmup_iters = 2;
  const float lr = 2e-3f, anchor_scale = 0.25f;
  const double warmup_factor = 0.1;

  RetinaNet model(c);
  model.initialize(7);  // the reference's initialisation: cls bias -log(99), normal(0, 0.01) heads
  nn::save_weights(model, (dir / "init.bhw").string());

  // Images with structure, and boxes of several sizes and classes; the third image has none
  // (every anchor background: its focal loss still counts, its box loss is zero).
  const Tensor images = benchhost::testing::random_tensor({n, 3, s, s}, 11, -2.0f, 2.0f);
  Tensor boxes = Tensor::zeros({n, max_boxes, 4});
  Tensor labels = Tensor::zeros({n, max_boxes}, DType::i64);
  Tensor num_boxes = Tensor::empty({n}, DType::i64);
  const float box_table[2][4][4] = {{{4, 6, 40, 30}, {50, 10, 90, 80}, {20, 44, 36, 60}, {60, 60, 94, 95}},
                                    {{10, 10, 70, 70}, {70, 5, 92, 28}, {0, 80, 30, 96}, {40, 40, 52, 58}}};
  const std::int64_t counts[3] = {4, 3, 0};
  for (std::int64_t b = 0; b < n; ++b) {
    num_boxes.data<std::int64_t>()[b] = counts[b];
    for (std::int64_t j = 0; j < counts[b]; ++j) {
      for (int k = 0; k < 4; ++k) boxes.data<float>()[(b * max_boxes + j) * 4 + k] = box_table[b][j][k];
      labels.data<std::int64_t>()[b * max_boxes + j] = (b + 2 * j) % c.num_classes;
    }
  }
  nn::save_tensors((dir / "batch.bhw").string(),
                   {{"images", images}, {"boxes", boxes}, {"labels", labels}, {"num_boxes", num_boxes}});

  // Our side: what train_step does, on this batch.
  const Tensor input = c.layout == nn::ImageLayout::nhwc ? images.permute({0, 2, 3, 1}).contiguous() : images;
  model.train(true);
  nn::AnchorSpec spec = nn::retinanet_anchor_spec();
  for (auto& sizes : spec.sizes)
    for (double& v : sizes) v *= anchor_scale;
  optim::Adam adam(model.trainable_parameters());
  const IterationWarmupSchedule schedule(lr, warmup_factor, warmup_iters);
  std::vector<std::pair<double, double>> ours;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t k = 0; k < steps; ++k) {
    const HeadOutputs out = model.forward(input);
    const Tensor anchors = nn::generate_anchors(spec, s, s, out.grid_sizes);
    const BatchLoss loss = retinanet_batch_loss(out, anchors, boxes, labels, num_boxes, 1.0f);
    model.backward(loss.dcls, loss.dbox);
    adam.step(schedule);
    adam.zero_grad();
    ours.emplace_back(loss.classification, loss.box_regression);
  }

  const auto t1 = std::chrono::steady_clock::now();
  const fs::path script = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "retinanet_peer.py";
  const fs::path out = dir / "peer.bhw", log = dir / "peer.json";
  const std::string cmd = fmt::format(
      "/usr/bin/python3 '{}' steps --weights '{}' --batch '{}' --out '{}' --steps {} --lr {} --warmup-factor {} "
      "--warmup-iters {} --anchor-scale {} --threads 2 {} > '{}' 2>&1",
      script.string(), (dir / "init.bhw").string(), (dir / "batch.bhw").string(), out.string(), steps, lr,
      warmup_factor, warmup_iters, anchor_scale, peer_options(c), log.string());
  const int rc = std::system(cmd.c_str());
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("%s: ours %.1f s, peer %.1f s\n", tag, std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count());
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  ASSERT_EQ(rc, 0) << cmd << "\n" << text.str();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  const auto theirs = j["losses"].get<std::vector<std::vector<double>>>();
  ASSERT_EQ(theirs.size(), ours.size());
  double worst_loss = 0, worst_update = 0;
  for (std::size_t k = 0; k < ours.size(); ++k) {
    worst_loss = std::max({worst_loss, std::abs(ours[k].first / theirs[k][0] - 1),
                           std::abs(ours[k].second / theirs[k][1] - 1)});
    // Real signal on both terms: the focal loss of a fresh head is ~1.1 per image at 1 %
    // foreground prior, the L1 box loss of matched anchors well above zero.
    EXPECT_GT(theirs[k][0], 0.05) << tag << " step " << k;
    EXPECT_GT(theirs[k][1], 0.01) << tag << " step " << k;
    EXPECT_NEAR(ours[k].first, theirs[k][0], 1e-4 * theirs[k][0]) << tag << " classification loss, step " << k;
    EXPECT_NEAR(ours[k].second, theirs[k][1], 1e-4 * theirs[k][1]) << tag << " box loss, step " << k;
  }
  // The losses moved: the steps trained something (a comparison of frozen models would pass too).
  EXPECT_LT(theirs.back()[0] + theirs.back()[1], theirs.front()[0] + theirs.front()[1]) << tag;

  std::map<std::string, std::vector<float>> peer;
  for (auto& t : nn::load_tensors(out.string())) peer[t.name] = t.tensor.to_float_vector();
  std::int64_t compared = 0;
  std::map<std::string, std::vector<float>> initial;
  for (auto& t : nn::load_tensors((dir / "init.bhw").string())) initial[t.name] = t.tensor.to_float_vector();
  for (nn::Parameter* p : model.parameters()) {
    ASSERT_TRUE(peer.count(p->name)) << p->name;
    const std::vector<float> v = p->value.to_float_vector();
    ASSERT_EQ(v.size(), peer[p->name].size()) << p->name;
    // Adam's first steps move each weight by about lr; compare the updates, not just the weights,
    // so a parameter that neither side moved cannot hide a wrong one.
    std::vector<float> du(v.size()), dp(v.size());
    const std::vector<float>& w0 = initial[p->name];
    for (std::size_t i = 0; i < v.size(); ++i) {
      du[i] = v[i] - w0[i];
      dp[i] = peer[p->name][i] - w0[i];
    }
    const bool moved = std::any_of(dp.begin(), dp.end(), [](float x) { return x != 0.0f; });
    if (!moved) {
      EXPECT_TRUE(std::all_of(du.begin(), du.end(), [](float x) { return x == 0.0f; }))
          << tag << " " << p->name << " is frozen in torchvision but we moved it";
      continue;
    }
    worst_update = std::max(worst_update, rel_l2(du, dp));
    EXPECT_LT(rel_l2(du, dp), 2e-3) << tag << " update of " << p->name;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<std::int64_t>(model.trainable_parameters().size())) << tag;
  std::printf("%s: losses %.4f -> %.4f, worst relative loss difference %.2e, worst update difference %.2e\n", tag,
              theirs.front()[0] + theirs.front()[1], theirs.back()[0] + theirs.back()[1], worst_loss, worst_update);
  fs::remove_all(dir);
}

TEST(RetinaNetPeer, AdamStepsMatchTorchvision) {
  if (!python_has_torchvision()) GTEST_SKIP() << "/usr/bin/python3 has no torch/torchvision: peer comparison skipped";
  steps_match_torchvision(narrow(nn::ImageLayout::nhwc, 3), "nhwc_trainable3");
  steps_match_torchvision(narrow(nn::ImageLayout::nchw, 5), "nchw_trainable5");
}

}  // namespace
