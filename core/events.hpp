#pragma once
/// @file events.hpp  The one event stream every reporter listens to.
///
/// Note [Event stream]
/// Run modes never print or write files. They emit four kinds of event into an EventBus:
///   - point starts: a time-to-train run or sweep point begins (what it is, the record it will fill);
///   - MLLOG events (key, value, metadata, wall-clock time) as mlcommons/logging defines them;
///   - progress updates (for the console's live line);
///   - finished records: one flat RunRecord per time-to-train run or sweep point.
/// Reporters (console, JSON, CSV, MLLOG) subscribe and decide what to do with each. A reporter
/// that writes a file rewrites it atomically after every record, so whatever was measured before
/// a failure, a crash in a later point or Ctrl-C is on disk.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchhost/plugin_abi.h"
#include "machine_load.hpp"

namespace benchhost::host {

/// How a run or sweep point ended.
enum class RunStatus { passed, skipped, invalid_arguments, oom, timeout, diverged, failed };
const char* to_string(RunStatus s);  ///< "PASSED", "SKIPPED", ...
RunStatus status_from_bh(bh_status s);

/// One finished run (ttt) or sweep point (train/infer/loader). Fields not meaningful for a kind
/// stay unset (reported as null in JSON, empty in CSV).
struct RunRecord {
  std::string kind;  ///< "ttt", "train", "infer", "loader"
  RunStatus status = RunStatus::passed;
  std::string message;  ///< why it did not pass (actionable), or a note
  std::string plugin;
  std::string device;
  std::string precision;
  std::int64_t batch_size = 0;  ///< per rank, as run (0: the workload's default)
  int devices = 1;              ///< ranks (the -n value)
  std::uint64_t seed = 0;
  int run_index = 0;            ///< ttt: 0-based run number
  std::int64_t iterations = 0;  ///< timed steps
  std::int64_t samples = 0;     ///< samples in the timed part
  std::optional<double> seconds;             ///< timed wall time
  std::optional<double> samples_per_second;
  std::optional<double> step_ms_mean, step_ms_p50, step_ms_p90, step_ms_p99;  ///< train
  std::optional<double> latency_ms_avg, latency_ms_p50, latency_ms_p90, latency_ms_p95, latency_ms_p99;  ///< infer
  std::optional<double> data_wait_fraction;  ///< share of step time spent in prepare_batch
  std::optional<double> achieved_tflops;
  std::optional<double> mfu;                 ///< achieved FLOP/s / (peak_tflops x devices)
  std::string mfu_note;                      ///< why MFU is missing
  // Note [Calibrated MFU] (peak.hpp): the peak `mfu` is against and where it came from, and MFU
  // against a vendor datasheet's peak where one is known.
  std::optional<double> peak_tflops;            ///< per device: calibrated, or --peak-tflops
  std::string peak_source;                      ///< "measured: SDK matmul f32 (oneDNN) 2048x2048x2048, ..."
  std::optional<double> mfu_datasheet;          ///< achieved / (datasheet_peak_tflops x devices)
  std::optional<double> datasheet_peak_tflops;  ///< per device
  std::string datasheet_source;                 ///< "NVIDIA H100 SXM5 datasheet, dense bf16" or why none
  std::optional<double> scaling_efficiency;  ///< weak scaling vs. the 1-device point
  std::optional<double> final_loss;
  // Mixed-precision step outcomes (ABI 1.2), over the steps counted in `iterations`; unset unless
  // the plugin reported loss scaling (a step with loss_scale > 0), so fp32 and bf16 runs carry
  // nothing here. Rank 0's values (Note [Loss-scaling outcomes], run_modes.cpp).
  std::optional<std::int64_t> updates_skipped;  ///< steps whose optimizer update was skipped
  std::optional<double> loss_scale;              ///< last nonzero loss scale reported
  /// Op calls that ran through f32 promotion (no native f16/bf16 implementation took them) over
  /// the counted steps, by op name; empty when none did (Note [Promoted calls], run_modes.cpp).
  std::map<std::string, std::int64_t> promoted_calls;
  // time-to-train
  std::optional<bool> converged;
  std::optional<double> time_to_train_seconds;
  std::optional<double> final_metric;
  std::int64_t epochs = 0;
  struct Eval {
    double epoch = 0;
    std::int64_t samples_trained = 0;
    double metric = 0;
    double seconds_since_run_start = 0;
    /// MLLOG's eval_accuracy when it was not `metric` alone (Mask R-CNN's {"BBOX": b, "SEGM": s});
    /// null otherwise (Note [Dictionary-valued evaluations], workload.hpp).
    nlohmann::ordered_json value{};
    /// The workload's own verdict on the target; unset when the host compared `metric`.
    std::optional<bool> target_reached{};
  };
  std::vector<Eval> evals;
  /// Every timed step's time in ms, in order (train and loader: step time; infer: batch latency);
  /// rank 0's in a multi-process point. What `benchhost compare` resamples (core/compare.hpp).
  std::vector<double> iteration_ms;
  /// (training step, loss) pairs, steps 1-based: every timed step of a train point; for a ttt
  /// run every step until 2048 pairs, then every 2nd, 4th, ... (Note [Step losses]). The HTML
  /// report draws them.
  std::vector<std::pair<std::int64_t, double>> step_losses;
  void add_step_loss(std::int64_t step, double loss);
  std::int64_t loss_stride_ = 1;  ///< ttt thinning (Note [Step losses]); not reported
  // multi-rank step-time aggregation (per-rank mean step time, ms)
  std::optional<double> rank_step_ms_min, rank_step_ms_median, rank_step_ms_max;
  /// One rank's timed step times (ms) in a multi-process point; `rank_steps[i].rank == i`.
  struct RankSteps {
    int rank = 0;
    double min = 0, median = 0, max = 0;
  };
  std::vector<RankSteps> rank_steps;  ///< empty for a single process
  /// How busy the machine was over the measurement (Note [A busy machine], machine_load.cpp);
  /// unset where it could not be read or nothing was measured.
  std::optional<MachineLoad> machine_load;
};

/// One MLLOG line's content.
struct MllogEvent {
  std::int64_t time_ms = 0;  ///< milliseconds since the Unix epoch (system clock)
  std::string event_type;    ///< "POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"
  std::string key;
  nlohmann::ordered_json value;
  nlohmann::ordered_json metadata;  ///< extra metadata (file/lineno are added by the bus)
  std::string file;
  int line = 0;
  int run_index = 0;
};

struct Progress {
  std::string what;  ///< "ttt run 1/5", "train b=32 n=1"
  std::int64_t step = 0;
  std::int64_t total_steps = 0;  ///< 0 = unknown
  std::string detail;            ///< "epoch 3, metric 0.71"
};

/// A time-to-train run or sweep point is about to start. A supervisor that runs the modes in a
/// worker process (Note [Crash isolation], isolation.cpp) uses it to name, and record, the point
/// a crashed worker was in, and to resume after it.
struct PointStart {
  int index = 0;     ///< 0-based position in the run's sequence of ttt runs or sweep points
  std::string what;  ///< "train b=16 n=1", "ttt run 2/5"
  RunRecord record;  ///< what is known before it runs: kind, plugin, device, precision, batch, seed, ...
};

/// Aggregate results attached at the end (ttt olympic mean).
struct Summary {
  nlohmann::ordered_json ttt;  ///< null unless mode ttt
  int exit_code = 0;
  bool interrupted = false;
};

class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual void on_point_start(const PointStart&) {}
  virtual void on_mllog(const MllogEvent&) {}
  virtual void on_progress(const Progress&) {}
  /// What the open time-to-train run has measured so far (Note [What an unfinished run keeps]).
  virtual void on_point_update(const RunRecord&) {}
  virtual void on_record(const RunRecord&, const std::vector<RunRecord>& all) {}
  virtual void on_finish(const std::vector<RunRecord>& all, const Summary&) {}
};

/// Fan-out of events to reporters. Only rank 0 gets reporters (see main.cpp).
class EventBus {
 public:
  void add(std::unique_ptr<Reporter> r);
  void mllog(const std::string& event_type, const std::string& key, nlohmann::ordered_json value,
             nlohmann::ordered_json metadata = nlohmann::ordered_json::object(),
             const char* file = __builtin_FILE(), int line = __builtin_LINE());  // the caller's, for metadata
  /// An MLLOG event made elsewhere (a worker process's), passed on unchanged.
  void forward_mllog(const MllogEvent& e);
  void point_start(const PointStart& p);
  void progress(const Progress& p);
  /// Note [What an unfinished run keeps] (events.cpp): the open point's record as it stands (a
  /// time-to-train run's evaluations, epochs and losses so far). A point that ends without its own
  /// record (a second signal, a crash, a hang) is recorded from the last one.
  void update_point(const RunRecord& so_far);
  /// The time_ms of the MLLOG run_start whose run_stop has not come yet; empty when no run is open.
  std::optional<std::int64_t> open_run_start_ms();
  void record(RunRecord r);
  void finish(const Summary& s);
  const std::vector<RunRecord>& records() const { return records_; }
  void set_run_index(int i) { run_index_ = i; }
  /// Note [A step that does not return] (run_modes.cpp): called from another thread while the
  /// run's own thread may be stuck in a step. Records the point in progress (if any) as FAILED
  /// with `message`, closes an open MLLOG run with run_stop status aborted, and finishes the
  /// reports as interrupted, unless the run already finished them. Takes the bus and keeps it:
  /// the caller ends the process next. False when the bus stayed busy for `wait` (a reporter stuck
  /// in a write), with nothing written.
  bool finish_interrupted(const std::string& message, std::chrono::milliseconds wait);
  /// Note [A report that cannot be written]: what reporters failed to write, one message each
  /// (the first failure of each reporter), in order. The run went on regardless.
  const std::vector<std::string>& write_failures() const { return write_failures_; }

 private:
  template <class F>
  void deliver(std::size_t reporter, F&& f);
  void forward_mllog_locked(const MllogEvent& e);
  void record_locked(RunRecord r);
  void finish_locked(const Summary& s);
  std::vector<std::unique_ptr<Reporter>> reporters_;
  std::vector<bool> failed_;  ///< per reporter: it has failed once (reported once)
  std::vector<RunRecord> records_;
  std::vector<std::string> write_failures_;
  int run_index_ = 0;
  // What finish_interrupted needs to know; every public call holds mutex_.
  std::timed_mutex mutex_;
  std::optional<PointStart> open_point_;  ///< started, not yet recorded
  Progress last_progress_;
  bool mllog_run_open_ = false;  ///< run_start logged without its run_stop
  std::int64_t run_start_ms_ = 0;  ///< that run_start's time_ms
  bool finished_ = false;
};

/// Milliseconds since the Unix epoch, for MLLOG's time_ms.
std::int64_t unix_time_ms();

}  // namespace benchhost::host
