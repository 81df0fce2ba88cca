#include "benchhost/comm/launch.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "benchhost/error.hpp"

namespace benchhost {

std::string LaunchEnv::describe() const {
  return fmt::format("rank {}/{} (local {}/{}, {})", rank, world_size, local_rank, local_size,
                     launcher);
}

namespace {

using Getenv = std::function<const char*(const char*)>;

std::optional<int> read_int(const Getenv& env, const char* name) {
  const char* v = env(name);
  if (!v || !*v) return std::nullopt;
  std::string_view s(v);
  int out = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p != s.data() + s.size()) {
    BH_THROW(InvalidArgument, "launcher environment variable {}='{}' is not an integer", name, s);
  }
  return out;
}

// SLURM_TASKS_PER_NODE looks like "4(x2),3": tasks on the first node(s) come first. The local
// size of *this* node is not derivable from it in general; the first entry is right for the
// homogeneous layouts benchmarks use, and SLURM_NTASKS_PER_NODE (set with --ntasks-per-node)
// is preferred when present.
std::optional<int> slurm_local_size(const Getenv& env) {
  if (auto n = read_int(env, "SLURM_NTASKS_PER_NODE")) return n;
  const char* v = env("SLURM_TASKS_PER_NODE");
  if (!v || !*v) return std::nullopt;
  std::string_view s(v);
  int out = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p == s.data()) {
    BH_THROW(InvalidArgument, "launcher environment variable SLURM_TASKS_PER_NODE='{}' does not "
             "start with a task count", s);
  }
  return out;
}

struct Family {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;  // may be null
  const char* local_size;  // may be null
};

LaunchEnv from_family(const Getenv& env, const Family& f) {
  LaunchEnv e;
  e.launcher = f.launcher;
  std::optional<int> rank = read_int(env, f.rank);
  std::optional<int> size = read_int(env, f.size);
  if (!size) {
    BH_THROW(InvalidArgument, "{}={} is set but {} is not: cannot tell the world size ({} launch)",
             f.rank, *rank, f.size, f.launcher);
  }
  std::optional<int> lrank = f.local_rank ? read_int(env, f.local_rank) : std::nullopt;
  std::optional<int> lsize;
  if (std::string_view(f.launcher) == "slurm") {
    lsize = slurm_local_size(env);
  } else if (f.local_size) {
    lsize = read_int(env, f.local_size);
  }
  if (*size < 1 || *rank < 0 || *rank >= *size) {
    BH_THROW(InvalidArgument, "inconsistent launcher environment: {}={} and {}={} (need 0 <= rank "
             "< size)", f.rank, *rank, f.size, *size);
  }
  e.rank = *rank;
  e.world_size = *size;
  // Without a local rank, assume one process per node; without a local size, the smallest
  // size consistent with the local rank (only device binding uses it, through local_rank).
  e.local_rank = lrank.value_or(0);
  e.local_size = lsize.value_or(e.local_rank + 1);
  const char* lr_name = f.local_rank ? f.local_rank : "(local rank)";
  const char* ls_name = std::string_view(f.launcher) == "slurm"
                            ? "SLURM_NTASKS_PER_NODE/SLURM_TASKS_PER_NODE"
                            : (f.local_size ? f.local_size : "(local size)");
  if (e.local_size < 1 || e.local_rank < 0 || e.local_rank >= e.local_size ||
      e.local_size > e.world_size) {
    BH_THROW(InvalidArgument, "inconsistent launcher environment: {}={}, {}={}, {}={} (need 0 <= "
             "local rank < local size <= world size)", lr_name, e.local_rank, ls_name,
             e.local_size, f.size, e.world_size);
  }
  return e;
}

}  // namespace

LaunchEnv detect_launch_env(const Getenv& env) {
  static const Family families[] = {
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
      {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {"torchrun-style", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
  };
  for (const Family& f : families) {
    if (read_int(env, f.rank)) return from_family(env, f);
  }
  // A size without a rank is as suspicious as the reverse.
  for (const Family& f : families) {
    if (auto s = read_int(env, f.size); s && *s != 1) {
      BH_THROW(InvalidArgument, "{}={} is set but {} is not: cannot tell this process's rank",
               f.size, *s, f.rank);
    }
  }
  return LaunchEnv{};
}

LaunchEnv detect_launch_env() {
  return detect_launch_env([](const char* name) { return std::getenv(name); });
}

Device device_for_local_rank(const LaunchEnv& env, DeviceType type) {
  if (type == DeviceType::cpu) return Device::cpu();
  int n = device_backend(type).device_count();
  if (n <= 0) {
    BH_THROW(Unsupported, "no CUDA device is visible to local rank {} (CUDA_VISIBLE_DEVICES='{}')",
             env.local_rank, std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES")
                                                                 : "(unset)");
  }
  return Device::cuda(env.local_rank % n);
}

}  // namespace benchhost
