// The mini configuration (configs/rnnt/mini.conf) reaches its WER target from its fixed seed, end
// to end through the benchhost executable (the path users take: benchhost --plugin rnnt): the
// espeak-ng generator writes the LibriSpeech-layout speech on first use, then the reader, the
// feature pipeline, the model, the transducer loss, LAMB with EMA and greedy decoding run as in
// mlperf.conf, and the MLLOG passes the open-division rules of benchmark rnnt.

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/host_run.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
namespace fs = std::filesystem;

const fs::path kMiniConf = fs::path(BENCHHOST_SOURCE_DIR) / "configs" / "rnnt" / "mini.conf";

TEST(RnntMini, ReachesTargetOnSynthesisedSpeech) {
  const Options o = declared_options<rnnt::RnntWorkload>(plugin_values(read_config_file(kMiniConf.string()), "rnnt"));
  const double target = o.get_float("target");
  ASSERT_LE(target, 0.8);  // below empty hypotheses (1.0), the statistics-only plateau (1.0) and the commonest word (~0.9)
  const auto run = test_support::run_host("rnnt", fmt::format("--config '{}' --threads 2", kMiniConf.string()), "rnnt_mini");
  if (!run.started) GTEST_SKIP() << run.why;
  ASSERT_EQ(run.exit_code, 0) << run.console;
  const auto& r = run.result;
  ASSERT_TRUE(r["ttt"].is_object()) << r.dump(2);
  const double wer = r["ttt"]["final_metric"].get<double>();
  std::printf("mini WER %.4f in %.1f s (host time to train)\n", wer, r["ttt"]["time_to_train_seconds"].get<double>());
  EXPECT_LE(wer, target) << r.dump(2);
  EXPECT_GT(wer, 0.0);
  EXPECT_EQ(r["status"], "PASSED") << r.dump(2);
  const std::string mls = test_support::read_text(run.mllog);
  for (const char* key : {"\"opt_name\"", "\"opt_lamb_epsilon\"", "\"data_speed_perturbaton_min\"", "\"model_eval_ema_factor\"",
                          "\"eval_max_prediction_symbols\"", "\"eval_accuracy\"", "\"run_stop\"",
                          "\"submission_benchmark\", \"value\": \"rnnt\""})
    EXPECT_NE(mls.find(key), std::string::npos) << key;
  EXPECT_EQ(test_support::mllog_violations(run.mllog), "");
}

}  // namespace
