#pragma once
/// @file commands.hpp  The benchhost commands (list, info, run) behind main().

#include <cstdio>
#include <string>

#include "plugin_loader.hpp"
#include "run_modes.hpp"

namespace benchhost::host {

/// The whole program: parses argv, discovers plugins, runs the command; returns the exit code
/// (cli.hpp). Never throws. Human output goes to `out`, errors to `err`.
int run_main(int argc, const char* const* argv, std::FILE* out, std::FILE* err);

/// `benchhost list`: name, version, ABI, MLPerf key, metric and target, devices, precisions;
/// then the broken files and why. Reads descriptors only.
std::string list_text(const PluginRegistry& registry);
/// `benchhost info <plugin>`: options with types, defaults, allowed values and help; the MLPerf
/// rules it declares; shipped configs.
std::string info_text(const LoadedPlugin& plugin, const std::vector<std::filesystem::path>& configs_roots);
/// `benchhost info <plugin> --json`: the plugin's declaration (describe_json: options, metric,
/// MLPerf rules) plus where it was loaded from and the shipped configs' paths. What
/// tools/mllog_check.py reads.
nlohmann::ordered_json info_json(const LoadedPlugin& plugin, const std::vector<std::filesystem::path>& configs_roots);
/// `benchhost list --json`: {"plugins": [info_json...], "broken": [{"path", "reason"}...]}.
nlohmann::ordered_json list_json(const PluginRegistry& registry, const std::vector<std::filesystem::path>& configs_roots);

/// Rank, world size and local rank from the launcher's environment (OpenMPI, Slurm,
/// RANK/WORLD_SIZE/LOCAL_RANK); single process when none is set.
Placement detect_placement();

}  // namespace benchhost::host
