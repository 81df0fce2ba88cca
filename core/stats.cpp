#include "stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "benchhost/error.hpp"

namespace benchhost::host {

double percentile(std::vector<double> values, double p) {
  BH_CHECK_AS(InvalidArgument, !values.empty(), "percentile of an empty sample");
  BH_CHECK_AS(InvalidArgument, p >= 0 && p <= 100, "percentile {} outside [0, 100]", p);
  std::sort(values.begin(), values.end());
  const double pos = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

OlympicMean olympic_mean(const std::vector<TttRun>& runs, std::size_t drop_each_side) {
  OlympicMean out;
  out.dropped_each_side = drop_each_side;
  const std::size_t n = runs.size();
  const auto non_converged =
      static_cast<std::size_t>(std::count_if(runs.begin(), runs.end(), [](const TttRun& r) { return !r.converged; }));
  if (n == 0) {
    out.note = "no time-to-train runs";
    return out;
  }
  if (n < 2 * out.dropped_each_side + 1) {
    out.dropped_each_side = 0;
    if (non_converged > 0) {
      out.note = fmt::format("{} of {} runs did not reach the target and there are too few runs ({}) to drop "
                             "one; run with --runs {} or more",
                             non_converged, n, n, 2 * drop_each_side + 1);
      return out;
    }
    for (std::size_t i = 0; i < n; ++i) out.kept.push_back(i);
    double sum = 0;
    for (auto& r : runs) sum += r.seconds;
    out.seconds = sum / static_cast<double>(n);
    out.valid = true;
    out.note = fmt::format("plain mean of {} run(s): the olympic mean needs at least {}", n,
                           2 * drop_each_side + 1);
    return out;
  }
  // Non-converged runs count as the slowest, so at most as many as are dropped from that side.
  if (non_converged > drop_each_side) {
    out.note = fmt::format("INVALID: {} of {} runs did not reach the target; MLPerf allows at most {}",
                           non_converged, n, drop_each_side);
    return out;
  }
  // Sort by time with a non-converged run placed last (it counts as the slowest).
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](std::size_t i) {
    return runs[i].converged ? runs[i].seconds : std::numeric_limits<double>::infinity();
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  const std::size_t d = out.dropped_each_side;
  double sum = 0;
  for (std::size_t k = d; k < n - d; ++k) {
    out.kept.push_back(order[k]);
    sum += runs[order[k]].seconds;
  }
  std::sort(out.kept.begin(), out.kept.end());
  out.seconds = sum / static_cast<double>(n - 2 * d);
  out.valid = true;
  out.note = fmt::format("olympic mean of {} runs, dropping the {} fastest and {} slowest{}", n, d, d,
                         non_converged ? " (a run that did not converge counts as the slowest)" : "");
  return out;
}

}  // namespace benchhost::host
