#include "commands.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "benchhost/version.hpp"
#include "cli.hpp"
#include "compare.hpp"
#include "environment.hpp"
#include "html_report.hpp"
#include "isolation.hpp"
#include "reporters.hpp"

namespace benchhost::host {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

std::string metric_text(const WorkloadInfo& i) {
  if (i.metric_name.empty()) return "-";
  return fmt::format("{} {} {}", i.metric_name, i.higher_is_better ? ">=" : "<=", i.metric_target);
}

int exit_code_for(const std::vector<RunRecord>& records, const ordered_json& ttt, bool interrupted) {
  if (interrupted) return kExitInterrupted;
  if (records.empty()) return kExitRunFailed;
  bool all_skipped = true;
  for (const auto& r : records) all_skipped &= r.status == RunStatus::skipped;
  if (all_skipped) return kExitAllSkipped;
  if (!ttt.is_null()) return ttt.value("status", "") == "VALID" ? kExitOk : kExitRunFailed;
  for (const auto& r : records)
    if (r.status != RunStatus::passed && r.status != RunStatus::skipped) return kExitRunFailed;
  return kExitOk;
}

// `benchhost check-mllog FILE ...`: the MLLOG checker installed with the host
// (<prefix>/share/benchhost/tools/mllog_check.py; tools/ in a build tree), asking this executable for
// every plugin's declared rules, with --plugin-dir directories added to BENCHHOST_PLUGIN_PATH.
int check_mllog(const PreParsed& pre, const fs::path& exe_dir, std::FILE* err) {
  std::error_code ec;
  fs::path script;
  for (const fs::path& candidate : {exe_dir / ".." / "share" / "benchhost" / "tools" / "mllog_check.py",
                                    exe_dir / ".." / ".." / "tools" / "mllog_check.py"})
    if (fs::is_regular_file(candidate, ec)) {
      script = candidate.lexically_normal();
      break;
    }
  if (script.empty()) {
    std::fprintf(err, "benchhost: error: check-mllog: mllog_check.py is not installed next to this benchhost (looked in "
                 "%s/../share/benchhost/tools)\n", exe_dir.string().c_str());
    return kExitHostError;
  }
  std::vector<std::string> dirs;
  for (const auto& d : pre.plugin_dirs) dirs.push_back(fs::absolute(d, ec).string());
  if (const char* old = std::getenv("BENCHHOST_PLUGIN_PATH"); old && *old) dirs.emplace_back(old);
  if (!dirs.empty()) ::setenv("BENCHHOST_PLUGIN_PATH", fmt::format("{}", fmt::join(dirs, ":")).c_str(), 1);
  const std::string self = (exe_dir / "benchhost").string(), script_path = script.string();
  std::vector<std::string> args{"python3", script_path, "--benchhost", self};
  args.insert(args.end(), pre.passthrough.begin(), pre.passthrough.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp("python3", argv.data());
  std::fprintf(err, "benchhost: error: check-mllog runs %s with python3, which cannot be started (%s); install "
               "python3\n", script_path.c_str(), std::strerror(errno));
  return kExitHostError;
}

// Note [A report that cannot be written] (events.cpp): a report file the run could never write is
// refused before anything runs, naming its option.
void check_report_paths(const Settings& s) {
  const std::pair<const char*, const std::string*> whole[] = {
      {"-o/--output", &s.output}, {"--csv", &s.csv}, {"--html", &s.html}};
  auto check = [](const char* option, const fs::path& path, bool replaced_whole) {
    try {
      check_report_path(path, replaced_whole);
    } catch (const Error& e) {
      BH_USAGE("option {}: {}; nothing was run", option, e.message());
    }
  };
  for (const auto& [option, path] : whole)
    if (!path->empty()) check(option, *path, true);
  if (!s.mllog.empty()) check("--mllog", MllogReporter::path_for_run(s.mllog, 1, s.runs), false);
}

}  // namespace

std::string list_text(const PluginRegistry& reg) {
  std::ostringstream os;
  os << "Plugins";
  if (!reg.searched().empty()) {
    os << " (searched:";
    for (const auto& d : reg.searched()) os << " " << d.lexically_normal().string();
    os << ")";
  }
  os << ":\n";
  if (reg.plugins().empty()) os << "  (none found; add --plugin-dir DIR or set BENCHHOST_PLUGIN_PATH)\n";
  if (!reg.plugins().empty())
    os << fmt::format("  {:<16} {:<9} {:<5} {:<12} {:<40} {:<10} {}\n", "NAME", "VERSION", "ABI", "MLPERF",
                      "METRIC (target)", "DEVICES", "PRECISIONS");
  for (const auto& p : reg.plugins()) {
    const WorkloadInfo& i = p->info;
    os << fmt::format("  {:<16} {:<9} {:<5} {:<12} {:<40} {:<10} {}\n", p->name, p->version, p->abi,
                      i.benchmark.empty() ? "-" : i.benchmark, metric_text(i), fmt::join(i.devices, ","),
                      fmt::join(i.precisions, ","));
  }
  if (!reg.broken().empty()) {
    os << "Broken plugin files:\n";
    for (const auto& b : reg.broken()) os << "  " << b.path.string() << ": " << b.reason << "\n";
  }
  if (!reg.unusable_directories().empty()) {
    os << "Plugin directories not searched:\n";
    for (const auto& d : reg.unusable_directories()) os << "  " << d.path.string() << ": " << d.reason << "\n";
  }
  return os.str();
}

std::string info_text(const LoadedPlugin& p, const std::vector<fs::path>& roots) {
  const WorkloadInfo& i = p.info;
  std::ostringstream os;
  os << fmt::format("{} {} (SDK ABI {}) from {}\n", p.name, p.version, p.abi, p.path.string());
  if (!i.description.empty()) os << "  " << i.description << "\n";
  os << fmt::format("  MLPerf benchmark: {}\n", i.benchmark.empty() ? "-" : i.benchmark);
  os << fmt::format("  metric: {}\n", metric_text(i));
  os << fmt::format("  modes: {}   devices: {}   precisions: {}\n", fmt::join(i.modes, ", "), fmt::join(i.devices, ", "),
                    fmt::join(i.precisions, ", "));
  os << "Options (--" << p.name << ".<name> VALUE, or '" << p.name << ".<name> = VALUE' in a config file):\n";
  if (i.options.empty()) os << "  (none)\n";
  for (const auto& o : i.options)
    os << fmt::format("  --{}.{:<24} {:<10} default: {:<12} {}\n", p.name, o.name, o.type.empty() ? "string" : o.type,
                      o.default_value.empty() ? "-" : o.default_value, option_help(o));
  if (!i.benchmark.empty()) {
    const mlperf::Rules& r = i.mlperf;
    os << fmt::format("MLPerf rules (benchmark '{}'): {} division by default; {} runs scored, olympic mean drops {} "
                      "each side; evaluation {}; {} logged key(s) checked (tools/mllog_check.py)\n",
                      i.benchmark, r.closed_division ? "closed" : "open", r.runs, r.olympic_drop_each_side,
                      r.eval_cadence.empty() ? "as the plugin's configuration says" : r.eval_cadence, r.keys.size());
  }
  os << "Configs:\n";
  if (i.configs.empty()) os << "  (none shipped)\n";
  for (const auto& c : i.configs) {
    std::string where = "not found";
    try {
      where = resolve_config(c, p.name, roots).string();
    } catch (const UsageError&) {
    }
    os << fmt::format("  {:<20} {}{}\n", c, where, c == i.default_config ? "  (default)" : "");
  }
  return os.str();
}

ordered_json info_json(const LoadedPlugin& p, const std::vector<fs::path>& roots) {
  ordered_json j = ordered_json::parse(p.info.to_json());
  j["path"] = p.path.string();
  j["abi"] = p.abi;
  j["shares_sdk"] = p.shares_sdk;
  ordered_json configs = ordered_json::object();
  for (const auto& c : p.info.configs) {
    try {
      configs[c] = resolve_config(c, p.name, roots).string();
    } catch (const UsageError&) {
      configs[c] = nullptr;
    }
  }
  j["config_paths"] = configs;
  return j;
}

ordered_json list_json(const PluginRegistry& reg, const std::vector<fs::path>& roots) {
  ordered_json plugins = ordered_json::array(), broken = ordered_json::array();
  for (const auto& p : reg.plugins()) plugins.push_back(info_json(*p, roots));
  for (const auto& b : reg.broken()) broken.push_back({{"path", b.path.string()}, {"reason", b.reason}});
  ordered_json unusable = ordered_json::array();
  for (const auto& d : reg.unusable_directories()) unusable.push_back({{"path", d.path.string()}, {"reason", d.reason}});
  return {{"plugins", plugins}, {"broken", broken}, {"unusable_directories", unusable}};
}

Placement detect_placement() {
  const LaunchEnv env = detect_launch_env();
  Placement p;
  p.rank = env.rank;
  p.world_size = env.world_size;
  p.local_rank = env.local_rank;
  p.launcher = env.launcher;
  return p;
}

int run_main(int argc, const char* const* argv, std::FILE* out, std::FILE* err) {
  auto usage_error = [&](const std::exception& e) {
    const auto* be = dynamic_cast<const Error*>(&e);
    std::fprintf(err, "benchhost: error: %s\n", be ? be->message().c_str() : e.what());
    return kExitUsage;
  };
  // A worker started by a supervisor (Note [Crash isolation]): taken first, so that nothing this
  // process starts inherits the channel.
  std::optional<WorkerChannel> worker;
  PreParsed pre;
  try {
    worker = take_worker_channel();
    pre = pre_parse(argc, argv);
  } catch (const std::exception& e) {
    return usage_error(e);
  }
  if (pre.command == "version") {
    std::fprintf(out, "benchhost %s (git %s%s), plugin ABI %d.%d\n", BENCHHOST_VERSION_STRING, BENCHHOST_GIT_REVISION,
                 BENCHHOST_GIT_DIRTY ? ", dirty" : "", BENCHHOST_ABI_MAJOR, BENCHHOST_ABI_MINOR);
    return kExitOk;
  }
  // Relative paths (configs, data, reports) all need one; a directory removed under the shell has none.
  if (std::error_code ec; fs::current_path(ec).empty() || ec) {
    std::fprintf(err, "benchhost: error: the working directory is gone (%s); cd to a directory that exists and run "
                 "again\n", ec.message().c_str());
    return kExitUsage;
  }
  const fs::path exe_dir = executable_dir();
  if (pre.command == "check-mllog") return check_mllog(pre, exe_dir, err);
  if (pre.command == "report") return report_command(pre.passthrough, out, err);
  if (pre.command == "compare") return run_compare(pre.passthrough, out, err);
  const auto roots = default_configs_roots(exe_dir);
  PluginRegistry registry;
  registry.discover(plugin_search_path(pre.plugin_dirs, exe_dir));
  // A directory the user named (--plugin-dir, BENCHHOST_PLUGIN_PATH) that cannot be searched is
  // said, not skipped in silence; `list` shows it too.
  if (pre.command != "list")
    for (const auto& d : registry.unusable_directories())
      if (d.path != exe_dir / "plugins")
        std::fprintf(err, "benchhost: warning: plugin directory %s %s\n", d.path.string().c_str(), d.reason.c_str());
  auto find_plugin = [&](const std::string& name) -> std::shared_ptr<LoadedPlugin> {
    if (auto p = registry.find(name)) return p;
    for (const auto& b : registry.broken())
      if (b.path.stem() == name)
        BH_USAGE("plugin '{}' ({}) cannot be used: {}", name, b.path.string(), b.reason);
    const std::string near = nearest(name, registry.names());
    BH_USAGE("no plugin named '{}'{}; available: {} (see `benchhost list`)", name,
             near.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", near),
             registry.names().empty() ? std::string("none") : fmt::format("{}", fmt::join(registry.names(), ", ")));
  };

  if (pre.command == "help" || (pre.help && pre.plugin.empty())) {
    std::fputs(help_text(nullptr).c_str(), out);
    return kExitOk;
  }
  if (pre.command == "list") {
    std::fputs(pre.json ? (list_json(registry, roots).dump(2) + "\n").c_str() : list_text(registry).c_str(), out);
    return kExitOk;
  }
  std::shared_ptr<LoadedPlugin> plugin;
  try {
    if (pre.plugin.empty())
      BH_USAGE("{} needs a plugin: {} (available: {})", pre.command,
               pre.command == "info" ? "benchhost info <plugin>" : "--plugin NAME",
               registry.names().empty() ? std::string("none found") : fmt::format("{}", fmt::join(registry.names(), ", ")));
    plugin = find_plugin(pre.plugin);
  } catch (const std::exception& e) {
    return usage_error(e);
  }
  if (pre.command == "info") {
    std::fputs(pre.json ? (info_json(*plugin, roots).dump(2) + "\n").c_str() : info_text(*plugin, roots).c_str(), out);
    return kExitOk;
  }
  if (pre.help) {
    std::fputs(help_text(&plugin->info).c_str(), out);
    return kExitOk;
  }
  Settings s;
  try {
    s = parse_cli(argc, argv, &plugin->info, roots);
  } catch (const std::exception& e) {
    return usage_error(e);
  }
  // More threads than the machine has measures contention, not the workload (4 threads on 2
  // cores ran 56 times slower). Said once, by the process the user started.
  if (const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
      !worker && s.threads_given && static_cast<unsigned>(s.threads) > hardware)
    std::fprintf(err, "benchhost: warning: --threads %d is more than this machine's %u hardware threads: the run measures "
                 "oversubscription\n", s.threads, hardware);

  // Note [Multi-process runs]: one process per device under the cluster's launcher
  // (docs/multi-process.md). The host creates the communicator, binds cuda to the local rank,
  // hands the communicator to the plugin, and lets only rank 0 print and write files.
  Placement where;
  std::unique_ptr<Communicator> comm;
  bool supervise = false;
  try {
    const LaunchEnv env = detect_launch_env();
    where.rank = env.rank;
    where.world_size = env.world_size;
    where.local_rank = env.local_rank;
    where.local_size = env.local_size;
    where.launcher = env.launcher;
    // Note [Crash isolation] (isolation.cpp): a single process without a launcher supervises a
    // worker process that runs the plugin; under a launcher every rank runs it itself.
    supervise = s.isolation && !worker && env.world_size == 1 && env.launcher == "none";
    if (!worker && env.rank == 0) check_report_paths(s);  // rank 0 writes the reports
    if (env.world_size > 1 && s.device == "cuda") s.device = device_for_local_rank(env, DeviceType::cuda).str();
    // Processes on one node share its cores unless --threads says otherwise: two ranks each
    // running all cores' worth of threads measure the oversubscription, not the machine.
    if (!s.threads_given && env.local_size > 1)
      s.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_size);
    if (!supervise) {  // the worker creates its own
      CommOptions opts;
      opts.timeout_seconds = s.comm_timeout_seconds;
      comm = create_communicator(s.comm_backend, parse_device(s.device), env, opts);
      where.communicator = comm.get();
    }
  } catch (const Unsupported& e) {
    std::fprintf(err, "benchhost: error: %s\n", e.message().c_str());
    return kExitRunFailed;
  } catch (const Error& e) {
    return usage_error(e);
  }
  const bool rank0 = where.rank == 0;
  EventBus bus;
  // Note [A step that does not return] (run_modes.cpp); a supervisor and its worker handle
  // signals between them (Note [Interrupts]).
  std::optional<InterruptWatcher> watcher;
  if (!supervise && !worker) watcher.emplace(bus, where.world_size > 1 ? 0.3 : 5.0, where.world_size > 1, err);
  try {
    ReportHeader header;
    ordered_json options = ordered_json::object();
    for (const auto& [k, v] : s.plugin_options) options[k] = v;
    header.invocation = {{"argv", s.argv},
                         {"command", "run"},
                         {"plugin", s.plugin},
                         {"mode", s.mode},
                         {"config", s.config_path.empty() ? ordered_json(nullptr) : ordered_json(s.config_path.string())},
                         {"device", s.device},
                         {"precision", s.precision},
                         {"batch_sizes", s.batch_sizes},
                         {"device_counts", s.device_counts.empty() ? std::vector<int>{where.world_size} : s.device_counts},
                         {"warmup", s.warmup},
                         {"iterations", s.iterations},
                         {"runs", s.runs},
                         {"seed", s.seed},
                         {"threads", s.threads},
                         {"synthetic", s.synthetic},
                         {"timeout_seconds", s.timeout_seconds},
                         {"world_size", where.world_size},
                         {"options", options}};
    const WorkloadInfo& i = plugin->info;
    header.plugin = {{"name", plugin->name},
                     {"version", plugin->version},
                     {"abi", plugin->abi},
                     {"path", plugin->path.string()},
                     {"benchmark", i.benchmark},
                     {"metric", {{"name", i.metric_name}, {"target", i.metric_target},
                                 {"direction", i.higher_is_better ? "max" : "min"}}}};
    if (!worker)
      header.environment = environment_fingerprint({{plugin->name, plugin->version, plugin->abi, plugin->path.string()}});
    if (!worker) header.environment["threading"] = threading_settings(s, supervise);
    if (worker) {
      bus.add(make_worker_reporter(*worker));
    } else if (rank0) {
      bus.add(std::make_unique<ConsoleReporter>(out));
      if (!s.output.empty()) bus.add(std::make_unique<JsonReporter>(s.output, header));
      if (!s.csv.empty()) bus.add(std::make_unique<CsvReporter>(s.csv));
      if (!s.html.empty()) bus.add(std::make_unique<HtmlReporter>(s.html, header));
      if (!s.mllog.empty()) bus.add(std::make_unique<MllogReporter>(s.mllog, s.runs));
      std::fprintf(out, "benchhost %s: %s %s, mode %s, device %s, precision %s%s\n", BENCHHOST_VERSION_STRING,
                   plugin->name.c_str(), plugin->version.c_str(), s.mode.c_str(), s.device.c_str(), s.precision.c_str(),
                   s.config_path.empty() ? "" : fmt::format(", config {}", s.config_path.string()).c_str());
      std::fflush(out);
    }
    Summary summary;
    if (supervise) {
      const SupervisedRun run = supervise_workers(s, *plugin, bus, err);
      if (run.exit_code >= 0) return run.exit_code;
      if (s.mode == "ttt") summary.ttt = summarize_ttt(bus.records(), i);
      summary.interrupted = run.interrupted || received_signal() != 0;
    } else {
      summary.ttt = run_selected_mode(s, plugin, where, bus, worker ? worker->first_point : 0);
      summary.interrupted = received_signal() != 0;
    }
    summary.exit_code = exit_code_for(bus.records(), summary.ttt, summary.interrupted);
    if (!bus.write_failures().empty() && !summary.interrupted) summary.exit_code = kExitHostError;
    bus.finish(summary);
    // Note [A report that cannot be written] (events.cpp): the runs went on; say what is missing.
    if (!bus.write_failures().empty()) {
      for (const auto& f : bus.write_failures()) std::fprintf(err, "benchhost: error: incomplete output: %s\n", f.c_str());
      if (!summary.interrupted) summary.exit_code = kExitHostError;
    }
    if (comm && comm->failed()) comm->abort(summary.exit_code == kExitOk ? kExitRunFailed : summary.exit_code);
    // An interrupted rank leaves its peers waiting in the next collective: end the job.
    if (comm && summary.interrupted && where.world_size > 1) comm->abort(kExitInterrupted);
    return summary.exit_code;
  } catch (const UsageError& e) {
    return usage_error(e);
  } catch (const std::exception& e) {
    std::fprintf(err, "benchhost: error: %s\n", e.what());
    return kExitHostError;
  }
}

}  // namespace benchhost::host
