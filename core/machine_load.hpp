#pragma once
/// @file machine_load.hpp  How busy the machine was while a measurement ran (Note [A busy machine]).

#include <optional>
#include <string>

namespace benchhost::host {

/// The machine over one measurement window, from /proc/stat and this process's CPU time.
struct MachineLoad {
  int cpus = 0;               ///< CPUs the kernel accounts (the `cpuN` lines of /proc/stat)
  double seconds = 0;         ///< the window's wall time
  double other_cpus = 0;      ///< CPUs kept busy by other processes, on average over the window
  double steal_fraction = 0;  ///< share of CPU time the hypervisor gave to other guests
  double load_average = 0;    ///< the 1-minute load average at the window's end
  bool busy = false;          ///< enough of either to make the window's figures understate the machine
  /// "other processes kept 1.9 of 2 CPUs busy, 0.0% CPU time stolen by the hypervisor, load 3.1"
  std::string describe() const;
};

/// Started at a measurement's first clock read, finished at its last. `local_processes` is how
/// many processes of this run share the node (ranks on it; each is assumed to use about the CPU
/// time this one does), so that they do not count as other work.
class LoadWindow {
 public:
  explicit LoadWindow(int local_processes = 1);
  /// nullopt where /proc/stat or the process's CPU time cannot be read (not Linux).
  std::optional<MachineLoad> finish() const;

  /// The verdict on raw counts (jiffies summed over all CPUs), for tests.
  static MachineLoad judge(int cpus, double seconds, double total_jiffies, double busy_jiffies, double steal_jiffies,
                           double own_jiffies, double load_average);

 private:
  struct Sample {
    bool ok = false;
    double total = 0, busy = 0, steal = 0;  ///< jiffies over all CPUs
    double own = 0;                         ///< this process's CPU time, in jiffies
    double wall = 0;                        ///< seconds, steady clock
    int cpus = 0;
  };
  static Sample take();
  Sample begin_;
  int local_processes_;
};

}  // namespace benchhost::host
