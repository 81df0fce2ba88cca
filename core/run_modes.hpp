#pragma once
/// @file run_modes.hpp  The host's run modes: time-to-train, training throughput, inference and
/// data-loader throughput. The host owns every clock (Note [Host clocks] in run_modes.cpp).

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "benchhost/comm/communicator.hpp"
#include "cli.hpp"
#include "events.hpp"
#include "plugin_loader.hpp"

namespace benchhost::host {

/// Process placement, from the launcher (single process: rank 0 of 1).
struct Placement {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;                     ///< this run's processes on this node
  std::string launcher = "none";          ///< comm/launch.hpp: "openmpi", "slurm", ..., "none"
  Communicator* communicator = nullptr;   ///< owned by run_main; null only in unit tests
};

/// Seed of time-to-train run `run` derived from the base seed (SplitMix64: distinct, reproducible).
std::uint64_t derive_seed(std::uint64_t base, int run);

/// Run the mode selected in `s` and emit every record into `bus`. Returns the ttt summary object
/// (null for other modes). Plugin failures become records; only host bugs throw. The ttt runs or
/// sweep points before `first_point` (PointStart::index) are not run: a worker that resumes after
/// a crashed one starts there (Note [Crash isolation]).
nlohmann::ordered_json run_selected_mode(const Settings& s, const std::shared_ptr<LoadedPlugin>& plugin,
                                         const Placement& where, EventBus& bus, int first_point = 0);

/// Weak scaling: set r.scaling_efficiency against the 1-device point of the same batch in
/// `earlier`, when both passed. Recomputing it over a longer `earlier` gives the same value.
void apply_weak_scaling(RunRecord& r, const std::vector<RunRecord>& earlier);

/// Time-to-train aggregation over the ttt records in `records` (olympic mean; see stats.hpp).
nlohmann::ordered_json summarize_ttt(const std::vector<RunRecord>& records, const WorkloadInfo& info);

/// SIGINT/SIGTERM: handlers set a flag; run loops stop at the next step and report what they have.
void install_signal_handlers();
int received_signal();  ///< 0 when none
int received_signal_count();  ///< SIGINT/SIGTERM/SIGHUP received so far (Note [Interrupts], run_modes.cpp)
/// Whether a second signal ends this process at once (true, the default) or is left to the
/// caller (a supervisor, which kills its worker instead).
void set_second_signal_ends_process(bool ends);
void raise_interrupt_for_testing(int sig);

/// Note [A step that does not return] (run_modes.cpp): in a process that runs the plugin itself,
/// ends the run `grace_seconds` after the first signal (at once on a second) with the point in
/// progress recorded, if the run's thread has not finished by then. Destroy it before `bus`.
class InterruptWatcher {
 public:
  InterruptWatcher(EventBus& bus, double grace_seconds, bool several_ranks, std::FILE* err);
  ~InterruptWatcher();
  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

 private:
  void watch();
  EventBus& bus_;
  double grace_seconds_;
  bool several_ranks_;
  std::FILE* err_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace benchhost::host
