#include "run_modes.hpp"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>

#include <semaphore.h>
#include <unistd.h>

#include <fmt/format.h>

#include "benchhost/nn/registry.hpp"
#include "environment.hpp"
#include "peak.hpp"
#include "reporters.hpp"
#include "stats.hpp"

namespace benchhost::host {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Note [Host clocks]
// Every duration the host reports comes from std::chrono::steady_clock read by the host. Before a
// clock is read around device work the host calls the plugin's synchronize slot, so queued GPU
// work is inside the interval it belongs to. MLLOG's time_ms uses the system clock (wall time since
// the Unix epoch) because that is what the format defines; reported durations never do.

namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_signal_count = 0;
volatile std::sig_atomic_t g_second_signal_ends_process = 1;
volatile std::sig_atomic_t g_watcher_active = 0;  ///< an InterruptWatcher waits on g_wake
sem_t g_wake;                                      ///< posted by on_signal (async-signal-safe)

// Note [Interrupts]
// The first SIGINT, SIGTERM or SIGHUP asks the run to stop between steps: the point in progress
// ends, what was measured is written (MLLOG run_stop aborted) and the host exits 130. A step that
// never returns would make that wait forever, so a second signal ends it: in a supervisor the
// worker is killed (isolation.cpp; also after a grace period without a second signal), in a
// process that runs the plugin itself (--no-isolation, a launcher's rank) the process ends at once
// by that signal, keeping what the reports already hold.
extern "C" void on_signal(int sig) {
  g_signal = sig;
  g_signal_count = g_signal_count + 1;
  if (g_watcher_active) sem_post(&g_wake);
  // With a watcher, the second signal is its cue (Note [A step that does not return]); a third
  // ends the process even if the watcher is stuck.
  if (g_signal_count >= (g_watcher_active ? 3 : 2) && g_second_signal_ends_process) {
    static const char msg[] = "benchhost: second interrupt: stopping now (the reports keep what they hold)\n";
    [[maybe_unused]] const auto n = ::write(2, msg, sizeof msg - 1);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct TimeoutExceeded {
  double limit;
  std::int64_t steps;
};
struct InterruptedBySignal {
  int sig;
};

/// Owns the strings a bh_run_context points to.
struct Context {
  std::string mode, device, precision, options_json, config_dir;
  bh_run_context c{};
};

std::unique_ptr<Context> make_context(const Settings& s, const LoadedPlugin& p, const Placement& where,
                                      const std::string& mode, std::int64_t batch, std::uint64_t seed) {
  auto ctx = std::make_unique<Context>();
  ctx->mode = mode;
  Device dev = parse_device(s.device);
  // One process per GPU: rank r on a node drives cuda:local_rank unless an index was given.
  if (dev.is_cuda() && where.world_size > 1 && s.device == "cuda") dev.index = where.local_rank;
  ctx->device = dev.str();
  ctx->precision = s.precision;
  ordered_json opts = ordered_json::object();
  for (const auto& [k, v] : s.plugin_options) opts[k] = v;
  ctx->options_json = opts.dump();
  ctx->config_dir = s.config_path.empty() ? std::string() : s.config_path.parent_path().string();
  bh_run_context& c = ctx->c;
  c.struct_size = sizeof(bh_run_context);
  c.mode = ctx->mode.c_str();
  c.device = ctx->device.c_str();
  c.precision = ctx->precision.c_str();
  c.seed = seed;
  c.batch_size = batch;
  c.rank = where.rank;
  c.world_size = where.world_size;
  c.local_rank = where.local_rank;
  c.num_threads = s.threads;
  c.synthetic_data = s.synthetic ? 1 : 0;
  c.options_json = ctx->options_json.c_str();
  c.config_dir = ctx->config_dir.c_str();
  // Note [One SDK in the process] (plugin_abi.h): only a plugin on the host's SDK can use it.
  c.communicator = p.shares_sdk ? where.communicator : nullptr;
  return ctx;
}

RunRecord base_record(const Settings& s, const LoadedPlugin& p, const std::string& kind, std::int64_t batch, int n) {
  RunRecord r;
  r.kind = kind;
  r.plugin = p.name;
  r.device = s.device;
  r.precision = s.precision;
  r.batch_size = batch;
  r.devices = n;
  r.seed = s.seed;
  return r;
}

/// Turn the exception in flight into the record's status and an actionable message.
void classify_current_exception(RunRecord& r, const Settings& s) {
  try {
    throw;
  } catch (const TimeoutExceeded& t) {
    r.status = RunStatus::timeout;
    r.message = fmt::format("exceeded --timeout {} s after {} steps; raise --timeout or lower -i", t.limit, t.steps);
  } catch (const InterruptedBySignal& i) {
    r.status = RunStatus::failed;
    r.message = fmt::format("interrupted by signal {}; results so far were written", i.sig);
  } catch (const PluginError& e) {
    r.status = status_from_bh(e.status());
    r.message = e.message();
    switch (e.status()) {
      case BH_STATUS_OUT_OF_MEMORY: r.message += "; try a smaller batch size (-b)"; break;
      case BH_STATUS_INVALID_ARGUMENT:
        r.message += fmt::format("; see `benchhost info {}` for its options", r.plugin);
        break;
      case BH_STATUS_DIVERGED: r.message += "; try a lower learning rate or --precision fp32"; break;
      default: break;
    }
  } catch (const Unsupported& e) {
    r.status = RunStatus::skipped;
    r.message = e.message();
  } catch (const InvalidArgument& e) {
    r.status = RunStatus::invalid_arguments;
    r.message = e.message();
  } catch (const OutOfMemory& e) {
    r.status = RunStatus::oom;
    r.message = e.message() + "; try a smaller batch size (-b)";
  } catch (const Diverged& e) {
    r.status = RunStatus::diverged;
    r.message = e.message() + "; try a lower learning rate or --precision fp32";
  } catch (const std::bad_alloc&) {
    r.status = RunStatus::oom;
    r.message = "out of host memory; try a smaller batch size (-b)";
  } catch (const Error& e) {
    r.status = RunStatus::failed;
    r.message = e.message();
  } catch (const std::exception& e) {
    r.status = RunStatus::failed;
    r.message = e.what();
  } catch (...) {
    r.status = RunStatus::failed;
    r.message = "unknown exception";
  }
  (void)s;
}

void check_loss(double loss, std::int64_t step) {
  // NaN means "not computed" by convention only in inference; a training loss of NaN/Inf diverged.
  if (std::isnan(loss) || std::isinf(loss))
    throw Diverged(fmt::format("training loss became {} at step {}", loss, step), __FILE__, __LINE__);
}

// Note [Loss-scaling outcomes]
// Under fp16 dynamic loss scaling a step whose scaled gradients overflow skips its optimizer update
// and lowers the scale (bh_step_result.update_skipped, loss_scale; ABI 1.2). The host counts those
// steps over exactly the steps it counts in RunRecord::iterations (every training step in
// time-to-train, the timed steps in throughput mode, never warm-up) and keeps the last nonzero
// scale. Multi-rank: gradients are all-reduced before the overflow check, so every rank's scaler
// takes the same decisions and rank 0's counts (the record its reporters write) are the run's.
// A run whose every counted step was skipped never changed its weights: it keeps its status, but
// its message says so, because a throughput number from it measures no real training.
class LossScaleTally {
 public:
  void add(const bh_step_result& step) {
    ++steps_;
    if (step.update_skipped) ++skipped_;
    if (step.loss_scale > 0) last_scale_ = step.loss_scale;
  }
  void write_to(RunRecord& r) const {
    if (last_scale_ == 0) return;  // no loss scaling reported: fp32, bf16, a plugin built against ABI 1.0/1.1
    r.updates_skipped = skipped_;
    r.loss_scale = last_scale_;
    if (steps_ > 0 && skipped_ == steps_) {
      const std::string note = "every optimizer update was skipped: the loss scale never found a finite gradient";
      r.message = r.message.empty() ? note : r.message + "; " + note;
    }
  }

 private:
  std::int64_t steps_ = 0, skipped_ = 0;
  double last_scale_ = 0;
};

// Note [Promoted calls]
// A mixed-precision run hands ops f16/bf16 tensors; an op with no native implementation for them
// is computed through f32 copies (Note [Half-precision promotion], nn/registry.hpp), which costs
// conversion passes the user should know about when comparing bf16 throughput. The host diffs
// the SDK registry's per-op promotion counts over the counted steps (the same steps as
// RunRecord::iterations; evaluation inside time-to-train included) and reports them per record.
// Counts are this process's: rank 0's, the same ops as every rank's.
class PromotionTally {
 public:
  void begin() {
    begun_ = true;
    for (const auto& [op, n] : nn::OpRegistry::instance().promotion_counts()) before_[op] = n;
  }
  void write_to(RunRecord& r) const {
    if (!begun_) return;
    for (const auto& [op, n] : nn::OpRegistry::instance().promotion_counts()) {
      const auto was = before_.find(op);
      const std::uint64_t since = n - (was == before_.end() ? 0 : was->second);
      if (since > 0) r.promoted_calls[op] = static_cast<std::int64_t>(since);
    }
  }

 private:
  bool begun_ = false;
  std::map<std::string, std::uint64_t> before_;
};

// Note [Op times] (nn/registry.cpp): BENCHHOST_OP_TIMES counts the counted steps only, not model
// building or warm-up steps, whose first call of each shape autotunes.
class OpTimesWindow {
 public:
  OpTimesWindow() { nn::set_op_times_counting(false); }
  ~OpTimesWindow() { nn::set_op_times_counting(false); }
  OpTimesWindow(const OpTimesWindow&) = delete;
  OpTimesWindow& operator=(const OpTimesWindow&) = delete;
  void begin() { nn::set_op_times_counting(true); }
  void end() { nn::set_op_times_counting(false); }
};

class StepGuard {
 public:
  StepGuard(const Settings& s) : limit_(s.timeout_seconds), start_(Clock::now()) {}
  void check(std::int64_t steps) const {
    if (g_signal) throw InterruptedBySignal{g_signal};
    if (limit_ > 0 && seconds(start_, Clock::now()) > limit_) throw TimeoutExceeded{limit_, steps};
  }

 private:
  double limit_;
  Clock::time_point start_;
};

// The CUDA backend names each GPU "gpu<N>_name" (peak.cpp reads it).
std::string gpu_name_from_environment() { return gpu_name(Device::cuda(0)); }

// ---- time to train -------------------------------------------------------------------------------

void emit_submission_keys(const Settings& s, const LoadedPlugin& p, EventBus& bus) {
  const std::string benchmark = p.info.benchmark.empty() ? p.name : p.info.benchmark;
  std::string division = s.submission_division;
  // Note [MLPerf rules declared by the plugin]: closed when the plugin implements a closed
  // benchmark's reference, unless the run (a scaled mini config) says otherwise.
  if (division.empty()) division = !p.info.benchmark.empty() && p.info.mlperf.closed_division ? "closed" : "open";
  std::string platform = s.submission_platform;
  if (platform.empty()) {
    platform = parse_device(s.device).is_cuda() ? gpu_name_from_environment() : cpu_model();
    if (platform.empty()) platform = "unknown";
  }
  bus.mllog("POINT_IN_TIME", "submission_benchmark", benchmark);
  bus.mllog("POINT_IN_TIME", "submission_org", s.submission_org);
  bus.mllog("POINT_IN_TIME", "submission_division", division);
  bus.mllog("POINT_IN_TIME", "submission_status", s.submission_status);
  bus.mllog("POINT_IN_TIME", "submission_platform", platform);
  bus.mllog("POINT_IN_TIME", "submission_poc_name", s.submission_poc_name);
  bus.mllog("POINT_IN_TIME", "submission_poc_email", s.submission_poc_email);
}

void run_ttt_once(const Settings& s, const std::shared_ptr<LoadedPlugin>& plugin, const Placement& where,
                  EventBus& bus, int run) {
  const LoadedPlugin& p = *plugin;
  const std::int64_t batch = s.batch_sizes.empty() ? 0 : s.batch_sizes.front();
  RunRecord r = base_record(s, p, "ttt", batch, where.world_size);
  r.run_index = run;
  r.seed = derive_seed(s.seed, run);
  r.converged = false;
  bus.set_run_index(run);
  Progress prog{fmt::format("ttt run {}/{}", run + 1, s.runs), 0, 0, ""};
  bus.point_start({run, prog.what, r});
  bool run_started = false;
  Clock::time_point t_start{};
  std::int64_t steps = 0, samples_trained = 0;
  double wait_seconds = 0;
  LossScaleTally loss_scaling;
  PromotionTally promotions;
  OpTimesWindow op_times;
  // The samples trained in the timed region (MLPerf's trained_samples, which some benchmarks' rules require
  // once), then run_stop with its status.
  auto log_run_stop = [&](const char* status) {
    bus.mllog("POINT_IN_TIME", "trained_samples", samples_trained);
    bus.mllog("INTERVAL_END", "run_stop", nullptr, {{"status", status}});
  };
  try {
    emit_submission_keys(s, p, bus);
    bus.mllog("POINT_IN_TIME", "cache_clear", true);
    bus.mllog("INTERVAL_START", "init_start", nullptr);
    auto ctx = make_context(s, p, where, "ttt", batch, r.seed);
    if (std::string why = WorkloadInstance::check_support(p, ctx->c); !why.empty()) throw Unsupported(why, __FILE__, __LINE__);
    if (!p.descriptor.evaluate)
      throw Unsupported(fmt::format("plugin '{}' has no evaluate slot, which --mode ttt needs", p.name), __FILE__, __LINE__);
    WorkloadInstance w(plugin);
    const bh_run_info info = w.setup(ctx->c);
    if (r.batch_size == 0 && info.global_batch_size > 0) r.batch_size = info.global_batch_size / where.world_size;
    if (info.samples_per_epoch <= 0)
      throw InvalidArgument(fmt::format("plugin '{}' reported samples_per_epoch {}; time-to-train needs a positive epoch size",
                                        p.name, info.samples_per_epoch), __FILE__, __LINE__);
    bus.mllog("POINT_IN_TIME", "seed", r.seed);
    // Hyperparameters: the plugin's keys, plus the ones every closed submission must log.
    ordered_json hyper = ordered_json::object();
    try {
      hyper = ordered_json::parse(w.hyperparameters_json());
    } catch (const std::exception& e) {
      throw PluginError(BH_STATUS_FAILED, fmt::format("{}.hyperparameters_json returned malformed JSON: {}", p.name, e.what()),
                        __FILE__, __LINE__);
    }
    if (!hyper.is_object()) hyper = ordered_json::object();
    if (!hyper.contains("global_batch_size"))
      bus.mllog("POINT_IN_TIME", "global_batch_size",
                info.global_batch_size > 0 ? info.global_batch_size : batch * where.world_size);
    if (!hyper.contains("gradient_accumulation_steps")) bus.mllog("POINT_IN_TIME", "gradient_accumulation_steps", 1);
    for (auto it = hyper.begin(); it != hyper.end(); ++it) {
      if (it.key() == "weights_initialization" && it.value().is_array()) {  // see HyperValue
        for (const auto& tensor : it.value())
          bus.mllog("POINT_IN_TIME", "weights_initialization", nullptr, ordered_json{{"tensor", tensor}});
        continue;
      }
      bus.mllog("POINT_IN_TIME", it.key(), it.value());
    }
    bus.mllog("POINT_IN_TIME", "train_samples", info.train_samples > 0 ? info.train_samples : info.samples_per_epoch);
    bus.mllog("POINT_IN_TIME", "eval_samples", info.eval_samples);
    w.synchronize();
    bus.mllog("INTERVAL_END", "init_stop", nullptr);

    // ---- timed region: run_start .. run_stop, evaluation on the clock.
    bus.mllog("INTERVAL_START", "run_start", nullptr);
    run_started = true;
    promotions.begin();
    op_times.begin();
    const LoadWindow load(where.local_size);  // Note [A busy machine]
    t_start = Clock::now();
    StepGuard guard(s);
    bus.progress(prog);  // step 0: the --timeout clock runs from here (Note [Crash isolation])
    const std::int64_t eval_every = info.eval_every_samples;
    std::int64_t next_eval = eval_every > 0 ? eval_every : 0;
    const std::int64_t max_epochs = std::max<std::int64_t>(1, info.max_epochs);
    // A config may carry its own target (bh_run_info.metric_target, e.g. a mini config); else describe()'s.
    const double target = info.metric_target != 0 ? info.metric_target : p.info.metric_target;
    auto reached = [&](double m) { return p.info.higher_is_better ? m >= target : m <= target; };
    // Note [What an unfinished run keeps] (events.cpp): the record as it stands, for a run that
    // ends without returning (a second signal, a crash or a hang in a supervised worker).
    auto share_so_far = [&] {
      r.iterations = steps;
      r.samples = samples_trained;
      bus.update_point(r);
    };
    ordered_json last_value;            // the last evaluation's dictionary, if it had one
    bool decided_by_workload = false;   // the last evaluation carried the workload's verdict
    auto evaluate = [&] {
      const double epoch_num = static_cast<double>(samples_trained) / static_cast<double>(info.samples_per_epoch);
      ordered_json meta = {{"epoch_num", epoch_num}, {"samples_count", samples_trained}};
      w.synchronize();
      bus.mllog("INTERVAL_START", "eval_start", nullptr, meta);
      const Evaluation e = w.evaluate();
      if (!std::isfinite(e.metric))
        throw Diverged(fmt::format("evaluation metric {} became {}", p.info.metric_name, e.metric), __FILE__, __LINE__);
      // Note [Dictionary-valued evaluations] (workload.hpp): the plugin's value when it gave one
      // (Mask R-CNN's {"BBOX": b, "SEGM": s}), and its verdict on the target when it gave one.
      bus.mllog("POINT_IN_TIME", "eval_accuracy", e.value.is_null() ? ordered_json(e.metric) : e.value, meta);
      bus.mllog("INTERVAL_END", "eval_stop", nullptr, meta);
      r.evals.push_back({epoch_num, samples_trained, e.metric, seconds(t_start, Clock::now()), e.value, e.target_reached});
      r.final_metric = e.metric;
      last_value = e.value;
      prog.detail = fmt::format("epoch {:.2f}, {} {:.4g}", epoch_num, p.info.metric_name, e.metric);
      if (!e.value.is_null()) prog.detail += " " + e.value.dump();
      prog.detail += e.target_reached ? fmt::format(" (target {})", *e.target_reached ? "reached" : "not reached")
                                      : fmt::format(" (target {:.4g})", target);
      bus.progress(prog);
      decided_by_workload = e.target_reached.has_value();
      share_so_far();
      return e.target_reached.value_or(reached(e.metric));
    };
    bool converged = false;
    for (std::int64_t epoch = 0; epoch < max_epochs && !converged; ++epoch) {
      bus.mllog("INTERVAL_START", "epoch_start", nullptr, {{"epoch_num", epoch + 1}});
      w.begin_epoch(epoch);
      std::int64_t epoch_samples = 0;
      while (epoch_samples < info.samples_per_epoch && !converged) {
        guard.check(steps);
        const auto t0 = Clock::now();
        w.prepare_batch();
        wait_seconds += seconds(t0, Clock::now());
        const bh_step_result step = w.train_step();
        ++steps;
        loss_scaling.add(step);
        check_loss(step.loss, steps);
        r.final_loss = step.loss;
        r.add_step_loss(steps, step.loss);
        if (step.samples <= 0)
          throw PluginError(BH_STATUS_FAILED, fmt::format("{}.train_step reported {} samples; it must consume at least one",
                                                          p.name, step.samples), __FILE__, __LINE__);
        const std::int64_t global = step.samples * where.world_size;
        epoch_samples += global;
        samples_trained += global;
        prog.step = steps;
        bus.progress(prog);
        if (eval_every > 0 && samples_trained >= next_eval) {
          next_eval += eval_every;
          if (samples_trained >= info.eval_start_samples) converged = evaluate();
        }
      }
      if (eval_every == 0 && !converged && samples_trained >= info.eval_start_samples) converged = evaluate();
      r.epochs = epoch + 1;
      bus.mllog("INTERVAL_END", "epoch_stop", nullptr, {{"epoch_num", epoch + 1}});
      share_so_far();
    }
    w.synchronize();
    op_times.end();
    const auto t_stop = Clock::now();
    r.machine_load = load.finish();
    log_run_stop(converged ? "success" : "aborted");
    run_started = false;
    r.converged = converged;
    r.time_to_train_seconds = seconds(t_start, t_stop);
    r.seconds = r.time_to_train_seconds;
    if (!converged && decided_by_workload) {
      r.status = RunStatus::failed;
      r.message = fmt::format("did not reach its target within {} epochs (the workload's verdict; last {} {:.6g}{}); "
                              "run_stop status aborted",
                              max_epochs, p.info.metric_name, r.final_metric.value_or(0),
                              last_value.is_null() ? std::string() : ", eval_accuracy " + last_value.dump());
    } else if (!converged) {
      r.status = RunStatus::failed;
      r.message = fmt::format("did not reach {} {} {} within {} epochs (last {}); run_stop status aborted",
                              p.info.metric_name, p.info.higher_is_better ? ">=" : "<=", target, max_epochs,
                              r.final_metric ? fmt::format("{:.6g}", *r.final_metric) : std::string("none"));
    }
  } catch (...) {
    classify_current_exception(r, s);
    if (run_started) {
      log_run_stop("aborted");
      r.time_to_train_seconds = seconds(t_start, Clock::now());
      r.seconds = r.time_to_train_seconds;
    }
  }
  r.iterations = steps;
  r.samples = samples_trained;
  loss_scaling.write_to(r);
  promotions.write_to(r);
  if (r.seconds && *r.seconds > 0) {
    r.samples_per_second = static_cast<double>(samples_trained) / *r.seconds;
    r.data_wait_fraction = wait_seconds / *r.seconds;
  }
  bus.record(std::move(r));
}

// ---- throughput ----------------------------------------------------------------------------------

const std::vector<std::int64_t> batch_list(const Settings& s) {
  return s.batch_sizes.empty() ? std::vector<std::int64_t>{0} : s.batch_sizes;
}

void fill_step_stats(RunRecord& r, const std::vector<double>& ms, bool latency) {
  if (ms.empty()) return;
  r.iteration_ms = ms;
  if (latency) {
    r.latency_ms_avg = mean(ms);
    r.latency_ms_p50 = percentile(ms, 50);
    r.latency_ms_p90 = percentile(ms, 90);
    r.latency_ms_p95 = percentile(ms, 95);
    r.latency_ms_p99 = percentile(ms, 99);
  } else {
    r.step_ms_mean = mean(ms);
    r.step_ms_p50 = percentile(ms, 50);
    r.step_ms_p90 = percentile(ms, 90);
    r.step_ms_p99 = percentile(ms, 99);
  }
}

enum class Kind { train, infer, loader };

std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos)
    return a;
  std::string out = "'";
  for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Note [Device-count sweeps]
// MPI is initialised once per process, so a single-process host cannot regroup itself into n
// processes. Started without a launcher and given -n N > 1, it runs that point as a child job:
// the same command line under `mpirun -np N` (or --launcher), with -n N and a private report,
// then reads the child's records (written by its rank 0). See docs/multi-process.md.
void run_child_point(const Settings& s, const LoadedPlugin& p, EventBus& bus, std::int64_t batch, int n) {
  namespace fs = std::filesystem;
  RunRecord failed = base_record(s, p, "train", s.batch_sizes.empty() ? 0 : s.batch_sizes.front(), n);
  // A private directory (mkdtemp: new, 0700, ours): a predictable name in a shared /tmp could be
  // planted beforehand with links for the child's report and log to write through.
  std::string dir_template = (fs::temp_directory_path() / fmt::format("benchhost_sweep_n{}_XXXXXX", n)).string();
  if (::mkdtemp(dir_template.data()) == nullptr) {
    failed.status = RunStatus::failed;
    failed.message = fmt::format("cannot create a private directory for the -n {} child job in {}: {}", n,
                                 fs::temp_directory_path().string(), std::strerror(errno));
    bus.record(std::move(failed));
    return;
  }
  const fs::path dir = dir_template;
  std::error_code ec;
  const fs::path report = dir / "report.json", log = dir / "child.log";
  std::string launcher = s.launcher;
  if (launcher.empty()) launcher = std::string("mpirun") + (::geteuid() == 0 ? " --allow-run-as-root" : "") + " --oversubscribe -np {n}";
  for (auto pos = launcher.find("{n}"); pos != std::string::npos; pos = launcher.find("{n}"))
    launcher.replace(pos, 3, std::to_string(n));
  // The child must find the very plugin this host loaded: its directory goes first, after the
  // leading positional words (`train <plugin>`), which the command line only accepts up front.
  std::string cmd = launcher + " " + shell_quote((executable_dir() / "benchhost").string());
  std::size_t first_option = 1;
  while (first_option < s.argv.size() && !s.argv[first_option].empty() && s.argv[first_option][0] != '-')
    cmd += " " + shell_quote(s.argv[first_option++]);
  cmd += " --plugin-dir " + shell_quote(p.path.parent_path().string());
  // The child runs this one point: its device count and batch size replace the sweep's lists (a
  // child given the whole -b list ran every batch size at every call, recording each point once
  // per batch size), and its report goes to the private directory, never to this run's files.
  static const std::vector<std::string> drop_with_value{"-n",    "--devices", "-b",    "--batch-size", "-o",
                                                        "--output", "--csv",  "--mllog", "--html"};
  for (std::size_t i = first_option; i < s.argv.size(); ++i) {
    const std::string& a = s.argv[i];
    if (std::find(drop_with_value.begin(), drop_with_value.end(), a) != drop_with_value.end()) {
      ++i;
      continue;
    }
    bool glued = false;
    for (const auto& d : drop_with_value) glued |= a.rfind(d + "=", 0) == 0 || (d.size() == 2 && a.rfind(d, 0) == 0 && a.size() > 2 && d != "--");
    if (glued) continue;
    cmd += " " + shell_quote(a);
  }
  if (batch > 0) cmd += fmt::format(" -b {}", batch);
  cmd += fmt::format(" -n {} -o {} > {} 2>&1", n, shell_quote(report.string()), shell_quote(log.string()));
  const int rc = std::system(cmd.c_str());
  std::vector<RunRecord> child;
  try {
    if (fs::exists(report)) {
      std::ifstream in(report);
      const auto j = nlohmann::json::parse(in);
      for (const auto& r : j.at("results")) child.push_back(record_from_json(r));
    }
  } catch (const std::exception& e) {
    child.clear();
  }
  if (child.empty()) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > 1500) text = "..." + text.substr(text.size() - 1500);
    failed.status = RunStatus::failed;
    failed.message = fmt::format("child job for -n {} produced no report (exit status {}): `{}`; its output:\n{}", n, rc,
                                 cmd, text);
    bus.record(std::move(failed));
  }
  for (auto& r : child) {
    apply_weak_scaling(r, bus.records());
    bus.record(std::move(r));
  }
  fs::remove_all(dir, ec);
}

void run_point(const Settings& s, const std::shared_ptr<LoadedPlugin>& plugin, const Placement& where, EventBus& bus,
               Kind kind, std::int64_t batch, int n, int index) {
  const LoadedPlugin& p = *plugin;
  const char* kind_name = kind == Kind::train ? "train" : kind == Kind::infer ? "infer" : "loader";
  RunRecord r = base_record(s, p, kind_name, batch, n);
  r.seed = s.seed;
  bus.point_start({index, batch > 0 ? fmt::format("{} b={} n={}", kind_name, batch, n)
                                    : fmt::format("{} (default batch) n={}", kind_name, n), r});
  if (n != where.world_size && where.world_size == 1 && where.launcher == "none" && n > 1) {
    run_child_point(s, p, bus, batch, n);
    return;
  }
  if (n != where.world_size) {
    r.status = RunStatus::skipped;
    r.message = fmt::format("this launch ({}) has {} processes; -n {} needs a launch with {} (one job per device count)",
                            where.launcher, where.world_size, n, n);
    bus.record(std::move(r));
    return;
  }
  std::vector<double> step_ms;
  double wait_seconds = 0, step_seconds = 0;
  std::int64_t samples = 0, steps = 0;
  LossScaleTally loss_scaling;
  PromotionTally promotions;
  OpTimesWindow op_times;
  try {
    auto ctx = make_context(s, p, where, kind_name, batch, s.seed);
    if (std::string why = WorkloadInstance::check_support(p, ctx->c); !why.empty()) throw Unsupported(why, __FILE__, __LINE__);
    if (kind == Kind::infer && !p.descriptor.infer_step)
      throw Unsupported(fmt::format("plugin '{}' has no infer_step slot, which --mode infer needs", p.name), __FILE__, __LINE__);
    if (kind == Kind::loader && !p.descriptor.prepare_batch)
      throw Unsupported(fmt::format("plugin '{}' has no prepare_batch slot, which --mode loader measures", p.name),
                        __FILE__, __LINE__);
    WorkloadInstance w(plugin);
    const bh_run_info info = w.setup(ctx->c);
    const std::int64_t loader_batch =
        batch > 0 ? batch : (info.global_batch_size > 0 ? info.global_batch_size / where.world_size : 0);
    if (kind == Kind::loader && loader_batch <= 0)
      throw InvalidArgument("--mode loader needs a batch size: give -b or have the plugin report global_batch_size",
                            __FILE__, __LINE__);
    if (kind != Kind::infer) w.begin_epoch(0);
    if (r.batch_size == 0 && info.global_batch_size > 0) r.batch_size = info.global_batch_size / where.world_size;
    Progress prog{fmt::format("{} b={} n={}", kind_name, r.batch_size, n), 0, s.warmup + s.iterations, "warm-up"};
    StepGuard guard(s);
    bus.progress(prog);  // step 0: the --timeout clock runs from here (Note [Crash isolation])
    auto one_step = [&](bool timed) {
      const auto t0 = Clock::now();
      std::int64_t got = 0;
      double loss = 0;
      bh_step_result trained{};  // train only; zero (no loss scaling) otherwise
      if (kind == Kind::infer) {
        const bh_step_result out = w.infer_step();
        got = out.samples;
      } else {
        w.prepare_batch();
        if (timed && kind == Kind::train) wait_seconds += seconds(t0, Clock::now());
        if (kind == Kind::train) {
          trained = w.train_step();
          got = trained.samples;
          loss = trained.loss;
          check_loss(loss, steps + 1);
          r.final_loss = loss;
        } else {
          got = loader_batch;
        }
      }
      w.synchronize();
      const auto t1 = Clock::now();
      if (got <= 0 && kind != Kind::loader)
        throw PluginError(BH_STATUS_FAILED, fmt::format("{} step reported {} samples", p.name, got), __FILE__, __LINE__);
      if (timed) {
        step_ms.push_back(seconds(t0, t1) * 1e3);
        step_seconds += seconds(t0, t1);
        samples += got;
        if (kind == Kind::train) {
          loss_scaling.add(trained);
          r.add_step_loss(s.warmup + steps + 1, loss);  // training steps counted from 1, warm-up included
        }
      }
    };
    for (std::int64_t i = 0; i < s.warmup; ++i) {
      guard.check(i);
      one_step(false);
      prog.step = i + 1;
      bus.progress(prog);
    }
    w.synchronize();
    prog.detail = "timed";
    promotions.begin();
    op_times.begin();
    const LoadWindow load(where.local_size);  // Note [A busy machine]
    const auto t_begin = Clock::now();
    for (steps = 0; steps < s.iterations;) {
      guard.check(steps);
      one_step(true);
      ++steps;
      prog.step = s.warmup + steps;
      bus.progress(prog);
    }
    w.synchronize();
    op_times.end();  // not the peak calibration below
    const double total = seconds(t_begin, Clock::now());
    r.machine_load = load.finish();
    r.seconds = total;
    // Samples are counted per rank; the grid point's throughput is for all n devices together.
    r.samples_per_second = static_cast<double>(samples * where.world_size) / total;
    fill_step_stats(r, step_ms, kind == Kind::infer);
    if (where.communicator && where.world_size > 1) {
      // Every rank's mean step time, so a straggler shows (collective: all ranks run the same grid).
      std::vector<double> per_rank = allgather_values(*where.communicator, mean(step_ms));
      // And each rank's own min/median/max step time, by rank (Note [Scaling report], scaling.hpp).
      const std::vector<double> mins = allgather_values(*where.communicator, percentile(step_ms, 0));
      const std::vector<double> medians = allgather_values(*where.communicator, percentile(step_ms, 50));
      const std::vector<double> maxes = allgather_values(*where.communicator, percentile(step_ms, 100));
      for (std::size_t rank = 0; rank < medians.size(); ++rank)
        r.rank_steps.push_back({static_cast<int>(rank), mins[rank], medians[rank], maxes[rank]});
      std::sort(per_rank.begin(), per_rank.end());
      r.rank_step_ms_min = per_rank.front();
      r.rank_step_ms_max = per_rank.back();
      r.rank_step_ms_median = percentile(per_rank, 50);
    }
    if (kind == Kind::train) {
      r.data_wait_fraction = step_seconds > 0 ? wait_seconds / step_seconds : 0.0;
      fill_mfu(r, s, info.train_flops_per_sample, n, where.local_size);  // peak.hpp
    } else if (kind == Kind::infer) {
      fill_mfu(r, s, info.infer_flops_per_sample, n, where.local_size);
    }
  } catch (...) {
    classify_current_exception(r, s);
    if (!step_ms.empty()) {  // keep what was measured before the failure
      fill_step_stats(r, step_ms, kind == Kind::infer);
      r.seconds = step_seconds;
      r.samples_per_second = static_cast<double>(samples * where.world_size) / step_seconds;
      r.message += fmt::format(" (after {} timed steps)", step_ms.size());
    }
  }
  r.iterations = steps;
  r.samples = samples * where.world_size;
  loss_scaling.write_to(r);
  promotions.write_to(r);
  apply_weak_scaling(r, bus.records());
  bus.record(std::move(r));
}

}  // namespace

void apply_weak_scaling(RunRecord& r, const std::vector<RunRecord>& earlier) {
  if (r.kind != "train" || r.devices <= 1 || r.status != RunStatus::passed || !r.samples_per_second) return;
  for (const auto& base : earlier)
    if (base.kind == "train" && base.devices == 1 && base.batch_size == r.batch_size &&
        base.status == RunStatus::passed && base.samples_per_second)
      r.scaling_efficiency = *r.samples_per_second / (r.devices * *base.samples_per_second);
}

std::uint64_t derive_seed(std::uint64_t base, int run) {
  // SplitMix64 of (base, run): distinct for distinct runs, the same for the same inputs.
  std::uint64_t z = base + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(run + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z & 0x7FFFFFFFull;  // MLPerf logs seeds as small positive integers
}

ordered_json summarize_ttt(const std::vector<RunRecord>& records, const WorkloadInfo& info) {
  std::vector<TttRun> runs;
  std::vector<std::uint64_t> seeds;
  for (const auto& r : records) {
    if (r.kind != "ttt" || r.status == RunStatus::skipped) continue;
    runs.push_back({r.time_to_train_seconds.value_or(0), r.converged.value_or(false)});
    seeds.push_back(r.seed);
  }
  ordered_json j;
  j["benchmark"] = info.benchmark.empty() ? info.name : info.benchmark;
  j["runs"] = runs.size();
  j["seeds"] = seeds;
  if (runs.empty()) {
    j["status"] = "SKIPPED";
    j["olympic_mean_seconds"] = nullptr;
    j["dropped_each_side"] = 0;
    j["kept_runs"] = ordered_json::array();
    j["note"] = "no time-to-train run was attempted";
    return j;
  }
  const OlympicMean m = olympic_mean(runs, static_cast<std::size_t>(std::max(0, info.mlperf.olympic_drop_each_side)));
  j["status"] = m.valid ? "VALID" : "INVALID";
  j["olympic_mean_seconds"] = m.valid ? ordered_json(m.seconds) : ordered_json(nullptr);
  j["dropped_each_side"] = m.dropped_each_side;
  j["kept_runs"] = m.kept;
  std::string note = m.note;
  // MLPerf scores a result from the number of runs the benchmark's rules fix.
  if (!info.benchmark.empty() && static_cast<int>(runs.size()) < info.mlperf.runs)
    note += fmt::format("; MLPerf scores {} from {} runs (--runs {})", info.benchmark, info.mlperf.runs, info.mlperf.runs);
  j["note"] = note;
  return j;
}

ordered_json run_selected_mode(const Settings& s, const std::shared_ptr<LoadedPlugin>& plugin, const Placement& where,
                               EventBus& bus, int first_point) {
  if (s.mode == "ttt") {
    if (s.batch_sizes.size() > 1)
      BH_USAGE("--mode ttt takes one batch size, got {} (-b lists are for --mode train/infer)",
               s.batch_sizes.size());
    for (int run = std::max(0, first_point); run < s.runs && !g_signal; ++run) run_ttt_once(s, plugin, where, bus, run);
    return summarize_ttt(bus.records(), plugin->info);
  }
  const Kind kind = s.mode == "train" ? Kind::train : s.mode == "infer" ? Kind::infer : Kind::loader;
  const std::vector<int> counts = kind == Kind::train && !s.device_counts.empty() ? s.device_counts
                                                                                 : std::vector<int>{where.world_size};
  int index = 0;
  for (int n : counts)
    for (std::int64_t b : batch_list(s)) {
      if (g_signal) break;
      if (index >= first_point) run_point(s, plugin, where, bus, kind, b, n, index);
      ++index;
    }
  return nullptr;
}

// Note [A step that does not return]
// A process that runs the plugin itself (--no-isolation, or each rank under a launcher) has no
// supervisor to kill a step that never returns, and a rank whose peer died waits in a collective
// that never completes. OpenMPI's mpirun ends the survivors with SIGTERM and SIGKILL 1 s later
// (odls_base_sigkill_timeout), so the run's own thread would never get to record the point it is
// in. An InterruptWatcher thread waits for the first signal, gives the run's thread a grace to stop
// by itself (5 s alone, 0.3 s as a rank of several, well inside mpirun's 1 s), and then, or at
// once on a second signal, records the point in progress as FAILED, closes an open MLLOG run with
// run_stop aborted, finishes the reports (EventBus::finish_interrupted) and ends the process with
// exit code 130. Under mpirun, that exit ends the other ranks the same way.
InterruptWatcher::InterruptWatcher(EventBus& bus, double grace_seconds, bool several_ranks, std::FILE* err)
    : bus_(bus), grace_seconds_(grace_seconds), several_ranks_(several_ranks), err_(err) {
  g_watcher_active = 1;
  thread_ = std::thread([this] { watch(); });
}

InterruptWatcher::~InterruptWatcher() {
  stop_ = true;
  sem_post(&g_wake);
  thread_.join();
  g_watcher_active = 0;
}

namespace {
// Waits for g_wake until `deadline` (CLOCK_REALTIME, as sem_timedwait wants; none: forever).
// False on timeout.
bool wait_wake(const timespec* deadline) {
  while (true) {
    const int rc = deadline ? sem_timedwait(&g_wake, deadline) : sem_wait(&g_wake);
    if (rc == 0) return true;
    if (errno == ETIMEDOUT) return false;
  }
}
}  // namespace

void InterruptWatcher::watch() {
  while (!stop_ && g_signal == 0) wait_wake(nullptr);
  if (stop_) return;
  const int sig = g_signal;
  timespec deadline{};
  clock_gettime(CLOCK_REALTIME, &deadline);
  const auto grace_ns = static_cast<long long>(grace_seconds_ * 1e9) + deadline.tv_nsec;
  deadline.tv_sec += static_cast<time_t>(grace_ns / 1000000000);
  deadline.tv_nsec = static_cast<long>(grace_ns % 1000000000);
  while (!stop_ && g_signal_count < 2)
    if (!wait_wake(&deadline)) break;
  if (stop_) return;
  std::string message =
      fmt::format("interrupted by signal {} in a step that did not return within {} s (or a second signal came)", sig,
                  grace_seconds_);
  if (several_ranks_) message += "; a rank that died, stopped or was interrupted leaves the others waiting in a collective";
  std::fprintf(err_, "benchhost: %s: recording the point in progress and ending the run\n", message.c_str());
  std::fflush(err_);
  if (!bus_.finish_interrupted(message, std::chrono::seconds(2)))
    std::fprintf(err_, "benchhost: the reports were busy for 2 s; ending without the point in progress\n");
  std::fflush(nullptr);
  ::_exit(kExitInterrupted);
}

void install_signal_handlers() {
  sem_init(&g_wake, 0, 0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported like a full disk
  // (Note [A report that cannot be written]), instead of killing the host with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
}

int received_signal() { return g_signal; }
int received_signal_count() { return g_signal_count; }
void set_second_signal_ends_process(bool ends) { g_second_signal_ends_process = ends ? 1 : 0; }
void raise_interrupt_for_testing(int sig) { g_signal = sig; }

}  // namespace benchhost::host
