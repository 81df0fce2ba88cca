#include "machine_load.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace benchhost::host {

// Note [A busy machine]
// A throughput figure measured while other processes compete for the CPUs understates the machine,
// by a factor no reader of the report can guess: on a 2-core VM with two spinning processes,
// resnet50's mini training ran at 0.10x its idle throughput and dlrm_dcnv2's at 0.19x (0.13x and
// 0.34x with OMP_WAIT_POLICY=PASSIVE, which idle costs resnet50 15%; tools/bench_busy_machine.sh,
// results/cpu/2026-11-25/busy_machine). The host cannot make the machine idle, so it measures how
// busy it was and says so.
// Over each measurement (a sweep point's timed steps, a time-to-train run from run_start to
// run_stop) it reads /proc/stat's CPU counters and its own CPU time (getrusage) at both ends:
//   other CPUs = (busy time of all CPUs - this run's CPU time) / wall time,
// where this run's CPU time is this process's times the run's processes on the node (its ranks),
// and steal = the hypervisor's `steal` share of all CPU time. A window of at least 0.25 s with
// other processes keeping at least max(0.5, 10% of the CPUs) busy, or with 5% or more stolen, is
// a busy machine: the record keeps its status and figures, gets `machine_load.busy` true and a
// message saying what was measured, on the console, in JSON and in CSV.

namespace {
constexpr double kMinWindowSeconds = 0.25;
constexpr double kStealLimit = 0.05;
}  // namespace

std::string MachineLoad::describe() const {
  return fmt::format("other processes kept {:.2g} of {} CPUs busy, {:.1f}% CPU time stolen by the hypervisor, load {:.2g}",
                     other_cpus, cpus, steal_fraction * 100, load_average);
}

MachineLoad LoadWindow::judge(int cpus, double seconds, double total_jiffies, double busy_jiffies, double steal_jiffies,
                              double own_jiffies, double load_average) {
  MachineLoad m;
  m.cpus = cpus;
  m.seconds = seconds;
  m.load_average = load_average;
  if (cpus <= 0 || total_jiffies <= 0) return m;
  // Jiffies per CPU over the window: the kernel's own measure of the window's length.
  const double per_cpu = total_jiffies / cpus;
  m.other_cpus = std::max(0.0, (busy_jiffies - own_jiffies) / per_cpu);
  m.steal_fraction = std::clamp(steal_jiffies / total_jiffies, 0.0, 1.0);
  m.busy = seconds >= kMinWindowSeconds &&
           (m.other_cpus >= std::max(0.5, 0.1 * cpus) || m.steal_fraction >= kStealLimit);
  return m;
}

LoadWindow::Sample LoadWindow::take() {
  Sample s;
  s.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::ifstream in("/proc/stat");
  std::string line;
  bool have_total = false;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0) break;
    if (line.rfind("cpu ", 0) == 0) {
      // user nice system idle iowait irq softirq steal (guest time is already inside user)
      std::istringstream f(line.substr(4));
      double v[8] = {};
      for (double& x : v) f >> x;
      if (!f) return s;
      s.busy = v[0] + v[1] + v[2] + v[5] + v[6];
      s.steal = v[7];
      s.total = s.busy + v[3] + v[4] + s.steal;
      have_total = true;
    } else {
      ++s.cpus;
    }
  }
  rusage u{};
  const long tick = ::sysconf(_SC_CLK_TCK);
  if (!have_total || s.cpus == 0 || tick <= 0 || ::getrusage(RUSAGE_SELF, &u) != 0) return s;
  const double cpu_seconds = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                             static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
  s.own = cpu_seconds * static_cast<double>(tick);
  s.ok = true;
  return s;
}

LoadWindow::LoadWindow(int local_processes) : begin_(take()), local_processes_(std::max(1, local_processes)) {}

std::optional<MachineLoad> LoadWindow::finish() const {
  const Sample end = take();
  if (!begin_.ok || !end.ok) return std::nullopt;
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  return judge(end.cpus, end.wall - begin_.wall, end.total - begin_.total, end.busy - begin_.busy,
               end.steal - begin_.steal, (end.own - begin_.own) * local_processes_, load);
}

}  // namespace benchhost::host
