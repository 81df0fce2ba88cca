#pragma once
// The RunContext of a language-model plugin's mini configuration, as the bert and gpt3 tests run
// it: the config file's values, the data folder moved under the build tree (its name encodes the
// build options), explicit overrides, and a calibration aid:
// BH_MINI_OVERRIDES="lr=0.01,warmup-steps=5" replaces config values when no overrides are given.
#include <cstdlib>
#include <map>
#include <string>

#include "benchhost/workload.hpp"
#include "options.hpp"  // plugins/lm_common: lm::read_plugin_config

namespace benchhost::test_support {

inline RunContext lm_mini_context(const std::string& plugin,
                                  const std::map<std::string, std::string>& overrides = {}) {
  auto values = lm::read_plugin_config(
      std::string(BENCHHOST_SOURCE_DIR) + "/configs/" + plugin + "/mini.conf", plugin);
  values["data-dir"] = std::string(BENCHHOST_BINARY_DIR) + "/test-data/" +
                       values["data-dir"].substr(values["data-dir"].find_last_of('/') + 1);
  for (const auto& [k, v] : overrides) values[k] = v;
  if (const char* env = std::getenv("BH_MINI_OVERRIDES"); env && overrides.empty()) {
    const std::string list = env;
    for (std::size_t pos = 0; pos < list.size();) {
      std::size_t end = list.find(',', pos);
      if (end == std::string::npos) end = list.size();
      const std::string item = list.substr(pos, end - pos);
      const std::size_t eq = item.find('=');
      if (eq != std::string::npos) values[item.substr(0, eq)] = item.substr(eq + 1);
      pos = end + 1;
    }
  }
  RunContext ctx;
  ctx.mode = "ttt";
  ctx.seed = 1;
  ctx.num_threads = 2;
  ctx.options = Options(plugin, values);
  return ctx;
}

}  // namespace benchhost::test_support
