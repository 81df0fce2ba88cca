#include "scaling.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "stats.hpp"

namespace benchhost::host {

using nlohmann::ordered_json;

namespace {
bool multi_device_sweep(const std::vector<RunRecord>& records) {
  return std::any_of(records.begin(), records.end(), [](const RunRecord& r) { return r.kind == "train" && r.devices > 1; });
}
std::optional<double> efficiency(const RunRecord& r) {
  if (r.devices == 1 && r.status == RunStatus::passed && r.samples_per_second) return 1.0;
  return r.scaling_efficiency;
}
// A single process has no gathered rank_steps: rank 0's figures come from its own step times.
std::vector<RunRecord::RankSteps> ranks_of(const RunRecord& r) {
  if (!r.rank_steps.empty() || r.iteration_ms.empty()) return r.rank_steps;
  return {{0, percentile(r.iteration_ms, 0), percentile(r.iteration_ms, 50), percentile(r.iteration_ms, 100)}};
}
ordered_json opt(const std::optional<double>& v) { return v && std::isfinite(*v) ? ordered_json(*v) : ordered_json(nullptr); }
}  // namespace

std::optional<Straggler> find_straggler(const RunRecord& r) {
  if (r.rank_steps.size() < 2) return std::nullopt;
  std::vector<double> medians;
  for (const auto& rs : r.rank_steps) medians.push_back(rs.median);
  const auto slowest = std::max_element(r.rank_steps.begin(), r.rank_steps.end(),
                                        [](const auto& a, const auto& b) { return a.median < b.median; });
  Straggler s;
  s.rank = slowest->rank;
  s.median_ms = slowest->median;
  s.ranks_median_ms = percentile(medians, 50);
  s.above_median_fraction = s.ranks_median_ms > 0 ? s.median_ms / s.ranks_median_ms - 1 : 0;
  return s;
}

ordered_json straggler_json(const RunRecord& r) {
  const auto s = find_straggler(r);
  if (!s) return nullptr;
  return {{"rank", s->rank}, {"median_ms", s->median_ms}, {"ranks_median_ms", s->ranks_median_ms},
          {"above_median_fraction", s->above_median_fraction}};
}

ordered_json scaling_report_json(const std::vector<RunRecord>& records) {
  if (!multi_device_sweep(records)) return nullptr;
  ordered_json rows = ordered_json::array();
  for (const auto& r : records) {
    if (r.kind != "train") continue;
    ordered_json per_rank = ordered_json::array();
    for (const auto& rs : ranks_of(r))
      per_rank.push_back({{"rank", rs.rank}, {"min", rs.min}, {"median", rs.median}, {"max", rs.max}});
    std::optional<double> per_device;
    if (r.samples_per_second) per_device = *r.samples_per_second / std::max(1, r.devices);
    rows.push_back({{"batch_size", r.batch_size},
                    {"devices", r.devices},
                    {"status", to_string(r.status)},
                    {"samples_per_second", opt(r.samples_per_second)},
                    {"samples_per_second_per_device", opt(per_device)},
                    {"scaling_efficiency", opt(efficiency(r))},
                    {"per_rank", per_rank},
                    {"straggler", straggler_json(r)}});
  }
  return rows;
}

std::string scaling_report_text(const std::vector<RunRecord>& records) {
  if (!multi_device_sweep(records)) return {};
  std::string out = "weak scaling (samples/s per device at n over n = 1, same per-device batch):\n";
  out += fmt::format("{:>7} {:>4} {:>14} {:>12} {:>10}  {}\n", "batch", "n", "samples/s", "per device", "efficiency",
                     "step ms by rank: min/median/max");
  auto num = [](const std::optional<double>& v, const char* f) {
    return v && std::isfinite(*v) ? fmt::format(fmt::runtime(f), *v) : std::string("-");
  };
  for (const auto& r : records) {
    if (r.kind != "train") continue;
    std::optional<double> per_device;
    if (r.samples_per_second) per_device = *r.samples_per_second / std::max(1, r.devices);
    const std::optional<double> eff = efficiency(r);
    std::string ranks;
    for (const auto& rs : ranks_of(r))
      ranks += fmt::format("{}r{} {:.4g}/{:.4g}/{:.4g}", ranks.empty() ? "" : "  ", rs.rank, rs.min, rs.median, rs.max);
    if (r.status != RunStatus::passed) ranks = to_string(r.status);
    out += fmt::format("{:>7} {:>4} {:>14} {:>12} {:>10}  {}\n", r.batch_size, r.devices,
                       num(r.samples_per_second, "{:.1f}"), num(per_device, "{:.1f}"),
                       eff ? fmt::format("{:.1f}%", *eff * 100) : std::string("-"), ranks);
    if (const auto s = find_straggler(r))
      out += fmt::format("{:>52}straggler: rank {}, median {:.4g} ms, {:+.1f}% against the ranks' median {:.4g} ms\n", "",
                         s->rank, s->median_ms, s->above_median_fraction * 100, s->ranks_median_ms);
  }
  return out;
}

}  // namespace benchhost::host
