#pragma once
/// @file compare.hpp  `benchhost compare BASE.json NEW.json [NEW2.json ...]`: is NEW faster or slower
/// than BASE, by how much, and how sure are we (docs/cli.md, "Comparing reports").
///
/// Note [Comparing two reports]
/// Points are matched by (kind, plugin, batch size, device count, precision, device). For each
/// throughput point (train, loader) the figure is the median timed step time, for an inference
/// point the median (p50) batch latency, with p99 shown beside it; both come from the per-iteration
/// samples the report carries (`iteration_ms`, report schema 6). The ratio is NEW's speed over
/// BASE's: median BASE time / median NEW time (above 1: NEW is faster). Its confidence interval is
/// a seeded percentile bootstrap: each of kBootstrapResamples resamples draws both samples again
/// with replacement, takes each median and their ratio; the interval is the (1-c)/2 and (1+c)/2
/// quantiles of those ratios. The bootstrap makes no assumption about the shape of step-time
/// distributions (skewed, with slow outliers from the OS), and the median ignores those outliers.
/// A seed makes the same two reports give the same interval every time.
///
/// Verdicts, with t = --threshold and [lo, hi] the interval:
///   FASTER    lo > 1 + t           (the whole interval beyond +t)
///   SLOWER    hi < 1 - t           (the whole interval beyond -t): a regression
///   SAME      1 - t <= lo and hi <= 1 + t  (the whole interval within +-t)
///   UNCERTAIN otherwise, and whenever either side has fewer than kMinSamples samples, a point did
///             not pass, or a report has no per-iteration samples (schema_version < 6).
/// Time-to-train points compare olympic means (the same runs MLPerf keeps, core/stats.hpp), with
/// the kept runs' min, max and standard deviation; their interval bootstraps the ratio of the kept
/// runs' means, and a verdict needs kMinRuns kept runs on each side.
///
/// Differences between the two runs' environments (benchhost and plugin versions, libraries, CPU,
/// threads, GPU and clocks, environment variables, warm-up and iteration counts, a busy machine)
/// are warnings: they do not change a verdict, they say what else could explain it.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchhost/error.hpp"

namespace benchhost::host {

/// A report that cannot be compared (unreadable, not JSON, not a benchhost report, nothing to
/// match); `benchhost compare` prints it and exits with kExitUnusableInput.
class UnusableReport : public InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

inline constexpr int kBootstrapResamples = 2000;
inline constexpr std::uint64_t kBootstrapSeed = 20240601;
inline constexpr std::size_t kMinSamples = 10;  ///< per side, for a throughput or latency verdict
inline constexpr std::size_t kMinRuns = 3;      ///< kept time-to-train runs per side, for a verdict
inline constexpr int kFirstSchemaWithIterations = 6;  ///< report schema_version that added `iteration_ms`

enum class Verdict { faster, slower, same, uncertain };
const char* to_string(Verdict v);  ///< "FASTER", "SLOWER", "SAME", "UNCERTAIN"

/// A ratio with its confidence interval.
struct RatioInterval {
  double ratio = 0;  ///< the point estimate
  double low = 0, high = 0;
};

/// Which statistic the bootstrap takes of each resample.
enum class Statistic { median, mean };

/// statistic(base) / statistic(next) with a percentile-bootstrap interval at `confidence`
/// (Note [Comparing two reports]). Throws InvalidArgument on an empty sample or a confidence
/// outside (0, 1).
RatioInterval bootstrap_ratio(const std::vector<double>& base, const std::vector<double>& next, Statistic statistic,
                              double confidence, int resamples = kBootstrapResamples,
                              std::uint64_t seed = kBootstrapSeed);

/// The verdict for an interval at `threshold` (a fraction: 0.05 is 5%).
Verdict decide(const RatioInterval& r, double threshold);

struct CompareOptions {
  double threshold = 0.05;
  double confidence = 0.95;
  bool json = false;
};

/// A report as compare reads it: checked to be a benchhost report (UnusableReport otherwise).
struct LoadedReport {
  std::string path;
  nlohmann::json document;
};
LoadedReport load_report(const std::filesystem::path& path);
/// The same checks on a document already in memory (`path` names it in messages).
LoadedReport check_report(nlohmann::json document, const std::string& path);

/// The comparison of NEW against BASE as `--json` prints it (docs/report-schema.md, "benchhost
/// compare --json"): {base, new, environment_differences[], warnings[], points[], unmatched {base_only[],
/// new_only[]}, counts {FASTER, SLOWER, SAME, UNCERTAIN}}. Throws UnusableReport when no point matches.
nlohmann::ordered_json compare_reports(const LoadedReport& base, const LoadedReport& next, const CompareOptions& o);

/// Environment differences between two reports, one line each ("environment.libraries.onednn: BASE
/// 3.0.0, NEW 3.1.0"), then busy-machine notes.
std::vector<std::string> environment_differences(const nlohmann::json& base, const nlohmann::json& next);

/// Human text of one compare_reports() result.
std::string comparison_text(const nlohmann::ordered_json& comparison, const CompareOptions& o);

/// `benchhost compare FILE FILE... [--threshold T] [--confidence C] [--json]` (the words after
/// `compare`). Returns kExitOk, kExitRegression, kExitUnusableInput or kExitUsage (cli.hpp).
int run_compare(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

}  // namespace benchhost::host
