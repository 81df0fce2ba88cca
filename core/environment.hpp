#pragma once
/// @file environment.hpp  The environment fingerprint every report carries.
///
/// Note [No secrets in reports]
/// Only facts about the machine and the software are recorded, and environment variables only
/// from a fixed allow-list (kEnvironmentAllowList). The environment is never dumped: tokens,
/// passwords and cloud credentials commonly live there.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace benchhost::host {

/// Environment variables a report may copy (when set).
const std::vector<std::string>& environment_allow_list();

struct PluginVersion {
  std::string name, version, abi, path;
};

/// Host, CPU, memory, OS/kernel, compiler, benchhost version/git, loaded library versions
/// (oneTBB, oneDNN, fmt, Boost, nlohmann_json), CUDA facts when a GPU is usable, allow-listed
/// environment variables and the given plugin versions.
nlohmann::ordered_json environment_fingerprint(const std::vector<PluginVersion>& plugins);

/// Note [Threads of a run]: what the host adds to a supervised worker's environment
/// ("OMP_NUM_THREADS=4" unless the user set it), and the threading settings a run measures under,
/// for the report's environment.threading.
std::vector<std::string> worker_threading_environment(const Settings& s);
nlohmann::ordered_json threading_settings(const Settings& s, bool supervised);

/// "Intel(R) Xeon(R) ..." from /proc/cpuinfo ("unknown" if unreadable).
std::string cpu_model();

}  // namespace benchhost::host
