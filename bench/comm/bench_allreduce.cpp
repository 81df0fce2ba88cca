// Allreduce bus bandwidth: benchhost's MPI communicator vs MPI_Allreduce called directly.
//
//   mpirun -np 2 bench_allreduce [--min-bytes 4096] [--max-bytes 268435456] [--seconds 0.3]
//                                [--rounds 5]
//
// For each message size (x4 from min to max, f32 sum) both paths run the same number of
// iterations on the same buffer, in alternating rounds so drift on a shared machine hits both
// alike; each round is timed between barriers and its time is the slowest rank's. The table
// reports the median round: time per allreduce, algorithm bandwidth (bytes / time) and bus
// bandwidth (2 (n-1)/n x bytes / time, the nccl-tests convention: what each link carries), and
// the overhead of our layer as a ratio of times. On a shared machine noise only ever adds time,
// so the table shows the best round of each path, with the median rounds' ratio beside it.

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "benchhost/comm/communicator.hpp"

using namespace benchhost;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Slowest rank's elapsed time of `iters` calls of fn, between barriers.
template <class Fn>
double timed_round(int iters, Fn&& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  double local = seconds_since(t0), slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string human_bytes(std::size_t b) {
  if (b >= (1u << 20)) return std::to_string(b >> 20) + " MB";
  return std::to_string(b >> 10) + " KB";
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_bytes = 4096, max_bytes = std::size_t{256} << 20;
  double seconds = 0.3;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--min-bytes") min_bytes = std::stoull(v);
    else if (k == "--max-bytes") max_bytes = std::stoull(v);
    else if (k == "--seconds") seconds = std::stod(v);
    else if (k == "--rounds") rounds = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }

  LaunchEnv env = detect_launch_env();
  CommOptions opts;
  opts.timeout_seconds = 600;
  // Our backend initialises MPI (asking for MPI_THREAD_MULTIPLE) and the raw calls below share it.
  auto comm = create_communicator("mpi", Device::cpu(), env, opts);
  int level = 0;
  MPI_Query_thread(&level);
  const int n = comm->size(), rank = comm->rank();
  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, len);
    v = v.substr(0, v.find('\n'));
    std::printf("# allreduce f32 sum, %d ranks, %s, thread level %s\n", n, v.c_str(),
                level == MPI_THREAD_MULTIPLE ? "MULTIPLE" : "below MULTIPLE (raw calls unsafe)");
    std::printf("# best of %d alternating rounds of ~%.2f s each (median ratio in the last column); "
                "times are the slowest rank's\n", rounds, seconds);
    std::printf("%9s | %11s %10s %10s | %11s %10s %10s | %9s %9s | %11s\n", "size", "ours us",
                "algbw GB/s", "busbw GB/s", "MPI us", "algbw GB/s", "busbw GB/s", "overhead",
                "(median)", "Iallreduce us");
  }
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;

  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::int64_t count = static_cast<std::int64_t>(bytes / sizeof(float));
    Tensor ours = Tensor::zeros({count});
    Tensor raw = Tensor::zeros({count});
    float* raw_ptr = raw.data<float>();
    auto run_ours = [&] { comm->allreduce(ours, ReduceOp::sum).wait(); };
    auto run_raw = [&] {
      MPI_Allreduce(MPI_IN_PLACE, raw_ptr, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    // The non-blocking MPI call our backend is built on, waited at once: how much of the
    // overhead is MPI's non-blocking path rather than our layer.
    auto run_nbc = [&] {
      MPI_Request req;
      MPI_Iallreduce(MPI_IN_PLACE, raw_ptr, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                     MPI_COMM_WORLD, &req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
    };
    // Warm up both paths (first-touch pages, MPI's internal buffers) and size the rounds by the
    // slower of the two so both run the same count.
    for (int w = 0; w < 2; ++w) {
      run_ours();
      run_raw();
    }
    double probe = std::max(timed_round(1, run_ours), timed_round(1, run_raw));
    int iters = std::max(1, static_cast<int>(seconds / std::max(probe, 1e-7)));
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);

    std::vector<double> t_ours, t_raw, t_nbc;
    for (int r = 0; r < rounds; ++r) {
      if (r % 2 == 0) {
        t_ours.push_back(timed_round(iters, run_ours) / iters);
        t_raw.push_back(timed_round(iters, run_raw) / iters);
        t_nbc.push_back(timed_round(iters, run_nbc) / iters);
      } else {
        t_nbc.push_back(timed_round(iters, run_nbc) / iters);
        t_raw.push_back(timed_round(iters, run_raw) / iters);
        t_ours.push_back(timed_round(iters, run_ours) / iters);
      }
    }
    double a = *std::min_element(t_ours.begin(), t_ours.end());
    double b = *std::min_element(t_raw.begin(), t_raw.end());
    double c = *std::min_element(t_nbc.begin(), t_nbc.end());
    double med_ratio = median(t_ours) / median(t_raw);
    if (rank == 0) {
      std::printf("%9s | %11.1f %10.3f %10.3f | %11.1f %10.3f %10.3f | %+8.1f%% %+8.1f%% | %11.1f\n",
                  human_bytes(bytes).c_str(), a * 1e6, bytes / a / 1e9,
                  bus_factor * bytes / a / 1e9, b * 1e6, bytes / b / 1e9,
                  bus_factor * bytes / b / 1e9, (a / b - 1) * 100, (med_ratio - 1) * 100, c * 1e6);
      std::fflush(stdout);
    }
  }
  comm.reset();
  return 0;
}
