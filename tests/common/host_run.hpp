#pragma once
/// @file tests/common/host_run.hpp  Runs the benchhost executable as a user would, and checks the
/// MLLOG file it writes with tools/mllog_check.py (the MLPerf Training v3.0 logging rules).
///
/// Usage (any test area; tests/ is on the include path):
///   const auto run = benchhost::test_support::run_host("gpt3", "--config configs/gpt3/mini.conf --threads 2");
///   ASSERT_TRUE(run.started) << run.why;
///   EXPECT_EQ(run.result.at("status"), "PASSED") << run.console;
///   EXPECT_EQ(test_support::mllog_violations(run.mllog), "");
///
/// Each run gets its own folder under the build tree (removed by the next run of the same name),
/// so a failing test leaves its console output, report and MLLOG behind for a person to read.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace benchhost::test_support {

struct HostRun {
  bool started = false;           ///< the executable and plugin exist and a report was written
  std::string why;                ///< when not started: what is missing, and the console output
  int exit_code = -1;             ///< benchhost's exit code (docs/cli.md)
  nlohmann::json result;          ///< the report's first result record
  std::string console;            ///< what benchhost printed (stdout and stderr)
  std::filesystem::path mllog;    ///< the MLLOG file it wrote
  std::filesystem::path folder;   ///< report.json, mllog.txt and console.txt
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `benchhost --plugin <plugin> <args> -o report.json --mllog mllog.txt` from the source
/// tree (so config paths are relative to it), with the build's plugins.
inline HostRun run_host(const std::string& plugin, const std::string& args, const std::string& name = "") {
  namespace fs = std::filesystem;
  HostRun run;
  const fs::path bin = fs::path(BENCHHOST_BINARY_DIR) / "bin";
  if (!fs::exists(bin / "benchhost") || !fs::exists(bin / "plugins" / (plugin + ".so"))) {
    run.why = fmt::format("build the benchhost and {} targets ({} has neither)", plugin, bin.string());
    return run;
  }
  run.folder = fs::path(BENCHHOST_BINARY_DIR) / "host_runs" / (name.empty() ? plugin : name);
  fs::remove_all(run.folder);
  fs::create_directories(run.folder);
  run.mllog = run.folder / "mllog.txt";
  const fs::path report = run.folder / "report.json", console = run.folder / "console.txt";
  const std::string cmd = fmt::format(
      "cd '{}' && XDG_CACHE_HOME='{}/cache' '{}' --plugin {} {} -o '{}' --mllog '{}' > '{}' 2>&1",
      BENCHHOST_SOURCE_DIR, BENCHHOST_BINARY_DIR, (bin / "benchhost").string(), plugin, args, report.string(),
      run.mllog.string(), console.string());
  const int status = std::system(cmd.c_str());
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.console = read_text(console);
  std::ifstream in(report);
  if (!in) {
    run.why = fmt::format("no report from `{}` (exit code {}):\n{}", cmd, run.exit_code, run.console);
    return run;
  }
  const auto j = nlohmann::json::parse(in);
  run.result = j.at("results").at(0);
  run.started = true;
  return run;
}

/// The violations tools/mllog_check.py finds in an MLLOG file, one per line; "" when compliant.
/// The checker reads the rules the plugins declare from this build's executable. A checker that
/// cannot run is a violation too (python3 is installed by tools/setup.sh).
inline std::string mllog_violations(const std::filesystem::path& mllog) {
  const std::string cmd = fmt::format("python3 '{}/tools/mllog_check.py' --benchhost '{}/bin/benchhost' --quiet '{}' 2>&1",
                                      BENCHHOST_SOURCE_DIR, BENCHHOST_BINARY_DIR, mllog.string());
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return "cannot start " + cmd;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  const int status = ::pclose(pipe);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc != 0 && out.empty()) out = fmt::format("`{}` exited with {}", cmd, rc);
  return out;  // --quiet prints violations only: empty when compliant
}

}  // namespace benchhost::test_support

#include <gtest/gtest.h>

namespace benchhost::test_support {

/// Time to train on a plugin's mini config through the executable, from the config's seed: the
/// run must pass, converge, and leave an MLLOG file that tools/mllog_check.py accepts for
/// `benchmark` in the open division (a scaled-down model is not a closed-division run).
inline void expect_mini_time_to_train(const std::string& plugin, const std::string& benchmark) {
  const HostRun run = run_host(plugin, "--config mini --threads 2", plugin + "_mini_ttt");
  ASSERT_TRUE(run.started) << run.why;
  const auto& r = run.result;
  EXPECT_EQ(run.exit_code, 0) << run.console;
  EXPECT_EQ(r.at("status"), "PASSED") << r.value("message", "") << "\n" << run.console;
  const auto& ttt = r.at("ttt");
  EXPECT_TRUE(ttt.at("converged").get<bool>()) << ttt.dump(2);
  std::printf("%s mini through the host: final metric %.4f in %.1f s (time to train)\n", plugin.c_str(),
              ttt.at("final_metric").get<double>(), ttt.at("time_to_train_seconds").get<double>());
  EXPECT_EQ(mllog_violations(run.mllog), "") << "in " << run.mllog;
  const std::string mllog = read_text(run.mllog);
  EXPECT_NE(mllog.find(fmt::format("\"key\": \"submission_benchmark\", \"value\": \"{}\"", benchmark)),
            std::string::npos);
  EXPECT_NE(mllog.find("\"key\": \"submission_division\", \"value\": \"open\""), std::string::npos);
  EXPECT_NE(mllog.find("\"status\": \"success\""), std::string::npos);
}

}  // namespace benchhost::test_support
