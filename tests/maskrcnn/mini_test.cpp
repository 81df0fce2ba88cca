// The mini configuration (configs/maskrcnn/mini.conf) reaches its box and mask mAP targets from
// its fixed seed, end to end through the benchhost executable: the generator writes the COCO 2017
// layout (JPEGs, instances JSON with polygons, non-contiguous category ids and crowd RLEs) on
// first use, then the loader (decode, resize, flip, BGR normalisation, padding to 32), the R-FPN
// Mask R-CNN, RPN and RoI-head targets and losses, SGD with the warm-up multi-step schedule, the
// reference post-processing, mask pasting and the SDK's COCO box and mask evaluation run as in
// mlperf.conf, and the MLLOG (eval_accuracy {"BBOX": b, "SEGM": s}) passes the open-division
// rules of benchmark maskrcnn.

#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/host_run.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
namespace fs = std::filesystem;

const fs::path kMiniConf = fs::path(BENCHHOST_SOURCE_DIR) / "configs" / "maskrcnn" / "mini.conf";

TEST(MaskRcnnMini, ReachesBoxAndMaskTargetsOnGeneratedShapes) {
  const Options o =
      declared_options<maskrcnn::MaskRcnnWorkload>(plugin_values(read_config_file(kMiniConf.string()), "maskrcnn"));
  const double bbox_target = o.get_float("target-bbox"), segm_target = o.get_float("target-segm");
  ASSERT_GE(bbox_target, 0.1);  // no detections score 0; an untrained model ~0.005 (masks ~0.002)
  ASSERT_GE(segm_target, 0.1);
  const auto run =
      test_support::run_host("maskrcnn", fmt::format("--config '{}' --threads 2", kMiniConf.string()), "maskrcnn_mini");
  if (!run.started) GTEST_SKIP() << run.why;
  ASSERT_EQ(run.exit_code, 0) << run.console;
  const auto& r = run.result;
  ASSERT_TRUE(r["ttt"].is_object()) << r.dump(2);
  EXPECT_EQ(r["status"], "PASSED") << r.dump(2);
  // The last eval_accuracy of the MLLOG: both parts at their targets, both below 1.
  const std::string mls = test_support::read_text(run.mllog);
  std::istringstream lines(mls);
  nlohmann::json last;
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("{");
    if (line.find("\"eval_accuracy\"") == std::string::npos || at == std::string::npos) continue;
    last = nlohmann::json::parse(line.substr(at))["value"];
  }
  ASSERT_TRUE(last.is_object()) << mls;
  const double bbox = last["BBOX"].get<double>(), segm = last["SEGM"].get<double>();
  std::printf("mini box mAP %.4f, mask mAP %.4f in %.1f s (host time to train)\n", bbox, segm,
              r["ttt"]["time_to_train_seconds"].get<double>());
  EXPECT_GE(bbox, bbox_target);
  EXPECT_GE(segm, segm_target);
  EXPECT_LT(bbox, 1.0);
  EXPECT_LT(segm, 1.0);
  EXPECT_NEAR(r["ttt"]["final_metric"].get<double>(), bbox, 1e-12);
  for (const char* key : {"\"opt_name\", \"value\": \"sgd_with_momentum\"", "\"num_image_candidates\"",
                          "\"opt_learning_rate_decay_steps\"", "\"run_stop\"", "\"submission_benchmark\", \"value\": \"maskrcnn\""})
    EXPECT_NE(mls.find(key), std::string::npos) << key;
  EXPECT_EQ(test_support::mllog_violations(run.mllog), "");
}

}  // namespace
