// Golden outputs: the MLLOG stream of a toy time-to-train run (time_ms and lineno normalised) and
// the JSON report's schema (every path with its type). Regenerate after an intended change with
//   BENCHHOST_UPDATE_GOLDEN=1 bin/test_core --gtest_filter='Golden*'
// and review the diff: a schema change also bumps kReportSchemaVersion and docs/report-schema.md.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "reporters.hpp"
#include "run_modes.hpp"
#include "test_support.hpp"

using namespace benchhost::host;

namespace {

bool update_golden() {
  const char* v = std::getenv("BENCHHOST_UPDATE_GOLDEN");
  return v && *v == '1';
}

void compare_with_golden(const std::string& actual, const std::string& name) {
  const std::filesystem::path golden = std::filesystem::path(BENCHHOST_CORE_GOLDEN_DIR) / name;
  if (update_golden()) {
    write_file_atomically(golden, actual);
    std::cout << "updated " << golden << "\n";
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(golden)) << golden << " missing; run with BENCHHOST_UPDATE_GOLDEN=1";
  const std::string expected = bhtest::read_file(golden);
  EXPECT_EQ(actual, expected) << "golden " << golden << " differs";
}

// time_ms and lineno vary by run and by edits to the host; float values are rounded to 6
// significant digits so a libm difference in the last bit does not fail the test (the exact line
// format is locked separately by MllogLineFormatMatchesMlcommonsLogging).
std::string normalise_mllog(const std::string& line) {
  static const std::regex time_ms(R"("time_ms": [0-9]+)"), lineno(R"("lineno": [0-9]+)"),
      float_value(R"("value": (-?[0-9]+\.[0-9]+(e[-+]?[0-9]+)?))");
  std::string out = std::regex_replace(std::regex_replace(line, time_ms, "\"time_ms\": 0"), lineno, "\"lineno\": 0");
  std::smatch m;
  if (std::regex_search(out, m, float_value))
    out = m.prefix().str() + fmt::format("\"value\": {:.6g}", std::stod(m[1].str())) + m.suffix().str();
  return out;
}

}  // namespace

TEST(Golden, MllogOfToyTimeToTrain) {
  bhtest::TempDir tmp("mllog");
  const auto log = tmp.path / "result.txt";
  auto p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin toy --seed 3 --submission-platform test-platform "
                                             "--mllog '{}'",
                                             bhtest::plugin_dir().string(), log.string()));
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  std::istringstream in(bhtest::read_file(log));
  std::string line, normalised;
  std::map<std::string, int> count;
  std::int64_t last_time = 0;
  while (std::getline(in, line)) {
    ASSERT_EQ(line.rfind(":::MLLOG {\"namespace\": \"\", \"time_ms\": ", 0), 0u) << line;
    auto j = nlohmann::json::parse(line.substr(9));
    ASSERT_TRUE(j["metadata"].contains("file") && j["metadata"].contains("lineno")) << line;
    EXPECT_GE(j["time_ms"].get<std::int64_t>(), last_time);  // monotone
    last_time = j["time_ms"].get<std::int64_t>();
    ++count[j["key"].get<std::string>()];
    const std::string key = j["key"];
    if (key == "eval_start" || key == "eval_stop" || key == "eval_accuracy" || key == "epoch_start" || key == "epoch_stop")
      EXPECT_TRUE(j["metadata"].contains("epoch_num")) << line;
    if (key == "run_stop") EXPECT_EQ(j["metadata"]["status"], "success");
    normalised += normalise_mllog(line) + "\n";
  }
  // The MLPerf Training 3.0 compliance rules (common.yaml + closed_common.yaml).
  for (const char* k : {"submission_benchmark", "submission_org", "submission_division", "submission_status",
                        "submission_platform", "init_stop", "run_start", "run_stop", "train_samples", "eval_samples",
                        "seed", "global_batch_size", "gradient_accumulation_steps"})
    EXPECT_EQ(count[k], 1) << k;
  for (const char* k : {"cache_clear", "init_start", "epoch_start", "epoch_stop", "eval_start", "eval_stop",
                        "eval_accuracy", "submission_poc_name", "submission_poc_email", "opt_base_learning_rate"})
    EXPECT_GE(count[k], 1) << k;
  compare_with_golden(normalised, "toy_ttt.mllog");
}

TEST(Golden, MllogLineFormatMatchesMlcommonsLogging) {
  MllogEvent e;
  e.time_ms = 1700000000123;
  e.event_type = "POINT_IN_TIME";
  e.key = "eval_accuracy";
  e.value = 0.5;
  e.metadata = {{"epoch_num", 2}};
  e.file = "core/run_modes.cpp";
  e.line = 42;
  EXPECT_EQ(format_mllog_line(e),
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1700000000123, \"event_type\": \"POINT_IN_TIME\", "
            "\"key\": \"eval_accuracy\", \"value\": 0.5, \"metadata\": {\"file\": \"core/run_modes.cpp\", "
            "\"lineno\": 42, \"epoch_num\": 2}}");
  e.event_type = "INTERVAL_START";
  e.key = "run_start";
  e.value = nullptr;
  e.metadata = nlohmann::ordered_json::object();
  EXPECT_EQ(format_mllog_line(e),
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1700000000123, \"event_type\": \"INTERVAL_START\", "
            "\"key\": \"run_start\", \"value\": null, \"metadata\": {\"file\": \"core/run_modes.cpp\", \"lineno\": 42}}");
}

namespace {

// Objects whose keys depend on the machine (their values are still typed in the docs).
const std::set<std::string> kFreeForm{"environment.cuda", "environment.environment_variables", "invocation.options"};

std::string type_of(const nlohmann::json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "bool";
  if (j.is_number_integer()) return "int";
  if (j.is_number_float()) return "float";
  if (j.is_string()) return "string";
  if (j.is_array()) return "array";
  return "object";
}

void schema(const nlohmann::json& j, const std::string& path, std::map<std::string, std::set<std::string>>& out) {
  out[path].insert(type_of(j));
  if (kFreeForm.count(path)) return;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) schema(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
  if (j.is_array())
    for (const auto& e : j) schema(e, path + "[]", out);
}

}  // namespace

TEST(Golden, JsonReportSchema) {
  bhtest::TempDir tmp("schema");
  std::map<std::string, std::set<std::string>> paths;
  // Time-to-train (toy), training and inference throughput, fp16 loss scaling and a SKIPPED point
  // cover every record kind's fields.
  const std::string dir = bhtest::plugin_dir().string();
  const auto ttt = tmp.path / "ttt.json", train = tmp.path / "train.json", infer = tmp.path / "infer.json";
  auto p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin toy -o '{}'", dir, ttt.string()));
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin toy --mode train -b 4 -i 5 --peak-tflops 1 -o '{}'",
                                        dir, train.string()));
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin null --mode infer -b 2 -i 5 -o '{}'", dir, infer.string()));
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  // fp16 with dynamic loss scaling: the mixed-precision step outcomes (ABI 1.2) are set.
  const auto fp16 = tmp.path / "fp16.json";
  p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin loss_scaling --mode train --precision fp16 -w 1 -i 5 "
                                        "--loss_scaling.overflow-steps 3 -o '{}'", dir, fp16.string()));
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  // A SKIPPED point: every measurement field is null.
  const auto skipped = tmp.path / "skipped.json";
  p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin decline -o '{}'", dir, skipped.string()));
  ASSERT_EQ(p.exit_code, kExitAllSkipped) << p.output;
  for (const auto& f : {ttt, train, infer, fp16, skipped}) {
    auto j = nlohmann::json::parse(bhtest::read_file(f));
    EXPECT_EQ(j["schema_version"], kReportSchemaVersion);
    EXPECT_EQ(j["summary"]["complete"], true);
    schema(j, "", paths);
  }
  std::string text;
  for (const auto& [path, types] : paths) {
    if (path.empty()) continue;
    std::string t;
    for (const auto& x : types) t += (t.empty() ? "" : "|") + x;
    text += path + ": " + t + "\n";
  }
  compare_with_golden(text, "report_schema.txt");
}
