// A small multi-process program that fails on purpose, for the failure tests in CMakeLists.txt:
//   comm_failure_probe kill   DIR : the last rank raises SIGKILL after the first collective
//   comm_failure_probe hang   DIR : the last rank sleeps 60 s instead of joining the second one
//   comm_failure_probe vanish DIR : the last rank _exit(0)s after the first (no MPI_Finalize)
//   comm_failure_probe stop   DIR : the last rank stops itself (SIGSTOP): alive to the launcher,
//                                   but neither it nor its progress thread answers anything
// An optional third argument names collective #2: allreduce (the default) or alltoall (equal
// blocks of 256 f32 per rank).
// The survivors sit in the second collective. What must happen, each in bounded time: mpirun
// ends the job (kill, vanish) or the collective timeout fires with a CommError naming the rank
// (hang, and vanish if the launcher does not notice), rank 0 — and only rank 0 — writes its
// FAILED report (here a marker file in DIR; on SIGTERM from mpirun too), and abort() ends the
// job, the sleeping rank included.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "benchhost/comm/communicator.hpp"

using namespace benchhost;

namespace {
char g_sigterm_marker[512];

// What the host does on SIGTERM: record the failure (async-signal-safe calls only) and exit.
void on_sigterm(int) {
  int fd = open(g_sigterm_marker, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd >= 0) {
    const char msg[] = "status FAILED: terminated by the launcher\n";
    ssize_t ignored = write(fd, msg, sizeof msg - 1);
    (void)ignored;
    close(fd);
  }
  _exit(143);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s kill|hang|vanish|stop DIR [allreduce|alltoall]\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1], dir = argv[2], second = argc == 4 ? argv[3] : "allreduce";
  if (second != "allreduce" && second != "alltoall") {
    std::fprintf(stderr, "unknown collective '%s': allreduce or alltoall\n", second.c_str());
    return 2;
  }
  LaunchEnv env = detect_launch_env();
  CommOptions opts;
  opts.timeout_seconds = mode == "hang" || mode == "stop" ? 2 : 10;
  opts.abort_grace_seconds = 5;
  opts.on_fatal_error = [&](const CommError& e) {
    std::fprintf(stderr, "rank %d: fatal communication error reported to the host hook\n", env.rank);
  };
  auto comm = create_communicator("mpi", Device::cpu(), env, opts);
  const int last = comm->size() - 1;
  if (is_writer(*comm)) {
    std::snprintf(g_sigterm_marker, sizeof g_sigterm_marker, "%s/rank%d_sigterm", dir.c_str(), comm->rank());
    signal(SIGTERM, on_sigterm);
  }

  Tensor t = Tensor::full({1024}, 1.0);
  comm->allreduce(t, ReduceOp::sum).wait();  // collective #1: everyone is here
  std::fflush(stdout);

  if (comm->rank() == last) {
    if (mode == "kill") raise(SIGKILL);
    if (mode == "vanish") _exit(0);
    if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(60));
    if (mode == "stop") raise(SIGSTOP);
  }
  try {
    if (second == "alltoall") {
      Tensor in = Tensor::full({256 * comm->size()}, 1.0);
      Tensor out = Tensor::zeros({256 * comm->size()});
      comm->alltoall(in, out).wait();  // collective #2
    } else {
      comm->allreduce(t, ReduceOp::sum).wait();  // collective #2
    }
    std::printf("rank %d: collective #2 completed (unexpected)\n", comm->rank());
  } catch (const CommError& e) {
    std::printf("rank %d caught CommError: %s\n", comm->rank(), e.message().c_str());
    std::fflush(stdout);
    if (is_writer(*comm)) {
      std::ofstream(dir + "/report_rank" + std::to_string(comm->rank()) + ".txt")
          << "status FAILED: " << e.message() << "\n";
    }
    comm->abort(3);
  }
  return 0;
}
