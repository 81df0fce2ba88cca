#pragma once
/// @file memory_budget.hpp  How much memory a run may plan for, for the fit checks workloads make
/// before they allocate (so a run that cannot fit is OOM with advice, not a kill by the kernel).
///
/// Note [Memory budgets]
/// On a GPU the budget is the device's memory (the CUDA backend's facts). On the CPU it is the
/// machine's memory, but a process inside a memory cgroup (a container, a Slurm job, a systemd
/// unit) is killed at the cgroup's limit, well before the machine runs out, so the limits of the
/// process's cgroup and of every cgroup above it count too (cgroup v2 memory.max, or cgroup v1
/// memory.limit_in_bytes). capacity is the most the run could ever use; available subtracts what
/// is in use now (MemAvailable, and the cgroup's memory.current / usage_in_bytes).

#include <string>

#include "benchhost/device.hpp"

namespace benchhost {

struct MemoryBudget {
  double capacity_bytes = 0;   ///< total memory the run could use (0 = unknown)
  double available_bytes = 0;  ///< of it, free now (0 = unknown); the GPU's is its capacity
  std::string source;          ///< where the numbers come from, for messages: "cgroup /job.slice limit"
};

/// The budget of `device` for this process (Note [Memory budgets]). Never throws: unknown parts
/// are 0.
MemoryBudget memory_budget(Device device);

namespace detail {
/// The tightest cgroup memory limit and its usage for the cgroup named in `proc_self_cgroup` (the
/// text of /proc/self/cgroup), read under `sysfs_cgroup_root` (/sys/fs/cgroup). {0, 0, ""} when
/// no limit is set. Exposed for tests.
MemoryBudget cgroup_memory(const std::string& proc_self_cgroup, const std::string& sysfs_cgroup_root);
}  // namespace detail

}  // namespace benchhost
