// configs/dlrm_dcnv2/mini.conf reaches its target through the host, from the config's fixed seed:
//   benchhost --plugin dlrm_dcnv2 --config mini.conf
// The generated data is cached under the build tree (XDG_CACHE_HOME), so only the first run
// pays for the generator (~15 s). OMP_WAIT_POLICY=PASSIVE: oneDNN's OpenMP workers otherwise
// spin between matmuls while the oneTBB ops run, which on 2 shared cores slowed training ~40x.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/host_run.hpp"

namespace fs = std::filesystem;

TEST(DlrmMini, ReachesTargetThroughTheHost) {
  const fs::path bin = fs::path(BENCHHOST_BINARY_DIR) / "bin";
  ASSERT_TRUE(fs::exists(bin / "benchhost")) << "build the benchhost target";
  ASSERT_TRUE(fs::exists(bin / "plugins" / "dlrm_dcnv2.so")) << "build the dlrm_dcnv2 target";
  const fs::path work = fs::path(BENCHHOST_BINARY_DIR) / "dlrm_mini_test";
  fs::create_directories(work);
  const fs::path report = work / "report.json", mllog = work / "mllog.txt";
  fs::remove(report);
  fs::remove(mllog);
  const std::string cmd = fmt::format(
      "XDG_CACHE_HOME={}/cache OMP_WAIT_POLICY=PASSIVE {}/benchhost --plugin dlrm_dcnv2 --config {}/configs/dlrm_dcnv2/mini.conf "
      "-o {} --mllog {} > {}/console.txt 2>&1",
      BENCHHOST_BINARY_DIR, bin.string(), BENCHHOST_SOURCE_DIR, report.string(), mllog.string(),
      work.string());
  const int rc = std::system(cmd.c_str());
  std::ifstream in(report);
  ASSERT_TRUE(in) << "no report; exit code " << rc << "; see " << (work / "console.txt");
  const auto j = nlohmann::json::parse(in);
  const auto& r = j.at("results").at(0);
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
  std::ifstream log(mllog);
  ASSERT_TRUE(log) << "no MLLOG at " << mllog;
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  for (const char* key : {"\"opt_name\", \"value\": \"adagrad\"", "\"opt_adagrad_epsilon\"",
                          "\"opt_adagrad_initial_accumulator_value\"", "\"eval_accuracy\"",
                          "\"run_stop\"", "\"success\""})
    EXPECT_NE(text.find(key), std::string::npos) << "MLLOG lacks " << key;
  // The whole file against the MLPerf logging rules (open division: a scaled-down model).
  EXPECT_EQ(benchhost::test_support::mllog_violations(mllog), "");
}
