#pragma once
/// @file comm/launch.hpp  Where this process sits in a multi-process run, read from the launcher.
///
/// Note [Launcher environments]
/// benchhost never starts its peers itself: the user runs it under the launcher the cluster
/// already has, one process per device (see docs/multi-process.md), and every process reads its
/// place from the environment that launcher set. Recognised, in this order (the first family
/// whose rank variable is set wins; later families are not consulted, because e.g. an sbatch
/// script sets SLURM_PROCID=0 for the batch step and an mpirun inside it must still win):
///   "openmpi"        OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
///                    OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
///   "slurm"          SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the local size from
///                    SLURM_NTASKS_PER_NODE or the first entry of SLURM_TASKS_PER_NODE ("4(x2)")
///   "pmi"            PMI_RANK, PMI_SIZE (MPICH/Hydra), MPI_LOCALRANKID, MPI_LOCALNRANKS
///   "torchrun-style" RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
///   "none"           none of them: rank 0 of 1
/// Values that contradict each other (rank >= size, a rank without its size, text that is not a
/// number) are an InvalidArgument naming the variables and their values.

#include <functional>
#include <string>

#include "benchhost/device.hpp"

namespace benchhost {

/// This process's place in the job. Plain data; copyable.
struct LaunchEnv {
  int rank = 0;           ///< global rank, 0 <= rank < world_size
  int world_size = 1;     ///< number of processes in the job
  int local_rank = 0;     ///< rank among the processes on this node, 0 <= local_rank < local_size
  int local_size = 1;     ///< processes on this node
  std::string launcher = "none";  ///< "openmpi", "slurm", "pmi", "torchrun-style" or "none"

  /// "rank 1/4 (local 1/2, openmpi)"
  std::string describe() const;
};

/// Read the launcher's environment (see Note [Launcher environments]). Throws InvalidArgument.
LaunchEnv detect_launch_env();
/// Same, with an injectable lookup (returns nullptr for unset variables); for tests.
LaunchEnv detect_launch_env(const std::function<const char*(const char*)>& getenv_fn);

/// The device this process should use: `cuda:(local_rank % visible devices)` for DeviceType::cuda,
/// `cpu` for DeviceType::cpu. The driver applies CUDA_VISIBLE_DEVICES before we count, so with
/// CUDA_VISIBLE_DEVICES=2,3 local rank 0 gets physical GPU 2 as cuda:0. Throws Unsupported when
/// CUDA is not available. When local_size exceeds the visible device count, ranks share devices
/// (modulo), which is allowed but slow; the host warns about it.
Device device_for_local_rank(const LaunchEnv& env, DeviceType type);

/// Whether this process writes files and the console table: only rank 0 does.
inline bool is_writer(const LaunchEnv& env) { return env.rank == 0; }

}  // namespace benchhost
