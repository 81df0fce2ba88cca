#pragma once
/// @file cli.hpp  Command line and config files (Boost.Program_options).
///
/// Note [CLI parsing in two passes]
/// Plugin options (--<plugin>.<name>) are only known once the plugin is found, and finding it
/// needs --plugin-dir. So the command line is read twice: pre_parse() picks out the command,
/// --plugin, --plugin-dir, --config and --help while tolerating everything else; after discovery
/// parse_cli() reads it again strictly, with the plugin's options registered, then the config
/// file. program_options keeps the first value stored, so the command line wins over the file.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "benchhost/error.hpp"
#include "benchhost/workload.hpp"

namespace benchhost::host {

/// A command-line or config-file problem; main() prints it and exits with kExitUsage.
class UsageError : public InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

/// Throw UsageError with a fmt-formatted message.
#define BH_USAGE(...) \
  throw ::benchhost::host::UsageError(::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

/// Exit codes (docs/cli.md).
inline constexpr int kExitOk = 0;           ///< every run/sweep point PASSED (SKIPPED points allowed if one passed)
inline constexpr int kExitUsage = 1;        ///< bad command line, config file or plugin name
inline constexpr int kExitRunFailed = 2;    ///< a run ended INVALID_ARGUMENTS/OOM/TIMEOUT/DIVERGED/FAILED or ttt INVALID
inline constexpr int kExitAllSkipped = 3;   ///< nothing ran: every point was SKIPPED
inline constexpr int kExitHostError = 4;    ///< the host itself failed (report not writable, ...)
inline constexpr int kExitRegression = 5;   ///< compare: a point is SLOWER beyond --threshold with confidence
inline constexpr int kExitUnusableInput = 6;  ///< compare: a report unreadable, not a benchhost report, or nothing matched
inline constexpr int kExitInterrupted = 130;  ///< SIGINT/SIGTERM: partial results were written

struct PreParsed {
  std::string command;  ///< "run" (default), "list", "info", "help", "version", "check-mllog", "report", "compare"
  std::string plugin;   ///< --plugin, or the argument of `info`
  std::vector<std::string> plugin_dirs;
  std::string config;
  bool help = false;
  bool json = false;  ///< --json: `list` and `info` print JSON (the plugins' declarations)
  std::vector<std::string> passthrough;  ///< check-mllog: the checker's arguments; report, compare: their arguments
};
PreParsed pre_parse(int argc, const char* const* argv);

struct Settings {
  std::string command = "run";
  std::string plugin;
  std::string mode = "ttt";
  std::string config;                ///< as given
  std::filesystem::path config_path; ///< resolved ("" if none)
  std::string device = "cpu";
  std::string precision = "fp32";
  std::vector<std::int64_t> batch_sizes;   ///< empty: the workload's default
  std::vector<int> device_counts;          ///< empty: the launch's process count
  std::int64_t warmup = 5;
  std::int64_t iterations = 50;
  int runs = 1;
  std::uint64_t seed = 1;
  std::string output, mllog, csv;
  std::string html;  ///< --html: the self-contained HTML report (core/html_report.hpp)
  std::vector<std::string> plugin_dirs;
  int threads = 0;  ///< 0: all hardware threads
  bool threads_given = false;  ///< --threads was on the command line (else shared among local ranks)
  bool synthetic = false;
  double timeout_seconds = 0;  ///< per run / sweep point; 0 = none
  bool isolation = true;       ///< run the modes in a supervised worker process (Note [Crash isolation])
  double peak_tflops = 0;      ///< device peak for MFU given by the user; 0 = calibrate (Note [Calibrated MFU])
  std::string calibrate_peak = "auto";  ///< auto | refresh | off (peak.hpp, CalibrateMode)
  std::string comm_backend = "auto";  ///< auto | single | mpi | nccl
  double comm_timeout_seconds = 1800; ///< per-collective deadline
  std::string launcher;               ///< -n sweep child launcher template with {n}; "" = mpirun
  std::string submission_org = "benchhost", submission_platform, submission_division,
              submission_status = "onprem", submission_poc_name = "benchhost",
              submission_poc_email = "benchhost@localhost";
  std::map<std::string, std::string> plugin_options;  ///< without the "<plugin>." prefix
  std::vector<std::string> argv;                      ///< the command line as given
};

/// Strict parse with `info`'s options registered (null: no plugin). `configs_roots` are searched
/// for a --config name that is not a path. Throws UsageError naming the option, with a suggestion.
Settings parse_cli(int argc, const char* const* argv, const WorkloadInfo* info,
                   const std::vector<std::filesystem::path>& configs_roots);

/// Help text: host options, plus the plugin's options when `info` is given.
std::string help_text(const WorkloadInfo* info);

/// Where shipped config files live: <exe>/../../configs (build tree), <exe>/../share/benchhost/configs
/// (installed), and the current directory's configs/.
std::vector<std::filesystem::path> default_configs_roots(const std::filesystem::path& exe_dir);

/// Resolve --config: an existing path as given, else <root>/<plugin>/<name>[.conf]. Throws
/// UsageError listing where it looked.
std::filesystem::path resolve_config(const std::string& name, const std::string& plugin,
                                     const std::vector<std::filesystem::path>& roots);

/// Levenshtein distance and the closest candidate ("" if none is close enough).
std::size_t edit_distance(const std::string& a, const std::string& b);
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

/// A plugin option's help line as --help and `info` print it: the declared help, the values
/// allowed (options.hpp allowed_values), the unit and whether it must be given.
std::string option_help(const OptionSpec& spec);

}  // namespace benchhost::host
