#include "cli.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace benchhost::host {

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

// Options that may also appear in config files (everything that shapes a run).
po::options_description run_options() {
  po::options_description d("Run options (also valid as 'key = value' in --config files)");
  d.add_options()
      ("mode", po::value<std::string>()->value_name("ttt|train|infer|loader"),
       "ttt: time to train to the target (MLPerf timing); train: training throughput over -b x -n; "
       "infer: inference throughput and latency; loader: data pipeline only (prepare_batch)")
      ("device", po::value<std::string>()->value_name("cpu|cuda[:N]"), "device to run on (default cpu)")
      ("precision", po::value<std::string>()->value_name("fp32|tf32|fp16|bf16|fp8"), "precision policy (default fp32)")
      ("batch-size,b", po::value<std::vector<std::string>>()->value_name("B[,B...]"),
       "per-device batch sizes (comma list or repeated); default: the workload's")
      ("devices,n", po::value<std::vector<std::string>>()->value_name("N[,N...]"),
       "device counts for the throughput grid (default: the launch's process count, 1 without a launcher)")
      ("warmup,w", po::value<std::int64_t>()->value_name("STEPS"), "untimed warm-up steps per sweep point (default 5)")
      ("iterations,i", po::value<std::int64_t>()->value_name("STEPS"), "timed steps per sweep point (default 50)")
      ("runs", po::value<int>()->value_name("N"), "time-to-train runs, each with its own seed (default 1)")
      ("seed", po::value<std::string>()->value_name("S"), "base seed; run r uses a seed derived from it (default 1)")
      ("threads", po::value<int>()->value_name("N"), "CPU threads for the workload (default: all)")
      ("synthetic", po::value<bool>()->implicit_value(true)->value_name("BOOL"),
       "use the workload's synthetic data source (same shapes, no storage)")
      ("timeout", po::value<double>()->value_name("SECONDS"),
       "per run / sweep point time limit, checked between steps; a step that does not return within the limit "
       "plus a grace (the larger of 10 s and a quarter of the limit) has its worker process killed (0 = none)")
      ("peak-tflops", po::value<double>()->value_name("TFLOPS"),
       "device peak for MFU, instead of the calibrated one (named as the source in reports)")
      ("calibrate-peak", po::value<std::string>()->value_name("auto|refresh|off"),
       "measure the device's achievable peak with the SDK's GEMM for MFU: auto (cached per machine and build, "
       "default), refresh (measure again), off (MFU only against --peak-tflops)")
      ("comm-backend", po::value<std::string>()->value_name("auto|single|mpi|nccl"),
       "collective backend (default auto: nccl on CUDA, mpi when launched with several processes)")
      ("comm-timeout", po::value<double>()->value_name("SECONDS"), "deadline of each collective (default 1800)")
      ("launcher", po::value<std::string>()->value_name("TEMPLATE"),
       "how -n sweeps start N processes, {n} replaced (default: mpirun --oversubscribe -np {n})")
      ("submission-org", po::value<std::string>(), "MLLOG submission_org")
      ("submission-platform", po::value<std::string>(), "MLLOG submission_platform (default: CPU or GPU model)")
      ("submission-division", po::value<std::string>(), "MLLOG submission_division: closed|open (default: closed for MLPerf benchmarks)")
      ("submission-status", po::value<std::string>(), "MLLOG submission_status: onprem|cloud|preview|research")
      ("submission-poc-name", po::value<std::string>(), "MLLOG submission_poc_name")
      ("submission-poc-email", po::value<std::string>(), "MLLOG submission_poc_email");
  return d;
}

po::options_description general_options() {
  po::options_description d("General options");
  d.add_options()
      ("help,h", "show this help (with --plugin X: also X's options)")
      ("version", "print the benchhost version")
      ("plugin,p", po::value<std::string>()->value_name("NAME"), "workload plugin to run (see `benchhost list`)")
      ("config,c", po::value<std::string>()->value_name("FILE"),
       "config file: a path, or a name in configs/<plugin>/ (e.g. mini.conf)")
      ("output,o", po::value<std::string>()->value_name("FILE"), "JSON report (written atomically)")
      ("mllog", po::value<std::string>()->value_name("FILE"), "MLPerf MLLOG file (ttt; --runs N writes FILE_<r>)")
      ("csv", po::value<std::string>()->value_name("FILE"), "CSV report, one row per run / sweep point")
      ("html", po::value<std::string>()->value_name("FILE"),
       "HTML report: environment, verdicts and plots in one self-contained page (rewritten after every point)")
      ("plugin-dir", po::value<std::vector<std::string>>()->value_name("DIR"), "also search DIR for plugins (repeatable)")
      ("no-isolation", po::bool_switch(),
       "run the plugin in this process instead of a supervised worker process: a crash then ends the whole "
       "run (for debugging under gdb; always so under a multi-process launcher)")
      ("command", po::value<std::string>(), "list | info | run (positional)")
      ("args", po::value<std::vector<std::string>>(), "command arguments (positional)");
  return d;
}

po::positional_options_description positionals() {
  po::positional_options_description p;
  p.add("command", 1).add("args", -1);
  return p;
}

void add_plugin_options(po::options_description& d, const WorkloadInfo& info) {
  for (const auto& o : info.options) {
    auto* v = po::value<std::string>()->value_name(o.type.empty() ? "string" : o.type);
    if (!o.default_value.empty()) v->default_value(o.default_value);
    const std::string name = info.name + "." + o.name;
    d.add_options()(name.c_str(), v, option_help(o).c_str());
  }
}

std::vector<std::string> option_names(const po::options_description& d) {
  std::vector<std::string> out;
  for (const auto& o : d.options()) {
    const std::string& n = o->long_name();
    if (!n.empty() && n != "command" && n != "args") out.push_back(n);
  }
  return out;
}

std::string strip_dashes(std::string s) {
  while (!s.empty() && s.front() == '-') s.erase(s.begin());
  if (auto eq = s.find('='); eq != std::string::npos) s.erase(eq);
  return s;
}

// Note [Percent signs in options]
// program_options builds an error's text on what() by replacing placeholders such as
// "%canonical_option%" with the option and value as given, in a loop that runs until the placeholder
// is gone: an argument that contains its own placeholder ("-%canonical_option%") never ends it.
// When any token that reached the parser holds a '%', the message is built here from the option's
// name instead, and what() is never called.
std::string po_message(const po::error& e, bool tokens_have_percent) {
  if (!tokens_have_percent) return e.what();
  auto* named = dynamic_cast<const po::error_with_option_name*>(&e);
  const std::string name = named ? named->get_option_name() : std::string();
  const char* what_kind = "cannot parse option";
  if (dynamic_cast<const po::unknown_option*>(&e))
    what_kind = "unrecognised option";
  else if (dynamic_cast<const po::ambiguous_option*>(&e))
    what_kind = "ambiguous option";
  else if (dynamic_cast<const po::multiple_occurrences*>(&e) || dynamic_cast<const po::multiple_values*>(&e))
    what_kind = "option given more than once";
  else if (dynamic_cast<const po::invalid_option_value*>(&e) || dynamic_cast<const po::validation_error*>(&e))
    what_kind = "invalid value for option";
  else if (dynamic_cast<const po::required_option*>(&e))
    what_kind = "missing value for option";
  else if (dynamic_cast<const po::invalid_syntax*>(&e))
    what_kind = "malformed option";
  if (name.empty()) return fmt::format("{} (an argument contains '%')", what_kind);
  return fmt::format("{} '{}'", what_kind, name);
}

bool has_percent(const std::string& s) { return s.find('%') != std::string::npos; }

[[noreturn]] void rethrow_po(const po::error& e, const std::vector<std::string>& candidates, const std::string& where,
                             bool have_plugin, bool tokens_have_percent) {
  const std::string text = po_message(e, tokens_have_percent);
  std::string msg = where.empty() ? text : fmt::format("{}: {}", where, text);
  if (auto* u = dynamic_cast<const po::unknown_option*>(&e)) {
    std::string bad = strip_dashes(u->get_option_name());
    std::string near = nearest(bad, candidates);
    if (!near.empty())
      msg += fmt::format("; did you mean '--{}'?", near);
    else if (bad.find('.') != std::string::npos && !have_plugin)
      msg += "; plugin options are only known once --plugin NAME is given";
    else
      msg += "; see --help";
  }
  throw UsageError(msg, __FILE__, __LINE__);
}

template <class T>
bool parse_full(const std::string& s, T& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

// The comma-separated items of each part; an empty item ("8,,16", "8,") is kept as "" so that the
// caller refuses it instead of silently reading "8,16".
std::vector<std::string> split_commas(const std::vector<std::string>& parts) {
  std::vector<std::string> out;
  for (const auto& p : parts) {
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = p.find(',', start);
      std::string item = p.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      out.push_back(item);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

template <class T>
std::vector<T> positive_list(const std::vector<std::string>& parts, const char* option) {
  std::vector<T> out;
  for (const auto& s : split_commas(parts)) {
    T v{};
    if (s.empty()) BH_USAGE("option --{}: an empty element in '{}' (expected e.g. --{} 32,64)", option, fmt::join(parts, " "), option);
    if (!parse_full(s, v) || v <= 0)
      BH_USAGE("option --{}: '{}' is not a positive integer (expected e.g. --{} 32,64)", option, s, option);
    out.push_back(v);
  }
  if (out.empty()) BH_USAGE("option --{} needs at least one value", option);
  return out;
}

}  // namespace

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0u : 1u)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  // Close enough to be a typo: at most a third of the word (at least 2 edits) away.
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::string best;
  std::size_t best_d = static_cast<std::size_t>(-1);
  for (const auto& c : candidates) {
    // The distance is at least the difference in length: a candidate that cannot come within the
    // limit, or beat the best so far, is not measured (a megabyte-long unknown option would cost a
    // quadratic table per candidate).
    const std::size_t gap = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    if (gap > limit || gap >= best_d) continue;
    std::size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (best_d <= limit) return best;
  // Or the start of a longer name (`dlrm` for `dlrm_dcnv2`): the shortest such.
  best.clear();
  if (word.size() >= 3)
    for (const auto& c : candidates)
      if (c.size() > word.size() && c.compare(0, word.size(), word) == 0 && (best.empty() || c.size() < best.size()))
        best = c;
  return best;
}

std::string option_help(const OptionSpec& o) {
  std::string allowed = allowed_values(o);
  if (!o.unit.empty()) allowed += ", in " + o.unit;
  return fmt::format("{} [{}]{}", o.help, allowed, o.required ? " (required)" : "");
}

PreParsed pre_parse(int argc, const char* const* argv) {
  // A hand scan, not program_options: options not known yet (--<plugin>.hidden-size 256) take values
  // that a tolerant parser would mistake for positional arguments.
  PreParsed out;
  int i = 1;
  if (argc > 1 && argv[1][0] != '-') {
    out.command = argv[1];
    i = 2;
    if (out.command == "report") {  // everything after it is the report command's (core/html_report.hpp)
      for (; i < argc; ++i) out.passthrough.push_back(argv[i]);
      return out;
    }
    if (out.command == "check-mllog") {  // everything after it is the checker's (tools/mllog_check.py)
      for (; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--plugin-dir" && i + 1 < argc)
          out.plugin_dirs.push_back(argv[++i]);
        else if (arg.rfind("--plugin-dir=", 0) == 0)
          out.plugin_dirs.push_back(arg.substr(13));
        else
          out.passthrough.push_back(arg);
      }
      return out;
    }
    if (out.command == "compare") {  // reports and compare's own options (core/compare.hpp)
      for (; i < argc; ++i) out.passthrough.emplace_back(argv[i]);
      return out;
    }
    // `benchhost info <plugin>` and the shorthand `benchhost <mode> <plugin>` (= run --mode <mode>).
    const bool mode_shorthand = out.command == "ttt" || out.command == "train" || out.command == "infer" ||
                                out.command == "loader";
    if ((out.command == "info" || mode_shorthand) && argc > 2 && argv[2][0] != '-') {
      out.plugin = argv[2];
      i = 3;
    }
    if (mode_shorthand) out.command = "run";
  }
  auto value_of = [&](const std::string& arg, const char* long_name, const char* short_name, std::string& dst) {
    const std::string l = std::string("--") + long_name;
    if (arg == l || (short_name && arg == short_name)) {
      if (i + 1 >= argc) BH_USAGE("option {} needs a value", l);
      dst = argv[++i];
      return true;
    }
    if (arg.rfind(l + "=", 0) == 0) {
      dst = arg.substr(l.size() + 1);
      return true;
    }
    return false;
  };
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string v;
    if (arg == "--help" || arg == "-h") {
      out.help = true;
    } else if (arg == "--json") {
      out.json = true;
    } else if (arg == "--version") {
      if (out.command.empty()) out.command = "version";
    } else if (value_of(arg, "plugin", "-p", v)) {
      out.plugin = v;
    } else if (value_of(arg, "plugin-dir", nullptr, v)) {
      out.plugin_dirs.push_back(v);
    } else if (value_of(arg, "config", "-c", v)) {
      out.config = v;
    }
  }
  if (out.command.empty()) out.command = out.help && out.plugin.empty() ? "help" : "run";
  static const std::vector<std::string> commands{"run",   "list",  "info",  "help",   "version",
                                                 "ttt",   "train", "infer", "loader", "check-mllog", "report",
                                                 "compare"};
  if (std::find(commands.begin(), commands.end(), out.command) == commands.end()) {
    std::string near = nearest(out.command, commands);
    BH_USAGE("unknown command '{}'{} (commands: list, info <plugin>, run, ttt|train|infer|loader <plugin>, check-mllog FILE, "
             "report RUN.json..., compare BASE NEW)",
             out.command,
             near.empty() ? std::string() : fmt::format("; did you mean '{}'?", near));
  }
  return out;
}

std::vector<fs::path> default_configs_roots(const fs::path& exe_dir) {
  return {exe_dir / ".." / ".." / "configs", exe_dir / ".." / "share" / "benchhost" / "configs",
          fs::current_path() / "configs"};
}

fs::path resolve_config(const std::string& name, const std::string& plugin, const std::vector<fs::path>& roots) {
  std::error_code ec;
  if (fs::is_regular_file(name, ec)) return fs::absolute(name);
  std::vector<std::string> tried{name};
  for (const auto& root : roots) {
    for (const std::string& candidate : {name, name + ".conf"}) {
      fs::path p = root / plugin / candidate;
      if (fs::is_regular_file(p, ec)) {
        fs::path r = fs::weakly_canonical(p, ec);
        return ec ? fs::absolute(p) : r;
      }
      tried.push_back(p.lexically_normal().string());
    }
  }
  std::string list;
  for (const auto& t : tried) list += "\n  " + t;
  BH_USAGE("config file '{}' not found; looked at:{}", name, list);
}

Settings parse_cli(int argc, const char* const* argv, const WorkloadInfo* info, const std::vector<fs::path>& roots) {
  Settings s;
  for (int i = 0; i < argc; ++i) s.argv.emplace_back(argv[i]);
  po::options_description plugin_desc(info ? fmt::format("Options of plugin '{}'", info->name) : std::string("Plugin"));
  if (info) add_plugin_options(plugin_desc, *info);
  po::options_description cmdline;
  cmdline.add(general_options()).add(run_options()).add(plugin_desc);
  po::options_description file_desc;
  file_desc.add(run_options()).add(plugin_desc);
  const std::vector<std::string> candidates = option_names(cmdline);
  const bool argv_percent = std::any_of(s.argv.begin(), s.argv.end(), has_percent);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(cmdline).positional(positionals()).run(), vm);
  } catch (const po::error& e) {
    rethrow_po(e, candidates, "", info != nullptr, argv_percent);
  }
  std::vector<std::string> args = vm.count("args") ? vm["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
  std::string shorthand_mode;
  if (vm.count("command")) s.command = vm["command"].as<std::string>();
  if (s.command == "ttt" || s.command == "train" || s.command == "infer" || s.command == "loader") {
    shorthand_mode = s.command;  // `benchhost train <plugin> ...`
    s.command = "run";
    if (!args.empty()) {
      if (vm.count("plugin") && vm["plugin"].as<std::string>() != args.front())
        BH_USAGE("plugin given twice: '{}' and --plugin {}", args.front(), vm["plugin"].as<std::string>());
      s.plugin = args.front();
      args.erase(args.begin());
    }
  }
  if (s.command != "run") BH_USAGE("unexpected argument '{}' (options take the form --name VALUE)", s.command);
  if (!args.empty()) BH_USAGE("unexpected argument '{}' (options take the form --name VALUE)", args.front());
  if (vm.count("plugin")) s.plugin = vm["plugin"].as<std::string>();
  if (!shorthand_mode.empty()) {
    if (vm.count("mode") && vm["mode"].as<std::string>() != shorthand_mode)
      BH_USAGE("mode given twice: '{}' and --mode {}", shorthand_mode, vm["mode"].as<std::string>());
    s.mode = shorthand_mode;
  }
  s.isolation = !vm["no-isolation"].as<bool>();
  if (vm.count("plugin-dir")) s.plugin_dirs = vm["plugin-dir"].as<std::vector<std::string>>();

  // Config: explicit --config, else the plugin's declared default config (when it exists).
  std::string config = vm.count("config") ? vm["config"].as<std::string>() : std::string();
  if (config.empty() && info && !info->default_config.empty()) {
    try {
      s.config_path = resolve_config(info->default_config, info->name, roots);
      s.config = info->default_config;
    } catch (const UsageError&) {
      // A missing default config is not an error: the plugin's option defaults apply.
    }
  } else if (!config.empty()) {
    s.config = config;
    s.config_path = resolve_config(config, info ? info->name : std::string(), roots);
  }
  bool config_percent = false;
  if (!s.config_path.empty()) {
    std::ifstream file(s.config_path, std::ios::binary);
    if (!file) BH_USAGE("cannot read config file {}", s.config_path.string());
    std::ostringstream text;
    text << file.rdbuf();
    config_percent = has_percent(text.str());
    std::istringstream in(text.str());
    try {
      po::store(po::parse_config_file(in, file_desc, false), vm);
    } catch (const po::error& e) {
      rethrow_po(e, option_names(file_desc), fmt::format("config file {}", s.config_path.string()), info != nullptr,
                 config_percent);
    }
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    rethrow_po(e, candidates, "", info != nullptr, argv_percent || config_percent);
  }

  auto str = [&](const char* k, std::string& dst) {
    if (vm.count(k)) dst = vm[k].as<std::string>();
  };
  str("mode", s.mode);
  if (!shorthand_mode.empty()) s.mode = shorthand_mode;  // the command line wins over a config's mode
  str("device", s.device);
  str("precision", s.precision);
  str("output", s.output);
  str("mllog", s.mllog);
  str("csv", s.csv);
  str("html", s.html);
  str("submission-org", s.submission_org);
  str("comm-backend", s.comm_backend);
  str("launcher", s.launcher);
  if (vm.count("comm-timeout")) s.comm_timeout_seconds = vm["comm-timeout"].as<double>();
  str("submission-platform", s.submission_platform);
  str("submission-division", s.submission_division);
  str("submission-status", s.submission_status);
  str("submission-poc-name", s.submission_poc_name);
  str("submission-poc-email", s.submission_poc_email);
  if (vm.count("batch-size")) s.batch_sizes = positive_list<std::int64_t>(vm["batch-size"].as<std::vector<std::string>>(), "batch-size");
  if (vm.count("devices")) s.device_counts = positive_list<int>(vm["devices"].as<std::vector<std::string>>(), "devices");
  if (vm.count("warmup")) s.warmup = vm["warmup"].as<std::int64_t>();
  if (vm.count("iterations")) s.iterations = vm["iterations"].as<std::int64_t>();
  if (vm.count("runs")) s.runs = vm["runs"].as<int>();
  if (vm.count("seed")) {
    // Digits only: program_options would read "-1" as 2^64 - 1 without a word.
    const std::string seed = vm["seed"].as<std::string>();
    if (!parse_full(seed, s.seed)) BH_USAGE("option --seed: '{}' is not an integer in [0, 2^64)", seed);
  }
  if (vm.count("threads")) {
    s.threads = vm["threads"].as<int>();
    s.threads_given = true;
  }
  if (vm.count("synthetic")) s.synthetic = vm["synthetic"].as<bool>();
  if (vm.count("timeout")) s.timeout_seconds = vm["timeout"].as<double>();
  if (vm.count("peak-tflops")) s.peak_tflops = vm["peak-tflops"].as<double>();
  if (vm.count("calibrate-peak")) {
    s.calibrate_peak = vm["calibrate-peak"].as<std::string>();
    if (s.calibrate_peak != "auto" && s.calibrate_peak != "refresh" && s.calibrate_peak != "off")
      BH_USAGE("option --calibrate-peak: '{}' is not one of auto, refresh, off", s.calibrate_peak);
  }

  // Without --mode: time to train when the plugin supports it, else the plugin's first mode.
  if (!vm.count("mode") && shorthand_mode.empty() && info && !info->modes.empty() &&
      std::find(info->modes.begin(), info->modes.end(), "ttt") == info->modes.end())
    s.mode = info->modes.front();
  static const std::vector<std::string> modes{"ttt", "train", "infer", "loader"};
  static const std::vector<std::string> precisions{"fp32", "tf32", "fp16", "bf16", "fp8"};
  if (std::find(modes.begin(), modes.end(), s.mode) == modes.end())
    BH_USAGE("option --mode: '{}' is not one of ttt, train, infer, loader{}", s.mode,
             nearest(s.mode, modes).empty() ? "" : fmt::format("; did you mean '{}'?", nearest(s.mode, modes)));
  if (std::find(precisions.begin(), precisions.end(), s.precision) == precisions.end())
    BH_USAGE("option --precision: '{}' is not one of fp32, tf32, fp16, bf16, fp8", s.precision);
  try {
    (void)parse_device(s.device);
  } catch (const Error& e) {
    BH_USAGE("option --device: {}", e.message());
  }
  if (s.warmup < 0) BH_USAGE("option --warmup: {} is negative", s.warmup);
  if (s.iterations <= 0) BH_USAGE("option --iterations: {} must be at least 1", s.iterations);
  if (s.runs <= 0) BH_USAGE("option --runs: {} must be at least 1", s.runs);
  if (s.comm_timeout_seconds <= 0) BH_USAGE("option --comm-timeout: {} must be positive", s.comm_timeout_seconds);
  if (s.comm_backend != "auto" && s.comm_backend != "single" && s.comm_backend != "mpi" && s.comm_backend != "nccl")
    BH_USAGE("option --comm-backend: '{}' is not one of auto, single, mpi, nccl", s.comm_backend);
  if (!std::isfinite(s.timeout_seconds) || s.timeout_seconds < 0)
    BH_USAGE("option --timeout: {} is not a number of seconds >= 0 (0 = no limit)", s.timeout_seconds);
  if (!std::isfinite(s.comm_timeout_seconds)) BH_USAGE("option --comm-timeout: {} is not a number of seconds", s.comm_timeout_seconds);
  if (vm.count("peak-tflops") && !(std::isfinite(s.peak_tflops) && s.peak_tflops > 0))
    BH_USAGE("option --peak-tflops: {} is not a positive number of TFLOP/s", s.peak_tflops);
  if (s.threads < 0) BH_USAGE("option --threads: {} is negative", s.threads);
  // Far more threads than the machine has exhausts the process (run_main warns about fewer).
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (s.threads > 64 * hardware)
    BH_USAGE("option --threads: {} is more than 64 times this machine's {} hardware threads", s.threads, hardware);
  if (s.threads == 0) s.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  {
    // Two reports in one file would overwrite each other: one of them would be lost.
    const std::vector<std::pair<const char*, const std::string*>> outputs{
        {"--output", &s.output}, {"--csv", &s.csv}, {"--mllog", &s.mllog}, {"--html", &s.html}};
    // Resolved as the filesystem does where it can (links, ".."), else compared as written, made
    // absolute: a name the filesystem refuses (a component longer than NAME_MAX) is not this
    // check's to report; the report's own check names it (Note [A report that cannot be written]).
    auto resolved = [](const std::string& name) {
      std::error_code ec;
      fs::path p = fs::absolute(name, ec);
      if (ec) return fs::path(name).lexically_normal();
      fs::path r = fs::weakly_canonical(p, ec);
      return ec ? p.lexically_normal() : r;
    };
    for (std::size_t i = 0; i < outputs.size(); ++i)
      for (std::size_t j = i + 1; j < outputs.size(); ++j)
        if (!outputs[i].second->empty() && !outputs[j].second->empty() &&
            resolved(*outputs[i].second) == resolved(*outputs[j].second))
          BH_USAGE("options {} and {} name the same file '{}': each report needs its own", outputs[i].first,
                   outputs[j].first, *outputs[i].second);
  }
  if (!s.submission_status.empty()) {
    static const std::vector<std::string> st{"onprem", "cloud", "preview", "research"};
    if (std::find(st.begin(), st.end(), s.submission_status) == st.end())
      BH_USAGE("option --submission-status: '{}' is not one of onprem, cloud, preview, research",
               s.submission_status);
  }
  if (!s.submission_division.empty() && s.submission_division != "closed" && s.submission_division != "open")
    BH_USAGE("option --submission-division: '{}' is not closed or open", s.submission_division);

  if (info) {
    if (std::find(info->modes.begin(), info->modes.end(), s.mode) == info->modes.end() && s.mode != "loader")
      BH_USAGE("plugin '{}' does not support --mode {} (it supports: {})", info->name, s.mode,
               fmt::join(info->modes, ", "));
    for (const auto& o : info->options) {
      const std::string key = info->name + "." + o.name;
      if (vm.count(key)) {
        std::string v = vm[key].as<std::string>();
        // Note [Options declared once] (options.hpp): the SDK checks the value against the
        // plugin's declaration; here a refusal is a usage error (exit 1) before any run starts.
        try {
          validate_option_value(info->name, o, v);
        } catch (const InvalidArgument& e) {
          BH_USAGE("{}", e.message());
        }
        s.plugin_options[o.name] = v;
      } else if (o.required) {
        BH_USAGE("plugin '{}' needs option --{} ({})", info->name, key, o.help);
      }
    }
  }
  return s;
}

std::string help_text(const WorkloadInfo* info) {
  std::ostringstream os;
  os << "usage: benchhost list [--plugin-dir DIR]\n"
        "       benchhost info <plugin>\n"
        "       benchhost [run] --plugin NAME [--mode ttt|train|infer|loader] [--config FILE] [options]\n"
        "       benchhost ttt|train|infer|loader NAME [options]      (same as --plugin NAME --mode ...)\n"
        "       benchhost check-mllog FILE [--plugin-dir DIR] [--quiet]  (MLPerf logging rules; see --help there)\n"
        "       benchhost report RUN.json... [-o report.html]  (one HTML page with plots from JSON reports)\n"
        "       benchhost compare BASE.json NEW.json [NEW2.json ...] [--threshold 0.05] [--confidence 0.95] [--json]\n"
        "                 (FASTER/SLOWER/SAME/UNCERTAIN per point; exit 5 on a regression, 6 on unusable input)\n\n";
  po::options_description visible;
  po::options_description g("General options");
  const po::options_description general = general_options();
  for (const auto& o : general.options())
    if (o->long_name() != "command" && o->long_name() != "args") g.add(o);
  visible.add(g).add(run_options());
  if (info) {
    po::options_description p(fmt::format("Options of plugin '{}' {} (--{}.<name> or '{}.<name> = value' in a config)",
                                          info->name, info->version, info->name, info->name));
    add_plugin_options(p, *info);
    visible.add(p);
  }
  os << visible;
  if (!info) os << "\nWith --plugin NAME, --help also lists that plugin's options.\n";
  os << "\nExit codes: 0 passed, 1 usage error, 2 a run failed, 3 everything skipped, 4 host error, "
        "130 interrupted (see docs/cli.md).\n";
  return os.str();
}

}  // namespace benchhost::host
