// configs/dlrm_dcnv2/mini.conf reaches its target through the host, from the config's fixed seed:
//   benchhost --plugin dlrm_dcnv2 --config mini.conf
// The generated data is cached under the build tree (XDG_CACHE_HOME), so only the first run
// pays for the generator (~15 s). ctest runs it with OMP_WAIT_POLICY=PASSIVE (Note [Tests on
// shared cores]): oneDNN's OpenMP workers otherwise spin between matmuls while the oneTBB ops run,
// which on 2 shared cores slowed training ~40x.
#include <gtest/gtest.h>

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/host_run.hpp"

namespace fs = std::filesystem;

TEST(DlrmMini, ReachesTargetThroughTheHost) {
  const auto run = benchhost::test_support::run_host("dlrm_dcnv2", "--config configs/dlrm_dcnv2/mini.conf", "dlrm_mini");
  ASSERT_TRUE(run.started) << run.why;
  const auto& r = run.result;
  const auto& ttt = r.at("ttt");
  std::string evals;
  for (const auto& e : ttt.at("evals"))
    evals += fmt::format("  {} samples: AUC {:.5f}\n", e.at("samples_trained").get<long>(),
                         e.at("metric").get<double>());
  EXPECT_EQ(r.at("status"), "PASSED") << r.value("message", "") << "\n" << evals;
  EXPECT_TRUE(ttt.at("converged").get<bool>()) << evals;
  EXPECT_GE(ttt.at("final_metric").get<double>(), 0.87) << evals;  // mini.conf's target
  EXPECT_LE(ttt.at("epochs").get<int>(), 1);

  // The MLLOG carries the MLPerf DLRM-DCNv2 keys the compliance checker looks for.
  ASSERT_TRUE(fs::exists(run.mllog)) << "no MLLOG at " << run.mllog;
  const std::string text = benchhost::test_support::read_text(run.mllog);
  for (const char* key : {"\"opt_name\", \"value\": \"adagrad\"", "\"opt_adagrad_epsilon\"",
                          "\"opt_adagrad_initial_accumulator_value\"", "\"eval_accuracy\"",
                          "\"run_stop\"", "\"success\""})
    EXPECT_NE(text.find(key), std::string::npos) << "MLLOG lacks " << key;
  // The whole file against the MLPerf logging rules (open division: a scaled-down model).
  EXPECT_EQ(benchhost::test_support::mllog_violations(run.mllog), "");
}
