#pragma once
/// @file comm/communicator.hpp  Collectives across the processes of a run.
///
/// A Communicator connects the `size()` processes of one job (one per device).
/// Collectives: allreduce, broadcast, allgather, reduce_scatter, alltoall (per-peer counts, or
/// equal blocks) and barrier; each but barrier returns a Work handle.
/// Backends:
///   "single"  one process; no dependency; every collective is a local copy or nothing.
///   "mpi"     OpenMPI (or any MPI-3 library); CPU tensors (CUDA tensors are staged through host
///             memory, correct but slow); also bootstraps NCCL. Built when MPI is found.
///   "nccl"    CUDA tensors; lives in libbenchhost_sdk_cuda.so; the ncclUniqueId is broadcast over
///             the MPI backend; one NCCL communicator per run; alltoall is grouped
///             ncclSend/ncclRecv. Built when CUDA and NCCL are found.
///
/// Threading: collectives must be issued in the same order on every rank (as in MPI), from one
/// thread at a time per communicator. A Work handle may be waited on from any thread.
/// Ownership: a collective reads and writes the caller's tensors until its Work completes; the
/// caller keeps them alive and does not touch them until then (the Work also holds a reference
/// to their storage, so a dropped Tensor handle cannot free memory under a running collective).
/// Destroy communicators before main() returns: MPI is finalised by a static destructor.
///
/// Note [Collective timeout]
/// Every wait has a deadline (CommOptions::timeout_seconds, from the moment the collective was
/// issued). When it passes, the backend asks its peers over a separate control channel which
/// collective each has reached, and throws CommError naming the collective, its sequence number,
/// the timeout, and each rank that has not started it or did not answer (dead or stopped). The
/// communicator is then failed: later calls throw at once. The caller (the host) records the
/// failure (rank 0 writes its report with status FAILED) and calls abort(); if nobody does
/// within CommOptions::abort_grace_seconds a watchdog aborts the job, so no run hangs forever.
/// A rank that dies is reaped by the launcher: OpenMPI's mpirun sends SIGTERM (then SIGKILL) to
/// the others, which the host handles; see docs/multi-process.md.
///
/// Note [Uneven chunks]
/// allgather and reduce_scatter split a flat buffer of N elements over P ranks like
/// numpy.array_split: rank r owns chunk_count(N, P, r) = N / P + (r < N % P ? 1 : 0) elements at
/// offset chunk_offset(N, P, r). Every rank knows N, so no counts are exchanged.
///
/// Note [All-to-all blocks]
/// alltoall moves size() blocks out of and into flat buffers: block r of `in` (send_counts[r]
/// elements, at the sum of the earlier send counts) goes to rank r, and block q of `out`
/// (recv_counts[q] elements, at the sum of the earlier receive counts) comes from rank q, so
/// rank q's send_counts[r] must equal rank r's recv_counts[q]. Every rank checks only its own
/// counts against its own tensors; counts that disagree between ranks are the caller's error
/// (MPI reports a truncation or the collective times out). When the counts vary per step (the
/// embedding exchange of a model-parallel table), exchange them first with the equal-block form
/// on one i64 per rank. Counts are int64 on every backend: the MPI backend, whose counts and
/// displacements are int, sends blocks with more than INT_MAX elements (or at offsets beyond
/// INT_MAX) as per-peer derived datatypes through MPI_Ialltoallw; NCCL counts are size_t.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "benchhost/comm/launch.hpp"
#include "benchhost/error.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost {

/// Reduction operators. avg is sum divided by size(). Integer sums wrap modulo 2^bits (u8 sums
/// of more than 255 wrap; use a wider dtype). Integer avg: the MPI backend sums u8/i32 in 64 bits
/// and truncates the quotient toward zero; the NCCL backend rejects it (use sum, then divide).
/// f16 and bf16 are reduced element-wise in float and rounded to nearest even after each
/// pairwise step, like NCCL.
enum class ReduceOp : std::uint8_t { sum, avg, max, min };
/// "sum", "avg", "max", "min"
const char* reduce_op_name(ReduceOp op) noexcept;

/// Elements of N owned by rank r of P (Note [Uneven chunks]).
inline std::int64_t chunk_count(std::int64_t n, int p, int r) {
  return n / p + (r < n % p ? 1 : 0);
}
/// Offset (in elements) of rank r's chunk of N over P.
inline std::int64_t chunk_offset(std::int64_t n, int p, int r) {
  return static_cast<std::int64_t>(r) * (n / p) + (r < n % p ? r : n % p);
}

/// Backend side of a Work handle. Backends derive from it; users hold Work.
class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  /// Non-blocking: true once the collective finished and its results are in the tensors.
  /// Throws CommError if it failed.
  virtual bool test() = 0;
  /// Block until finished or the communicator's timeout passes (throws CommError).
  virtual void wait() = 0;
  /// "allreduce #12 (sum, f32, 1048576 elements)"
  virtual std::string describe() const = 0;
};

/// Handle to an issued collective. Cheap to copy (shared). A default-constructed Work is
/// already complete. Dropping a Work without waiting is allowed: the collective still runs to
/// completion and the backend keeps its buffers alive until then, but only a wait on this Work
/// says when its result is in the tensors.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkImpl> impl) : impl_(std::move(impl)) {}
  /// Block until the collective has finished. Throws CommError on timeout or peer failure.
  void wait() {
    if (impl_) impl_->wait();
  }
  /// Non-blocking completion check (also drives progress). Throws CommError on failure.
  bool is_completed() { return !impl_ || impl_->test(); }
  std::string describe() const { return impl_ ? impl_->describe() : "completed work"; }

 private:
  std::shared_ptr<WorkImpl> impl_;
};

/// Options for create_communicator.
struct CommOptions {
  /// Deadline for each collective, from issue to completion, in seconds (Note [Collective
  /// timeout]). Generous by default: the first collective of a run waits for every rank's setup.
  double timeout_seconds = 1800;
  /// After a fatal error is reported (CommError thrown), abort the whole job this many seconds
  /// later if the process has not ended or called abort() by then. <= 0 disables the watchdog.
  double abort_grace_seconds = 30;
  /// Called once, on the thread that detected the failure, just before the first fatal
  /// CommError is thrown (and before the watchdog aborts). The host uses it to mark the run
  /// FAILED; it must be quick and must not call the communicator.
  std::function<void(const CommError&)> on_fatal_error;
  /// MPI backend: how often the background progress thread polls outstanding collectives while
  /// no thread waits on them, in microseconds (the overlap of bucketed gradient reduction
  /// depends on it: MPI's non-blocking collectives advance only inside MPI calls).
  int progress_poll_us = 50;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "single", "mpi" or "nccl"
  virtual std::string backend_name() const = 0;
  /// The device whose tensors this communicator moves (cpu for single/mpi, cuda:N for nccl).
  virtual Device device() const = 0;

  /// In place: every rank's `tensor` becomes op over all ranks' tensors. Same shape and dtype
  /// on every rank. dtypes f32, f64, f16, bf16, i32, i64, u8.
  virtual Work allreduce(Tensor& tensor, ReduceOp op) = 0;
  /// In place: every rank's `tensor` becomes root's. Any dtype.
  virtual Work broadcast(Tensor& tensor, int root) = 0;
  /// `in` is this rank's chunk (chunk_count(out.numel(), size(), rank()) elements); `out` (any
  /// shape, N elements) receives every rank's chunk in rank order. Same dtype. Any dtype.
  virtual Work allgather(const Tensor& in, Tensor& out) = 0;
  /// `in` (N elements, same on every rank) is reduced with op across ranks; `out` receives this
  /// rank's chunk of the result (chunk_count(N, size(), rank()) elements). Same dtype.
  virtual Work reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  /// All-to-all with per-peer counts (MPI_Alltoallv): `in` holds size() consecutive blocks, block r
  /// (send_counts[r] elements) going to rank r; `out` receives size() consecutive blocks, block r
  /// (recv_counts[r] elements) coming from rank r. send_counts[r] on rank q must equal
  /// recv_counts[q] on rank r (exchange counts first when they vary, e.g. with the equal-block form
  /// on one i64 per rank). in.numel() == sum(send_counts), out.numel() == sum(recv_counts); same
  /// dtype; any dtype; both contiguous; zero counts allowed. Counts are not limited to INT_MAX on
  /// any backend (Note [All-to-all blocks]). `in` and `out` may share storage (the mpi and
  /// nccl backends then send from a copy). Throws InvalidArgument, before anything is sent, naming the numbers
  /// when a count is negative, there are not size() of them, or a sum differs from numel().
  virtual Work alltoall(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& send_counts,
                        const std::vector<std::int64_t>& recv_counts) = 0;
  /// Equal blocks: in.numel() == out.numel() == N, N divisible by size(); block r of N / size()
  /// elements goes to rank r, and out's block r comes from rank r. (Derived classes that override
  /// the virtual form add `using Communicator::alltoall;` so this overload stays visible.)
  Work alltoall(const Tensor& in, Tensor& out);
  /// Blocks until every rank has reached it (with the timeout). Throws CommError.
  virtual void barrier() = 0;
  /// End the whole job now: MPI_Abort (mpirun then stops every rank) / ncclCommAbort and exit.
  /// Never returns. The host calls it after writing what it has when a CommError occurred.
  [[noreturn]] virtual void abort(int exit_code) noexcept = 0;
  /// True once a collective failed or timed out; later calls throw CommError at once.
  virtual bool failed() const = 0;
};

/// Create the communicator for this process.
/// backend: "auto" | "single" | "mpi" | "nccl". auto: nccl when `device` is a CUDA device that is
/// present, env.world_size > 1 and NCCL was built; else mpi when env.world_size > 1 and MPI was
/// built; else single when world_size == 1 (one process needs no collective library).
/// Throws InvalidArgument (unknown backend, single with world_size > 1) or Unsupported (the
/// backend was not built: "world size 2 from openmpi but this benchhost was built without MPI").
/// The MPI backend checks that MPI's own rank and size agree with `env` (CommError otherwise).
std::unique_ptr<Communicator> create_communicator(const std::string& backend, Device device,
                                                  const LaunchEnv& env,
                                                  const CommOptions& opts = {});
/// Names of the backends this build can create ("single", and "mpi"/"nccl" when built).
std::vector<std::string> available_comm_backends();

/// Only rank 0 writes files and the console table.
inline bool is_writer(const Communicator& comm) { return comm.rank() == 0; }
inline bool is_writer(const Communicator* comm) { return comm == nullptr || comm->rank() == 0; }

// ---- helpers for metrics and report aggregation (blocking; every rank must call them) ----

/// Element-wise op over ranks of a few host scalars (e.g. {correct, total} for accuracy).
std::vector<double> allreduce_values(Communicator& comm, std::vector<double> values, ReduceOp op);
std::vector<std::int64_t> allreduce_values(Communicator& comm, std::vector<std::int64_t> values,
                                           ReduceOp op);
/// A braced list of one type, `allreduce_values(comm, {correct, total}, ReduceOp::sum)`: without
/// this the list would match both overloads above.
template <class T>
  requires std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>
std::vector<T> allreduce_values(Communicator& comm, std::initializer_list<T> values, ReduceOp op) {
  return allreduce_values(comm, std::vector<T>(values), op);
}
inline double allreduce_value(Communicator& comm, double v, ReduceOp op) {
  return allreduce_values(comm, std::vector<double>{v}, op)[0];
}
/// Every rank's value, in rank order (e.g. per-rank step times: min/median/max for stragglers).
std::vector<double> allgather_values(Communicator& comm, double value);

/// How one per-rank quantity (a step time in ms, samples/s) spreads over the ranks, for reports
/// that make a straggler visible. median is the lower middle value for an even count.
struct RankSpread {
  double min = 0, median = 0, max = 0, sum = 0;
  int min_rank = 0, max_rank = 0;  ///< the ranks holding min and max (lowest rank on ties)
};
/// Blocking; every rank calls it and gets the same result.
RankSpread rank_spread(Communicator& comm, double value);

}  // namespace benchhost
