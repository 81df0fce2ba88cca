// Dictionary-valued evaluations (Note [Dictionary-valued evaluations], workload.hpp; ABI 1.4)
// through the host, with the eval_dict test plugin: MLLOG's eval_accuracy logs the plugin's
// dictionary, time-to-train stops on the workload's verdict, the JSON report keeps the dictionary
// beside the metric, a value the host cannot log fails the run naming the plugin, and
// tools/mllog_check.py accepts the log against the plugin's per-field targets
// (Note [Dictionary-valued targets], mlperf_rules.hpp), which survive describe_json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "plugin_loader.hpp"
#include "reporters.hpp"
#include "run_modes.hpp"
#include "test_support.hpp"

using namespace benchhost::host;

namespace {

struct InProcessRun {
  std::vector<RunRecord> records;
  std::vector<MllogEvent> mllog;
  std::vector<MllogEvent> evals() const {
    std::vector<MllogEvent> out;
    for (const auto& e : mllog)
      if (e.key == "eval_accuracy") out.push_back(e);
    return out;
  }
};

InProcessRun run_eval_dict(std::vector<std::string> args) {
  BrokenPlugin why;
  auto plugin = load_plugin(bhtest::plugin_file("eval_dict"), &why);
  if (!plugin) throw std::runtime_error(why.reason);
  std::vector<const char*> argv{"benchhost", "--plugin", "eval_dict"};
  for (auto& a : args) argv.push_back(a.c_str());
  Settings s = parse_cli(static_cast<int>(argv.size()), argv.data(), &plugin->info, {});
  InProcessRun out;
  EventBus bus;
  bus.add(std::make_unique<bhtest::CapturingReporter>(&out.mllog));
  run_selected_mode(s, plugin, Placement{}, bus);
  out.records = bus.records();
  return out;
}

}  // namespace

TEST(EvalDict, MllogLogsTheDictionaryAndTheWorkloadsVerdictStopsTheRun) {
  const InProcessRun r = run_eval_dict({"--eval_dict.reach-at", "3"});
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  ASSERT_EQ(rec.status, RunStatus::passed) << rec.message;
  ASSERT_TRUE(rec.converged && *rec.converged);
  // The metric (BBOX, 0.39 at the 3rd evaluation) is far from describe's 0.99: the verdict stopped it.
  ASSERT_EQ(rec.evals.size(), 3u);
  EXPECT_EQ(rec.final_metric, 0.39);
  const auto evals = r.evals();
  ASSERT_EQ(evals.size(), 3u);
  for (std::size_t k = 0; k < evals.size(); ++k) {
    const double bbox = 0.13 * static_cast<double>(k + 1), segm = 0.12 * static_cast<double>(k + 1);
    ASSERT_TRUE(evals[k].value.is_object()) << evals[k].value.dump();
    EXPECT_NEAR(evals[k].value.at("BBOX").get<double>(), bbox, 1e-12);
    EXPECT_NEAR(evals[k].value.at("SEGM").get<double>(), segm, 1e-12);
    EXPECT_TRUE(evals[k].metadata.contains("epoch_num"));  // the same metadata as a number's
    EXPECT_TRUE(evals[k].metadata.contains("samples_count"));
    EXPECT_EQ(rec.evals[k].value, evals[k].value);
    ASSERT_TRUE(rec.evals[k].target_reached.has_value());
    EXPECT_EQ(*rec.evals[k].target_reached, k == 2);
    EXPECT_NEAR(rec.evals[k].metric, bbox, 1e-12);
  }
  // The line as mlcommons/logging prints it.
  const std::string line = format_mllog_line(evals[2]);
  EXPECT_NE(line.find(R"("key": "eval_accuracy", "value": {"BBOX": 0.39, "SEGM": 0.36}, "metadata": {)"),
            std::string::npos)
      << line;
  bool success = false;
  for (const auto& e : r.mllog)
    if (e.key == "run_stop") success = e.metadata.at("status") == "success";
  EXPECT_TRUE(success);
}

TEST(EvalDict, AVerdictOfNotReachedRunsToTheEpochLimit) {
  // BBOX reaches 0.99 at no evaluation of 2 epochs (4 evaluations); the verdict never says reached.
  const InProcessRun r = run_eval_dict({"--eval_dict.reach-at", "100", "--eval_dict.max-epochs", "2"});
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  EXPECT_EQ(rec.status, RunStatus::failed);
  EXPECT_FALSE(*rec.converged);
  EXPECT_EQ(rec.evals.size(), 4u);
  EXPECT_NE(rec.message.find("the workload's verdict"), std::string::npos) << rec.message;
  EXPECT_NE(rec.message.find(R"({"BBOX":0.52,"SEGM":0.48})"), std::string::npos) << rec.message;
}

TEST(EvalDict, WithoutAVerdictTheHostComparesTheMetric) {
  // Target 0.25 from the configuration: BBOX 0.26 at the 2nd evaluation reaches it; the dictionary
  // is still what MLLOG logs.
  const InProcessRun r = run_eval_dict({"--eval_dict.verdict", "none", "--eval_dict.target", "0.25"});
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  ASSERT_EQ(rec.status, RunStatus::passed) << rec.message;
  EXPECT_EQ(rec.evals.size(), 2u);
  EXPECT_FALSE(rec.evals.back().target_reached.has_value());
  ASSERT_EQ(r.evals().size(), 2u);
  EXPECT_TRUE(r.evals().back().value.is_object());
  // And a plugin that gives no value logs its metric, as before ABI 1.4.
  const InProcessRun plain = run_eval_dict({"--eval_dict.value", "number", "--eval_dict.reach-at", "2"});
  ASSERT_EQ(plain.records.size(), 1u);
  ASSERT_EQ(plain.records[0].status, RunStatus::passed) << plain.records[0].message;
  ASSERT_EQ(plain.evals().size(), 2u);
  EXPECT_EQ(plain.evals()[1].value, 0.26);
  EXPECT_TRUE(plain.records[0].evals[1].value.is_null());
}

TEST(EvalDict, AValueTheHostCannotLogFailsTheRunNamingThePlugin) {
  for (const char* value : {"malformed", "array"}) {
    const InProcessRun r = run_eval_dict({"--eval_dict.value", value});
    ASSERT_EQ(r.records.size(), 1u) << value;
    const RunRecord& rec = r.records[0];
    EXPECT_EQ(rec.status, RunStatus::failed) << value;
    EXPECT_NE(rec.message.find("eval_dict.evaluate: value_json"), std::string::npos) << rec.message;
    EXPECT_TRUE(r.evals().empty()) << value;  // nothing logged for it
    bool aborted = false;
    for (const auto& e : r.mllog)
      if (e.key == "run_stop") aborted = e.metadata.at("status") == "aborted";
    EXPECT_TRUE(aborted) << value;
  }
}

TEST(EvalDict, ExecutableWritesTheDictionaryToMllogAndReportAndTheCheckerAcceptsIt) {
  // Through the real executable, so through its worker process (crash isolation) and the report's
  // record round trip, and the rules through `info --json`.
  bhtest::TempDir tmp("eval_dict");
  const auto report = tmp.path / "report.json", mllog = tmp.path / "run.mllog", rules = tmp.path / "rules.json";
  const std::string dir = bhtest::plugin_dir().string();
  auto p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin eval_dict -o '{}' --mllog '{}'", dir,
                                             report.string(), mllog.string()));
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  const auto j = nlohmann::json::parse(bhtest::read_file(report));
  const auto& evals = j["results"][0]["ttt"]["evals"];
  ASSERT_EQ(evals.size(), 3u) << j.dump(2);
  EXPECT_EQ(evals[2]["metric"], 0.39);
  EXPECT_EQ(evals[2]["value"], nlohmann::json::parse(R"({"BBOX": 0.39, "SEGM": 0.36})"));
  EXPECT_EQ(evals[2]["target_reached"], true);
  EXPECT_EQ(evals[1]["target_reached"], false);
  const std::string log = bhtest::read_file(mllog);
  EXPECT_NE(log.find(R"("key": "eval_accuracy", "value": {"BBOX": 0.39, "SEGM": 0.36}, "metadata": {"file": )"),
            std::string::npos)
      << log;

  auto info = bhtest::run_benchhost(fmt::format("info eval_dict --plugin-dir '{}' --json > '{}'", dir, rules.string()));
  ASSERT_EQ(info.exit_code, kExitOk) << info.output;
  const auto declared = nlohmann::json::parse(bhtest::read_file(rules));
  const auto& fields = declared.at("mlperf").at("closed_target_fields");
  ASSERT_EQ(fields.size(), 2u) << declared.dump(2);
  EXPECT_EQ(fields[0]["field"], "BBOX");
  EXPECT_EQ(fields[1]["field"], "SEGM");
  auto checked = bhtest::run_command(fmt::format("python3 '{}/tools/mllog_check.py' --rules '{}' '{}'",
                                                 BENCHHOST_SOURCE_DIR, rules.string(), mllog.string()));
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("compliant"), std::string::npos) << checked.output;
}

TEST(EvalDict, PerFieldTargetsSurviveDescribeJson) {
  namespace mlperf = benchhost::mlperf;
  benchhost::WorkloadInfo w;
  w.name = "maskrcnn_like";
  w.benchmark = "maskrcnn";
  w.mlperf.closed_target_fields = {{"BBOX", mlperf::between(0.377, 1.0, false, true)},
                                   {"SEGM", mlperf::between(0.339, 1.0, false, true)}};
  w.mlperf.open_target_fields = {{"BBOX", mlperf::between(0.0, 1.0, false, true)}};
  const benchhost::WorkloadInfo back = benchhost::WorkloadInfo::from_json(w.to_json());
  ASSERT_TRUE(back.mlperf.eval_accuracy_is_dictionary());
  ASSERT_EQ(back.mlperf.closed_target_fields.size(), 2u);
  EXPECT_EQ(back.mlperf.closed_target_fields[0].first, "BBOX");
  EXPECT_EQ(back.mlperf.closed_target_fields[1].first, "SEGM");
  const mlperf::ValueCheck& segm = back.mlperf.closed_target_fields[1].second;
  EXPECT_EQ(segm.min, 0.339);
  EXPECT_FALSE(segm.min_exclusive);
  EXPECT_EQ(segm.max, 1.0);
  EXPECT_TRUE(segm.max_exclusive);
  ASSERT_EQ(back.mlperf.open_target_fields.size(), 1u);
  EXPECT_TRUE(back.mlperf.open_target_fields[0].second.max_exclusive);
  // A number-valued benchmark declares none, and a description without the keys reads as none.
  EXPECT_FALSE(benchhost::WorkloadInfo::from_json(R"({"name": "x", "mlperf": {}})").mlperf.eval_accuracy_is_dictionary());
}
