// The HTML report (core/html_report.hpp): the page is self-contained (no URL, no script), opens
// with the environment and the verdicts, draws each plot where the reports hold its data and
// overlays several runs; text from a report is escaped; the chart geometry puts points where
// their values say.

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "benchhost/data/image.hpp"
#include "events.hpp"
#include "html_report.hpp"
#include "reporters.hpp"
#include "test_support.hpp"

namespace {

using benchhost::host::Chart;
using benchhost::host::ChartSeries;
using benchhost::host::NamedReport;
using benchhost::host::render_html_report;
using nlohmann::ordered_json;

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

ordered_json train_record(const char* precision, int batch, double sps, int devices = 1) {
  ordered_json r;
  r["kind"] = "train";
  r["status"] = "PASSED";
  r["message"] = "";
  r["device"] = "cpu";
  r["precision"] = precision;
  r["batch_size"] = batch;
  r["devices"] = devices;
  r["samples_per_second"] = sps;
  r["step_ms"] = {{"mean", 1000.0 * batch / sps}, {"p50", 1000.0 * batch / sps}, {"p90", nullptr}, {"p99", nullptr}};
  r["mfu"] = 0.25;
  r["iteration_ms"] = ordered_json::array({12.0, 10.5, 10.0, 10.1, 9.9, 10.2});
  r["machine_load"] = {{"busy", false}, {"other_cpus", 0.1}};
  return r;
}

ordered_json report(const std::string& host, ordered_json results) {
  ordered_json j;
  j["schema"] = "benchhost-report";
  j["invocation"] = {{"argv", {"benchhost", "--plugin", "toy"}}, {"mode", "train"}};
  j["plugin"] = {{"name", "toy"}, {"version", "1.0"}, {"abi", "1.3"},
                 {"metric", {{"name", "accuracy"}, {"target", 0.75}, {"direction", "max"}}}};
  j["environment"] = {{"host", host},
                      {"cpu", {{"model", "Test CPU <fast>"}, {"logical_cores", 2}}},
                      {"memory_bytes", 8.0 * (1ull << 30)},
                      {"benchhost", {{"version", "0.1.0"}, {"git_revision", "abc"}, {"git_dirty", false}}},
                      {"libraries", {{"onednn", "2.6.3"}}},
                      {"threading", {{"threads", 2}}}};
  j["results"] = std::move(results);
  j["summary"] = {{"complete", true}};
  return j;
}

TEST(HtmlReport, SelfContainedWithEnvironmentVerdictsAndPlots) {
  ordered_json ttt;
  ttt["kind"] = "ttt";
  ttt["status"] = "PASSED";
  ttt["precision"] = "fp32";
  ttt["device"] = "cpu";
  ttt["run_index"] = 0;
  ttt["seed"] = 7;
  ttt["ttt"] = {{"converged", true},
                {"time_to_train_seconds", 12.5},
                {"evals", {{{"seconds_since_run_start", 4.0}, {"metric", 0.5}},
                           {{"seconds_since_run_start", 8.0}, {"metric", 0.7}},
                           {{"seconds_since_run_start", 12.0}, {"metric", 0.8}}}}};
  ordered_json infer;
  infer["kind"] = "infer";
  infer["status"] = "PASSED";
  infer["precision"] = "fp32";
  infer["batch_size"] = 8;
  infer["latency_ms"] = {{"avg", 3.0}, {"p50", 2.9}, {"p90", 3.5}, {"p95", 3.7}, {"p99", 4.2}};
  ordered_json bad = train_record("bf16", 16, 100);
  bad["status"] = "OOM";
  bad["message"] = "out of memory <at batch 16>";
  const std::string page = render_html_report(
      {{"base.json", report("host-a", {train_record("fp32", 8, 100), train_record("fp32", 16, 180), bad, ttt, infer})},
       {"new.json", report("host-b", {train_record("fp32", 8, 90), train_record("fp32", 16, 170)})}});
  // Self-contained: no URL of any kind, no script, no external style or image.
  EXPECT_EQ(page.find("http"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  // Environment first, then verdicts, then plots.
  const auto env = page.find("<h2>Environment"), verdicts = page.find("<h2>Verdicts"), plots = page.find("<h2>Plots");
  ASSERT_NE(env, std::string::npos);
  ASSERT_NE(verdicts, std::string::npos);
  ASSERT_NE(plots, std::string::npos);
  EXPECT_LT(env, verdicts);
  EXPECT_LT(verdicts, plots);
  // The hosts differ between the runs: marked.
  EXPECT_NE(page.find("<td class=\"differs\">host-a</td>"), std::string::npos);
  // Every report text is escaped.
  EXPECT_NE(page.find("Test CPU &lt;fast&gt;"), std::string::npos);
  EXPECT_EQ(page.find("Test CPU <fast>"), std::string::npos);
  EXPECT_NE(page.find("out of memory &lt;at batch 16&gt;"), std::string::npos);
  EXPECT_NE(page.find("class=\"bad\">OOM"), std::string::npos);
  // The plots that have data: throughput (both runs overlaid), latency, ttt with the target,
  // and a step-time series and histogram per point with iteration times (5 train records).
  EXPECT_NE(page.find("Training throughput against batch size"), std::string::npos);
  EXPECT_NE(page.find("base.json: fp32"), std::string::npos);
  EXPECT_NE(page.find("new.json: fp32"), std::string::npos);
  EXPECT_NE(page.find("Inference latency percentiles"), std::string::npos);
  EXPECT_NE(page.find("Time to train: quality against time"), std::string::npos);
  EXPECT_NE(page.find("target 0.75"), std::string::npos);
  EXPECT_EQ(count(page, "<div class=\"pair\">"), 5u);
  EXPECT_EQ(page.find("Weak-scaling efficiency"), std::string::npos);  // no multi-device point
  EXPECT_EQ(page.find("Training loss against step"), std::string::npos);  // no per-step losses here
  EXPECT_EQ(count(page, "<svg"), count(page, "</svg>"));
}

// Note [Step losses]: a ttt run's list thins to multiples of a doubling stride, never above 2048
// pairs; a train point keeps every timed step. The pairs survive the JSON round trip.
TEST(HtmlReport, StepLossesThinForLongRuns) {
  benchhost::host::RunRecord ttt;
  ttt.kind = "ttt";
  for (std::int64_t step = 1; step <= 100000; ++step) ttt.add_step_loss(step, 1.0 / static_cast<double>(step));
  ASSERT_LT(ttt.step_losses.size(), 2048u);
  ASSERT_GT(ttt.step_losses.size(), 1024u);
  const std::int64_t stride = ttt.step_losses[0].first;
  EXPECT_EQ(stride & (stride - 1), 0) << stride << " is a power of two";
  for (std::size_t i = 0; i < ttt.step_losses.size(); ++i) {
    EXPECT_EQ(ttt.step_losses[i].first, stride * static_cast<std::int64_t>(i + 1));
    EXPECT_EQ(ttt.step_losses[i].second, 1.0 / static_cast<double>(ttt.step_losses[i].first));
  }
  benchhost::host::RunRecord train;
  train.kind = "train";
  for (std::int64_t step = 6; step <= 5005; ++step) train.add_step_loss(step, 0.5);
  EXPECT_EQ(train.step_losses.size(), 5000u);
  const benchhost::host::RunRecord back =
      benchhost::host::record_from_json(nlohmann::json::parse(benchhost::host::record_to_json(ttt).dump()));
  EXPECT_EQ(back.step_losses, ttt.step_losses);
}

TEST(HtmlReport, ChartPutsPointsWhereTheirValuesSay) {
  Chart c;
  c.title = "t";
  c.series.push_back(ChartSeries{"a", {{0, 0}, {10, 100}}});
  const std::string svg = benchhost::host::svg_line_chart(c);
  // Plot area: x from 70 to 720-190 = 530, y from 34 to 340-50 = 290; y runs 0..105 (5% head room).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("points=\"([0-9.]+),([0-9.]+) ([0-9.]+),([0-9.]+) \"")));
  EXPECT_NEAR(std::stod(m[1]), 70.0, 0.06);
  EXPECT_NEAR(std::stod(m[2]), 290.0, 0.06);
  EXPECT_NEAR(std::stod(m[3]), 530.0, 0.06);
  EXPECT_NEAR(std::stod(m[4]), 34 + (1 - 100.0 / 105.0) * 256, 0.06);
  // log2 axis: 1, 2, 4 evenly spaced.
  Chart l;
  l.log2_x = true;
  l.series.push_back(ChartSeries{"b", {{1, 1}, {2, 2}, {4, 3}}});
  const std::string svg2 = benchhost::host::svg_line_chart(l);
  ASSERT_TRUE(std::regex_search(svg2, m, std::regex("points=\"([0-9.]+),[0-9.]+ ([0-9.]+),[0-9.]+ ([0-9.]+),[0-9.]+ \"")));
  EXPECT_NEAR(std::stod(m[2]) - std::stod(m[1]), std::stod(m[3]) - std::stod(m[2]), 0.11);
  // No data: a chart that says so rather than an empty frame.
  EXPECT_NE(benchhost::host::svg_line_chart(Chart{}).find("no data"), std::string::npos);
}

TEST(HtmlReport, HistogramCountsEveryValue) {
  std::vector<double> v;
  for (int i = 0; i < 100; ++i) v.push_back(10 + (i % 7));
  const std::string svg = benchhost::host::svg_histogram("h", "ms", v);
  EXPECT_NE(svg.find("100 steps"), std::string::npos);
  EXPECT_NE(svg.find("median 13"), std::string::npos);
  EXPECT_GE(count(svg, "class=\"bar\""), 5u);
}

// Through the real executable: two runs write JSON (one also --html), `benchhost report` draws
// both, and headless Chromium renders the page; the screenshot must show the plot's two series in
// their colours (the browser drew the inline SVG) and the page's DOM must hold the charts.
TEST(HtmlReport, TwoRunsRenderInHeadlessChromium) {
  namespace fs = std::filesystem;
  bhtest::TempDir dir("html_report");
  const std::string toy = fmt::format("--plugin-dir '{}' --plugin toy --mode train -b 4,8,16 -w 2 -i 20",
                                      bhtest::plugin_dir().string());
  const fs::path a = dir.path / "a.json", b = dir.path / "b.json", a_html = dir.path / "a.html",
                 page = dir.path / "ab.html";
  auto p = bhtest::run_benchhost(fmt::format("{} -o '{}' --html '{}'", toy, a.string(), a_html.string()));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  p = bhtest::run_benchhost(fmt::format("{} --threads 1 -o '{}'", toy, b.string()));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  p = bhtest::run_benchhost(fmt::format("report '{}' '{}' -o '{}'", a.string(), b.string(), page.string()));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("wrote"), std::string::npos) << p.output;
  const std::string html = bhtest::read_file(page), single = bhtest::read_file(a_html);
  EXPECT_NE(html.find("a.json: fp32"), std::string::npos);
  EXPECT_NE(html.find("b.json: fp32"), std::string::npos);
  EXPECT_NE(single.find("Training throughput against batch size"), std::string::npos);
  EXPECT_EQ(html.find("http"), std::string::npos);
  // With two reports the verdicts open with `benchhost compare`'s decision per point, and the
  // thread counts that differ are named.
  EXPECT_NE(html.find("<table class=\"verdicts\">"), std::string::npos);
  EXPECT_EQ(count(html, "<td class=\"FASTER\">") + count(html, "<td class=\"SLOWER\">") +
                count(html, "<td class=\"SAME\">") + count(html, "<td class=\"UNCERTAIN\">"),
            3u);
  EXPECT_NE(html.find("environment differs"), std::string::npos);
  // Each timed step's loss (toy train points) is drawn against its step.
  EXPECT_NE(html.find("Training loss against step"), std::string::npos);
  const auto report_a = nlohmann::json::parse(bhtest::read_file(a));
  for (const auto& r : report_a["results"]) {
    ASSERT_EQ(r["step_losses"].size(), 20u);
    EXPECT_EQ(r["step_losses"][0][0], 3);  // after -w 2
    EXPECT_EQ(r["step_losses"][19][0], 22);
    EXPECT_EQ(r["step_losses"][19][1].get<double>(), r["final_loss"].get<double>());
  }
  EXPECT_LT(html.find("<h2>Verdicts"), html.find("<table class=\"verdicts\">"));
  // Per-iteration step times: a series and a histogram per point.
  EXPECT_EQ(count(html, "<div class=\"pair\">"), 6u);
  // Bad input: a clear error naming the file, the usage exit code.
  const fs::path junk = dir.path / "junk.json";
  std::ofstream(junk) << "{\"not\": \"a report\"}";
  p = bhtest::run_benchhost(fmt::format("report '{}' -o '{}'", junk.string(), (dir.path / "x.html").string()));
  EXPECT_EQ(p.exit_code, 1) << p.output;
  EXPECT_NE(p.output.find("is not a benchhost report"), std::string::npos) << p.output;
  EXPECT_FALSE(fs::exists(dir.path / "x.html"));

  const char* browser = nullptr;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (fs::exists(c)) browser = c;
  if (browser == nullptr) GTEST_SKIP() << "no headless browser (apt-get install chromium): the page was written but not rendered";
  const fs::path shot = dir.path / "ab.png";
  const std::string flags = fmt::format(
      "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
      "--disable-component-update --disable-sync --hide-scrollbars --user-data-dir='{}'",
      (dir.path / "profile").string());
  p = bhtest::run_command(fmt::format("timeout 120 {} {} --window-size=1400,1400 --screenshot='{}' 'file://{}' 2>&1", browser,
                                      flags, shot.string(), page.string()));
  ASSERT_TRUE(fs::exists(shot)) << p.output;
  const std::string png = bhtest::read_file(shot);
  const benchhost::Tensor img = benchhost::data::decode_png(
      {reinterpret_cast<const std::uint8_t*>(png.data()), png.size()}, shot.string(), 3);  // [H, W, 3] u8
  const auto* px = img.data<std::uint8_t>();
  const std::int64_t n = img.size(0) * img.size(1);
  std::int64_t first = 0, second = 0, white = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const int r = px[3 * i], g = px[3 * i + 1], b = px[3 * i + 2];
    auto near = [&](int R, int G, int B) { return std::abs(r - R) < 12 && std::abs(g - G) < 12 && std::abs(b - B) < 12; };
    first += near(0x4e, 0x79, 0xa7);
    second += near(0xf2, 0x8e, 0x2b);
    white += r > 250 && g > 250 && b > 250;
  }
  // Two series lines with markers and legend swatches: hundreds of pixels each; a page that did
  // not render (or an empty chart) has none.
  EXPECT_GT(first, 200) << "first series colour pixels in " << shot;
  EXPECT_GT(second, 200) << "second series colour pixels in " << shot;
  EXPECT_LT(white, n * 98 / 100) << "the screenshot is blank";
  p = bhtest::run_command(fmt::format("timeout 120 {} {} --dump-dom 'file://{}' 2>/dev/null", browser, flags, page.string()));
  EXPECT_GE(count(p.output, "<svg"), 1u) << p.output.substr(0, 2000);
  EXPECT_NE(p.output.find("<polyline"), std::string::npos);
}

}  // namespace
