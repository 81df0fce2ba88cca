// The NCCL communicator backend: CUDA tensors, one NCCL communicator per run. Built into
// libbenchhost_sdk_cuda.so when CUDA and NCCL are found (BENCHHOST_HAVE_NCCL); it registers
// itself with create_communicator() when that library is loaded.
//
// Note [NCCL bootstrap and timeouts]
// Rank 0 creates the ncclUniqueId and broadcasts it over the MPI communicator (the bootstrap),
// which this communicator keeps for barrier-free abort. The NCCL communicator is created
// non-blocking (ncclConfig_t::blocking = 0): every NCCL call may return ncclInProgress, and we
// poll ncclCommGetAsyncError against the collective timeout, so neither initialisation nor an
// enqueue can hang on a missing peer. Collectives run on a dedicated stream that first waits for
// the legacy default stream (where the SDK's ops run), and a Work is a CUDA event recorded after
// the collective: wait() polls it against the deadline and calls ncclCommAbort on timeout.
// avg uses ncclAvg for floating-point dtypes; integer avg is rejected (NCCL would divide each
// step's partial sum and u8 would wrap): use sum and divide.
// alltoall is one ncclSend and one ncclRecv per peer with a non-zero block (self included: NCCL
// copies it), fused by ncclGroupStart/End; counts are bytes in size_t, so no INT_MAX limit.

#ifdef BENCHHOST_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <thread>

#include "benchhost/comm/communicator.hpp"
#include "comm/backend_registry.hpp"
#include "comm/collective_checks.hpp"

namespace benchhost {
namespace {

using Clock = std::chrono::steady_clock;

#define BH_CHECK_CUDA_COMM(call)                                                            \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess)                                                                  \
      BH_THROW(CommError, "{} failed: {}", #call, cudaGetErrorString(e_));                  \
  } while (0)

ncclDataType_t nccl_reduce_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    default: BH_THROW(InvalidArgument, "nccl: no reduction for dtype {}", dtype_name(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg:
      if (!is_floating(t)) {
        BH_THROW(InvalidArgument, "nccl: avg of integer dtype {} is not supported (NCCL divides "
                 "partial sums); use sum and divide", dtype_name(t));
      }
      return ncclAvg;
  }
  return ncclSum;
}

class NcclCommunicator;

class NcclWork final : public WorkImpl {
 public:
  NcclWork(NcclCommunicator* c, std::string desc, Clock::time_point deadline)
      : comm_(c), desc_(std::move(desc)), deadline_(deadline) {}
  ~NcclWork() override {
    if (event_) cudaEventDestroy(event_);
  }
  bool test() override;
  void wait() override;
  std::string describe() const override { return desc_; }

  cudaEvent_t event_ = nullptr;
  std::vector<Tensor> keep_alive;

 private:
  NcclCommunicator* comm_;
  std::string desc_;
  Clock::time_point deadline_;
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Device device, const LaunchEnv& env, const CommOptions& opts,
                   std::unique_ptr<Communicator> bootstrap)
      : device_(device), opts_(opts), bootstrap_(std::move(bootstrap)), rank_(env.rank),
        size_(env.world_size) {
    BH_CHECK_AS(InvalidArgument, device.is_cuda(), "the nccl backend moves CUDA tensors; the run's "
                "device is {}", device.str());
    BH_CHECK_CUDA_COMM(cudaSetDevice(device.index));
    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (size_ > 1) {
      BH_CHECK(bootstrap_ != nullptr, "nccl with world size {} needs an MPI bootstrap", size_);
      Tensor bytes = Tensor::zeros({static_cast<std::int64_t>(sizeof id)}, DType::u8);
      if (rank_ == 0) std::memcpy(bytes.raw_data(), &id, sizeof id);
      bootstrap_->broadcast(bytes, 0).wait();
      std::memcpy(&id, bytes.raw_data(), sizeof id);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) check_nccl(rc, "ncclCommInitRankConfig");
    wait_ready("ncclCommInitRankConfig", deadline_from_now());
    BH_CHECK_CUDA_COMM(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }

  ~NcclCommunicator() override {
    if (stream_) cudaStreamSynchronize(stream_);
    inflight_.clear();
    if (comm_) {
      if (failed_) {
        ncclCommAbort(comm_);
      } else {
        ncclCommFinalize(comm_);
        ncclResult_t st = ncclInProgress;
        auto until = deadline_from_now();
        while (st == ncclInProgress && Clock::now() < until) ncclCommGetAsyncError(comm_, &st);
        ncclCommDestroy(comm_);
      }
    }
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }
  Device device() const override { return device_; }
  bool failed() const override { return failed_; }

  [[noreturn]] void abort(int exit_code) noexcept override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    std::fflush(stdout);
    std::fflush(stderr);
    if (bootstrap_) bootstrap_->abort(exit_code);
    std::_Exit(exit_code);
  }

  Work allreduce(Tensor& t, ReduceOp op) override {
    check_tensor(t, "allreduce", true);
    auto w = begin(fmt::format("allreduce ({}, {}, {} elements)", reduce_op_name(op),
                               dtype_name(t.dtype()), t.numel()), {t});
    enqueue(*w, "ncclAllReduce", [&] {
      return ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), nccl_reduce_type(t.dtype()),
                           nccl_op(op, t.dtype()), comm_, stream_);
    });
    return Work(w);
  }

  Work broadcast(Tensor& t, int root) override {
    check_tensor(t, "broadcast", false);
    BH_CHECK_AS(InvalidArgument, root >= 0 && root < size_,
                "broadcast root {} out of range for world size {}", root, size_);
    auto w = begin(fmt::format("broadcast (root {}, {}, {} elements)", root, dtype_name(t.dtype()),
                               t.numel()), {t});
    enqueue(*w, "ncclBroadcast", [&] {
      return ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, comm_, stream_);
    });
    return Work(w);
  }

  Work allgather(const Tensor& in, Tensor& out) override {
    detail::check_chunked(in, out, size_, rank_, "allgather", false);
    check_tensor(in, "allgather", false);
    check_tensor(out, "allgather", false);
    auto w = begin(fmt::format("allgather ({}, {} elements)", dtype_name(in.dtype()), out.numel()),
                   {in, out});
    const std::size_t es = in.element_size();
    const std::int64_t n = out.numel();
    auto* dst = static_cast<char*>(out.raw_data());
    enqueue(*w, "allgather", [&] {
      if (n % size_ == 0) {
        return ncclAllGather(in.raw_data(), dst, in.nbytes(), ncclUint8, comm_, stream_);
      }
      // Uneven chunks (Note [Uneven chunks]): one broadcast per owner, fused in a group.
      ncclResult_t rc = ncclGroupStart();
      for (int r = 0; r < size_ && rc == ncclSuccess; ++r) {
        char* chunk = dst + chunk_offset(n, size_, r) * es;
        std::size_t bytes = chunk_count(n, size_, r) * es;
        rc = ncclBroadcast(r == rank_ ? in.raw_data() : chunk, chunk, bytes, ncclUint8, r, comm_,
                           stream_);
      }
      ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
    return Work(w);
  }

  Work reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    detail::check_chunked(out, in, size_, rank_, "reduce_scatter", true);
    check_tensor(in, "reduce_scatter", true);
    check_tensor(out, "reduce_scatter", true);
    auto w = begin(fmt::format("reduce_scatter ({}, {}, {} elements)", reduce_op_name(op),
                               dtype_name(in.dtype()), in.numel()), {in, out});
    const std::size_t es = in.element_size();
    const std::int64_t n = in.numel();
    auto* src = static_cast<const char*>(in.raw_data());
    ncclDataType_t type = nccl_reduce_type(in.dtype());
    ncclRedOp_t nop = nccl_op(op, in.dtype());
    enqueue(*w, "reduce_scatter", [&] {
      if (n % size_ == 0) {
        return ncclReduceScatter(src, out.raw_data(), n / size_, type, nop, comm_, stream_);
      }
      ncclResult_t rc = ncclGroupStart();
      for (int r = 0; r < size_ && rc == ncclSuccess; ++r) {
        rc = ncclReduce(src + chunk_offset(n, size_, r) * es, r == rank_ ? out.raw_data() : nullptr,
                        chunk_count(n, size_, r), type, nop, r, comm_, stream_);
      }
      ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
    return Work(w);
  }

  Work alltoall(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& send_counts,
               const std::vector<std::int64_t>& recv_counts) override {
    detail::check_alltoall(in, out, send_counts, recv_counts, size_);
    check_tensor(in, "alltoall", false);
    check_tensor(out, "alltoall", false);
    // Sends and receives of one group run concurrently: never send from the buffer being received
    // into. The copy runs on the default stream, which the collective's stream waits for.
    Tensor src = in.storage() == out.storage() && in.numel() > 0 ? in.clone() : in;
    auto w = begin(fmt::format("alltoall ({}, {} elements sent, {} received)",
                               dtype_name(in.dtype()), in.numel(), out.numel()), {in, out, src});
    const std::size_t es = in.element_size();
    const auto* send_base = static_cast<const char*>(src.raw_data());
    auto* recv_base = static_cast<char*>(out.raw_data());
    enqueue(*w, "alltoall", [&] {
      ncclResult_t rc = ncclGroupStart();
      std::size_t send_at = 0, recv_at = 0;  // bytes
      for (int r = 0; r < size_ && rc == ncclSuccess; ++r) {
        const std::size_t send_bytes = static_cast<std::size_t>(send_counts[r]) * es;
        const std::size_t recv_bytes = static_cast<std::size_t>(recv_counts[r]) * es;
        if (send_bytes > 0)
          rc = ncclSend(send_base + send_at, send_bytes, ncclUint8, r, comm_, stream_);
        if (rc == ncclSuccess && recv_bytes > 0)
          rc = ncclRecv(recv_base + recv_at, recv_bytes, ncclUint8, r, comm_, stream_);
        send_at += send_bytes;
        recv_at += recv_bytes;
      }
      ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
    return Work(w);
  }
  using Communicator::alltoall;

  void barrier() override {
    Tensor one = Tensor::zeros({1}, DType::f32, device_);
    allreduce(one, ReduceOp::sum).wait();
  }

  // ---- used by NcclWork ----

  void check_async(const std::string& what) {
    if (failed_) throw CommError(failure_, __FILE__, __LINE__);
    ncclResult_t st = ncclSuccess;
    ncclCommGetAsyncError(comm_, &st);
    if (st != ncclSuccess && st != ncclInProgress) {
      fail(fmt::format("{} failed on rank {}: {} ({})", what, rank_, ncclGetErrorString(st),
                       ncclGetLastError(comm_)));
    }
  }

  [[noreturn]] void fail(const std::string& msg) {
    if (!failed_) {
      failed_ = true;
      failure_ = msg;
      CommError err(msg, __FILE__, __LINE__);
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
      // The watchdog ends this process; the launcher then ends the others (mpirun reports
      // the exit), which is all MPI_Abort would do.
      detail::report_fatal_error(opts_, err, [](int code) {
        std::fflush(stderr);
        std::_Exit(code);
      });
    }
    throw CommError(failure_, __FILE__, __LINE__);
  }

  const CommOptions& options() const { return opts_; }

 private:
  Clock::time_point deadline_from_now() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(opts_.timeout_seconds));
  }

  void check_nccl(ncclResult_t rc, const char* what) {
    if (rc != ncclSuccess) {
      BH_THROW(CommError, "{} failed on rank {}: {}", what, rank_, ncclGetErrorString(rc));
    }
  }

  void wait_ready(const char* what, Clock::time_point until) {
    for (;;) {
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) fail(fmt::format("{} failed on rank {}: {}", what, rank_,
                                                 ncclGetErrorString(st)));
      if (Clock::now() > until) {
        fail(fmt::format("{} did not complete within {} s on rank {} (a peer never joined, or "
                         "is stuck)", what, opts_.timeout_seconds, rank_));
      }
      sched_yield();
    }
  }

  void check_tensor(const Tensor& t, const char* op, bool reduction) {
    detail::check_defined(t, op, "input");
    detail::check_dtype_supported(t, op, reduction);
    BH_CHECK_AS(InvalidArgument, t.device() == device_, "{}: the nccl communicator moves tensors on "
                "{}, got {}", op, device_.str(), t.describe());
    BH_CHECK_AS(InvalidArgument, t.is_contiguous(), "{}: nccl needs a contiguous tensor, got {} "
                "(call contiguous() first)", op, t.describe());
  }

  std::shared_ptr<NcclWork> begin(std::string desc, std::vector<Tensor> tensors) {
    if (failed_) throw CommError(failure_, __FILE__, __LINE__);
    // Works the caller dropped still own their tensors until the GPU is done with them.
    std::erase_if(inflight_, [](const std::shared_ptr<NcclWork>& w) {
      return w->event_ && cudaEventQuery(w->event_) == cudaSuccess;
    });
    auto w = std::make_shared<NcclWork>(this, fmt::format("{} #{}", desc, ++seq_), deadline_from_now());
    w->keep_alive = std::move(tensors);
    inflight_.push_back(w);
    return w;
  }

  template <class Fn>
  void enqueue(NcclWork& w, const char* what, Fn&& fn) {
    BH_CHECK_CUDA_COMM(cudaSetDevice(device_.index));
    // Order after the SDK's work on the legacy default stream.
    cudaEvent_t produced;
    BH_CHECK_CUDA_COMM(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    BH_CHECK_CUDA_COMM(cudaEventRecord(produced, cudaStreamLegacy));
    BH_CHECK_CUDA_COMM(cudaStreamWaitEvent(stream_, produced, 0));
    cudaEventDestroy(produced);
    ncclResult_t rc = fn();
    if (rc != ncclSuccess && rc != ncclInProgress) {
      fail(fmt::format("{} failed on rank {}: {}", w.describe(), rank_, ncclGetErrorString(rc)));
    }
    wait_ready(what, deadline_from_now());
    BH_CHECK_CUDA_COMM(cudaEventCreateWithFlags(&w.event_, cudaEventDisableTiming));
    BH_CHECK_CUDA_COMM(cudaEventRecord(w.event_, stream_));
  }

  Device device_;
  CommOptions opts_;
  std::unique_ptr<Communicator> bootstrap_;
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::int64_t seq_ = 0;
  std::vector<std::shared_ptr<NcclWork>> inflight_;
  bool failed_ = false;
  std::string failure_;
};

bool NcclWork::test() {
  if (done_) return true;
  cudaError_t e = cudaEventQuery(event_);
  if (e == cudaSuccess) {
    done_ = true;
    keep_alive.clear();
    return true;
  }
  if (e != cudaErrorNotReady) comm_->fail(fmt::format("{}: {}", desc_, cudaGetErrorString(e)));
  comm_->check_async(desc_);
  return false;
}

void NcclWork::wait() {
  while (!test()) {
    if (Clock::now() > deadline_) {
      comm_->fail(fmt::format("{} did not complete within {} s on rank {} (a peer rank is dead, "
                              "stuck or has not issued it)", desc_,
                              comm_->options().timeout_seconds, comm_->rank()));
    }
    sched_yield();
  }
}

std::unique_ptr<Communicator> make_nccl(Device device, const LaunchEnv& env, const CommOptions& opts,
                                        std::unique_ptr<Communicator> bootstrap) {
  return std::make_unique<NcclCommunicator>(device, env, opts, std::move(bootstrap));
}

const bool registered = [] {
  detail::register_communicator_backend("nccl", &make_nccl);
  return true;
}();

}  // namespace
}  // namespace benchhost

#endif  // BENCHHOST_HAVE_NCCL
