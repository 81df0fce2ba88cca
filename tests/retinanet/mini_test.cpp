// The mini configuration (configs/retinanet/mini.conf) reaches its COCO mAP target from its fixed
// seed, end to end through the benchhost executable: the generator writes the OpenImages-layout
// JPEGs and COCO JSON on first use, then the loader (decode, flip, normalise, resize), the
// ResNeXt-FPN RetinaNet, anchors, matching, focal and L1 losses, Adam with the warm-up, the
// reference post-processing and the SDK's COCO evaluator run as in mlperf.conf, and the MLLOG
// passes the open-division rules of benchmark ssd.

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/host_run.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
namespace fs = std::filesystem;

const fs::path kMiniConf = fs::path(BENCHHOST_SOURCE_DIR) / "configs" / "retinanet" / "mini.conf";

TEST(RetinaNetMini, ReachesTargetOnGeneratedShapes) {
  const Options o =
      declared_options<retinanet::RetinaNetWorkload>(plugin_values(read_config_file(kMiniConf.string()), "retinanet"));
  const double target = o.get_float("target");
  ASSERT_GE(target, 0.1);  // no detections score 0; an untrained model ~0.002
  const auto run =
      test_support::run_host("retinanet", fmt::format("--config '{}' --threads 2", kMiniConf.string()), "retinanet_mini");
  if (!run.started) GTEST_SKIP() << run.why;
  ASSERT_EQ(run.exit_code, 0) << run.console;
  const auto& r = run.result;
  ASSERT_TRUE(r["ttt"].is_object()) << r.dump(2);
  const double map = r["ttt"]["final_metric"].get<double>();
  std::printf("mini mAP %.4f in %.1f s (host time to train)\n", map, r["ttt"]["time_to_train_seconds"].get<double>());
  EXPECT_GE(map, target) << r.dump(2);
  EXPECT_LT(map, 1.0);
  EXPECT_EQ(r["status"], "PASSED") << r.dump(2);
  const std::string mls = test_support::read_text(run.mllog);
  for (const char* key : {"\"opt_name\", \"value\": \"adam\"", "\"opt_learning_rate_warmup_factor\"", "\"eval_accuracy\"",
                          "\"run_stop\"", "\"submission_benchmark\", \"value\": \"ssd\""})
    EXPECT_NE(mls.find(key), std::string::npos) << key;
  EXPECT_EQ(test_support::mllog_violations(run.mllog), "");
}

}  // namespace
