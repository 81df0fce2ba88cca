#pragma once
/// @file scaling.hpp  The scaling report of a `-n` device-count sweep: weak-scaling efficiency per
/// device count and every rank's step times, with the straggler named.
///
/// Note [Scaling report]
/// A training sweep over `-n 1,2,...` measures the same per-device batch on n devices. Weak-scaling
/// efficiency at n is samples/s(n) / (n * samples/s(1)) at the same per-device batch
/// (apply_weak_scaling, run_modes.hpp): 1.0 means n devices did n times the work of one. A point
/// with several ranks also gathers each rank's own minimum, median and maximum timed step time
/// (RunRecord::rank_steps, in rank order). Data parallelism waits for the slowest rank at every
/// gradient all-reduce, so the rank with the largest median step time is named the straggler, with
/// how far its median lies above the median of all ranks' medians; a slow node, a busy core or an
/// unlucky NUMA placement shows there before it shows in the efficiency.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "events.hpp"

namespace benchhost::host {

/// The slowest rank of a multi-rank point (Note [Scaling report]).
struct Straggler {
  int rank = 0;
  double median_ms = 0;           ///< its median step time
  double ranks_median_ms = 0;     ///< the median over every rank's median step time
  double above_median_fraction = 0;  ///< median_ms / ranks_median_ms - 1 (0.05: 5% slower)
};

/// The straggler of `r`, or nothing when `r` has fewer than two ranks' step times.
std::optional<Straggler> find_straggler(const RunRecord& r);

/// `rank_step_ms.straggler` of a record: {rank, median_ms, ranks_median_ms, above_median_fraction} or null.
nlohmann::ordered_json straggler_json(const RunRecord& r);

/// `summary.scaling` of a report: one entry per training point of a sweep that has a point with
/// more than one device, in run order: {batch_size, devices, status, samples_per_second,
/// samples_per_second_per_device, scaling_efficiency (1 at n = 1), per_rank[], straggler}. Null
/// when no training point ran on more than one device.
nlohmann::ordered_json scaling_report_json(const std::vector<RunRecord>& records);

/// The console's scaling table (ends with a newline), "" when scaling_report_json is null.
std::string scaling_report_text(const std::vector<RunRecord>& records);

}  // namespace benchhost::host
