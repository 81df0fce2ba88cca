// The -n sweep's scaling report (core/scaling.hpp, Note [Scaling report]): weak-scaling efficiency,
// every rank's step times and the straggler, in the record, summary.scaling and the console.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "core/test_support.hpp"
#include "reporters.hpp"
#include "run_modes.hpp"
#include "scaling.hpp"

namespace {

using namespace benchhost::host;
using nlohmann::json;

RunRecord point(int devices, double samples_per_second, std::vector<RunRecord::RankSteps> ranks) {
  RunRecord r;
  r.kind = "train";
  r.plugin = "null";
  r.device = "cpu";
  r.precision = "fp32";
  r.batch_size = 32;
  r.devices = devices;
  r.samples_per_second = samples_per_second;
  r.rank_steps = std::move(ranks);
  r.iteration_ms = {10.0, 10.5, 11.0};
  return r;
}

std::vector<RunRecord> sweep() {
  std::vector<RunRecord> records{point(1, 1000, {}), point(2, 1800, {{0, 9.5, 10.0, 12.0}, {1, 10.5, 11.0, 15.0}}),
                                 point(4, 3200, {{0, 9.5, 10.0, 12.0}, {1, 9.6, 10.2, 12.5}, {2, 9.4, 10.1, 11.0},
                                                 {3, 11.0, 12.6, 20.0}})};
  for (std::size_t i = 1; i < records.size(); ++i)
    apply_weak_scaling(records[i], std::vector<RunRecord>(records.begin(), records.begin() + i));
  return records;
}

TEST(Scaling, StragglerIsTheRankWithTheLargestMedian) {
  const auto records = sweep();
  EXPECT_FALSE(find_straggler(records[0]).has_value());  // one rank: nobody straggles
  const auto s = find_straggler(records[2]);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 3);
  EXPECT_DOUBLE_EQ(s->median_ms, 12.6);
  EXPECT_DOUBLE_EQ(s->ranks_median_ms, (10.1 + 10.2) / 2);
  EXPECT_NEAR(s->above_median_fraction, 12.6 / 10.15 - 1, 1e-12);
}

TEST(Scaling, ReportHasEfficiencyPerDeviceCountAndRanks) {
  const json j = json::parse(scaling_report_json(sweep()).dump());
  ASSERT_EQ(j.size(), 3u);
  EXPECT_DOUBLE_EQ(j[0]["scaling_efficiency"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j[1]["scaling_efficiency"].get<double>(), 0.9);  // 1800 / (2 * 1000)
  EXPECT_DOUBLE_EQ(j[2]["scaling_efficiency"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(j[2]["samples_per_second_per_device"].get<double>(), 800);
  ASSERT_EQ(j[0]["per_rank"].size(), 1u);  // a single process: rank 0 from its own step times
  EXPECT_DOUBLE_EQ(j[0]["per_rank"][0]["max"].get<double>(), 11.0);
  EXPECT_EQ(j[2]["per_rank"].size(), 4u);
  EXPECT_EQ(j[2]["straggler"]["rank"], 3);
  EXPECT_TRUE(j[0]["straggler"].is_null());
  const std::string text = scaling_report_text(sweep());
  EXPECT_NE(text.find("80.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("straggler: rank 3, median 12.6 ms, +24.1% against the ranks' median 10.15 ms"), std::string::npos)
      << text;
  // No multi-device point: no scaling report at all.
  EXPECT_TRUE(scaling_report_json({sweep()[0]}).is_null());
  EXPECT_EQ(scaling_report_text({sweep()[0]}), "");
}

TEST(Scaling, RecordCarriesRanksAndSamplesThroughJson) {
  // The -n child job's records come back to the parent through record_to_json/record_from_json.
  const RunRecord r = sweep()[1];
  const json j = json::parse(record_to_json(r).dump());
  EXPECT_EQ(j["rank_step_ms"]["per_rank"].size(), 2u);
  EXPECT_EQ(j["rank_step_ms"]["straggler"]["rank"], 1);
  EXPECT_EQ(j["iteration_ms"].size(), 3u);
  const RunRecord back = record_from_json(j);
  ASSERT_EQ(back.rank_steps.size(), 2u);
  EXPECT_EQ(back.rank_steps[1].rank, 1);
  EXPECT_DOUBLE_EQ(back.rank_steps[1].max, 15.0);
  EXPECT_EQ(back.iteration_ms, r.iteration_ms);
}

TEST(Scaling, DeviceCountSweepThroughTheExecutable) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  bhtest::TempDir tmp("compare_scaling");
  const auto out = tmp.path / "sweep.json";
  const auto p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin null --mode train -b 4 -n 1,2 -w 2 -i 20 "
                                                   "--null.step-us 1000 -o '{}'", bhtest::plugin_dir().string(),
                                                   out.string()));
  if (p.output.find("built without MPI") != std::string::npos) GTEST_SKIP() << "this build has no MPI backend";
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  EXPECT_NE(p.output.find("weak scaling"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("straggler: rank "), std::string::npos) << p.output;
  const json j = json::parse(bhtest::read_file(out));
  const json& scaling = j["summary"]["scaling"];
  ASSERT_EQ(scaling.size(), 2u) << scaling.dump(2);
  EXPECT_EQ(scaling[1]["devices"], 2);
  EXPECT_TRUE(scaling[1]["scaling_efficiency"].is_number());
  ASSERT_EQ(scaling[1]["per_rank"].size(), 2u);
  for (const auto& rank : scaling[1]["per_rank"]) {
    EXPECT_LE(rank["min"].get<double>(), rank["median"].get<double>());
    EXPECT_LE(rank["median"].get<double>(), rank["max"].get<double>());
    EXPECT_GE(rank["min"].get<double>(), 0.9);  // each step sleeps 1 ms
  }
  EXPECT_TRUE(scaling[1]["straggler"]["rank"].is_number_integer());
  EXPECT_EQ(j["results"][1]["rank_step_ms"]["per_rank"], scaling[1]["per_rank"]);
  EXPECT_EQ(j["results"][1]["iteration_ms"].size(), 20u);
}

// A sweep over batch sizes and device counts records each (batch, n) point once: the child job of
// an n > 1 point runs that point's batch alone (it used to get the whole -b list, so every n > 1
// point was recorded once per batch size), and it never writes this run's --html page.
TEST(Scaling, BatchAndDeviceSweepRecordsEachPointOnce) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  bhtest::TempDir tmp("compare_sweep_points");
  const auto out = tmp.path / "sweep.json", html = tmp.path / "sweep.html";
  const auto p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin null --mode train -b 2,4 -n 1,2 -w 1 -i 12 "
                                                   "-o '{}' --html '{}'", bhtest::plugin_dir().string(), out.string(),
                                                   html.string()));
  if (p.output.find("built without MPI") != std::string::npos) GTEST_SKIP() << "this build has no MPI backend";
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  const json j = json::parse(bhtest::read_file(out));
  std::vector<std::pair<int, int>> points;
  for (const auto& r : j["results"]) points.emplace_back(r["batch_size"].get<int>(), r["devices"].get<int>());
  const std::vector<std::pair<int, int>> expected{{2, 1}, {2, 2}, {4, 1}, {4, 2}};
  std::vector<std::pair<int, int>> sorted = points;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, expected) << p.output;
  const std::string page = bhtest::read_file(html);
  EXPECT_NE(page.find("Weak-scaling efficiency against device count"), std::string::npos);
  EXPECT_NE(page.find("train cpu fp32 b4 x2"), std::string::npos);  // the parent's page, with the n = 2 points
}

}  // namespace
