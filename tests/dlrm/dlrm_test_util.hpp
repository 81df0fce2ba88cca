#pragma once
// Helpers for the dlrm tests: a RunContext from configs/dlrm_dcnv2/<file> plus overrides.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/options.hpp"
#include "benchhost/workload.hpp"
#include "workload.hpp"

namespace dlrm_test {

inline std::string config_path(const std::string& name) {
  return std::string(BENCHHOST_SOURCE_DIR) + "/configs/dlrm_dcnv2/" + name;
}

/// The "dlrm_dcnv2.<key> = value" entries of a config (host keys ignored), with `overrides`
/// applied and checked against the plugin's declaration (its defaults behind them); mode ttt,
/// cpu, fp32, seed 1.
inline benchhost::RunContext context_from_config(
    const std::string& name, const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::map<std::string, std::string> values =
      benchhost::plugin_values(benchhost::read_config_file(config_path(name)), "dlrm_dcnv2");
  for (const auto& [k, v] : overrides) values[k] = v;
  benchhost::RunContext ctx;
  ctx.mode = "ttt";
  ctx.device = benchhost::Device::cpu();
  ctx.precision = "fp32";
  ctx.seed = 1;
  ctx.num_threads = 2;
  ctx.options = benchhost::declared_options<dlrm::DlrmWorkload>(values);
  return ctx;
}

}  // namespace dlrm_test
