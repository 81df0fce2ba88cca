// The mini configuration (configs/unet3d/mini.conf) reaches its mean-DICE target from its fixed
// seed, end to end through the benchhost executable (the path users take: benchhost --plugin
// unet3d): the generator writes the KiTS19-layout volumes on first use, then the loader, the
// model, the DiceCE loss, SGD and the sliding-window evaluation run as in mlperf.conf, and the
// MLLOG passes the open-division rules of benchmark unet3d.

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/host_run.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
namespace fs = std::filesystem;

const fs::path kMiniConf = fs::path(BENCHHOST_SOURCE_DIR) / "configs" / "unet3d" / "mini.conf";

TEST(UNet3dMini, ReachesTargetOnGeneratedVolumes) {
  const Options o =
      declared_options<unet3d::UNet3dWorkload>(plugin_values(read_config_file(kMiniConf.string()), "unet3d"));
  const double target = o.get_float("target");
  ASSERT_GE(target, 0.75);  // far above all-background (0) and per-voxel thresholds (0.47)
  const auto run = test_support::run_host("unet3d", fmt::format("--config '{}' --threads 2", kMiniConf.string()), "unet3d_mini");
  if (!run.started) GTEST_SKIP() << run.why;
  ASSERT_EQ(run.exit_code, 0) << run.console;
  const auto& r = run.result;
  ASSERT_TRUE(r["ttt"].is_object()) << r.dump(2);
  const double dice = r["ttt"]["final_metric"].get<double>();
  std::printf("mini mean DICE %.4f in %.1f s (host time to train)\n", dice, r["ttt"]["time_to_train_seconds"].get<double>());
  EXPECT_GE(dice, target) << r.dump(2);
  EXPECT_LT(dice, 1.0);
  EXPECT_EQ(r["status"], "PASSED") << r.dump(2);
  const std::string mls = test_support::read_text(run.mllog);
  for (const char* key : {"\"opt_name\"", "\"oversampling\"", "\"training_input_shape\"", "\"validation_overlap\"",
                          "\"eval_accuracy\"", "\"run_stop\"", "\"submission_benchmark\", \"value\": \"unet3d\""})
    EXPECT_NE(mls.find(key), std::string::npos) << key;
  // No evaluation before start-eval-at (4 passes over the 48 training cases).
  EXPECT_EQ(mls.find("\"epoch_num\": 2.0"), std::string::npos);
  EXPECT_EQ(test_support::mllog_violations(run.mllog), "");
}

}  // namespace
