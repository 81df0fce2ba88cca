#pragma once
/// @file stats.hpp  Statistics the host reports: percentiles and the MLPerf olympic mean.

#include <cstddef>
#include <string>
#include <vector>

namespace benchhost::host {

/// The p-th percentile (p in [0, 100]) of `values` by linear interpolation between closest ranks
/// (numpy's default: position p/100 * (n-1) in the sorted values). Throws InvalidArgument on an
/// empty input or p outside [0, 100]. `values` is taken by value and sorted.
double percentile(std::vector<double> values, double p);

double mean(const std::vector<double>& values);

/// One time-to-train run as the aggregation sees it.
struct TttRun {
  double seconds = 0;      ///< run_start..run_stop
  bool converged = false;  ///< reached the target (run_stop status success)
};

/// Result of the MLPerf olympic mean over a set of time-to-train runs.
struct OlympicMean {
  bool valid = false;
  double seconds = 0;            ///< mean of the runs kept (valid only)
  std::size_t dropped_each_side = 0;
  std::vector<std::size_t> kept; ///< indices into the input of the runs averaged
  std::string note;              ///< why it is INVALID, or how it was computed
};

/// Note [Olympic mean]
/// MLPerf Training scores a benchmark by running it N times, dropping the `drop_each_side` fastest
/// and slowest runs (the benchmark's plugin declares how many: mlperf::Rules) and averaging the rest. A run that did not reach the target counts as the
/// slowest; at most drop_each_side such runs are allowed, otherwise the result is INVALID. With fewer runs than
/// 2*drop+1 nothing can be dropped: the result is the plain mean of the converged runs (all must
/// have converged), and the note says so.
OlympicMean olympic_mean(const std::vector<TttRun>& runs, std::size_t drop_each_side);

}  // namespace benchhost::host
