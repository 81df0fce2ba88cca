// The unet3d workload: the exact reference model (parameter count, names, shapes), its backward
// by finite differences, layouts agreeing, the reference LR schedule, options and MLPerf rules,
// and the workload's modes on a small generated KiTS19 set.

#include <cmath>
#include <limits>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/segmentation.hpp"
#include "benchhost/random.hpp"
#include "common/shipped_configs.hpp"
#include "synthetic.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::unet3d;
namespace fs = std::filesystem;

// Two halvings (the input block's level and the bottleneck): sides a multiple of 4, at least 8.
UNet3dConfig small_config(nn::VolumeLayout layout) {
  UNet3dConfig c;
  c.filters = {4, 8};
  c.layout = layout;
  return c;
}

Tensor random_tensor(const Shape& shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed, 3);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * static_cast<float>(rng.uniform());
  return t;
}

Tensor random_labels(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::u8);
  Rng rng(seed, 5);
  auto* p = t.data<std::uint8_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<std::uint8_t>(rng.uniform() * 3.0) % 3;
  return t;
}

TEST(UNet3d, ParameterCountIsTheReference) {
  EXPECT_EQ(count_parameters(UNet3dConfig{}), 31190243);
  UNet3d model(UNet3dConfig{});
  EXPECT_EQ(model.num_parameters(), 31190243);
  EXPECT_EQ(count_parameters(small_config(nn::VolumeLayout::ndhwc)), UNet3d(small_config(nn::VolumeLayout::ndhwc)).num_parameters());
}

TEST(UNet3d, ParameterNamesAreTheReferenceStateDict) {
  UNet3d model(UNet3dConfig{});
  std::map<std::string, Shape> shapes;
  for (nn::Parameter* p : model.parameters()) shapes[p->name] = p->value.shape();
  EXPECT_EQ(shapes.at("input_block.conv1.0.weight"), (Shape{32, 1, 3, 3, 3}));
  EXPECT_EQ(shapes.at("input_block.conv1.1.weight"), (Shape{32}));
  EXPECT_EQ(shapes.at("downsample.3.conv1.0.weight"), (Shape{320, 256, 3, 3, 3}));
  EXPECT_EQ(shapes.at("bottleneck.conv2.0.weight"), (Shape{320, 320, 3, 3, 3}));
  EXPECT_EQ(shapes.at("upsample.0.upsample_conv.0.weight"), (Shape{320, 320, 2, 2, 2}));
  EXPECT_EQ(shapes.at("upsample.1.upsample_conv.0.weight"), (Shape{320, 256, 2, 2, 2}));
  EXPECT_EQ(shapes.at("upsample.1.upsample_conv.0.bias"), (Shape{256}));
  EXPECT_EQ(shapes.at("upsample.1.conv1.0.weight"), (Shape{256, 512, 3, 3, 3}));
  EXPECT_EQ(shapes.at("upsample.4.conv2.1.bias"), (Shape{32}));
  EXPECT_EQ(shapes.at("output.conv.0.weight"), (Shape{3, 32, 1, 1, 1}));
  EXPECT_EQ(shapes.at("output.conv.0.bias"), (Shape{3}));
  EXPECT_EQ(shapes.count("input_block.conv1.0.bias"), 0u);  // normalised convs have no bias
  EXPECT_EQ(shapes.size(), 2u * 3 + 8u * 3 + 2u * 3 + 5u * (2 + 6) + 2u);
}

TEST(UNet3d, InitialisationIsPytorchDefault) {
  UNet3d model(small_config(nn::VolumeLayout::ncdhw));
  model.initialize(3);
  for (nn::Parameter* p : model.parameters()) {
    SCOPED_TRACE(p->name);
    const float* v = p->value.data<float>();
    double max_abs = 0;
    for (std::int64_t i = 0; i < p->value.numel(); ++i) max_abs = std::max(max_abs, std::abs(static_cast<double>(v[i])));
    if (p->name.find(".1.weight") != std::string::npos) {
      EXPECT_EQ(max_abs, 1.0);
    } else if (p->name.find(".1.bias") != std::string::npos) {
      EXPECT_EQ(max_abs, 0.0);
    } else {
      // U(+-1/sqrt(fan_in)); a transposed conv's fan_in is its output channels x 8.
      double fan_in = 0;
      if (p->name.find("upsample_conv") != std::string::npos)
        fan_in = 8.0 * (p->name.find("upsample.0.") == 0 ? 8 : 4);  // upsample.0: 8 -> 8, upsample.1: 8 -> 4
      else if (p->name.find("output") == 0)
        fan_in = 4;
      if (fan_in > 0) EXPECT_LE(max_abs, 1.0 / std::sqrt(fan_in) + 1e-7);
      EXPECT_GT(max_abs, 0.0);
    }
  }
}

TEST(UNet3d, ForwardShapesAndMacs) {
  UNet3d model(small_config(nn::VolumeLayout::ncdhw));
  model.initialize(1);
  const Tensor y = model.forward(random_tensor({2, 1, 16, 12, 8}, 1));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 16, 12, 8}));
  EXPECT_THROW(model.forward(random_tensor({1, 1, 10, 16, 16}, 1)), InvalidArgument);  // 10 is not a multiple of 4
  EXPECT_THROW(model.forward(random_tensor({1, 1, 4, 16, 16}, 1)), InvalidArgument);   // a 1-voxel bottleneck
  // The full model: 477.1 GMAC per 128^3 patch forward, by hand level by level (the 128^3
  // levels: 1.8 + 58.0 input block, 116.0 + 58.0 + 4.3 the last upsample block, 0.2 head; ...).
  UNet3d full(UNet3dConfig{});
  const double macs = full.forward_macs(128, 128, 128);
  EXPECT_GT(macs, 476.5e9);
  EXPECT_LT(macs, 477.5e9);
}

// Loss of the whole model on fixed data, for finite differences.
double loss_of(UNet3d& model, const Tensor& x, const Tensor& labels) {
  const Tensor logits = model.forward(x);
  return nn::dice_ce_loss_forward(logits, labels, model.config().layout).loss;
}

// The composed backward (skips, concatenation, transposed convs, instance norms) against central
// differences on a few parameters of each kind.
void check_composed_backward(const UNet3dConfig& base, std::int64_t side, std::int64_t batch) {
  for (nn::VolumeLayout layout : {nn::VolumeLayout::ncdhw, nn::VolumeLayout::ndhwc}) {
    SCOPED_TRACE(nn::volume_layout_name(layout));
    UNet3dConfig config = base;
    config.layout = layout;
    UNet3d model(config);
    model.initialize(5);
    const Shape xs = layout == nn::VolumeLayout::ncdhw ? Shape{batch, 1, side, side, side} : Shape{batch, side, side, side, 1};
    const Tensor x = random_tensor(xs, 11);
    const Tensor labels = random_labels({batch, side, side, side}, 12);
    model.zero_grad();
    const Tensor logits = model.forward(x);
    const nn::DiceCeResult l = nn::dice_ce_loss_forward(logits, labels, layout);
    model.backward(nn::dice_ce_loss_backward(l, labels, layout));
    int checked = 0;
    for (nn::Parameter* p : model.parameters()) {
      const bool pick = p->name == "input_block.conv1.0.weight" || p->name == "downsample.0.conv2.1.weight" ||
                        p->name == "bottleneck.conv1.0.weight" || p->name == "upsample.0.upsample_conv.0.bias" ||
                        p->name == "upsample.1.conv1.0.weight" || p->name == "upsample.1.conv2.1.bias" || p->name == "output.conv.0.bias" ||
                        p->name == "upsample.1.upsample_conv.0.weight";
      if (!pick) continue;
      SCOPED_TRACE(p->name);
      float* w = p->value.data<float>();
      const float* g = p->grad.data<float>();
      for (std::int64_t i : {std::int64_t{0}, p->value.numel() / 2, p->value.numel() - 1}) {
        const float keep = w[i];
        // Central differences at several steps: a step that carries a voxel across a ReLU kink
        // is off, so the closest one must agree (a wrong gradient agrees with none).
        double best = std::numeric_limits<double>::infinity(), numeric = 0;
        for (float h : {1e-2f, 3e-3f, 1e-3f}) {
          w[i] = keep + h;
          const double up = loss_of(model, x, labels);
          w[i] = keep - h;
          const double down = loss_of(model, x, labels);
          w[i] = keep;
          const double d = (up - down) / (2.0 * h);
          if (std::abs(d - g[i]) < best) best = std::abs(d - g[i]), numeric = d;
        }
        EXPECT_LE(best, 5e-4 + 3e-2 * std::abs(numeric)) << "element " << i << ": analytic " << g[i] << ", numeric " << numeric;
        ++checked;
      }
    }
    EXPECT_EQ(checked, 24);
  }
}

TEST(UNet3d, ComposedBackwardMatchesFiniteDifferences) { check_composed_backward(small_config(nn::VolumeLayout::ncdhw), 8, 1); }

// The mini configuration's sizes (filters 8,16,32,64, 32^3 patches, batch 2): other oneDNN kernels
// (channel blocking) than the tiny case above.
TEST(UNet3d, MiniSizedBackwardMatchesFiniteDifferences) {
  UNet3dConfig c;
  c.filters = {8, 16, 32, 64};
  check_composed_backward(c, 32, 2);
}

// NCDHW and NDHWC models with the same weights compute the same logits.
TEST(UNet3d, LayoutsAgree) {
  UNet3d a(small_config(nn::VolumeLayout::ncdhw)), b(small_config(nn::VolumeLayout::ndhwc));
  a.initialize(9);
  b.initialize(9);
  const Tensor x = random_tensor({1, 1, 8, 8, 16}, 4);
  const Tensor ya = a.forward(x);
  const Tensor yb = nn::permute_copy(b.forward(x.contiguous().view({1, 8, 8, 16, 1})), {0, 4, 1, 2, 3});
  ASSERT_EQ(ya.shape(), yb.shape());
  const float* pa = ya.data<float>();
  const float* pb = yb.contiguous().data<float>();
  for (std::int64_t i = 0; i < ya.numel(); ++i) ASSERT_NEAR(pa[i], pb[i], 1e-4) << i;
}

// runtime/training.py: lr at (1-based) epoch e <= W is init + (base - init) * e / W, then base.
TEST(UNet3dSchedule, ReferenceWarmupByEpoch) {
  EpochWarmupSchedule s(1e-4f, 0.8f, 200, 84);
  EXPECT_NEAR(s.lr(0), 1e-4 + (0.8 - 1e-4) / 200, 1e-7);
  EXPECT_NEAR(s.lr(83), 1e-4 + (0.8 - 1e-4) / 200, 1e-7);
  EXPECT_NEAR(s.lr(84), 1e-4 + 2 * (0.8 - 1e-4) / 200, 1e-7);
  EXPECT_NEAR(s.lr(199 * 84), 0.8, 1e-6);
  EXPECT_NEAR(s.lr(1000 * 84), 0.8, 1e-7);
  EpochWarmupSchedule none(1e-4f, 0.5f, 0, 10);
  EXPECT_EQ(none.lr(0), 0.5f);
}

// runtime/training.py with lr_decay_epochs: MultiStepLR stepped after each epoch multiplies the rate
// once per boundary behind the current epoch; a boundary inside the warm-up is overwritten by the
// next warm-up epoch; a boundary given twice counts twice (its milestones are a Counter).
TEST(UNet3dSchedule, ReferenceMultiStepDecayAfterTheWarmup) {
  EpochWarmupSchedule s(0.0f, 0.8f, 2, 10, {1, 2, 5, 5}, 0.5);
  EXPECT_NEAR(s.lr(0), 0.4, 1e-7);   // epoch 1: warm-up
  EXPECT_NEAR(s.lr(19), 0.8, 1e-7);  // epoch 2: warm-up sets 0.8 again (boundary 1 is lost)
  EXPECT_NEAR(s.lr(20), 0.4, 1e-7);  // epoch 3: after boundary 2
  EXPECT_NEAR(s.lr(49), 0.4, 1e-7);  // epoch 5
  EXPECT_NEAR(s.lr(50), 0.1, 1e-7);  // epoch 6: boundary 5 twice
  EpochWarmupSchedule no_warmup(1e-4f, 1.0f, 0, 10, {1, 3}, 0.1);
  EXPECT_EQ(no_warmup.lr(9), 1.0f);
  EXPECT_NEAR(no_warmup.lr(10), 0.1, 1e-7);
  EXPECT_NEAR(no_warmup.lr(30), 0.01, 1e-8);
  EXPECT_NE(s.describe().find("x0.5 after epochs 1,2,5,5"), std::string::npos) << s.describe();
  // The options: boundaries are epochs from 1, the factor is in (0, 1].
  EXPECT_THROW(declared_options<UNet3dWorkload>({{"lr-decay-epochs", "0"}}), InvalidArgument);
  EXPECT_THROW(declared_options<UNet3dWorkload>({{"lr-decay-factor", "0"}}), InvalidArgument);
  EXPECT_THROW(declared_options<UNet3dWorkload>({{"lr-decay-factor", "1.5"}}), InvalidArgument);
}

TEST(UNet3dWorkload, DefaultsAreTheMlperfReference) {
  test_support::expect_defaults_are_mlperf_conf<UNet3dWorkload>("unet3d");
  test_support::expect_shipped_configs_allowed<UNet3dWorkload>("unet3d", {"mlperf.conf", "mini.conf"});
}

TEST(UNet3dWorkload, DeclaresTheMlperfRulesOfUnet3d) {
  const WorkloadInfo info = UNet3dWorkload::describe();
  EXPECT_EQ(info.benchmark, "unet3d");
  const mlperf::Rules& r = info.mlperf;
  EXPECT_TRUE(r.closed_division);
  EXPECT_EQ(r.runs, 40);
  EXPECT_EQ(r.olympic_drop_each_side, 4);
  ASSERT_TRUE(r.closed_target.min.has_value());
  EXPECT_EQ(*r.closed_target.min, 0.908);
  std::map<std::string, const mlperf::LoggedKey*> keys;
  for (const mlperf::LoggedKey& k : r.keys) EXPECT_TRUE(keys.emplace(k.key, &k).second) << k.key << " twice";
  for (const char* k : {"global_batch_size", "opt_name", "opt_base_learning_rate", "opt_learning_rate_warmup_epochs",
                        "opt_learning_rate_decay_boundary_epochs", "opt_learning_rate_decay_factor", "opt_weight_decay",
                        "opt_momentum", "oversampling", "training_input_shape", "validation_input_shape",
                        "validation_overlap", "train_samples"})
    EXPECT_TRUE(keys.count(k)) << k;
}

RunContext context(std::map<std::string, std::string> options, const std::string& mode = "ttt") {
  RunContext ctx;
  ctx.mode = mode;
  ctx.device = Device::cpu();
  ctx.precision = "fp32";
  ctx.seed = 7;
  ctx.num_threads = 2;
  ctx.options = declared_options<UNet3dWorkload>(std::move(options));
  return ctx;
}

// A tiny generated set through the real reader, loader, loss, optimizer and sliding window.
TEST(UNet3dWorkload, TrainsAndEvaluatesOnGeneratedVolumes) {
  const fs::path dir = fs::temp_directory_path() / ("unet3d_workload_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RunContext ctx = context({{"data-dir", dir.string()}, {"generate", "true"}, {"gen-train-cases", "4"},
                            {"gen-eval-cases", "2"}, {"gen-size-min", "32"}, {"gen-size-max", "36"},
                            {"filters", "4,8"}, {"patch-size", "16,16,16"}, {"roi-size", "16,16,16"},
                            {"batch-size", "2"}, {"warmup-epochs", "1"}, {"base-lr", "0.1"},
                            {"start-eval-at", "2"}, {"evaluate-every", "1"}, {"lr-decay-epochs", "3,5"},
                            {"lr-decay-factor", "0.5"}});
  UNet3dWorkload w;
  const RunInfo info = w.setup(ctx);
  EXPECT_EQ(info.samples_per_epoch, 4);
  EXPECT_EQ(info.eval_samples, 2);
  EXPECT_EQ(info.eval_every_samples, 4);
  EXPECT_EQ(info.eval_start_samples, 8);  // start-eval-at 2 passes over 4 cases
  EXPECT_EQ(info.train_samples, 4);
  EXPECT_GT(info.train_flops_per_sample, 0);
  w.begin_epoch(0);
  for (int s = 0; s < 4; ++s) {
    w.prepare_batch();
    const StepResult r = w.train_step();
    EXPECT_EQ(r.samples, 2);
    EXPECT_TRUE(std::isfinite(r.loss));
    EXPECT_GT(r.loss, 0.0);
  }
  const EvalResult e = w.evaluate();
  EXPECT_EQ(e.samples, 2);
  EXPECT_GE(e.metric, 0.0);
  EXPECT_LT(e.metric, 1.0);
  bool logged_shape = false, logged_boundaries = false, logged_factor = false;
  for (const auto& [k, v] : w.hyperparameters()) {
    if (k == "training_input_shape") logged_shape = std::get<std::vector<double>>(v) == std::vector<double>{16, 16, 16};
    if (k == "opt_learning_rate_decay_boundary_epochs")
      logged_boundaries = std::get<std::vector<double>>(v) == std::vector<double>{3, 5};
    if (k == "opt_learning_rate_decay_factor") logged_factor = std::get<double>(v) == 0.5;
  }
  EXPECT_TRUE(logged_shape);
  EXPECT_TRUE(logged_boundaries);
  EXPECT_TRUE(logged_factor);
  w.teardown();
  fs::remove_all(dir);
}

TEST(UNet3dWorkload, SyntheticThroughputAndInference) {
  RunContext train = context({{"filters", "4,8"}, {"patch-size", "16,16,16"}}, "train");
  train.synthetic_data = true;
  UNet3dWorkload w;
  w.setup(train);
  const StepResult r = w.train_step();
  EXPECT_EQ(r.samples, 2);
  EXPECT_TRUE(std::isfinite(r.loss));
  w.teardown();
  UNet3dWorkload inf;
  inf.setup(context({{"filters", "4,8"}, {"patch-size", "16,16,16"}}, "infer"));
  EXPECT_EQ(inf.infer_step().samples, 2);
}

TEST(UNet3dWorkload, BadSetupsAreClearErrors) {
  UNet3dWorkload w;
  // A patch the model cannot take (3 levels need multiples of 8 and at least 16).
  EXPECT_THROW(w.setup(context({{"filters", "4,8,8"}, {"patch-size", "12,16,16"}}, "train")), InvalidArgument);
  UNet3dWorkload u;
  EXPECT_THROW(u.setup(context({{"filters", "4,8,8"}, {"patch-size", "8,8,8"}}, "train")), InvalidArgument);
  // No data directory for time-to-train.
  try {
    UNet3dWorkload v;
    v.setup(context({{"filters", "4,8"}, {"patch-size", "16,16,16"}}));
    FAIL() << "setup without data-dir succeeded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unet3d.data-dir"), std::string::npos) << e.what();
  }
  // A data directory that is not there (and no generator) names it.
  try {
    UNet3dWorkload v;
    v.setup(context({{"filters", "4,8"}, {"patch-size", "16,16,16"}, {"data-dir", "/nonexistent/kits"}}));
    FAIL() << "setup on a missing directory succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kits"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// Instance norm has no running statistics: evaluation mode computes exactly what training mode
// does, so the sliding window sees the model the training steps trained.
TEST(UNet3d, EvalModeForwardEqualsTrainMode) {
  UNet3dConfig c;
  c.filters = {8, 16, 32, 64};
  UNet3d model(c);
  model.initialize(2);
  const Tensor x = random_tensor({2, 32, 32, 32, 1}, 8);
  const Tensor a = model.forward(x);
  model.train(false);
  const Tensor b = model.forward(x);
  ASSERT_EQ(a.shape(), b.shape());
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (std::int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(pa[i], pb[i]) << i;
}

}  // namespace

#include "common/ranks_match.hpp"

namespace {

// Data parallel (WORKLOADS.md): 2 ranks with batch 2 each end a few steps with the weights one
// process reaches with batch 4 on the same samples. Exact in exact arithmetic: the DiceCE loss is a
// mean over samples (Dice per sample and class, cross-entropy over equal-sized patches) and
// instance norm is per sample, so the mean of the ranks' gradients is the big batch's gradient.
TEST(UNet3dWorkload, TwoRanksMatchOneProcess) {
  const fs::path dir = fs::temp_directory_path() / ("unet3d_dp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::map<std::string, std::string> over = {
      {"data-dir", dir.string()}, {"generate", "true"}, {"gen-train-cases", "8"}, {"gen-eval-cases", "2"},
      {"gen-size-min", "32"}, {"gen-size-max", "36"}, {"filters", "4,8"}, {"patch-size", "16,16,16"},
      {"roi-size", "16,16,16"}, {"warmup-epochs", "0"}, {"base-lr", "0.05"}};
  const int steps = 2;
  auto weights_after = [&](UNet3dWorkload& w) {
    for (int s = 0; s < steps; ++s) {
      w.prepare_batch();
      w.train_step();
    }
    return test_support::named_weights(w.model().parameters());
  };
  test_support::NamedWeights want;
  {
    auto o = over;
    o["batch-size"] = "4";
    UNet3dWorkload single;
    single.setup(context(o, "ttt"));
    want = weights_after(single);
    single.teardown();
  }
  auto o = over;
  o["batch-size"] = "2";
  const auto got = test_support::on_rank_workloads<UNet3dWorkload>(2, context(o, "ttt"), weights_after);
  test_support::expect_ranks_match(want, got, 1e-5);
  fs::remove_all(dir);
}

}  // namespace

// Note [FLOPs per sample] (docs/plugin-abi.md): the declared training FLOPs of a two-level U-Net
// (filters 4, 8; 16^3 patch, 1 input channel, 3 classes) against a hand count, layer by layer:
// a k^3 convolution costs in x out x k^3 multiply-adds per *output* voxel (the strided
// down-sampling ones at the coarser size), a k2 s2 transposed convolution in x out x 8 per *input*
// voxel; instance norm, ReLU and the loss are not counted; training = 3 x forward, 2 FLOPs per MAC.
TEST(UNet3dWorkload, DeclaredTrainFlopsMatchAHandCount) {
  RunContext train = context({{"filters", "4,8"}, {"patch-size", "16,16,16"}}, "train");
  train.synthetic_data = true;
  UNet3dWorkload w;
  const RunInfo info = w.setup(train);
  const double v16 = 16 * 16 * 16, v8 = 8 * 8 * 8, v4 = 4 * 4 * 4;
  const double encoder = v16 * 1 * 4 * 27 + v16 * 4 * 4 * 27     // input block at 16^3
                         + v8 * 4 * 8 * 27 + v8 * 8 * 8 * 27     // down to 8^3 (strided), 4 -> 8
                         + v4 * 8 * 8 * 27 + v4 * 8 * 8 * 27;    // bottleneck at 4^3
  const double decoder = v4 * 8 * 8 * 8                          // transposed 4^3 -> 8^3
                         + v8 * 16 * 8 * 27 + v8 * 8 * 8 * 27    // skip concat 16 -> 8, then 8 -> 8
                         + v8 * 8 * 4 * 8                        // transposed 8^3 -> 16^3
                         + v16 * 8 * 4 * 27 + v16 * 4 * 4 * 27   // skip concat 8 -> 4, then 4 -> 4
                         + v16 * 4 * 3;                          // 1x1x1 to 3 classes
  const double forward_macs = encoder + decoder;
  EXPECT_DOUBLE_EQ(info.infer_flops_per_sample, 2 * forward_macs);
  EXPECT_DOUBLE_EQ(info.train_flops_per_sample, 3 * 2 * forward_macs);
}
