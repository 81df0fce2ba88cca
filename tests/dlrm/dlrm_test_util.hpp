#pragma once
// Helpers for the dlrm tests: a RunContext from configs/dlrm_dcnv2/<file> plus overrides.
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/workload.hpp"

namespace dlrm_test {

inline std::string config_path(const std::string& name) {
  return std::string(BENCHHOST_SOURCE_DIR) + "/configs/dlrm_dcnv2/" + name;
}

/// The "dlrm_dcnv2.<key> = value" lines of a config (comments and host keys ignored), with
/// `overrides` applied; mode ttt, cpu, fp32, seed 1.
inline benchhost::RunContext context_from_config(
    const std::string& name, const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::map<std::string, std::string> values;
  std::ifstream in(config_path(name));
  std::string line;
  const std::string prefix = "dlrm_dcnv2.";
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t\r") + 1);
      return s;
    };
    std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key.rfind(prefix, 0) == 0) values[key.substr(prefix.size())] = value;
  }
  for (const auto& [k, v] : overrides) values[k] = v;
  benchhost::RunContext ctx;
  ctx.mode = "ttt";
  ctx.device = benchhost::Device::cpu();
  ctx.precision = "fp32";
  ctx.seed = 1;
  ctx.num_threads = 2;
  ctx.options = benchhost::Options("dlrm_dcnv2", values);
  return ctx;
}

}  // namespace dlrm_test
