#pragma once
/// @file plugins/lm_common/options.hpp  Plugin options with one source of defaults.
///
/// A workload declares its options once (name, type, default, help). describe() publishes the
/// table to the host; setup() reads values through OptionTable, which falls back to the declared
/// default when the host (or a unit test) passed no value, so the defaults cannot drift apart.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "benchhost/workload.hpp"

namespace benchhost::lm {

class OptionTable {
 public:
  OptionTable(std::string plugin, std::vector<OptionSpec> specs) : plugin_(std::move(plugin)), specs_(std::move(specs)) {}
  const std::vector<OptionSpec>& specs() const { return specs_; }

  std::int64_t get_int(const Options& o, const std::string& name) const;
  double get_float(const Options& o, const std::string& name) const;
  std::string get_string(const Options& o, const std::string& name) const;
  bool get_bool(const Options& o, const std::string& name) const;

 private:
  Options with_default(const Options& o, const std::string& name) const;
  std::string plugin_;
  std::vector<OptionSpec> specs_;
};

/// The "<plugin>.<key> = value" lines of a config file (the host's syntax; '#' comments), as
/// the key -> value map RunContext::options holds. Lines of other prefixes are ignored.
/// Throws InvalidArgument naming the file when it cannot be read.
std::map<std::string, std::string> read_plugin_config(const std::string& path, const std::string& plugin);

/// Run-level keys of a config file (lines without a plugin prefix, e.g. "batch-size = 32").
std::map<std::string, std::string> read_run_config(const std::string& path);

}  // namespace benchhost::lm
