// The maskrcnn workload: schedule, options and MLPerf rules, and training steps on a small
// generated COCO 2017 set.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "benchhost/nn/serialize.hpp"
#include "common/ranks_match.hpp"
#include "common/shipped_configs.hpp"
#include "synthetic_coco2017.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::maskrcnn;
namespace fs = std::filesystem;

RunContext context(std::map<std::string, std::string> options, const std::string& mode = "ttt",
                   const std::string& precision = "fp32") {
  RunContext ctx;
  ctx.mode = mode;
  ctx.device = Device::cpu();
  ctx.precision = precision;
  ctx.seed = 7;
  ctx.num_threads = 2;
  ctx.options = declared_options<MaskRcnnWorkload>(std::move(options));
  return ctx;
}

std::map<std::string, std::string> tiny(const std::string& dir) {
  return {{"data-dir", dir},          {"generate", "true"},          {"gen-train-images", "16"},
          {"gen-val-images", "8"},     {"blocks", "1,1,1,1"},         {"stem-channels", "8"},
          {"fpn-channels", "16"},      {"num-classes", "5"},          {"representation-size", "32"},
          {"mask-convs", "1"},         {"mask-channels", "16"},       {"freeze-at", "0"},
          {"min-size", "96"},          {"max-size", "128"},           {"anchor-scale", "0.5"},
          {"rpn-pre-nms-top-n-train", "200"}, {"rpn-post-nms-top-n-train", "200"}, {"num-image-candidates", "400"},
          {"rpn-pre-nms-top-n-test", "200"}, {"rpn-post-nms-top-n-test", "100"},
          {"rpn-batch-size-per-image", "64"}, {"roi-batch-size-per-image", "64"},
          {"pretrained-backbone", "false"}, {"batch-size", "4"}, {"eval-batch-size", "4"},
          {"lr", "0.01"}, {"warmup-iters", "5"}, {"pixel-std", "57"}};
}

fs::path temp_dir(const char* tag) {
  return fs::temp_directory_path() / ("benchhost_maskrcnn_" + std::string(tag) + "_" + std::to_string(::getpid()));
}

TEST(MaskRcnnWorkload, DefaultsAreTheMlperfReference) {
  test_support::expect_defaults_are_mlperf_conf<MaskRcnnWorkload>("maskrcnn");
  test_support::expect_shipped_configs_allowed<MaskRcnnWorkload>("maskrcnn", {"mlperf.conf", "mini.conf"});
}

TEST(MaskRcnnWorkload, DeclaresTheMlperfRulesOfMaskrcnn) {
  const WorkloadInfo info = MaskRcnnWorkload::describe();
  EXPECT_EQ(info.benchmark, "maskrcnn");
  const mlperf::Rules& r = info.mlperf;
  EXPECT_TRUE(r.closed_division);
  EXPECT_EQ(r.runs, 5);
  std::map<std::string, const mlperf::LoggedKey*> keys;
  for (const mlperf::LoggedKey& k : r.keys) keys.emplace(k.key, &k);
  // closed_maskrcnn.yaml (training_3.0.0)
  ASSERT_EQ(r.closed_target_fields.size(), 2u);
  EXPECT_EQ(r.closed_target_fields[0].first, "BBOX");
  EXPECT_EQ(*r.closed_target_fields[0].second.min, 0.377);
  EXPECT_EQ(r.closed_target_fields[1].first, "SEGM");
  EXPECT_EQ(*r.closed_target_fields[1].second.min, 0.339);
  EXPECT_TRUE(r.eval_accuracy_is_dictionary());
  for (const char* k : {"global_batch_size", "opt_base_learning_rate", "opt_learning_rate_warmup_steps",
                        "opt_learning_rate_warmup_factor", "num_image_candidates", "opt_learning_rate_decay_factor",
                        "opt_learning_rate_decay_steps", "min_image_size", "max_image_size"})
    EXPECT_TRUE(keys.count(k)) << k;
}

// maskrcnn_benchmark's Resize.get_size: the shorter side to min_size unless the longer would pass
// max_size; the longer side truncated.
TEST(MaskRcnnData, ResizeIsTheReferences) {
  EXPECT_EQ(resized_size(480, 640, 800, 1333), (std::pair<int, int>{800, 1066}));
  EXPECT_EQ(resized_size(640, 480, 800, 1333), (std::pair<int, int>{1066, 800}));
  EXPECT_EQ(resized_size(200, 800, 800, 1333), (std::pair<int, int>{333, 1332}));  // size round(333.25), int(333 * 4)
  EXPECT_EQ(resized_size(800, 800, 800, 1333), (std::pair<int, int>{800, 800}));
  EXPECT_EQ(resized_size(96, 160, 128, 160), (std::pair<int, int>{96, 160}));  // 160 * 96 / 160 = 96: already there
}

TEST(MaskRcnnWorkload, RefusesWhatItCannotRunSayingWhy) {
  // Time to train starts from the pretrained body, as MLPerf does: without the file, a refusal
  // that says where to get it.
  MaskRcnnWorkload w;
  try {
    w.setup(context({{"data-dir", "/nonexistent"}}));
    ADD_FAILURE() << "setup without backbone weights did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("maskrcnn.backbone-weights"), std::string::npos) << e.what();
  }
  RunContext fp8 = context({});
  fp8.precision = "fp8";
  EXPECT_NE(MaskRcnnWorkload::check_support(fp8).find("run bf16"), std::string::npos)
      << MaskRcnnWorkload::check_support(fp8);
  RunContext tf32 = context({});
  tf32.precision = "tf32";  // a CUDA math mode
  EXPECT_FALSE(MaskRcnnWorkload::check_support(tf32).empty());
  RunContext bf16 = context({});
  bf16.precision = "bf16";
  EXPECT_EQ(MaskRcnnWorkload::check_support(bf16), "");
  // A corrupt weights file is a DataError naming it, before anything is trained.
  const fs::path dir = temp_dir("weights");
  fs::create_directories(dir);
  { std::ofstream(dir / "body.bhw") << "not a weights file"; }
  MaskRcnnWorkload w2;
  EXPECT_THROW(w2.setup(context({{"backbone-weights", (dir / "body.bhw").string()}})), DataError);
  fs::remove_all(dir);
}

TEST(MaskRcnnSchedule, WarmupMultiStep) {
  WarmupMultiStepSchedule s(0.02f, 1.0 / 3.0, 500, {60000, 80000}, 0.1);
  EXPECT_NEAR(s.lr(0), 0.02 / 3.0, 1e-8);
  EXPECT_NEAR(s.lr(250), 0.02 * (1.0 / 3.0 * 0.5 + 0.5), 1e-8);
  EXPECT_NEAR(s.lr(500), 0.02, 1e-8);
  EXPECT_NEAR(s.lr(59999), 0.02, 1e-8);
  EXPECT_NEAR(s.lr(60000), 0.002, 1e-9);
  EXPECT_NEAR(s.lr(80000), 0.0002, 1e-10);
  WarmupMultiStepSchedule bias(0.02f, 1.0 / 3.0, 500, {60000, 80000}, 0.1, 2.0);
  EXPECT_NEAR(bias.lr(1000), 0.04, 1e-8);
}

class MaskRcnnPrecision : public ::testing::TestWithParam<std::string> {};

// Note [Mask R-CNN LR scaling]: lr and decay steps are for a global batch of 16 and follow the
// run's linearly; the reference's one-GPU recipe (batch 2) is LR 0.0025 with steps 480000 and
// 640000.
TEST(MaskRcnnSchedule, LearningRateAndStepsScaleWithTheGlobalBatch) {
  const Options defaults = declared_options<MaskRcnnWorkload>({});
  ScaledSolver s = scaled_solver(defaults, 16);
  EXPECT_DOUBLE_EQ(s.lr, 0.02);
  EXPECT_EQ(s.decay_steps, (std::vector<std::int64_t>{60000, 80000}));
  s = scaled_solver(defaults, 2);
  EXPECT_DOUBLE_EQ(s.lr, 0.0025);
  EXPECT_EQ(s.decay_steps, (std::vector<std::int64_t>{480000, 640000}));
  s = scaled_solver(defaults, 64);
  EXPECT_DOUBLE_EQ(s.lr, 0.08);
  EXPECT_EQ(s.decay_steps, (std::vector<std::int64_t>{15000, 20000}));
  s = scaled_solver(declared_options<MaskRcnnWorkload>({{"lr-reference-batch", "0"}, {"decay-steps", "18000,24000"}}), 64);
  EXPECT_DOUBLE_EQ(s.lr, 0.02);  // as given
  EXPECT_EQ(s.decay_steps, (std::vector<std::int64_t>{18000, 24000}));
  // The run logs what it uses: batch 4 against the reference batch 16.
  const fs::path dir = temp_dir("lr");
  std::map<std::string, std::string> o = tiny(dir.string());
  o["lr-reference-batch"] = "16";
  o["lr"] = "0.02";
  o["decay-steps"] = "100,200";
  MaskRcnnWorkload w;
  w.setup(context(o));
  const nlohmann::json logged = nlohmann::json::parse(hyperparameters_to_json(w.hyperparameters()));
  EXPECT_EQ(logged["global_batch_size"].get<std::int64_t>(), 4) << logged.dump();
  EXPECT_DOUBLE_EQ(logged["opt_base_learning_rate"].get<double>(), 0.005);
  EXPECT_EQ(logged["opt_learning_rate_decay_steps"], nlohmann::json::parse("[400, 800]"));
  w.teardown();
  fs::remove_all(dir);
}

TEST_P(MaskRcnnPrecision, TrainStepsLowerTheLossesAndEvaluate) {
  const fs::path dir = temp_dir(("steps_" + GetParam()).c_str());
  std::map<std::string, std::string> o = tiny(dir.string());
  MaskRcnnWorkload w;
  const RunInfo info = w.setup(context(o, "ttt", GetParam()));
  {  // aspect-ratio groups of 4: each group's rest waits for the next epoch
    const auto split = coco::make_coco2017_train(dir.string());
    const std::vector<std::int32_t> g = aspect_ratio_groups(split->split());
    const auto tall = static_cast<std::int64_t>(std::count(g.begin(), g.end(), 1));
    EXPECT_EQ(info.samples_per_epoch, tall / 4 * 4 + (16 - tall) / 4 * 4);
  }
  std::vector<double> totals;
  const int steps = 24;
  for (int s = 0; s < steps; ++s) {
    w.prepare_batch();
    const StepResult r = w.train_step();
    const StepLosses& l = w.last_losses();
    ASSERT_TRUE(std::isfinite(r.loss)) << "step " << s;
    totals.push_back(r.loss);
    std::printf("step %2d  total %.4f  obj %.4f  rpn_box %.4f  cls %.4f  box %.4f  mask %.4f\n", s, r.loss, l.objectness,
                l.rpn_box, l.classifier, l.box_reg, l.mask);
  }
  const double first = (totals[0] + totals[1] + totals[2]) / 3, last = (totals[steps - 1] + totals[steps - 2] + totals[steps - 3]) / 3;
  EXPECT_LT(last, 0.8 * first);
  // The heads' outputs are in the policy's storage type (emulated on the CPU: real bf16/f16
  // tensors), and fp16 steps carry the dynamic loss scale.
  const DType storage = GetParam() == "bf16" ? DType::bf16 : GetParam() == "fp16" ? DType::f16 : DType::f32;
  w.model().train(false);
  const RpnOutputs probe = w.model().forward(Tensor::zeros({1, 3, 96, 128}));
  EXPECT_EQ(probe.objectness[0].dtype(), storage);
  EXPECT_EQ(w.model().box_head(Tensor::from_vector({0.0f, 8, 8, 40, 40}, {1, 5})).class_logits.dtype(), storage);
  w.model().train(true);
  const StepResult scaled = w.train_step();
  if (GetParam() == "fp16") {
    EXPECT_GT(scaled.loss_scale, 1.0);
  } else {
    EXPECT_EQ(scaled.loss_scale, 0.0);
  }
  const EvalResult e = w.evaluate();
  EXPECT_GE(e.metric, 0.0);
  EXPECT_LE(e.metric, 1.0);
  EXPECT_EQ(e.samples, 8);
  std::printf("bbox %.4f segm %.4f\n", w.last_bbox_map(), w.last_segm_map());
  // MLLOG's value is the dictionary, and the verdict needs both parts at their targets.
  const nlohmann::json v = nlohmann::json::parse(e.value_json);
  EXPECT_DOUBLE_EQ(v["BBOX"].get<double>(), w.last_bbox_map());
  EXPECT_DOUBLE_EQ(v["SEGM"].get<double>(), w.last_segm_map());
  EXPECT_EQ(e.metric, w.last_bbox_map());
  EXPECT_EQ(e.target_reached, 0);  // 0.377 / 0.339 after 24 tiny steps: no
  w.teardown();
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Cpu, MaskRcnnPrecision, ::testing::Values("fp32", "bf16", "fp16"),
                         [](const auto& i) { return i.param; });

}  // namespace

namespace {

// The transforms of Note [Mask R-CNN transforms] on generated COCO 2017 images: a flipped
// training sample is the mirror of the evaluation sample (pixels, and boxes and polygons with the
// +1 convention), resized like it; the collate pads to multiples of 32 with zeros.
TEST(MaskRcnnData, FlipAndCollateFollowTheReference) {
  const fs::path dir = temp_dir("data");
  coco::Coco2017SyntheticOptions g;
  g.train_images = 6;
  g.val_images = 2;
  coco::generate_coco2017_synthetic(dir.string(), g);
  auto split = coco::make_coco2017_train(dir.string());
  const MaskRcnnDataset plain(split, false, 128, 160, 57.0f), train(split, true, 128, 160, 57.0f);
  int flipped = 0, kept = 0;
  for (std::int64_t i = 0; i < plain.size(); ++i) {
    const data::Sample a = plain.get(data::SampleContext{i, 0, 5});
    for (std::int64_t epoch = 0; epoch < 4; ++epoch) {
      const data::Sample b = train.get(data::SampleContext{i, epoch, 5});
      const Tensor ia = a.at("image"), ib = b.at("image");
      ASSERT_EQ(ia.shape(), ib.shape());
      const std::int64_t h = ia.size(1), w = ia.size(2);
      const auto want = resized_size(static_cast<int>(a.at("orig_size").data<std::int64_t>()[0]),
                                     static_cast<int>(a.at("orig_size").data<std::int64_t>()[1]), 128, 160);
      EXPECT_EQ(h, want.first);
      EXPECT_EQ(w, want.second);
      bool same = true, mirror = true;
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t y = 0; y < h; ++y)
          for (std::int64_t x = 0; x < w; ++x) {
            const float va = ia.data<float>()[(c * h + y) * w + x];
            same &= ib.data<float>()[(c * h + y) * w + x] == va;
            mirror &= ib.data<float>()[(c * h + y) * w + (w - 1 - x)] == va;
          }
      ASSERT_TRUE(same || mirror) << "sample " << i << " epoch " << epoch;
      const Tensor ba = a.at("boxes"), bb = b.at("boxes");
      const Tensor pa = a.at("polygons"), pb = b.at("polygons");
      for (std::int64_t k = 0; k < ba.size(0); ++k) {
        const float* x = ba.data<float>() + 4 * k;
        const float* y = bb.data<float>() + 4 * k;
        if (same) {
          EXPECT_EQ(x[0], y[0]);
          EXPECT_EQ(x[2], y[2]);
        } else {
          EXPECT_FLOAT_EQ(y[0], static_cast<float>(w) - x[2] - 1.0f);
          EXPECT_FLOAT_EQ(y[2], static_cast<float>(w) - x[0] - 1.0f);
        }
        EXPECT_EQ(x[1], y[1]);
        EXPECT_EQ(x[3], y[3]);
      }
      for (std::int64_t k = 0; k + 1 < pa.numel(); k += 2) {
        const double xa = pa.data<double>()[k], xb = pb.data<double>()[k];
        EXPECT_FLOAT_EQ(static_cast<float>(xb), same ? static_cast<float>(xa) : static_cast<float>(w) - static_cast<float>(xa) - 1.0f);
        EXPECT_EQ(pa.data<double>()[k + 1], pb.data<double>()[k + 1]);
      }
      (same ? kept : flipped) += 1;
    }
  }
  EXPECT_GT(flipped, 0);
  EXPECT_GT(kept, 0);

  const data::TensorDict batch = maskrcnn_collate({plain.get(data::SampleContext{0, 0, 5}), plain.get(data::SampleContext{1, 0, 5})});
  const Tensor im = batch.at("image");
  EXPECT_EQ(im.size(2) % 32, 0);
  EXPECT_EQ(im.size(3) % 32, 0);
  const Tensor sizes = batch.at("image_size");
  for (std::int64_t n = 0; n < 2; ++n) {
    const std::int64_t h = sizes.data<std::int64_t>()[2 * n], w = sizes.data<std::int64_t>()[2 * n + 1];
    EXPECT_LE(h, im.size(2));
    EXPECT_LE(w, im.size(3));
    double pad = 0;
    for (std::int64_t y = 0; y < im.size(2); ++y)
      for (std::int64_t x = 0; x < im.size(3); ++x)
        if (y >= h || x >= w) pad += std::fabs(im.data<float>()[((n * 3 + 1) * im.size(2) + y) * im.size(3) + x]);
    EXPECT_EQ(pad, 0.0);
  }
  data::Batch b;
  b.tensors = batch;
  b.indices = {0, 1};
  const std::vector<ImageTargets> t = batch_targets(b);
  ASSERT_EQ(t.size(), 2u);
  const data::Sample s1 = plain.get(data::SampleContext{1, 0, 5});
  EXPECT_EQ(t[1].boxes.size(0), s1.at("boxes").size(0));
  EXPECT_EQ(t[1].polygons.size(), static_cast<std::size_t>(s1.at("labels").size(0)));
  EXPECT_EQ(t[1].polygons[0], coco::polygons_of(s1)[0]);
  fs::remove_all(dir);
}

}  // namespace

namespace {

// DATALOADER.ASPECT_RATIO_GROUPING: every training batch is all landscape or all portrait (and
// square) images; the groups are the reference's h / w quantised at 1. Off, batches mix them.
TEST(MaskRcnnData, TrainingBatchesAreGroupedByAspectRatio) {
  const fs::path dir = temp_dir("groups");
  auto count_mixed = [&](bool grouping) {
    std::map<std::string, std::string> o = tiny(dir.string());
    o["gen-train-images"] = "64";
    o["aspect-ratio-grouping"] = grouping ? "true" : "false";
    const DataSources d = build_data_sources(context(o), 4);
    const auto split = coco::make_coco2017_train(dir.string());
    const std::vector<std::int32_t> groups = aspect_ratio_groups(split->split());
    EXPECT_EQ(groups.size(), 64u);
    std::int64_t landscape = std::count(groups.begin(), groups.end(), 0);
    EXPECT_GT(landscape, 8);  // the generator draws both orientations
    EXPECT_LT(landscape, 56);
    int mixed = 0, batches = 0;
    for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
      d.train->start_epoch(epoch);
      while (auto b = d.train->next()) {
        const Tensor orig = (*b)["orig_size"];
        std::set<bool> tall;
        for (std::int64_t i = 0; i < orig.size(0); ++i) {
          const std::int64_t h = orig.data<std::int64_t>()[2 * i], w = orig.data<std::int64_t>()[2 * i + 1];
          tall.insert(h >= w);
          EXPECT_EQ(groups[static_cast<std::size_t>(b->indices[static_cast<std::size_t>(i)])], h >= w ? 1 : 0);
        }
        EXPECT_EQ(b->size(), 4);
        mixed += tall.size() > 1;
        ++batches;
      }
    }
    EXPECT_EQ(batches, 2 * d.train->batches_per_epoch());
    EXPECT_EQ(d.samples_per_epoch, 4 * d.train->batches_per_epoch());
    return mixed;
  };
  EXPECT_EQ(count_mixed(true), 0);
  EXPECT_GT(count_mixed(false), 0);
  fs::remove_all(dir);
}

}  // namespace

namespace {

// Data parallel (WORKLOADS.md, Note [Mask R-CNN losses]): 2 ranks with batch 2 each end two SGD
// steps with the weights one process reaches with batch 4 on the same images. The ranks normalise
// their losses over their own batch, as the reference does, so the case makes every image weigh
// the same: images of one size (so one padding and one anchor grid), 16 sampled anchors and 4
// sampled RoIs per image with one positive (its ground truth is always a candidate), and the
// batch's proposal budget never binding. Each image samples from its own streams, whichever rank
// has it.
TEST(MaskRcnnWorkload, TwoRanksMatchOneProcess) {
  const fs::path dir = temp_dir("dp");
  std::map<std::string, std::string> over = tiny(dir.string());
  over["gen-train-images"] = "8";
  over["gen-val-images"] = "2";
  over["gen-min-size"] = over["gen-max-size"] = "96";
  over["rpn-batch-size-per-image"] = "16";
  over["roi-batch-size-per-image"] = "4";
  over["num-image-candidates"] = "4000";
  over["gen-seed"] = "3";
  const int steps = 2;
  auto weights_after = [&](MaskRcnnWorkload& w) {
    for (int s = 0; s < steps; ++s) {
      w.prepare_batch();
      w.train_step();
    }
    return test_support::named_weights(w.model().trainable_parameters());
  };
  test_support::NamedWeights want, initial;
  {
    auto o = over;
    o["batch-size"] = "4";
    MaskRcnnWorkload single;
    single.setup(context(o));
    // Every training image has an object (the reference keeps crowd-only images, which would
    // have no positive RoI here): the generator's seed was chosen for it.
    const auto train_split = coco::make_coco2017_train(dir.string());
    const coco::Coco2017Split& split = train_split->split();
    for (const std::size_t pos : split.samples) {
      int objects = 0;
      for (const std::size_t a : split.coco->annotations_of(pos)) objects += split.coco->annotations[a].iscrowd ? 0 : 1;
      ASSERT_GT(objects, 0) << "training image " << split.coco->images[pos].id << " has no object: choose another gen-seed";
    }
    initial = test_support::named_weights(single.model().trainable_parameters());
    want = weights_after(single);
    single.teardown();
  }
  // The steps moved the weights (else matching would say nothing).
  double moved = 0;
  for (const auto& [name, v] : want)
    for (std::size_t i = 0; i < v.size(); ++i) moved = std::max(moved, double(std::fabs(v[i] - initial[name][i])));
  EXPECT_GT(moved, 1e-4);
  auto o = over;
  o["batch-size"] = "2";
  const auto got = test_support::on_rank_workloads<MaskRcnnWorkload>(2, context(o), weights_after);
  test_support::expect_ranks_match(want, got, 1e-5);
  fs::remove_all(dir);
}

}  // namespace

namespace {

// Evaluation in data parallel: each rank scores its shard of the validation images and the COCO
// evaluator merges the detections of every rank, so 2 ranks give one process's box and mask mAP
// on the same weights (images of one size, so the batches pad alike).
TEST(MaskRcnnWorkload, TwoRanksEvaluateAsOneProcess) {
  const fs::path dir = temp_dir("dp_eval");
  std::map<std::string, std::string> over = tiny(dir.string());
  over["gen-train-images"] = "16";
  over["gen-val-images"] = "6";
  over["gen-min-size"] = over["gen-max-size"] = "96";
  over["eval-batch-size"] = "2";
  over["lr"] = "0.01";
  const std::string trained = (dir / "trained.bhw").string();
  double bbox = 0, segm = 0;
  {
    MaskRcnnWorkload single;
    single.setup(context(over));
    for (int s = 0; s < 80; ++s) {
      single.prepare_batch();
      single.train_step();
    }
    nn::save_weights(single.model(), trained);
    const EvalResult e = single.evaluate();
    EXPECT_EQ(e.samples, 6);
    bbox = single.last_bbox_map();
    segm = single.last_segm_map();
    single.teardown();
  }
  ASSERT_GT(bbox, 0.0) << "the trained model detects nothing: the comparison would say little";
  ASSERT_GT(segm, 0.0);
  auto o = over;
  o["init-weights"] = trained;
  const auto got = test_support::on_rank_workloads<MaskRcnnWorkload>(2, context(o), [](MaskRcnnWorkload& w) {
    w.evaluate();
    return test_support::NamedWeights{{"map", {static_cast<float>(w.last_bbox_map()), static_cast<float>(w.last_segm_map())}}};
  });
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].count("map"), 1u) << "rank " << r;
    EXPECT_FLOAT_EQ(got[r].at("map")[0], static_cast<float>(bbox)) << "rank " << r;
    EXPECT_FLOAT_EQ(got[r].at("map")[1], static_cast<float>(segm)) << "rank " << r;
  }
  std::printf("bbox %.4f segm %.4f\n", bbox, segm);
  fs::remove_all(dir);
}

}  // namespace
