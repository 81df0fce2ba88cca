// The statistics of `benchhost compare` (core/compare.hpp, Note [Comparing two reports]) on planted
// samples, and compare_reports() on reports built in memory.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cli.hpp"
#include "compare.hpp"
#include "reporters.hpp"

namespace {

using namespace benchhost::host;
using nlohmann::json;
using nlohmann::ordered_json;

// Step times as a loaded machine gives them: a floor, log-normal spread, and a few slow outliers.
std::vector<double> step_times(std::size_t n, double median_ms, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> spread(0.0, 0.05);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = median_ms * spread(rng) * (u(rng) < 0.03 ? 3.0 : 1.0);
  return v;
}

std::vector<double> scaled(std::vector<double> v, double factor) {
  for (auto& x : v) x *= factor;
  return v;
}

TEST(CompareStats, BootstrapIntervalCoversAKnownRatio) {
  // NEW's steps take 1.25 times as long: its speed is 0.8 of BASE's. Over independent draws the 95%
  // interval must contain 0.8 about 95% of the time; allow for the bootstrap's known undercoverage
  // at moderate sample sizes.
  const double truth = 1 / 1.25;
  int covered = 0;
  const int trials = 60;
  for (int t = 0; t < trials; ++t) {
    const auto base = step_times(80, 10.0, 1000 + t);
    const auto next = scaled(step_times(80, 10.0, 5000 + t), 1.25);
    const RatioInterval r = bootstrap_ratio(base, next, Statistic::median, 0.95, 1000, 7 + t);
    EXPECT_LE(r.low, r.ratio);
    EXPECT_GE(r.high, r.ratio);
    covered += r.low <= truth && truth <= r.high;
  }
  EXPECT_GE(covered, trials * 85 / 100) << covered << " of " << trials << " intervals held the true ratio";
}

TEST(CompareStats, SameSeedSameInterval) {
  const auto base = step_times(50, 4.0, 1), next = step_times(50, 4.0, 2);
  const RatioInterval a = bootstrap_ratio(base, next, Statistic::median, 0.95);
  const RatioInterval b = bootstrap_ratio(base, next, Statistic::median, 0.95);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
}

TEST(CompareStats, IdenticalSamplesAreSame) {
  const auto base = step_times(50, 4.0, 3);
  const RatioInterval r = bootstrap_ratio(base, base, Statistic::median, 0.95);
  EXPECT_DOUBLE_EQ(r.ratio, 1.0);
  EXPECT_EQ(decide(r, 0.05), Verdict::same) << r.low << " " << r.high;
}

TEST(CompareStats, TwentyPercentShiftIsSlowerOrFaster) {
  const auto base = step_times(50, 4.0, 4);
  const auto slower = scaled(step_times(50, 4.0, 5), 1.2), faster = scaled(step_times(50, 4.0, 6), 1 / 1.2);
  const RatioInterval s = bootstrap_ratio(base, slower, Statistic::median, 0.95);
  const RatioInterval f = bootstrap_ratio(base, faster, Statistic::median, 0.95);
  EXPECT_NEAR(s.ratio, 1 / 1.2, 0.03);
  EXPECT_EQ(decide(s, 0.05), Verdict::slower) << s.low << " " << s.high;
  EXPECT_NEAR(f.ratio, 1.2, 0.04);
  EXPECT_EQ(decide(f, 0.05), Verdict::faster) << f.low << " " << f.high;
}

TEST(CompareStats, VerdictRules) {
  EXPECT_EQ(decide({1.0, 0.97, 1.03}, 0.05), Verdict::same);
  EXPECT_EQ(decide({0.9, 0.88, 0.93}, 0.05), Verdict::slower);
  EXPECT_EQ(decide({1.1, 1.07, 1.12}, 0.05), Verdict::faster);
  EXPECT_EQ(decide({0.95, 0.90, 1.00}, 0.05), Verdict::uncertain);  // straddles -5%
  EXPECT_EQ(decide({1.0, 0.80, 1.20}, 0.05), Verdict::uncertain);   // too wide to say
  EXPECT_EQ(decide({0.9, 0.88, 0.93}, 0.10), Verdict::uncertain);   // within the wider threshold's reach
}

TEST(CompareStats, RefusesEmptySamplesAndBadConfidence) {
  EXPECT_THROW(bootstrap_ratio({}, {1.0}, Statistic::median, 0.95), benchhost::InvalidArgument);
  EXPECT_THROW(bootstrap_ratio({1.0}, {1.0}, Statistic::median, 1.0), benchhost::InvalidArgument);
}

// ---- compare_reports on reports built in memory ----------------------------------------------------

RunRecord train_point(std::vector<double> ms, std::int64_t batch = 4) {
  RunRecord r;
  r.kind = "train";
  r.plugin = "null";
  r.device = "cpu";
  r.precision = "fp32";
  r.batch_size = batch;
  r.iterations = static_cast<std::int64_t>(ms.size());
  r.step_ms_p50 = ms.empty() ? 0 : ms[ms.size() / 2];
  r.samples_per_second = 1000.0;
  r.iteration_ms = std::move(ms);
  return r;
}

RunRecord ttt_run(double seconds, int index) {
  RunRecord r;
  r.kind = "ttt";
  r.plugin = "toy";
  r.device = "cpu";
  r.precision = "fp32";
  r.run_index = index;
  r.converged = true;
  r.time_to_train_seconds = seconds;
  return r;
}

LoadedReport report(const std::vector<RunRecord>& records, const std::string& onednn = "3.0.0", int drop = 1) {
  ReportHeader h;
  h.invocation = {{"warmup", 5}, {"iterations", 50}, {"threads", 2}};
  h.plugin = {{"name", "null"}, {"version", "1.0.0"}, {"abi", "1.3"}};
  h.environment = {{"cpu", {{"model", "test cpu"}}}, {"libraries", {{"onednn", onednn}}}};
  Summary s;
  s.ttt = {{"dropped_each_side", drop}};
  return check_report(json::parse(report_to_json(h, records, &s).dump()), "mem.json");
}

TEST(CompareReports, TooFewSamplesAreUncertainWithAWarning) {
  const auto base = step_times(5, 4.0, 7);
  const ordered_json c = compare_reports(report({train_point(base)}), report({train_point(scaled(base, 2))}), {});
  ASSERT_EQ(c["points"].size(), 1u);
  EXPECT_EQ(c["points"][0]["verdict"], "UNCERTAIN");  // twice as slow, but 5 samples cannot say so
  EXPECT_NE(c["points"][0]["warnings"].dump().find("too few samples"), std::string::npos) << c.dump(2);
}

TEST(CompareReports, MatchesPointsAndListsTheUnmatched) {
  const auto ms = step_times(40, 4.0, 8);
  const ordered_json c = compare_reports(report({train_point(ms, 4), train_point(ms, 8)}),
                                         report({train_point(scaled(ms, 1.3), 4), train_point(ms, 16)}), {});
  ASSERT_EQ(c["points"].size(), 1u);
  EXPECT_EQ(c["points"][0]["point"], "train null b=4 n=1 fp32 cpu");
  EXPECT_EQ(c["points"][0]["verdict"], "SLOWER");
  EXPECT_EQ(c["unmatched"]["base_only"], json::array({"train null b=8 n=1 fp32 cpu"}));
  EXPECT_EQ(c["unmatched"]["new_only"], json::array({"train null b=16 n=1 fp32 cpu"}));
  EXPECT_EQ(c["counts"]["SLOWER"], 1);
}

TEST(CompareReports, NothingInCommonIsUnusable) {
  const auto ms = step_times(20, 4.0, 9);
  EXPECT_THROW(compare_reports(report({train_point(ms, 4)}), report({train_point(ms, 8)}), {}), UnusableReport);
}

TEST(CompareReports, EnvironmentDifferencesAreWarnings) {
  const auto ms = step_times(40, 4.0, 10);
  const ordered_json c = compare_reports(report({train_point(ms)}), report({train_point(ms)}, "3.1.0"), {});
  EXPECT_EQ(c["points"][0]["verdict"], "SAME");
  const std::string diffs = c["environment_differences"].dump();
  EXPECT_NE(diffs.find("environment.libraries.onednn: BASE 3.0.0, NEW 3.1.0"), std::string::npos) << diffs;
  EXPECT_EQ(diffs.find("cpu.model"), std::string::npos) << diffs;  // the same in both
}

TEST(CompareReports, BusyMachineIsAWarning) {
  const auto ms = step_times(40, 4.0, 11);
  RunRecord busy = train_point(ms);
  busy.machine_load = MachineLoad{};
  busy.machine_load->cpus = 2;
  busy.machine_load->other_cpus = 1.5;
  busy.machine_load->busy = true;
  const ordered_json c = compare_reports(report({train_point(ms)}), report({busy}), {});
  EXPECT_NE(c["points"][0]["warnings"].dump().find("NEW point was measured on a busy machine"), std::string::npos)
      << c.dump(2);
}

TEST(CompareReports, ReportWithoutPerIterationSamplesIsReadableAndUncertain) {
  // A schema 4 report (before iteration_ms): medians from the percentiles, no interval, a clear note.
  const auto ms = step_times(40, 4.0, 12);
  json old = report({train_point(ms)}).document;
  old["schema_version"] = 4;
  old["results"][0].erase("iteration_ms");
  const LoadedReport base = check_report(old, "old.json");
  const ordered_json c = compare_reports(base, report({train_point(ms)}), {});
  const auto& p = c["points"][0];
  EXPECT_EQ(p["verdict"], "UNCERTAIN");
  EXPECT_TRUE(p["ci"].is_null());
  EXPECT_TRUE(p["ratio"].is_number());
  EXPECT_NE(p["warnings"].dump().find("no per-iteration samples: rerun it with benchhost >="), std::string::npos)
      << p.dump(2);
}

TEST(CompareReports, TimeToTrainComparesOlympicMeans) {
  std::vector<RunRecord> base, same, slow;
  const double seconds[] = {10.0, 10.2, 9.9, 10.1, 10.05, 9.95, 10.0};
  for (int i = 0; i < 7; ++i) {
    base.push_back(ttt_run(seconds[i], i));
    same.push_back(ttt_run(seconds[(i + 3) % 7], i));
    slow.push_back(ttt_run(seconds[i] * 1.3, i));
  }
  ordered_json c = compare_reports(report(base), report(same), {});
  const auto& p = c["points"][0];
  EXPECT_EQ(p["metric"], "time_to_train_seconds");
  EXPECT_EQ(p["base"]["kept_runs"], 5);  // the fastest and slowest dropped
  EXPECT_NEAR(p["base"]["olympic_mean_seconds"].get<double>(), 10.02, 1e-9);
  EXPECT_NEAR(p["base"]["min_seconds"].get<double>(), 9.95, 1e-12);
  EXPECT_NEAR(p["base"]["max_seconds"].get<double>(), 10.1, 1e-12);
  EXPECT_EQ(p["verdict"], "SAME") << p.dump(2);
  c = compare_reports(report(base), report(slow), {});
  EXPECT_EQ(c["points"][0]["verdict"], "SLOWER") << c.dump(2);
  // Two runs each: no verdict, and the note says how many runs it takes.
  c = compare_reports(report({base[0], base[1]}), report({slow[0], slow[1]}), {});
  EXPECT_EQ(c["points"][0]["verdict"], "UNCERTAIN");
  EXPECT_NE(c["points"][0]["warnings"].dump().find("too few runs"), std::string::npos) << c.dump(2);
}

TEST(CompareReports, RefusesWhatIsNotABenchhostReport) {
  EXPECT_THROW(check_report(json::parse(R"({"results": []})"), "x.json"), UnusableReport);
  EXPECT_THROW(check_report(json::parse(R"({"schema": "benchhost-report", "schema_version": 99, "results": []})"), "x.json"),
               UnusableReport);
  EXPECT_THROW(check_report(json::parse(R"({"schema": "benchhost-report", "schema_version": 5, "results": [{"kind": 1}]})"),
                            "x.json"),
               UnusableReport);
  EXPECT_THROW(load_report("/nonexistent/report.json"), UnusableReport);
}

}  // namespace
