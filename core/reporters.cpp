#include "reporters.hpp"

#include <algorithm>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "scaling.hpp"

namespace benchhost::host {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// Note [Writing report files]
// A report replaces its file whole (rename of a temporary in the same directory), so a reader never
// sees half a report and a crash leaves the previous one. The target must be a regular file or not
// exist: renaming over a device node, a directory or a symlink would replace the node or the link
// itself (as root, -o /dev/full turned the device into a file), so those are refused. The temporary
// is created by mkostemp (O_CREAT|O_EXCL: never through a planted symlink, never an existing file).
namespace {
// The report's directory (created if missing) and a new temporary file in it; `tmp` gets its name.
// Refuses a target that exists and is not a regular file when `regular_only`.
int create_temporary_beside(const fs::path& path, std::string& tmp, bool regular_only) {
  fs::path dir = path.parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
  }
  struct stat st {};
  if (regular_only && ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    BH_THROW(Error, "refusing to write {}: it exists and is not a regular file ({}); name a new or regular file",
             path.string(), S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory" : "a device, "
             "FIFO or socket");
  tmp = path.string() + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) BH_THROW(Error, "cannot write {}: cannot create a temporary file beside it: {}", path.string(), std::strerror(errno));
  return fd;
}
}  // namespace

void check_report_path(const fs::path& path, bool replaced_whole) {
  // A file written in place (the MLLOG) may be one that exists where no file can be created:
  // /dev/stdout, a FIFO another program reads.
  if (!replaced_whole && ::access(path.c_str(), F_OK) == 0) {
    if (::access(path.c_str(), W_OK) != 0)
      BH_THROW(Error, "cannot write {}: {}", path.string(), std::strerror(errno));
    return;
  }
  std::string tmp;
  const int fd = create_temporary_beside(path, tmp, replaced_whole);
  ::close(fd);
  ::unlink(tmp.c_str());
}

// Every write, the fsync and the close are checked: a full disk usually shows at one of them.
void write_file_atomically(const fs::path& path, const std::string& content) {
  std::string tmp;
  const int fd = create_temporary_beside(path, tmp, true);
  auto fail = [&](const char* what, int e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    BH_THROW(Error, "cannot write {}: {} failed: {}", path.string(), what, std::strerror(e));
  };
  ::fchmod(fd, 0644);  // mkostemp creates 0600; a report is for others to read
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL) fail("fsync", errno);
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    BH_THROW(Error, "cannot write {}: close failed: {}", path.string(), std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    BH_THROW(Error, "cannot rename {} to {}: {}", tmp, path.string(), std::strerror(e));
  }
}

namespace {
template <class T>
ordered_json opt(const std::optional<T>& v) {
  if (!v) return nullptr;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(*v)) return nullptr;
  return *v;
}
}  // namespace

ordered_json record_to_json(const RunRecord& r) {
  ordered_json j;
  j["kind"] = r.kind;
  j["status"] = to_string(r.status);
  j["message"] = r.message;
  j["plugin"] = r.plugin;
  j["device"] = r.device;
  j["precision"] = r.precision;
  j["batch_size"] = r.batch_size;
  j["devices"] = r.devices;
  j["seed"] = r.seed;
  j["run_index"] = r.run_index;
  j["iterations"] = r.iterations;
  j["samples"] = r.samples;
  j["seconds"] = opt(r.seconds);
  j["samples_per_second"] = opt(r.samples_per_second);
  j["step_ms"] = {{"mean", opt(r.step_ms_mean)}, {"p50", opt(r.step_ms_p50)}, {"p90", opt(r.step_ms_p90)},
                  {"p99", opt(r.step_ms_p99)}};
  j["latency_ms"] = {{"avg", opt(r.latency_ms_avg)}, {"p50", opt(r.latency_ms_p50)}, {"p90", opt(r.latency_ms_p90)},
                     {"p95", opt(r.latency_ms_p95)}, {"p99", opt(r.latency_ms_p99)}};
  j["data_wait_fraction"] = opt(r.data_wait_fraction);
  j["achieved_tflops"] = opt(r.achieved_tflops);
  j["mfu"] = opt(r.mfu);
  j["mfu_note"] = r.mfu_note;
  j["peak_tflops"] = opt(r.peak_tflops);
  j["peak_source"] = r.peak_source;
  j["mfu_datasheet"] = opt(r.mfu_datasheet);
  j["datasheet_peak_tflops"] = opt(r.datasheet_peak_tflops);
  j["datasheet_source"] = r.datasheet_source;
  j["scaling_efficiency"] = opt(r.scaling_efficiency);
  j["final_loss"] = opt(r.final_loss);
  j["updates_skipped"] = opt(r.updates_skipped);
  j["loss_scale"] = opt(r.loss_scale);
  j["promoted_calls"] = ordered_json::object();
  for (const auto& [op, n] : r.promoted_calls) j["promoted_calls"][op] = n;
  j["rank_step_ms"] = {{"min", opt(r.rank_step_ms_min)}, {"median", opt(r.rank_step_ms_median)},
                       {"max", opt(r.rank_step_ms_max)}};
  if (!r.rank_steps.empty()) {
    ordered_json per_rank = ordered_json::array();
    for (const auto& rs : r.rank_steps)
      per_rank.push_back({{"rank", rs.rank}, {"min", rs.min}, {"median", rs.median}, {"max", rs.max}});
    j["rank_step_ms"]["per_rank"] = per_rank;
    j["rank_step_ms"]["straggler"] = straggler_json(r);
  }
  if (r.machine_load) {
    const MachineLoad& m = *r.machine_load;
    j["machine_load"] = {{"cpus", m.cpus},
                         {"seconds", m.seconds},
                         {"other_cpus", m.other_cpus},
                         {"steal_fraction", m.steal_fraction},
                         {"load_average", m.load_average},
                         {"busy", m.busy}};
  } else {
    j["machine_load"] = nullptr;
  }
  ordered_json ttt = nullptr;
  if (r.kind == "ttt") {
    ttt = ordered_json::object();
    ttt["converged"] = opt(r.converged);
    ttt["time_to_train_seconds"] = opt(r.time_to_train_seconds);
    ttt["final_metric"] = opt(r.final_metric);
    ttt["epochs"] = r.epochs;
    ordered_json evals = ordered_json::array();
    for (const auto& e : r.evals)
      evals.push_back({{"epoch", e.epoch}, {"samples_trained", e.samples_trained}, {"metric", e.metric},
                       {"seconds_since_run_start", e.seconds_since_run_start}, {"value", e.value},
                       {"target_reached", opt(e.target_reached)}});
    ttt["evals"] = evals;
  }
  j["ttt"] = ttt;
  // Last, so a reader scrolling the report sees the summary fields first.
  j["iteration_ms"] = r.iteration_ms;
  ordered_json losses = ordered_json::array();
  for (const auto& [step, loss] : r.step_losses)
    losses.push_back(std::isfinite(loss) ? ordered_json::array({step, loss}) : ordered_json::array({step, nullptr}));
  j["step_losses"] = losses;
  return j;
}

namespace {
template <class T>
void read_opt(const nlohmann::json& j, const char* key, std::optional<T>& dst) {
  if (j.contains(key) && !j[key].is_null()) dst = j[key].get<T>();
}
RunStatus status_from_string(const std::string& s) {
  for (RunStatus st : {RunStatus::passed, RunStatus::skipped, RunStatus::invalid_arguments, RunStatus::oom,
                       RunStatus::timeout, RunStatus::diverged, RunStatus::failed})
    if (s == to_string(st)) return st;
  BH_THROW(InvalidArgument, "unknown run status '{}' in a report", s);
}
}  // namespace

RunRecord record_from_json(const nlohmann::json& j) {
  RunRecord r;
  r.kind = j.at("kind").get<std::string>();
  r.status = status_from_string(j.at("status").get<std::string>());
  r.message = j.value("message", "");
  r.plugin = j.value("plugin", "");
  r.device = j.value("device", "");
  r.precision = j.value("precision", "");
  r.batch_size = j.value("batch_size", std::int64_t{0});
  r.devices = j.value("devices", 1);
  r.seed = j.value("seed", std::uint64_t{0});
  r.run_index = j.value("run_index", 0);
  r.iterations = j.value("iterations", std::int64_t{0});
  r.samples = j.value("samples", std::int64_t{0});
  read_opt(j, "seconds", r.seconds);
  read_opt(j, "samples_per_second", r.samples_per_second);
  if (j.contains("step_ms")) {
    const auto& s = j["step_ms"];
    read_opt(s, "mean", r.step_ms_mean);
    read_opt(s, "p50", r.step_ms_p50);
    read_opt(s, "p90", r.step_ms_p90);
    read_opt(s, "p99", r.step_ms_p99);
  }
  if (j.contains("latency_ms")) {
    const auto& s = j["latency_ms"];
    read_opt(s, "avg", r.latency_ms_avg);
    read_opt(s, "p50", r.latency_ms_p50);
    read_opt(s, "p90", r.latency_ms_p90);
    read_opt(s, "p95", r.latency_ms_p95);
    read_opt(s, "p99", r.latency_ms_p99);
  }
  read_opt(j, "data_wait_fraction", r.data_wait_fraction);
  read_opt(j, "achieved_tflops", r.achieved_tflops);
  read_opt(j, "mfu", r.mfu);
  r.mfu_note = j.value("mfu_note", "");
  read_opt(j, "peak_tflops", r.peak_tflops);
  r.peak_source = j.value("peak_source", "");
  read_opt(j, "mfu_datasheet", r.mfu_datasheet);
  read_opt(j, "datasheet_peak_tflops", r.datasheet_peak_tflops);
  r.datasheet_source = j.value("datasheet_source", "");
  read_opt(j, "scaling_efficiency", r.scaling_efficiency);
  read_opt(j, "final_loss", r.final_loss);
  read_opt(j, "updates_skipped", r.updates_skipped);
  read_opt(j, "loss_scale", r.loss_scale);
  if (j.contains("promoted_calls") && j["promoted_calls"].is_object())
    for (auto it = j["promoted_calls"].begin(); it != j["promoted_calls"].end(); ++it)
      if (it.value().is_number_integer()) r.promoted_calls[it.key()] = it.value().get<std::int64_t>();
  if (j.contains("rank_step_ms")) {
    const auto& s = j["rank_step_ms"];
    read_opt(s, "min", r.rank_step_ms_min);
    read_opt(s, "median", r.rank_step_ms_median);
    read_opt(s, "max", r.rank_step_ms_max);
    if (s.contains("per_rank") && s["per_rank"].is_array())
      for (const auto& e : s["per_rank"])
        r.rank_steps.push_back({e.at("rank").get<int>(), e.at("min").get<double>(), e.at("median").get<double>(),
                                e.at("max").get<double>()});
  }
  if (j.contains("iteration_ms") && j["iteration_ms"].is_array())
    r.iteration_ms = j["iteration_ms"].get<std::vector<double>>();
  if (j.contains("step_losses") && j["step_losses"].is_array())
    for (const auto& e : j["step_losses"])
      if (e.is_array() && e.size() == 2 && e[0].is_number_integer() && e[1].is_number())
        r.step_losses.emplace_back(e[0].get<std::int64_t>(), e[1].get<double>());
  if (j.contains("machine_load") && j["machine_load"].is_object()) {
    const auto& m = j["machine_load"];
    MachineLoad load;
    load.cpus = m.value("cpus", 0);
    load.seconds = m.value("seconds", 0.0);
    load.other_cpus = m.value("other_cpus", 0.0);
    load.steal_fraction = m.value("steal_fraction", 0.0);
    load.load_average = m.value("load_average", 0.0);
    load.busy = m.value("busy", false);
    r.machine_load = load;
  }
  if (j.contains("ttt") && j["ttt"].is_object()) {
    const auto& t = j["ttt"];
    read_opt(t, "converged", r.converged);
    read_opt(t, "time_to_train_seconds", r.time_to_train_seconds);
    read_opt(t, "final_metric", r.final_metric);
    r.epochs = t.value("epochs", std::int64_t{0});
    for (const auto& e : t.value("evals", nlohmann::json::array())) {
      RunRecord::Eval eval{e.at("epoch").get<double>(), e.at("samples_trained").get<std::int64_t>(),
                           e.at("metric").get<double>(), e.at("seconds_since_run_start").get<double>()};
      if (e.contains("value")) eval.value = ordered_json(e["value"]);  // absent before schema 7
      read_opt(e, "target_reached", eval.target_reached);
      r.evals.push_back(std::move(eval));
    }
  }
  return r;
}

ordered_json report_to_json(const ReportHeader& h, const std::vector<RunRecord>& records, const Summary* summary) {
  ordered_json j;
  j["schema"] = "benchhost-report";
  j["schema_version"] = kReportSchemaVersion;
  j["created_unix_ms"] = unix_time_ms();
  j["invocation"] = h.invocation;
  j["plugin"] = h.plugin;
  j["environment"] = h.environment;
  ordered_json results = ordered_json::array();
  for (const auto& r : records) results.push_back(record_to_json(r));
  j["results"] = results;
  ordered_json counts = ordered_json::object();
  for (RunStatus s : {RunStatus::passed, RunStatus::skipped, RunStatus::invalid_arguments, RunStatus::oom,
                      RunStatus::timeout, RunStatus::diverged, RunStatus::failed}) {
    int n = 0;
    for (const auto& r : records) n += r.status == s;
    counts[to_string(s)] = n;
  }
  j["summary"] = {{"complete", summary != nullptr},
                  {"interrupted", summary ? summary->interrupted : false},
                  {"exit_code", summary ? ordered_json(summary->exit_code) : ordered_json(nullptr)},
                  {"status_counts", counts},
                  {"ttt", summary ? summary->ttt : ordered_json(nullptr)},
                  {"scaling", scaling_report_json(records)}};
  return j;
}

void JsonReporter::on_record(const RunRecord&, const std::vector<RunRecord>& all) {
  write_file_atomically(path_, report_to_json(header_, all, nullptr).dump(2) + "\n");
}

void JsonReporter::on_finish(const std::vector<RunRecord>& all, const Summary& s) {
  write_file_atomically(path_, report_to_json(header_, all, &s).dump(2) + "\n");
}

namespace {
std::string csv_num(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? fmt::format("{:.6g}", *v) : std::string();
}
// Shortest text that reads back to the same double: a loss scale of 2^24 stays 16777216.
std::string csv_exact(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? fmt::format("{}", *v) : std::string();
}
std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}
}  // namespace

namespace {
// Calls promoted over all of a record's ops (Note [Promoted calls], run_modes.cpp).
std::int64_t total_promoted(const RunRecord& r) {
  std::int64_t total = 0;
  for (const auto& entry : r.promoted_calls) total += entry.second;
  return total;
}
}  // namespace

std::string CsvReporter::render(const std::vector<RunRecord>& all) {
  std::string out =
      "kind,plugin,status,device,precision,batch_size,devices,seed,run_index,iterations,samples,seconds,"
      "samples_per_second,step_ms_p50,step_ms_p90,step_ms_p99,latency_ms_avg,latency_ms_p50,latency_ms_p90,"
      "latency_ms_p95,latency_ms_p99,data_wait_fraction,achieved_tflops,mfu,scaling_efficiency,converged,"
      "time_to_train_seconds,final_metric,message,updates_skipped,loss_scale,promoted_calls,other_cpus,"
      "cpu_steal_fraction,busy_machine,peak_tflops,peak_source,mfu_datasheet,datasheet_peak_tflops,datasheet_source\n";
  for (const auto& r : all) {
    const auto& m = r.machine_load;
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},"
                       "{},{},{},{},{}\n",
                       r.kind, csv_text(r.plugin), to_string(r.status), r.device, r.precision, r.batch_size,
                       r.devices, r.seed, r.run_index, r.iterations, r.samples, csv_num(r.seconds),
                       csv_num(r.samples_per_second), csv_num(r.step_ms_p50), csv_num(r.step_ms_p90),
                       csv_num(r.step_ms_p99), csv_num(r.latency_ms_avg), csv_num(r.latency_ms_p50),
                       csv_num(r.latency_ms_p90), csv_num(r.latency_ms_p95), csv_num(r.latency_ms_p99),
                       csv_num(r.data_wait_fraction), csv_num(r.achieved_tflops), csv_num(r.mfu),
                       csv_num(r.scaling_efficiency), r.converged ? (*r.converged ? "true" : "false") : "",
                       csv_num(r.time_to_train_seconds), csv_num(r.final_metric), csv_text(r.message),
                       r.updates_skipped ? std::to_string(*r.updates_skipped) : std::string(), csv_exact(r.loss_scale),
                       total_promoted(r), m ? fmt::format("{:.3g}", m->other_cpus) : std::string(),
                       m ? fmt::format("{:.3g}", m->steal_fraction) : std::string(),
                       m ? (m->busy ? "true" : "false") : "", csv_num(r.peak_tflops), csv_text(r.peak_source),
                       csv_num(r.mfu_datasheet), csv_num(r.datasheet_peak_tflops), csv_text(r.datasheet_source));
  }
  return out;
}

void CsvReporter::on_record(const RunRecord&, const std::vector<RunRecord>& all) {
  write_file_atomically(path_, render(all));
}

// ---- MLLOG ---------------------------------------------------------------------------------------

namespace {
// Python's json.dumps: ", " between items, ": " after keys, ASCII-only strings.
void python_json(const ordered_json& j, std::string& out) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += ordered_json(it.key()).dump(-1, ' ', true);
      out += ": ";
      python_json(it.value(), out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      python_json(j[i], out);
    }
    out += ']';
  } else if (j.is_number_float() && !std::isfinite(j.get<double>())) {
    double v = j.get<double>();
    out += std::isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity");
  } else {
    out += j.dump(-1, ' ', true);
  }
}
}  // namespace

std::string format_mllog_line(const MllogEvent& e) {
  ordered_json meta = ordered_json::object();
  meta["file"] = e.file;
  meta["lineno"] = e.line;
  for (auto it = e.metadata.begin(); it != e.metadata.end(); ++it) meta[it.key()] = it.value();
  ordered_json line;
  line["namespace"] = "";
  line["time_ms"] = e.time_ms;
  line["event_type"] = e.event_type;
  line["key"] = e.key;
  line["value"] = e.value;
  line["metadata"] = meta;
  std::string out = ":::MLLOG ";
  python_json(line, out);
  return out;
}

fs::path MllogReporter::path_for_run(const fs::path& base, int run, int runs) {
  if (runs <= 1) return base;
  fs::path p = base;
  p.replace_filename(fmt::format("{}_{}{}", base.stem().string(), run, base.extension().string()));
  return p;
}

void MllogReporter::on_mllog(const MllogEvent& e) {
  if (e.run_index != open_run_) {
    if (out_) std::fclose(out_);
    out_ = nullptr;
    open_file_ = path_for_run(path_, e.run_index, runs_);
    if (!open_file_.parent_path().empty()) {
      std::error_code ec;
      fs::create_directories(open_file_.parent_path(), ec);
    }
    out_ = std::fopen(open_file_.c_str(), "we");
    if (!out_) BH_THROW(Error, "cannot write MLLOG file {}: {}", open_file_.string(), std::strerror(errno));
    open_run_ = e.run_index;
  }
  // One line at a time, flushed, so a crash keeps every line logged so far; a failed write (a full
  // disk) is an error naming the file, not a silently truncated log.
  // A line that fails half-way is cut off again, so the file stays a sequence of whole lines.
  const std::string line = format_mllog_line(e) + "\n";
  const long before = std::ftell(out_);
  if (std::fwrite(line.data(), 1, line.size(), out_) != line.size() || std::fflush(out_) != 0) {
    const int err = errno;
    std::clearerr(out_);
    if (before >= 0 && ::ftruncate(::fileno(out_), before) == 0) std::fseek(out_, before, SEEK_SET);
    BH_THROW(Error, "cannot write MLLOG file {}: {}; the file is incomplete from key '{}' on", open_file_.string(),
             std::strerror(err), e.key);
  }
}

MllogReporter::~MllogReporter() {
  if (out_) std::fclose(out_);
}

// ---- console -------------------------------------------------------------------------------------

ConsoleReporter::ConsoleReporter(std::FILE* out) : out_(out), tty_(::isatty(::fileno(out)) != 0) {}

void ConsoleReporter::clear_progress() {
  if (progress_shown_) {
    std::fputs("\r\033[K", out_);
    progress_shown_ = false;
  }
}

void ConsoleReporter::on_progress(const Progress& p) {
  if (!tty_) return;
  using namespace std::chrono;
  const double now = duration<double>(steady_clock::now().time_since_epoch()).count();
  if (first_progress_ < 0) first_progress_ = now;
  if (now - first_progress_ < 1.0) return;  // short points finish without a progress line
  if (last_progress_ >= 0 && now - last_progress_ < 0.25) return;  // at most 4 updates a second
  last_progress_ = now;
  std::string line = p.total_steps > 0 ? fmt::format("  [{}] step {}/{}", p.what, p.step, p.total_steps)
                                       : fmt::format("  [{}] step {}", p.what, p.step);
  if (!p.detail.empty()) line += "  " + p.detail;
  std::fputs(("\r\033[K" + line).c_str(), out_);
  std::fflush(out_);
  progress_shown_ = true;
}

namespace {
std::string num(const std::optional<double>& v, const char* f = "{:.4g}") {
  return v && std::isfinite(*v) ? fmt::format(fmt::runtime(f), *v) : std::string("-");
}
std::string describe(const RunRecord& r) {
  if (r.kind == "ttt")
    return fmt::format("ttt run {} seed {}: {} in {} s, metric {}, {} epochs", r.run_index, r.seed,
                       r.converged.value_or(false) ? "converged" : "not converged", num(r.time_to_train_seconds),
                       num(r.final_metric), r.epochs);
  if (r.kind == "infer")
    return fmt::format("infer b={}: {} samples/s, latency ms avg {} p50 {} p90 {} p95 {} p99 {}", r.batch_size,
                       num(r.samples_per_second), num(r.latency_ms_avg), num(r.latency_ms_p50), num(r.latency_ms_p90),
                       num(r.latency_ms_p95), num(r.latency_ms_p99));
  if (r.kind == "loader")
    return fmt::format("loader b={}: {} samples/s", r.batch_size, num(r.samples_per_second));
  return fmt::format("train b={} n={}: {} samples/s, step ms p50 {} p90 {} p99 {}, data wait {}, MFU {}", r.batch_size,
                     r.devices, num(r.samples_per_second), num(r.step_ms_p50), num(r.step_ms_p90), num(r.step_ms_p99),
                     r.data_wait_fraction ? fmt::format("{:.1f}%", *r.data_wait_fraction * 100) : "-",
                     r.mfu ? fmt::format("{:.1f}%", *r.mfu * 100) : "-");
}
// "fp16 loss scaling: 3 of 1000 updates skipped (overflow), final loss scale 32768"; "" when the
// plugin reported no loss scaling.
std::string describe_loss_scaling(const RunRecord& r) {
  if (!r.updates_skipped || !r.loss_scale) return {};
  return fmt::format("{} loss scaling: {} of {} updates skipped (overflow), final loss scale {}", r.precision,
                     *r.updates_skipped, r.iterations, *r.loss_scale);
}
// "bf16: 1200 op calls computed through f32 promotion (batch_norm_forward 600, batch_norm_backward
// 600)": the most frequent three; "" when none was.
std::string describe_promotions(const RunRecord& r) {
  if (r.promoted_calls.empty()) return {};
  std::vector<std::pair<std::int64_t, std::string>> by_count;
  for (const auto& [op, n] : r.promoted_calls) by_count.emplace_back(n, op);
  std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string ops;
  for (std::size_t i = 0; i < by_count.size() && i < 3; ++i)
    ops += fmt::format("{}{} {}", i ? ", " : "", by_count[i].second, by_count[i].first);
  if (by_count.size() > 3) ops += fmt::format(", {} more ops", by_count.size() - 3);
  return fmt::format("{}: {} op calls computed through f32 promotion ({})", r.precision, total_promoted(r), ops);
}
// "MFU 41.2% of 0.104 TFLOP/s (measured: SDK matmul ...); datasheet: no datasheet peak for this
// CPU" (Note [Calibrated MFU], peak.hpp); "" when no achieved rate was computed.
std::string describe_peaks(const RunRecord& r) {
  if (!r.achieved_tflops) return {};
  std::string s = fmt::format("achieved {:.4g} TFLOP/s; ", *r.achieved_tflops);
  s += r.mfu ? fmt::format("MFU {:.1f}% of {:.4g} TFLOP/s ({})", *r.mfu * 100, r.peak_tflops.value_or(0), r.peak_source)
             : fmt::format("MFU -: {}", r.mfu_note);
  s += r.mfu_datasheet ? fmt::format("; datasheet MFU {:.1f}% of {:.4g} TFLOP/s ({})", *r.mfu_datasheet * 100,
                                     r.datasheet_peak_tflops.value_or(0), r.datasheet_source)
                       : fmt::format("; datasheet MFU -: {}", r.datasheet_source);
  return s;
}
}  // namespace

void ConsoleReporter::on_record(const RunRecord& r, const std::vector<RunRecord>&) {
  clear_progress();
  first_progress_ = -1;
  const bool busy = r.machine_load && r.machine_load->busy;
  std::string line = fmt::format("{:<17} {}", busy ? fmt::format("{} (busy)", to_string(r.status)) : to_string(r.status),
                                 describe(r));
  // Note [A busy machine] (machine_load.cpp): on the same line, so a report's shape does not depend on it.
  if (busy) line += fmt::format("; BUSY MACHINE: {}: these figures understate it", r.machine_load->describe());
  if (const std::string scaling = describe_loss_scaling(r); !scaling.empty()) line += "\n                  " + scaling;
  if (const std::string promoted = describe_promotions(r); !promoted.empty()) line += "\n                  " + promoted;
  if (const std::string peaks = describe_peaks(r); !peaks.empty()) line += "\n                  " + peaks;
  if (!r.message.empty()) line += "\n                  " + r.message;
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void ConsoleReporter::on_finish(const std::vector<RunRecord>& all, const Summary& s) {
  clear_progress();
  if (all.empty()) return;
  std::fprintf(out_, "\n%-6s %-17s %7s %4s %14s %10s %10s %10s %9s %7s\n", "kind", "status", "batch", "n", "samples/s",
               "p50 ms", "p90 ms", "p99 ms", "data-wait", "MFU");
  for (const auto& r : all) {
    const bool infer = r.kind == "infer";
    const std::string status = r.machine_load && r.machine_load->busy ? fmt::format("{} (busy)", to_string(r.status))
                                                                        : std::string(to_string(r.status));
    std::fprintf(out_, "%-6s %-17s %7lld %4d %14s %10s %10s %10s %9s %7s\n", r.kind.c_str(), status.c_str(),
                 static_cast<long long>(r.batch_size), r.devices, num(r.samples_per_second, "{:.1f}").c_str(),
                 num(infer ? r.latency_ms_p50 : r.step_ms_p50).c_str(), num(infer ? r.latency_ms_p90 : r.step_ms_p90).c_str(),
                 num(infer ? r.latency_ms_p99 : r.step_ms_p99).c_str(),
                 r.data_wait_fraction ? fmt::format("{:.1f}%", *r.data_wait_fraction * 100).c_str() : "-",
                 r.mfu ? fmt::format("{:.1f}%", *r.mfu * 100).c_str() : "-");
  }
  if (const std::string scaling = scaling_report_text(all); !scaling.empty()) std::fprintf(out_, "\n%s", scaling.c_str());
  if (!s.ttt.is_null()) {
    std::fprintf(out_, "\ntime to train: %s\n", s.ttt.value("status", "").c_str());
    if (s.ttt.contains("olympic_mean_seconds") && !s.ttt["olympic_mean_seconds"].is_null())
      std::fprintf(out_, "  olympic mean %.6g s (%.6g min)\n", s.ttt["olympic_mean_seconds"].get<double>(),
                   s.ttt["olympic_mean_seconds"].get<double>() / 60.0);
    std::fprintf(out_, "  %s\n", s.ttt.value("note", "").c_str());
  }
  if (s.interrupted) std::fprintf(out_, "interrupted: partial results above were written\n");
  std::fflush(out_);
}

}  // namespace benchhost::host
