#pragma once
// Checks every first-party workload makes of its shipped configs (configs/<plugin>/): the
// declared defaults are the MLPerf reference that mlperf.conf repeats value for value, and every
// shipped config is allowed by the declaration.

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "benchhost/options.hpp"
#include "benchhost/workload.hpp"

namespace benchhost::test_support {

inline std::filesystem::path shipped_config(const std::string& plugin, const std::string& name) {
  return std::filesystem::path(BENCHHOST_SOURCE_DIR) / "configs" / plugin / name;
}

/// Every option mlperf.conf sets (but those in `skip`, e.g. where the data lives) equals the
/// declared default, compared as the declared type.
template <class W>
void expect_defaults_are_mlperf_conf(const std::string& plugin, const std::set<std::string>& skip = {}) {
  const Options defaults = declared_options<W>({});
  const auto reference = plugin_values(read_config_file(shipped_config(plugin, "mlperf.conf").string()), plugin);
  EXPECT_FALSE(reference.empty());
  for (const OptionSpec& spec : defaults.declaration()) {
    if (skip.count(spec.name) || !reference.count(spec.name)) continue;
    SCOPED_TRACE(spec.name);
    const Options given = declared_options<W>({{spec.name, reference.at(spec.name)}});
    if (spec.type == "float")
      EXPECT_EQ(defaults.get_float(spec.name), given.get_float(spec.name));
    else if (spec.type == "int-list")
      EXPECT_EQ(defaults.get_int_list(spec.name), given.get_int_list(spec.name));
    else if (spec.type == "int")
      EXPECT_EQ(defaults.get_int(spec.name), given.get_int(spec.name));
    else if (spec.type == "bool")
      EXPECT_EQ(defaults.get_bool(spec.name), given.get_bool(spec.name));
    else
      EXPECT_EQ(defaults.get_string(spec.name), given.get_string(spec.name));
  }
}

/// Each of `names` in configs/<plugin>/ passes the declaration's checks.
template <class W>
void expect_shipped_configs_allowed(const std::string& plugin, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const Options o = declared_options<W>(plugin_values(read_config_file(shipped_config(plugin, name).string()), plugin));
    EXPECT_FALSE(o.values().empty());
  }
}

}  // namespace benchhost::test_support
