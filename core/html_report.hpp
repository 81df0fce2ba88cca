#pragma once
/// @file html_report.hpp  One self-contained HTML page from one or more JSON reports
/// (`benchhost report RUN.json... -o report.html`, and `--html FILE` on a run).
///
/// Note [A report people look at]
/// The page opens with what a reader must know before trusting any figure: each run's
/// environment (host, CPU, memory, OS, compiler, benchhost and library versions, GPU, threads,
/// whether the machine was busy) and the verdicts (every point's status, and with several runs
/// the `benchhost compare` verdict of each later run against the first). Then the plots, each
/// drawn only where the reports hold its data:
///   - throughput against batch size, one line per run, precision and device count;
///   - inference latency percentiles (p50, p90, p99) against batch size;
///   - weak-scaling efficiency against device count;
///   - time to train: the quality metric against seconds since run_start, one line per run,
///     the target drawn;
///   - training loss against step, from the per-step losses when the report has them;
///   - per point, the step times in iteration order and as a histogram, which show a slow
///     start (warm-up that was not excluded) and noise.
/// Several runs overlay: their series share the axes and are told apart by colour and legend.
///
/// Self-contained: inline SVG drawn here (no script, no stylesheet or font from elsewhere, no
/// network); the SVG elements carry no namespace attribute (HTML5 parses inline SVG without
/// one), so the page names no URL at all. Every text from a report is HTML-escaped.
///
/// Threading: pure functions.

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reporters.hpp"

namespace benchhost::host {

/// A report to draw, and the name it is shown under (its file name, or "this run").
struct NamedReport {
  std::string label;
  nlohmann::ordered_json report;
};

/// The page. `verdicts_html` is placed in the verdicts section as given (already HTML: the
/// comparison table of several runs), "" for none.
std::string render_html_report(const std::vector<NamedReport>& reports, const std::string& verdicts_html = "");

/// `--html FILE` on a run: the page of this run's report, rewritten atomically after every record
/// (so a crash or Ctrl-C leaves a page of everything measured so far) and at the end.
class HtmlReporter : public Reporter {
 public:
  HtmlReporter(std::filesystem::path path, ReportHeader header) : path_(std::move(path)), header_(std::move(header)) {}
  void on_record(const RunRecord&, const std::vector<RunRecord>& all) override;
  void on_finish(const std::vector<RunRecord>& all, const Summary& s) override;

 private:
  std::filesystem::path path_;
  ReportHeader header_;
};

/// `benchhost report RUN.json... [-o|--output FILE]` (default report.html): reads the JSON
/// reports (`-o` of earlier runs), writes the page, prints where. Returns kExitOk, or kExitUsage
/// for bad arguments or a file that is not a readable benchhost report (named, with why).
int report_command(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

/// One line chart as inline SVG (exposed for tests).
struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  ///< (x, y), drawn in order
};
struct Chart {
  std::string title, x_label, y_label;
  bool log2_x = false;                  ///< batch sizes and device counts
  std::vector<ChartSeries> series;
  std::vector<std::pair<std::string, double>> horizontal_lines;  ///< e.g. ("target 0.75", 0.75)
};
std::string svg_line_chart(const Chart& chart);
/// A histogram of `values` as inline SVG.
std::string svg_histogram(const std::string& title, const std::string& x_label, const std::vector<double>& values);
/// "&", "<", ">", '"' and "'" as entities.
std::string html_escape(const std::string& text);

}  // namespace benchhost::host
