// The retinanet workload: the reference warm-up, options and MLPerf rules, the batch loss against
// the per-image toolkit losses, and the modes on a small generated OpenImages-layout set.

#include <cmath>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>
#include <unistd.h>

#include "benchhost/nn/detection.hpp"
#include "benchhost/nn/ops.hpp"
#include "common/shipped_configs.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::retinanet;
namespace fs = std::filesystem;

// torchvision's warmup_lr_scheduler: f(x) = factor * (1 - x/W) + x/W for x < W, then 1.
TEST(RetinaNetSchedule, IterationWarmup) {
  IterationWarmupSchedule s(1e-4f, 1e-3, 100);
  EXPECT_NEAR(s.lr(0), 1e-7, 1e-12);
  EXPECT_NEAR(s.lr(50), 1e-4 * (1e-3 * 0.5 + 0.5), 1e-10);
  EXPECT_NEAR(s.lr(99), 1e-4 * (1e-3 * 0.01 + 0.99), 1e-10);
  EXPECT_EQ(s.lr(100), 1e-4f);
  EXPECT_EQ(IterationWarmupSchedule(1e-3f, 1e-3, 0).lr(0), 1e-3f);
}

TEST(RetinaNetWorkload, DefaultsAreTheMlperfReference) {
  test_support::expect_defaults_are_mlperf_conf<RetinaNetWorkload>("retinanet");
  test_support::expect_shipped_configs_allowed<RetinaNetWorkload>("retinanet", {"mlperf.conf", "mini.conf"});
}

TEST(RetinaNetWorkload, DeclaresTheMlperfRulesOfSsd) {
  const WorkloadInfo info = RetinaNetWorkload::describe();
  EXPECT_EQ(info.benchmark, "ssd");
  const mlperf::Rules& r = info.mlperf;
  EXPECT_TRUE(r.closed_division);
  EXPECT_EQ(r.runs, 5);
  ASSERT_TRUE(r.closed_target.min.has_value());
  EXPECT_EQ(*r.closed_target.min, 0.34);
  ASSERT_TRUE(r.open_target.max.has_value());
  EXPECT_EQ(*r.open_target.max, 1.0);
  std::map<std::string, const mlperf::LoggedKey*> keys;
  for (const mlperf::LoggedKey& k : r.keys) keys.emplace(k.key, &k);
  for (const char* k : {"global_batch_size", "opt_name", "opt_base_learning_rate", "opt_weight_decay",
                        "opt_learning_rate_warmup_epochs", "opt_learning_rate_warmup_factor"})
    EXPECT_TRUE(keys.count(k)) << k;
}

RunContext context(std::map<std::string, std::string> options, const std::string& mode = "ttt") {
  RunContext ctx;
  ctx.mode = mode;
  ctx.device = Device::cpu();
  ctx.precision = "fp32";
  ctx.seed = 7;
  ctx.num_threads = 2;
  ctx.options = declared_options<RetinaNetWorkload>(std::move(options));
  return ctx;
}

std::map<std::string, std::string> tiny() {
  return {{"blocks", "1,1,1,1"}, {"groups", "2"},      {"width-per-group", "2"}, {"stem-channels", "8"},
          {"fpn-channels", "8"}, {"head-convs", "1"},  {"num-classes", "4"},     {"image-size", "64"},
          {"anchor-scale", "0.125"}, {"pretrained-backbone", "false"}, {"batch-size", "2"}, {"eval-batch-size", "3"}};
}

// The batch loss is the mean over images of the toolkit's per-image losses (RetinaNet.compute_loss),
// and an image without boxes contributes a focal loss over background anchors only.
TEST(RetinaNetLoss, BatchLossIsTheMeanOfTheImages) {
  const std::int64_t a = 7, k = 3;
  HeadOutputs out;
  Rng rng(3, 1);
  auto rand = [&](const Shape& s) {
    Tensor t = Tensor::empty(s);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(-2.0f, 2.0f);
    return t;
  };
  out.cls_logits = {rand({2, 4, k}), rand({2, 3, k})};
  out.bbox_deltas = {rand({2, 4, 4}), rand({2, 3, 4})};
  Tensor anchors = Tensor::from_vector({0, 0, 10, 10, 5, 5, 15, 15, 10, 0, 20, 10, 0, 10, 10, 20, 20, 20, 30, 30,
                                        2, 2, 8, 8, 12, 12, 28, 28}, {a, 4});
  Tensor boxes = Tensor::from_vector({1, 1, 10, 11, 11, 11, 27, 29, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 2, 4});
  Tensor labels = Tensor::from_vector_i64({1, 2, -1, -1}, {2, 2});
  Tensor counts = Tensor::from_vector_i64({2, 0}, {2});
  const BatchLoss got = retinanet_batch_loss(out, anchors, boxes, labels, counts, 1.0f);
  double cls = 0, box = 0;
  for (std::int64_t b = 0; b < 2; ++b) {
    const Tensor logits = nn::concat({out.cls_logits[0].select(0, b), out.cls_logits[1].select(0, b)}, 0);
    const Tensor deltas = nn::concat({out.bbox_deltas[0].select(0, b), out.bbox_deltas[1].select(0, b)}, 0);
    const std::int64_t g = b == 0 ? 2 : 0;
    const Tensor gb = boxes.select(0, b).slice(0, 0, g).contiguous(), gl = labels.select(0, b).slice(0, 0, g).contiguous();
    const Tensor m = g > 0 ? nn::match_anchors(nn::box_iou(gb, anchors)) : Tensor::full({a}, -1.0, DType::i64);
    cls += nn::retinanet_focal_loss_forward(logits, m, gl).loss / 2.0;
    box += nn::retinanet_box_loss_forward(deltas, anchors, m, gb) / 2.0;
  }
  EXPECT_NEAR(got.classification, cls, 1e-6);
  EXPECT_NEAR(got.box_regression, box, 1e-6);
  EXPECT_GT(got.box_regression, 0.0);
  ASSERT_EQ(got.dcls.size(), 2u);
  EXPECT_EQ(got.dcls[0].shape(), out.cls_logits[0].shape());
  EXPECT_EQ(got.dbox[1].shape(), out.bbox_deltas[1].shape());
  // Finite differences through one logit of each image.
  for (std::int64_t b = 0; b < 2; ++b) {
    HeadOutputs up = out, down = out;
    up.cls_logits[1] = out.cls_logits[1].clone();
    down.cls_logits[1] = out.cls_logits[1].clone();
    const float h = 1e-2f;
    up.cls_logits[1].data<float>()[b * 3 * k + 4] += h;
    down.cls_logits[1].data<float>()[b * 3 * k + 4] -= h;
    const double numeric = (retinanet_batch_loss(up, anchors, boxes, labels, counts, 1.0f).total() -
                            retinanet_batch_loss(down, anchors, boxes, labels, counts, 1.0f).total()) / (2 * h);
    EXPECT_NEAR(got.dcls[1].data<float>()[b * 3 * k + 4], numeric, 1e-3 + 1e-2 * std::abs(numeric)) << "image " << b;
  }
}

TEST(RetinaNetWorkload, TrainsAndEvaluatesOnGeneratedImages) {
  const fs::path dir = fs::temp_directory_path() / ("retinanet_workload_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto o = tiny();
  o.insert({{"data-dir", dir.string()}, {"generate", "true"}, {"gen-train-images", "8"}, {"gen-val-images", "5"},
            {"gen-min-size", "48"}, {"gen-max-size", "80"}, {"lr", "0.001"}});
  RetinaNetWorkload w;
  const RunInfo info = w.setup(context(o));
  EXPECT_EQ(info.samples_per_epoch, 8);
  EXPECT_EQ(info.eval_samples, 5);
  EXPECT_GT(info.train_flops_per_sample, 0);
  w.begin_epoch(0);
  for (int s = 0; s < 4; ++s) {
    w.prepare_batch();
    const StepResult r = w.train_step();
    EXPECT_EQ(r.samples, 2);
    EXPECT_TRUE(std::isfinite(r.loss)) << r.loss;
  }
  const EvalResult e = w.evaluate();
  EXPECT_EQ(e.samples, 5);
  EXPECT_GE(e.metric, 0.0);
  EXPECT_LT(e.metric, 1.0);
  w.teardown();
  fs::remove_all(dir);
}

TEST(RetinaNetWorkload, SyntheticThroughputAndInference) {
  RetinaNetWorkload w;
  RunContext ctx = context(tiny(), "train");
  ctx.synthetic_data = true;
  w.setup(ctx);
  const StepResult r = w.train_step();
  EXPECT_EQ(r.samples, 2);
  EXPECT_TRUE(std::isfinite(r.loss));
  w.teardown();
  RetinaNetWorkload inf;
  inf.setup(context(tiny(), "infer"));
  EXPECT_EQ(inf.infer_step().samples, 2);
}

TEST(RetinaNetWorkload, TimeToTrainWithoutTheBackboneWeightsIsRefusedSayingWhere) {
  auto o = tiny();
  o["pretrained-backbone"] = "true";
  try {
    RetinaNetWorkload w;
    w.setup(context(o));
    FAIL() << "setup without backbone weights succeeded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("retinanet.backbone-weights"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("from-torch"), std::string::npos) << e.what();
  }
}

}  // namespace

#include "common/ranks_match.hpp"

namespace {

// Data parallel (WORKLOADS.md): 2 ranks with batch 2 each end a few Adam steps with the weights
// one process reaches with batch 4 on the same images: the loss is a mean over images and the
// frozen batch norms hold no batch statistics, so the mean of the ranks' gradients is the big
// batch's gradient.
TEST(RetinaNetWorkload, TwoRanksMatchOneProcess) {
  const fs::path dir = fs::temp_directory_path() / ("retinanet_dp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto over = tiny();
  over.insert({{"data-dir", dir.string()}, {"generate", "true"}, {"gen-train-images", "8"}, {"gen-val-images", "2"},
               {"gen-min-size", "48"}, {"gen-max-size", "64"}, {"lr", "0.001"}, {"warmup-epochs", "0"}});
  const int steps = 2;
  auto weights_after = [&](RetinaNetWorkload& w) {
    for (int s = 0; s < steps; ++s) {
      w.prepare_batch();
      w.train_step();
    }
    return test_support::named_weights(w.model().trainable_parameters());
  };
  test_support::NamedWeights want;
  {
    auto o = over;
    o["batch-size"] = "4";
    RetinaNetWorkload single;
    single.setup(context(o));
    want = weights_after(single);
    single.teardown();
  }
  auto o = over;
  o["batch-size"] = "2";
  const auto got = test_support::on_rank_workloads<RetinaNetWorkload>(2, context(o), weights_after);
  test_support::expect_ranks_match(want, got, 1e-5);
  fs::remove_all(dir);
}

}  // namespace

// Note [FLOPs per sample] (docs/plugin-abi.md): the forward MACs are torchvision's
// (RetinaNetPeer.ForwardMacsMatchTorchvisionHooks); training counts 3 x forward except the frozen
// backbone part (trainable-layers 3: the stem and layer1), which runs forward only. The frozen
// part by hand at 64x64 for the tiny model: the 7x7/2 stem 3 -> 8 channels at 32x32, max pool to
// 16x16, then layer1's one bottleneck (width 2 groups x 2, out 32): 1x1 8 -> 4, grouped 3x3 4 -> 4
// (2 input channels per group), 1x1 4 -> 32 and the 1x1 projection 8 -> 32, at 16x16.
TEST(RetinaNetWorkload, DeclaredTrainFlopsCountTheFrozenLayersForwardOnly) {
  const double stem = 32.0 * 32 * 8 * 3 * 49;
  const double layer1 = 16.0 * 16 * (8 * 4 + 4 * 2 * 9 + 4 * 32 + 8 * 32);
  for (const std::string trainable : {"3", "5"}) {
    auto o = tiny();
    o["trainable-layers"] = trainable;
    RetinaNetWorkload w;
    RunContext ctx = context(o, "train");
    ctx.synthetic_data = true;
    const RunInfo info = w.setup(ctx);
    const double macs = w.model().forward_macs(64, 64);
    const double frozen = trainable == "3" ? stem + layer1 : 0.0;
    EXPECT_DOUBLE_EQ(w.model().frozen_forward_macs(64, 64), frozen) << trainable;
    EXPECT_DOUBLE_EQ(info.infer_flops_per_sample, 2 * macs);
    EXPECT_DOUBLE_EQ(info.train_flops_per_sample, 3 * 2 * macs - 2 * 2 * frozen) << trainable;
    w.teardown();
  }
}
