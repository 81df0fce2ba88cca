#include "events.hpp"

#include "benchhost/error.hpp"
#include "cli.hpp"

#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace benchhost::host {

// Note [Step losses]
// A train point keeps the loss of each timed step (-i of them). A time-to-train run can take
// hundreds of thousands of steps, so its list is thinned as it grows: steps whose number is a
// multiple of the current stride are kept; at 2048 pairs every other one is dropped and the
// stride doubles. The report stays under ~50 KB of losses per run, the curve keeps its shape,
// and the steps kept are the same whatever the run's length (multiples of a power of two).
void RunRecord::add_step_loss(std::int64_t step, double loss) {
  if (kind != "ttt") {
    step_losses.emplace_back(step, loss);
    return;
  }
  if (step % loss_stride_ != 0) return;
  step_losses.emplace_back(step, loss);
  if (step_losses.size() >= 2048) {
    loss_stride_ *= 2;
    std::vector<std::pair<std::int64_t, double>> kept;
    for (const auto& e : step_losses)
      if (e.first % loss_stride_ == 0) kept.push_back(e);
    step_losses = std::move(kept);
  }
}

const char* to_string(RunStatus s) {
  switch (s) {
    case RunStatus::passed: return "PASSED";
    case RunStatus::skipped: return "SKIPPED";
    case RunStatus::invalid_arguments: return "INVALID_ARGUMENTS";
    case RunStatus::oom: return "OOM";
    case RunStatus::timeout: return "TIMEOUT";
    case RunStatus::diverged: return "DIVERGED";
    case RunStatus::failed: return "FAILED";
  }
  return "FAILED";
}

RunStatus status_from_bh(bh_status s) {
  switch (s) {
    case BH_STATUS_OK: return RunStatus::passed;
    case BH_STATUS_INVALID_ARGUMENT: return RunStatus::invalid_arguments;
    case BH_STATUS_UNSUPPORTED: return RunStatus::skipped;
    case BH_STATUS_OUT_OF_MEMORY: return RunStatus::oom;
    case BH_STATUS_DIVERGED: return RunStatus::diverged;
    case BH_STATUS_DATA_ERROR:
    case BH_STATUS_COMM_ERROR:
    case BH_STATUS_FAILED: return RunStatus::failed;
  }
  return RunStatus::failed;
}

std::int64_t unix_time_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

void EventBus::mllog(const std::string& event_type, const std::string& key, nlohmann::ordered_json value,
                     nlohmann::ordered_json metadata, const char* file, int line) {
  MllogEvent e;
  e.time_ms = unix_time_ms();
  e.event_type = event_type;
  e.key = key;
  e.value = std::move(value);
  e.metadata = std::move(metadata);
  // Report the host source file relative to the repository (core/run_modes.cpp), like
  // mlcommons/logging's root_dir trimming.
  std::string f = file;
  if (auto pos = f.rfind("/core/"); pos != std::string::npos) f = f.substr(pos + 1);
  e.file = f;
  e.line = line;
  e.run_index = run_index_;
  forward_mllog(e);
}

// Note [A report that cannot be written]
// A reporter that fails (a full disk, a file that may not be replaced) must not take the run down:
// the measurement goes on, the other reporters keep writing, and the failure is said at once on
// stderr and again at the end, where it makes the exit code 4 (commands.cpp). A reporter that
// failed is still called: the JSON and CSV reports rewrite their whole file on every record, so a
// later write can succeed once space is freed; only its first failure is reported. A report that
// could never be written (a directory that cannot be created or written, a name the filesystem
// refuses, a link, directory or device where a report would replace its file) is refused before
// anything runs, naming its option (check_report_paths, commands.cpp): exit 1, nothing measured.
template <class F>
void EventBus::deliver(std::size_t i, F&& f) {
  try {
    f(*reporters_[i]);
  } catch (const std::exception& e) {
    if (failed_[i]) return;
    failed_[i] = true;
    const auto* be = dynamic_cast<const Error*>(&e);
    write_failures_.push_back(be ? be->message() : std::string(e.what()));
    std::fprintf(stderr, "benchhost: error: %s (the run goes on)\n", write_failures_.back().c_str());
  }
}

void EventBus::add(std::unique_ptr<Reporter> r) {
  std::lock_guard lock(mutex_);
  reporters_.push_back(std::move(r));
  failed_.push_back(false);
}

void EventBus::forward_mllog(const MllogEvent& e) {
  std::lock_guard lock(mutex_);
  forward_mllog_locked(e);
}

void EventBus::forward_mllog_locked(const MllogEvent& e) {
  if (e.key == "run_start") {
    mllog_run_open_ = true;
    run_start_ms_ = e.time_ms;
  }
  if (e.key == "run_stop") mllog_run_open_ = false;
  for (std::size_t i = 0; i < reporters_.size(); ++i) deliver(i, [&](Reporter& r) { r.on_mllog(e); });
}

void EventBus::point_start(const PointStart& p) {
  std::lock_guard lock(mutex_);
  open_point_ = p;
  last_progress_ = Progress{p.what, 0, 0, ""};
  for (std::size_t i = 0; i < reporters_.size(); ++i) deliver(i, [&](Reporter& r) { r.on_point_start(p); });
}

void EventBus::progress(const Progress& p) {
  std::lock_guard lock(mutex_);
  last_progress_ = p;
  for (std::size_t i = 0; i < reporters_.size(); ++i) deliver(i, [&](Reporter& r) { r.on_progress(p); });
}

// Note [What an unfinished run keeps]
// A time-to-train run that ends without returning its own record (a second signal or the grace
// after the first, with a step that never returns; a crash or a hang in a supervised worker) used
// to be recorded from what was known when it started: "0 epochs, metric -", though it may have
// trained for hours and evaluated many times. So the run's loop sends its record as it stands
// after each evaluation and each epoch (update_point): epochs, evaluations, final metric and loss,
// steps and samples, the loss curve. In-process, the bus keeps it as the open point's record, and
// finish_interrupted writes it with the time from run_start to the interrupt as its time to
// train (run_stop aborted, not converged), as the supervisor does for its killed worker; a
// supervised worker sends it over the wire (isolation.cpp), and the supervisor records a crashed,
// hung or killed run from it. Sweep points are not updated: their timings mean something only
// over the whole point, and their records say where in the point it ended.
void EventBus::update_point(const RunRecord& so_far) {
  std::lock_guard lock(mutex_);
  if (open_point_) open_point_->record = so_far;
  for (std::size_t i = 0; i < reporters_.size(); ++i) deliver(i, [&](Reporter& r) { r.on_point_update(so_far); });
}

std::optional<std::int64_t> EventBus::open_run_start_ms() {
  std::lock_guard lock(mutex_);
  if (!mllog_run_open_) return std::nullopt;
  return run_start_ms_;
}

void EventBus::record(RunRecord rec) {
  std::lock_guard lock(mutex_);
  record_locked(std::move(rec));
}

void EventBus::record_locked(RunRecord rec) {
  open_point_.reset();
  records_.push_back(std::move(rec));
  for (std::size_t i = 0; i < reporters_.size(); ++i)
    deliver(i, [&](Reporter& r) { r.on_record(records_.back(), records_); });
}

void EventBus::finish(const Summary& s) {
  std::lock_guard lock(mutex_);
  finish_locked(s);
}

void EventBus::finish_locked(const Summary& s) {
  finished_ = true;
  for (std::size_t i = 0; i < reporters_.size(); ++i) deliver(i, [&](Reporter& r) { r.on_finish(records_, s); });
}

bool EventBus::finish_interrupted(const std::string& message, std::chrono::milliseconds wait) {
  if (!mutex_.try_lock_for(wait)) return false;
  // Never unlocked: the run's thread must not write after this, and the process ends next.
  if (finished_) return true;
  const bool ttt_clock_running = mllog_run_open_ && open_point_ && open_point_->record.kind == "ttt";
  const std::int64_t now_ms = unix_time_ms();
  if (mllog_run_open_) {
    MllogEvent e;
    e.time_ms = now_ms;
    e.event_type = "INTERVAL_END";
    e.key = "run_stop";
    e.value = nullptr;
    e.metadata = {{"status", "aborted"}};
    e.file = "core/events.cpp";
    e.line = __LINE__;
    e.run_index = run_index_;
    forward_mllog_locked(e);
  }
  if (open_point_) {
    RunRecord r = open_point_->record;
    r.status = RunStatus::failed;
    const Progress& at = last_progress_;
    // Note [What an unfinished run keeps]: a ttt run keeps its evaluations and its time so far.
    if (ttt_clock_running) {
      r.time_to_train_seconds = static_cast<double>(now_ms - run_start_ms_) / 1e3;
      r.seconds = r.time_to_train_seconds;
      r.converged = false;
    }
    r.message = at.step == 0        ? message
                : at.total_steps > 0 ? fmt::format("{} (after {} of {} steps; this point's timings are lost)", message,
                                                   at.step, at.total_steps)
                : r.kind == "ttt"    ? fmt::format("{} (after {} training steps; its epochs and evaluations so far are kept)",
                                                   message, at.step)
                                     : fmt::format("{} (after {} steps; this run's timings are lost)", message, at.step);
    record_locked(std::move(r));
  }
  Summary s;
  s.exit_code = kExitInterrupted;
  s.interrupted = true;
  finish_locked(s);
  return true;
}

}  // namespace benchhost::host
