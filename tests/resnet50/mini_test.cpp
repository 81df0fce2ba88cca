// The mini configuration (configs/resnet50/mini.conf) reaches top-1 >= 0.90 on the Fashion-MNIST
// test set from its fixed seed. End to end through the benchhost executable when it is built
// (the path users take: benchhost --plugin resnet50 --config configs/resnet50/mini.conf), else
// through the Workload class with the same options. Needs Debian's dataset-fashion-mnist.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/host_run.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
namespace fs = std::filesystem;

const char* kFashionDir = "/usr/share/datasets/fashion-mnist";
const fs::path kMiniConf = fs::path(BENCHHOST_SOURCE_DIR) / "configs" / "resnet50" / "mini.conf";

/// The config file's "key = value" entries by key.
std::map<std::string, std::string> read_conf(const fs::path& path) {
  std::map<std::string, std::string> out;
  for (const ConfigEntry& e : read_config_file(path.string())) out[e.key] = e.value;
  return out;
}

/// The mini config's resnet50.* values, checked against the declaration.
Options mini_options() {
  return declared_options<resnet::ResNetWorkload>(plugin_values(read_config_file(kMiniConf.string()), "resnet50"));
}

TEST(ResNet50Mini, ReachesTargetOnFashionMnist) {
  if (!fs::exists(fs::path(kFashionDir) / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  ASSERT_TRUE(fs::exists(kMiniConf)) << kMiniConf;
  const auto conf = read_conf(kMiniConf);
  const double target = mini_options().get_float("target");
  ASSERT_GE(target, 0.90);

  const fs::path exe = fs::path(BENCHHOST_BINARY_DIR) / "bin" / "benchhost";
  const fs::path plugin = fs::path(BENCHHOST_BINARY_DIR) / "bin" / "plugins" / "resnet50.so";
  if (fs::exists(exe) && fs::exists(plugin)) {
    const auto run = test_support::run_host("resnet50", fmt::format("--config '{}' --threads 2", kMiniConf.string()),
                                            "resnet50_mini");
    ASSERT_TRUE(run.started) << run.why;
    ASSERT_EQ(run.exit_code, 0) << run.console;
    const auto& r = run.result;
    ASSERT_TRUE(r["ttt"].is_object()) << r.dump(2);
    const double top1 = r["ttt"]["final_metric"].get<double>();
    std::printf("mini top-1 %.4f in %.1f s (host time to train)\n", top1,
                r["ttt"]["time_to_train_seconds"].get<double>());
    EXPECT_GE(top1, target) << r.dump(2);
    EXPECT_EQ(r["status"], "PASSED") << r.dump(2);
    // The MLLOG file carries the resnet keys.
    const std::string mls = test_support::read_text(run.mllog);
    for (const char* key : {"\"opt_name\"", "\"sgd_opt_base_learning_rate\"", "\"eval_accuracy\"",
                            "\"global_batch_size\"", "\"run_stop\"",
                            "\"key\": \"opt_learning_rate_decay_boundary_epochs\", \"value\": []"})
      EXPECT_NE(mls.find(key), std::string::npos) << key;
    // One weights_initialization event per tensor, tensor named in the metadata.
    EXPECT_NE(mls.find("\"key\": \"weights_initialization\", \"value\": null, \"metadata\": {\"file\""),
              std::string::npos);
    EXPECT_NE(mls.find("\"tensor\": \"conv0_weight\""), std::string::npos);
    // The whole file against the MLPerf logging rules (open division: a scaled-down model).
    EXPECT_EQ(test_support::mllog_violations(run.mllog), "");
    return;
  }

  // No executable in this build: the same options through the Workload class, the host's ttt
  // loop in miniature (evaluate at the configured interval, stop at the target).
  RunContext ctx;
  ctx.mode = "ttt";
  ctx.device = Device::cpu();
  ctx.precision = "fp32";
  ctx.seed = std::stoull(conf.count("seed") ? conf.at("seed") : "1");
  ctx.num_threads = 2;
  ctx.options = mini_options();
  resnet::ResNetWorkload w;
  const RunInfo info = w.setup(ctx);
  double top1 = 0;
  std::int64_t trained = 0;
  EXPECT_DOUBLE_EQ(info.metric_target, target);
  for (std::int64_t epoch = 0; epoch < info.max_epochs && top1 < target; ++epoch) {
    w.begin_epoch(epoch);
    for (std::int64_t s = 0; s < info.samples_per_epoch; s += info.global_batch_size) {
      w.prepare_batch();
      const StepResult r = w.train_step();
      ASSERT_TRUE(std::isfinite(r.loss));
      trained += r.samples;
    }
    if (trained % info.eval_every_samples == 0) top1 = w.evaluate().metric;
  }
  std::printf("mini top-1 %.4f (Workload class)\n", top1);
  EXPECT_GE(top1, target);
}

// Note [Promoted calls] (core/run_modes.cpp): a bf16 run reports which ops were computed through
// f32 promotion. On the CPU the batch norm (oneDNN, f32 only) is, once per BN layer and timed
// step; an fp32 run reports none. Synthetic data, so no dataset is needed.
TEST(ResNet50Host, ReportsTheOpsABf16RunPromotes) {
  const auto blocks = mini_options().get_int_list("blocks");
  const std::int64_t bn_layers =  // stem, three per block, one per stage's projection
      1 + 3 * std::accumulate(blocks.begin(), blocks.end(), std::int64_t{0}) + static_cast<std::int64_t>(blocks.size());
  const std::string common = "--mode train --synthetic -b 8 -w 1 -i 3 --threads 2";
  const auto bf16 = test_support::run_host("resnet50", common + " --precision bf16", "resnet50_bf16_promotions");
  if (!bf16.started) GTEST_SKIP() << bf16.why;
  ASSERT_EQ(bf16.exit_code, 0) << bf16.console;
  const auto& promoted = bf16.result.at("promoted_calls");
  ASSERT_TRUE(promoted.is_object()) << bf16.result.dump(2);
  ASSERT_TRUE(promoted.contains("batch_norm_forward")) << promoted.dump();
  EXPECT_EQ(promoted["batch_norm_forward"].get<int>(), 3 * bn_layers) << promoted.dump();
  EXPECT_EQ(promoted["batch_norm_backward"].get<int>(), 3 * bn_layers) << promoted.dump();
  EXPECT_NE(bf16.console.find("op calls computed through f32 promotion"), std::string::npos) << bf16.console;

  const auto fp32 = test_support::run_host("resnet50", common + " --precision fp32", "resnet50_fp32_promotions");
  ASSERT_TRUE(fp32.started) << fp32.why;
  ASSERT_EQ(fp32.exit_code, 0) << fp32.console;
  EXPECT_EQ(fp32.result.at("promoted_calls"), nlohmann::json::object()) << "fp32 promotes nothing";
}

// Note [Options declared once]: the host refuses a value outside the declared range before any
// run starts, naming the option, the value and the allowed range.
TEST(ResNet50Host, RefusesAnOutOfRangeOption) {
  const auto run = test_support::run_host(
      "resnet50", "--mode train --synthetic -b 2 -i 1 -w 0 --resnet50.image-size 4", "resnet50_out_of_range");
  if (run.exit_code == -1) GTEST_SKIP() << run.why;
  EXPECT_FALSE(run.started) << run.console;
  EXPECT_NE(run.exit_code, 0) << run.console;
  EXPECT_NE(run.console.find("option --resnet50.image-size: '4' is below the minimum 8; allowed: an integer >= 8"),
            std::string::npos)
      << run.console;
}

}  // namespace
