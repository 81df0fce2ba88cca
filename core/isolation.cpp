#include "isolation.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "environment.hpp"
#include "reporters.hpp"
#include "run_modes.hpp"

extern char** environ;

namespace benchhost::host {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Note [Crash isolation]
// "The host survives a plugin's failure and keeps the results it already has." Exceptions become
// typed results in-process (classify_current_exception), but a segfault, abort() or a step that
// never returns would take the host down with it. So a single-process run is two processes:
//
//   - The supervisor (run_main, after parsing) owns the reporters: console, JSON, CSV, MLLOG. It
//     starts a worker and re-emits the worker's events into its own EventBus, so reports, stdout
//     and exit codes are those of an in-process run.
//   - The worker is this executable again, fork+exec'd (/proc/self/exe: the same binary even if
//     it was rebuilt meanwhile) with the same argv and kWorkerEnvironmentVariable naming a pipe,
//     a shared-memory page and the first point to run. exec, not a bare fork: a fresh process, so
//     no CUDA, OpenMP or oneTBB state is shared. It runs run_selected_mode exactly as today with
//     one reporter that writes each event as a JSON line to the pipe: "point" (a ttt run or sweep
//     point starts; the record it will fill), "mllog", "progress", "record", and "done" from
//     on_finish. Its stdout and stderr are inherited (plugin prints still show); stdin is
//     /dev/null; it runs in its own process group (so a timeout kill also reaches what it
//     started, e.g. a -n sweep's mpirun) and dies with the supervisor (PR_SET_PDEATHSIG).
//
// Progress is per step, and host overhead per step must not grow: the worker stores the step
// count into the shared page (one relaxed atomic store) and writes a progress line only when the
// point's phase text changes (warm-up -> timed, an evaluation). The supervisor polls the page
// every 100 ms for the console's live line and, after a crash, to say at which step it happened.
//
// When the worker dies by a signal, or exits without "done": the point it had started and not
// recorded is recorded FAILED, naming the signal, the point and the step; a time-to-train run
// that had logged run_start gets run_stop status aborted in its MLLOG, as an in-process failure
// would. Then a new worker starts at the next point (first_point), so the rest of the sweep or
// the remaining runs still run. Records are re-checked for weak scaling against every record so
// far (a resumed worker does not have its predecessors'), and the ttt summary and exit code are
// computed here over all records.
//
// --timeout is checked by the worker between steps (a TIMEOUT record with its measurements). A
// step that never returns is the supervisor's: its clock starts with the point's first progress
// event, which run_modes emits when the worker's own --timeout clock starts (after setup), and
// when timeout + grace (hard_timeout_grace_seconds) has passed with the point still open, it sends
// SIGTERM to the worker's group, SIGKILL 2 s later, records TIMEOUT and goes on. The grace lets a
// slow but finite step end and be recorded by the worker itself.
//
// SIGINT/SIGTERM: the worker is not in the terminal's foreground group, so the supervisor forwards
// what it receives; the worker stops at the next step, records, sends "done" with interrupted set,
// and the run ends 130 as before. A worker killed by SIGINT/SIGTERM (no handler yet) also ends the
// run as interrupted, with no new worker.
//
// Off under a launcher (world size > 1, or any launcher's environment): mpirun/srun and the
// collective timeouts already handle a dead rank, and a process between the launcher and the rank
// would confuse both. --no-isolation runs in-process, to debug a crash under gdb.

namespace {

/// The shared-memory page: the worker's current step count (Progress::step) of the open point.
struct ProgressPage {
  std::atomic<std::int64_t> step{0};
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "the progress page is shared between processes");

ProgressPage* map_progress_page(int fd) {
  void* p = ::mmap(nullptr, sizeof(ProgressPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) BH_THROW(Error, "cannot map the worker progress page: {}", std::strerror(errno));
  return static_cast<ProgressPage*>(p);
}

// ---- wire format: one JSON object per line -------------------------------------------------------

ordered_json mllog_to_wire(const MllogEvent& e) {
  return {{"event", "mllog"},      {"time_ms", e.time_ms}, {"event_type", e.event_type}, {"key", e.key},
          {"value", e.value},      {"metadata", e.metadata}, {"file", e.file},           {"line", e.line},
          {"run_index", e.run_index}};
}

MllogEvent mllog_from_wire(const ordered_json& j) {
  MllogEvent e;
  e.time_ms = j.at("time_ms").get<std::int64_t>();
  e.event_type = j.at("event_type").get<std::string>();
  e.key = j.at("key").get<std::string>();
  e.value = j.at("value");
  e.metadata = j.at("metadata");
  e.file = j.at("file").get<std::string>();
  e.line = j.at("line").get<int>();
  e.run_index = j.at("run_index").get<int>();
  return e;
}

class WorkerReporter : public Reporter {
 public:
  WorkerReporter(int fd, ProgressPage* page) : fd_(fd), page_(page) {}
  ~WorkerReporter() override { ::munmap(page_, sizeof(ProgressPage)); }

  void on_point_start(const PointStart& p) override {
    page_->step.store(0, std::memory_order_relaxed);
    sent_what_.clear();
    sent_detail_.clear();
    sent_total_ = -1;
    send({{"event", "point"}, {"index", p.index}, {"what", p.what}, {"record", record_to_json(p.record)}});
  }
  void on_mllog(const MllogEvent& e) override { send(mllog_to_wire(e)); }
  void on_progress(const Progress& p) override {
    page_->step.store(p.step, std::memory_order_relaxed);
    if (p.total_steps == sent_total_ && p.what == sent_what_ && p.detail == sent_detail_) return;
    sent_what_ = p.what;
    sent_detail_ = p.detail;
    sent_total_ = p.total_steps;
    send({{"event", "progress"}, {"what", p.what}, {"step", p.step}, {"total_steps", p.total_steps},
          {"detail", p.detail}});
  }
  void on_point_update(const RunRecord& so_far) override {
    send({{"event", "point_update"}, {"record", record_to_json(so_far)}});
  }
  void on_record(const RunRecord& r, const std::vector<RunRecord>&) override {
    send({{"event", "record"}, {"record", record_to_json(r)}});
  }
  void on_finish(const std::vector<RunRecord>&, const Summary& s) override {
    send({{"event", "done"}, {"interrupted", s.interrupted}});
  }

 private:
  void send(const ordered_json& j) {
    // A plugin's message may hold bytes that are not UTF-8: replace them rather than throw.
    const std::string line = j.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n";
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        BH_THROW(Error, "cannot write to the supervisor (it may have ended): {}", std::strerror(errno));
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }

  int fd_;
  ProgressPage* page_;
  std::string sent_what_, sent_detail_;
  std::int64_t sent_total_ = -1;
};

// ---- the worker process --------------------------------------------------------------------------

std::string signal_text(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  const char* what = ::strsignal(sig);
  return fmt::format("{}, {}", abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig),
                     what ? what : "unknown signal");
}

/// One worker: started in the constructor; killed (its whole group) and reaped by the destructor
/// if it is still running, so that an exception in the supervisor leaves no process behind.
class WorkerProcess {
 public:
  WorkerProcess(const std::vector<std::string>& args, const std::vector<std::string>& extra_env, int progress_fd,
                int first_point) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) BH_THROW(Error, "cannot create the worker pipe: {}", std::strerror(errno));
    read_fd_ = fds[0];
    const int write_fd = fds[1];
    // Everything the child needs is built before fork: after it, only async-signal-safe calls.
    std::vector<std::string> env_strings;
    const std::string prefix = std::string(kWorkerEnvironmentVariable) + "=";
    auto replaced = [&](const char* e) {
      for (const auto& x : extra_env)
        if (const auto eq = x.find('='); eq != std::string::npos && std::strncmp(e, x.c_str(), eq + 1) == 0) return true;
      return false;
    };
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0 && !replaced(*e)) env_strings.emplace_back(*e);
    env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
    env_strings.push_back(fmt::format("{}{},{},{}", prefix, write_fd, progress_fd, first_point));
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      const int e = errno;
      ::close(read_fd_);
      ::close(write_fd);
      BH_THROW(Error, "cannot start a worker process: {}", std::strerror(e));
    }
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::fcntl(write_fd, F_SETFD, 0);  // these two survive exec; everything else of ours is O_CLOEXEC
      ::fcntl(progress_fd, F_SETFD, 0);
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0 && null_fd != STDIN_FILENO) {
        ::dup2(null_fd, STDIN_FILENO);
        ::close(null_fd);
      }
      ::execve("/proc/self/exe", argv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // also here: whichever runs first, the group exists before any kill
    ::close(write_fd);
    ::fcntl(read_fd_, F_SETFL, ::fcntl(read_fd_, F_GETFL) | O_NONBLOCK);
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  ~WorkerProcess() {
    if (running()) {
      ::kill(-pid_, SIGKILL);
      reap(true);
    }
    ::close(read_fd_);
  }

  int read_fd() const { return read_fd_; }
  bool running() const { return !exited_; }
  int wait_status() const { return status_; }
  void signal_group(int sig) const { ::kill(-pid_, sig); }

  /// Reap the worker if it has ended (or wait for it: `block`). Returns true once it has.
  bool reap(bool block) {
    if (exited_) return true;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &status_, block ? 0 : WNOHANG);
      if (r == pid_) return exited_ = true;
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return exited_ = true;  // not our child any more: nothing to wait for
      return false;
    }
  }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  int status_ = 0;
  bool exited_ = false;
};

// ---- the supervisor ------------------------------------------------------------------------------

constexpr int kPollMilliseconds = 100;
constexpr double kTermToKillSeconds = 2.0;
// Note [Interrupts] (run_modes.cpp): how long a worker gets to stop between steps after a signal.
constexpr double kInterruptGraceSeconds = 5.0;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class Supervisor {
 public:
  Supervisor(const Settings& s, const LoadedPlugin& plugin, EventBus& bus, std::FILE* err)
      : s_(s), plugin_(plugin), bus_(bus), err_(err) {
    progress_fd_ = ::memfd_create("benchhost-progress", MFD_CLOEXEC);
    if (progress_fd_ < 0) BH_THROW(Error, "cannot create the worker progress page: {}", std::strerror(errno));
    if (::ftruncate(progress_fd_, sizeof(ProgressPage)) != 0) {
      ::close(progress_fd_);
      BH_THROW(Error, "cannot size the worker progress page: {}", std::strerror(errno));
    }
    page_ = new (map_progress_page(progress_fd_)) ProgressPage{};
  }
  ~Supervisor() {
    ::munmap(page_, sizeof(ProgressPage));
    ::close(progress_fd_);
  }

  SupervisedRun run() {
    SupervisedRun out;
    int first_point = 0;
    for (;;) {
      const bool timed_out = run_worker(first_point);
      out.interrupted |= interrupted_;
      if (done_) {
        if (WIFSIGNALED(worker_status_))
          std::fprintf(err_, "benchhost: warning: the worker process ended by %s after reporting every result; "
                       "the results are complete\n", signal_text(WTERMSIG(worker_status_)).c_str());
        return out;
      }
      const bool killed_by_interrupt =
          !timed_out && (killed_after_interrupt_ || (WIFSIGNALED(worker_status_) &&
                                                    (WTERMSIG(worker_status_) == SIGINT || WTERMSIG(worker_status_) == SIGTERM ||
                                                     WTERMSIG(worker_status_) == SIGHUP)));
      if (point_) {
        RunRecord r = point_->record;
        const bool aborted = close_ttt_run(r);
        if (timed_out) {
          record_hung_point(r, aborted);
        } else if (killed_by_interrupt) {
          r.status = RunStatus::failed;
          r.message = killed_after_interrupt_
                          ? fmt::format("interrupted by signal {} in a step that did not return within {} s (or a second "
                                        "signal came), so its worker was killed; results so far were written",
                                        received_signal(), kInterruptGraceSeconds)
                          : fmt::format("interrupted by signal {}; results so far were written", WTERMSIG(worker_status_));
          out.interrupted = true;
        } else {
          record_crashed_point(r, aborted);
        }
        bus_.record(std::move(r));
        first_point = point_->index + 1;
      } else if (killed_by_interrupt || received_signal() != 0) {
        out.interrupted = true;  // before or between points: nothing to record, as in-process
        return out;
      } else if (started_points_ == 0) {
        // Nothing ran: a usage or setup error the worker printed, or a worker that could not start.
        if (WIFEXITED(worker_status_) && WEXITSTATUS(worker_status_) != 127) {
          out.exit_code = WEXITSTATUS(worker_status_);
        } else {
          std::fprintf(err_, "benchhost: error: the worker process %s before running anything; rerun with "
                       "--no-isolation to run in this process\n", ending_text().c_str());
          out.exit_code = kExitHostError;
        }
        return out;
      } else {
        // Between two points (say a plugin's own thread crashed): nothing to record; go on after them.
        std::fprintf(err_, "benchhost: warning: the worker process %s between two points; going on with a new one\n",
                     ending_text().c_str());
        first_point = last_index_ + 1;
      }
      if (killed_by_interrupt || received_signal() != 0) {
        out.interrupted = true;
        return out;
      }
    }
  }

 private:
  /// Start a worker at `first_point` and pump its events until it ends. True when it was killed
  /// for hanging past --timeout.
  bool run_worker(int first_point) {
    point_.reset();
    done_ = false;
    started_points_ = 0;
    buffer_.clear();
    page_->step.store(0, std::memory_order_relaxed);
    WorkerProcess worker(s_.argv, worker_threading_environment(s_), progress_fd_, first_point);
    bool eof = false, forwarded = false;
    killed_after_interrupt_ = false;
    Clock::time_point forwarded_at{};
    for (;;) {
      if (const int sig = received_signal(); sig != 0 && !forwarded) {
        worker.signal_group(sig);
        forwarded = true;
        forwarded_at = Clock::now();
        interrupted_ = true;
      }
      // Note [Interrupts] (run_modes.cpp): a worker stuck in a step does not see the signal.
      if (forwarded && (received_signal_count() > 1 || seconds_since(forwarded_at) > kInterruptGraceSeconds)) {
        worker.signal_group(SIGKILL);
        worker.reap(true);
        if (!eof) pump(worker.read_fd());
        worker_status_ = worker.wait_status();
        killed_after_interrupt_ = true;
        return false;
      }
      pollfd pfd{worker.read_fd(), POLLIN, 0};
      const int ready = ::poll(eof ? nullptr : &pfd, eof ? 0 : 1, kPollMilliseconds);
      if (ready > 0) eof = !pump(worker.read_fd());
      if (worker.reap(false)) {
        if (!eof) pump(worker.read_fd());  // what it wrote before it ended
        worker_status_ = worker.wait_status();
        return false;
      }
      show_progress();
      if (hung()) {
        kill_hung(worker);
        return true;
      }
    }
  }

  /// Read what is available and dispatch every complete line. False at end of file.
  bool pump(int fd) {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      buffer_.append(chunk, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (std::size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1)
        dispatch(std::string_view(buffer_).substr(start, nl - start));
      buffer_.erase(0, start);
    }
  }

  void dispatch(std::string_view line) {
    try {
      handle(ordered_json::parse(line));
    } catch (const nlohmann::json::exception& e) {  // the reporters' own errors go up
      std::fprintf(err_, "benchhost: warning: unreadable message from the worker process (%s)\n", e.what());
    }
  }

  void handle(const ordered_json& j) {
    const std::string event = j.value("event", "");
    if (event == "mllog") {
      bus_.forward_mllog(mllog_from_wire(j));
    } else if (event == "progress") {
      progress_ = {j.at("what").get<std::string>(), j.at("step").get<std::int64_t>(),
                   j.at("total_steps").get<std::int64_t>(), j.at("detail").get<std::string>()};
      if (!stepping_since_) stepping_since_ = Clock::now();
      shown_step_ = progress_.step;
      bus_.progress(progress_);
    } else if (event == "point") {
      PointStart p{j.at("index").get<int>(), j.at("what").get<std::string>(), record_from_json(nlohmann::json(j.at("record")))};
      ++started_points_;
      last_index_ = p.index;
      stepping_since_.reset();
      bus_.point_start(p);
      point_ = std::move(p);
    } else if (event == "point_update") {
      // Note [What an unfinished run keeps] (events.cpp): a crashed, hung or killed run is
      // recorded from this.
      if (point_) {
        point_->record = record_from_json(nlohmann::json(j.at("record")));
        bus_.update_point(point_->record);
      }
    } else if (event == "record") {
      RunRecord r = record_from_json(nlohmann::json(j.at("record")));
      point_.reset();
      stepping_since_.reset();
      apply_weak_scaling(r, bus_.records());
      bus_.record(std::move(r));
    } else if (event == "done") {
      done_ = true;
      interrupted_ |= j.value("interrupted", false);
    }
  }

  void show_progress() {
    if (!point_ || !stepping_since_) return;
    const std::int64_t step = page_->step.load(std::memory_order_relaxed);
    if (step == shown_step_) return;
    shown_step_ = progress_.step = step;
    bus_.progress(progress_);
  }

  bool hung() const {
    if (s_.timeout_seconds <= 0 || !point_ || !stepping_since_) return false;
    return seconds_since(*stepping_since_) > s_.timeout_seconds + hard_timeout_grace_seconds(s_.timeout_seconds);
  }

  void kill_hung(WorkerProcess& worker) {
    worker.signal_group(SIGTERM);
    const auto term_sent = Clock::now();
    char discard[65536];
    while (!worker.reap(false)) {
      if (seconds_since(term_sent) > kTermToKillSeconds) {
        worker.signal_group(SIGKILL);
        worker.reap(true);
        break;
      }
      while (::read(worker.read_fd(), discard, sizeof discard) > 0) {
      }  // keep the pipe from filling while it winds down; its events no longer count
      ::poll(nullptr, 0, 20);
    }
    worker_status_ = worker.wait_status();
  }

  std::int64_t steps_done() const { return page_->step.load(std::memory_order_relaxed); }

  /// "in step 3 of 7 (warm-up included)", "after 12 training steps" (ttt: the step count is known,
  /// not whether an evaluation followed), or "during setup, before its first step".
  std::string where_in_point() const {
    if (!stepping_since_) return "during setup, before its first step";
    const std::int64_t done = steps_done();
    if (progress_.total_steps <= 0) return fmt::format("after {} training steps", done);
    if (done >= progress_.total_steps) return fmt::format("after its last step ({})", done);
    return fmt::format("in step {} of {}{}", done + 1, progress_.total_steps, s_.warmup > 0 ? " (warm-up included)" : "");
  }

  /// "-b 16 " for a sweep point of a -b list (to rerun it alone); "" otherwise.
  std::string rerun_hint() const {
    const RunRecord& r = point_->record;
    if (r.kind == "ttt" || s_.batch_sizes.size() <= 1 || r.batch_size <= 0) return "--no-isolation";
    return fmt::format("-b {} --no-isolation", r.batch_size);
  }

  std::string ending_text() const {
    if (WIFSIGNALED(worker_status_)) return fmt::format("was ended by {}", signal_text(WTERMSIG(worker_status_)));
    return fmt::format("exited with status {}", WEXITSTATUS(worker_status_));
  }

  void record_crashed_point(RunRecord& r, bool aborted) const {
    r.status = RunStatus::failed;
    std::string how;
    if (WIFSIGNALED(worker_status_)) {
      const int sig = WTERMSIG(worker_status_);
      how = fmt::format("crashed ({})", signal_text(sig));
      if (sig == SIGKILL) how += " (killed from outside: often the kernel's out-of-memory killer; see dmesg)";
    } else {
      how = fmt::format("ended its process (exit status {}) instead of returning", WEXITSTATUS(worker_status_));
    }
    r.message = fmt::format("plugin {} {} in {} {}{}; the results before it are kept and the run went on in a new "
                            "worker process; to debug it, rerun this point in-process under gdb with {}",
                            plugin_.name, how, point_->what, where_in_point(), aborted ? "; run_stop status aborted" : "",
                            rerun_hint());
  }

  void record_hung_point(RunRecord& r, bool aborted) const {
    r.status = RunStatus::timeout;
    r.message = fmt::format("plugin {} did not return from a step within --timeout {} s plus {} s grace: {} {}{}; "
                            "its worker process was killed and the run went on in a new one; raise --timeout if "
                            "its steps are this slow, or see where it hangs in-process under gdb with {}",
                            plugin_.name, s_.timeout_seconds, hard_timeout_grace_seconds(s_.timeout_seconds),
                            point_->what, where_in_point(), aborted ? "; run_stop status aborted" : "", rerun_hint());
  }

  /// A time-to-train run that had started its clock ends aborted, as an in-process failure does.
  /// True when it logged run_stop.
  bool close_ttt_run(RunRecord& r) {
    // The bus saw the worker's run_start (forwarded above) and tracks it for in-process runs too.
    const std::optional<std::int64_t> run_start_ms = bus_.open_run_start_ms();
    if (r.kind != "ttt" || !run_start_ms) return false;
    bus_.set_run_index(r.run_index);
    bus_.mllog("INTERVAL_END", "run_stop", nullptr, {{"status", "aborted"}});
    r.time_to_train_seconds = static_cast<double>(unix_time_ms() - *run_start_ms) / 1e3;
    r.seconds = r.time_to_train_seconds;
    return true;
  }

  const Settings& s_;
  const LoadedPlugin& plugin_;
  EventBus& bus_;
  std::FILE* err_;
  int progress_fd_ = -1;
  ProgressPage* page_ = nullptr;
  // The current worker.
  std::string buffer_;
  int worker_status_ = 0;
  bool done_ = false;
  bool interrupted_ = false;
  bool killed_after_interrupt_ = false;  ///< the worker was killed: it did not stop after a signal
  int started_points_ = 0;
  int last_index_ = -1;
  // Its open point.
  std::optional<PointStart> point_;
  std::optional<Clock::time_point> stepping_since_;  ///< its first progress event: the --timeout clock
  Progress progress_;
  std::int64_t shown_step_ = -1;
};

}  // namespace

std::optional<WorkerChannel> take_worker_channel() {
  const char* v = std::getenv(kWorkerEnvironmentVariable);
  if (!v) return std::nullopt;
  const std::string value = v;
  ::unsetenv(kWorkerEnvironmentVariable);
  // Started through /proc/self/exe, the worker would show as "exe" in ps and top.
  ::prctl(PR_SET_NAME, "benchhost-wrk");
  WorkerChannel c;
  char tail = 0;
  if (std::sscanf(value.c_str(), "%d,%d,%d%c", &c.events_fd, &c.progress_fd, &c.first_point, &tail) != 3 ||
      c.events_fd < 0 || c.progress_fd < 0 || c.first_point < 0)
    BH_THROW(Error, "malformed {}='{}' (set only by a benchhost supervisor)", kWorkerEnvironmentVariable, value);
  for (int fd : {c.events_fd, c.progress_fd})
    if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
      BH_THROW(Error, "{}: descriptor {} is not open: {}", kWorkerEnvironmentVariable, fd, std::strerror(errno));
  return c;
}

std::unique_ptr<Reporter> make_worker_reporter(const WorkerChannel& channel) {
  return std::make_unique<WorkerReporter>(channel.events_fd, map_progress_page(channel.progress_fd));
}

double hard_timeout_grace_seconds(double timeout_seconds) { return std::max(10.0, timeout_seconds / 4); }

SupervisedRun supervise_workers(const Settings& s, const LoadedPlugin& plugin, EventBus& bus, std::FILE* err) {
  set_second_signal_ends_process(false);  // the supervisor kills its worker instead, and writes the reports
  Supervisor supervisor(s, plugin, bus, err);
  return supervisor.run();
}

}  // namespace benchhost::host
