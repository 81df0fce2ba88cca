// The MPI communicator backend (compiled only when MPI is found; see sdk/CMakeLists.txt).
//
// Note [MPI progress and threading]
// MPI's non-blocking collectives (OpenMPI's libnbc) advance only while some thread is inside an
// MPI call, so a gradient bucket issued during backward would sit still until finish() without
// help. Each communicator therefore runs a progress thread that polls its outstanding requests
// (every CommOptions::progress_poll_us) and answers its peers' diagnostic queries. MPI is
// initialised once per process asking for MPI_THREAD_MULTIPLE; we need only SERIALIZED, because
// every MPI call benchhost makes holds one process-wide mutex (uncontended it costs nanoseconds;
// it also guarantees that no two threads ever touch the same request). With MULTIPLE, code
// outside benchhost (a benchmark calling MPI_Allreduce directly) may use MPI concurrently.
// A thread that waits on a Work polls that request itself in a tight loop, like a blocking
// MPI_Allreduce would, and the progress thread steps back while anyone waits, so a blocking
// wait pays no thread hand-off.
//
// Note [Timeout diagnosis]
// When a wait passes its deadline, the waiting rank sends a query to every peer on a second,
// duplicated communicator (the control channel) and collects, for a bounded time, each peer's
// (collectives issued, collectives completed). Peers' progress threads answer even while their
// main thread sleeps or computes, so a rank that has not issued the collective is named as such,
// and a rank that answers nothing is named as dead or stopped. Then the communicator is failed
// (Note [Collective timeout] in communicator.hpp).
//
// Note [MPI alltoall and large counts]
// alltoall is always MPI_Ialltoallw, never MPI_Ialltoallv: MPI 3.1 counts and displacements are
// int, and whether a block fits is known only to the rank that holds it (a rank may receive 3 GB
// while its peers send 1 GB each), but every rank must call the same collective. Per peer, a
// block whose count fits in an int and whose byte offset fits in an int is sent as plain
// elements (count, offset, element type); any other block as one element of a derived datatype
// built for it (a struct of `count / limit` contiguous runs of `limit` elements plus the rest,
// at its 64-bit byte offset). Type signatures are sequences of elements either way, so a plain
// block on one side matches a derived one on the other. Derived types are freed when the
// request completes. The test suite lowers the limit with BENCHHOST_TEST_MPI_COUNT_LIMIT (read
// when a communicator is created) to run this path with small tensors.

// Only the C API: keep OpenMPI/MPICH from pulling in the deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <optional>
#include <sched.h>
#include <thread>

#include <fmt/ranges.h>

#include "benchhost/comm/communicator.hpp"
#include "comm/backend_registry.hpp"
#include "comm/collective_checks.hpp"

namespace benchhost {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTagQuery = 101;
constexpr int kTagReply = 102;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, len);
}

// ---- element-wise reductions MPI lacks: f16 and bf16 ----

template <float (*ToF)(std::uint16_t), std::uint16_t (*FromF)(float), int Kind>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = ToF(a[i]), y = ToF(b[i]);
    float r = Kind == 0 ? x + y : Kind == 1 ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = FromF(r);
  }
}

// ---- process-wide MPI state ----

class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime rt;
    return rt;
  }
  std::mutex mu;  // held around every MPI call benchhost makes (Note [MPI progress and threading])
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Op f16_ops[3]{}, bf16_ops[3]{};  // sum, max, min

  ~MpiRuntime() {
    if (!we_initialized_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Op* op : {&f16_ops[0], &f16_ops[1], &f16_ops[2], &bf16_ops[0], &bf16_ops[1], &bf16_ops[2]})
      MPI_Op_free(op);
    // MPI_Finalize synchronises with the peers; one that never arrives must not hang us.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(120));
      std::fprintf(stderr, "benchhost: MPI_Finalize did not return within 120 s (a peer rank "
                           "never finished); exiting\n");
      std::_Exit(1);
    }).detach();
    MPI_Finalize();
  }

 private:
  MpiRuntime() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // Note [libnbc allreduce algorithm]: OpenMPI's non-blocking allreduce defaults to a
      // binomial reduce + broadcast for small communicators, which moves the whole buffer through
      // rank 0 twice: 2.5x slower than MPI_Allreduce's ring at >= 1 MB on 2 ranks (measured with
      // bench/comm/bench_allreduce). The ring matches it, so it is our default; a value the user
      // set (mpirun -x / --mca / environment) wins. Other MPI libraries ignore the variable.
      setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level);
      if (rc != MPI_SUCCESS) BH_THROW(CommError, "MPI_Init_thread failed: {}", mpi_error_string(rc));
      we_initialized_ = true;
    } else {
      MPI_Query_thread(&thread_level);
    }
    if (thread_level < MPI_THREAD_SERIALIZED) {
      BH_THROW(Unsupported, "this MPI library provides thread level {} but benchhost needs at "
               "least MPI_THREAD_SERIALIZED (it runs a progress thread)", thread_level);
    }
    MPI_Op_create(&half_op<half_to_float, float_to_half, 0>, 1, &f16_ops[0]);
    MPI_Op_create(&half_op<half_to_float, float_to_half, 1>, 1, &f16_ops[1]);
    MPI_Op_create(&half_op<half_to_float, float_to_half, 2>, 1, &f16_ops[2]);
    MPI_Op_create(&half_op<bf16_to_float, float_to_bf16, 0>, 1, &bf16_ops[0]);
    MPI_Op_create(&half_op<bf16_to_float, float_to_bf16, 1>, 1, &bf16_ops[1]);
    MPI_Op_create(&half_op<bf16_to_float, float_to_bf16, 2>, 1, &bf16_ops[2]);
  }
  bool we_initialized_ = false;
};

// Movement type by element size: bytes are bytes (fp8, bool and everything else included).
MPI_Datatype move_type(DType t) {
  switch (dtype_size(t)) {
    case 1: return MPI_UINT8_T;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
  }
}

// Reduction staging: integer avg is computed in i64 (no wrap before the division).
DType reduce_stage_dtype(DType t, ReduceOp op) {
  if (op == ReduceOp::avg && (t == DType::u8 || t == DType::i32)) return DType::i64;
  return t;
}

MPI_Datatype reduce_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    default: return MPI_UINT16_T;  // f16, bf16 through user ops
  }
}

MPI_Op reduce_mpi_op(DType t, ReduceOp op) {
  int k = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;
  if (t == DType::f16) return MpiRuntime::get().f16_ops[k];
  if (t == DType::bf16) return MpiRuntime::get().bf16_ops[k];
  return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

// Divide a contiguous CPU buffer by n in place (avg = sum / n).
void divide_in_place(Tensor& t, int n) {
  std::int64_t count = t.numel();
  switch (t.dtype()) {
    case DType::f32: { float* p = t.data<float>(); for (std::int64_t i = 0; i < count; ++i) p[i] /= n; break; }
    case DType::f64: { double* p = t.data<double>(); for (std::int64_t i = 0; i < count; ++i) p[i] /= n; break; }
    case DType::i64: { auto* p = t.data<std::int64_t>(); for (std::int64_t i = 0; i < count; ++i) p[i] /= n; break; }
    case DType::f16: {
      auto* p = static_cast<std::uint16_t*>(t.raw_data());
      for (std::int64_t i = 0; i < count; ++i) p[i] = float_to_half(half_to_float(p[i]) / n);
      break;
    }
    case DType::bf16: {
      auto* p = static_cast<std::uint16_t*>(t.raw_data());
      for (std::int64_t i = 0; i < count; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / n);
      break;
    }
    default:
      BH_THROW(Error, "avg staging of dtype {} is not implemented", dtype_name(t.dtype()));
  }
}

int checked_count(std::int64_t n, const char* op, const Tensor& t) {
  if (n > INT_MAX) {
    BH_THROW(InvalidArgument, "{}: {} has {} elements, more than MPI's int count allows ({}); "
             "split it into pieces", op, t.describe(), n, INT_MAX);
  }
  return static_cast<int>(n);
}

// A contiguous CPU buffer holding `t` converted to `dtype` (t itself when nothing is needed).
Tensor stage(const Tensor& t, DType dtype, bool copy_values) {
  if (t.device().is_cpu() && t.is_contiguous() && t.dtype() == dtype) return t;
  if (!copy_values) return Tensor::empty(t.shape(), dtype);
  Tensor cpu = t.device().is_cpu() ? t : t.to(Device::cpu());
  Tensor out = cpu.dtype() == dtype ? cpu.contiguous() : cpu.to(dtype).contiguous();
  if (out.storage() == t.storage()) out = out.clone();  // never alias a staged copy
  return out;
}

bool same_buffer(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.storage_offset() == b.storage_offset();
}

// The int limit for counts and byte offsets of MPI_Ialltoallw (Note [MPI alltoall and large
// counts]); tests lower it through the environment.
std::int64_t alltoall_int_limit() {
  const char* text = std::getenv("BENCHHOST_TEST_MPI_COUNT_LIMIT");
  if (text == nullptr || *text == '\0') return INT_MAX;
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  BH_CHECK_AS(InvalidArgument, *end == '\0' && v > 0 && v <= INT_MAX,
              "BENCHHOST_TEST_MPI_COUNT_LIMIT={} is not a count in 1..{}", text, INT_MAX);
  return v;
}

// One side of an MPI_Ialltoallw: per peer, a count, a byte offset and a datatype.
struct AlltoallwSide {
  std::vector<int> counts, byte_offsets;
  std::vector<MPI_Datatype> types;
};

// Fills `side` for blocks of `counts` elements of `type` (element size `es`) laid out one after
// another; blocks beyond `limit` become one element of a derived type, appended to `derived`.
// Runs under the runtime mutex. Returns the first failing MPI call's code.
int describe_alltoallw_side(const std::vector<std::int64_t>& counts, MPI_Datatype type,
                            std::int64_t es, std::int64_t limit, AlltoallwSide& side,
                            std::vector<MPI_Datatype>& derived) {
  std::int64_t offset = 0;  // in elements
  for (std::int64_t count : counts) {
    const std::int64_t offset_bytes = offset * es;
    if (count == 0 || (count <= limit && offset_bytes <= limit)) {
      side.counts.push_back(static_cast<int>(count));
      side.byte_offsets.push_back(count == 0 ? 0 : static_cast<int>(offset_bytes));
      side.types.push_back(type);
    } else {
      const std::int64_t runs = count / limit, rest = count % limit;
      MPI_Datatype run_type = MPI_DATATYPE_NULL, block_type = MPI_DATATYPE_NULL;
      int lengths[2], n = 0;
      MPI_Aint displacements[2];
      MPI_Datatype parts[2];
      if (runs > 0) {
        int rc = MPI_Type_contiguous(static_cast<int>(limit), type, &run_type);
        if (rc != MPI_SUCCESS) return rc;
        lengths[n] = static_cast<int>(runs);
        displacements[n] = static_cast<MPI_Aint>(offset_bytes);
        parts[n++] = run_type;
      }
      if (rest > 0) {
        lengths[n] = static_cast<int>(rest);
        displacements[n] = static_cast<MPI_Aint>((offset + runs * limit) * es);
        parts[n++] = type;
      }
      int rc = MPI_Type_create_struct(n, lengths, displacements, parts, &block_type);
      if (run_type != MPI_DATATYPE_NULL) MPI_Type_free(&run_type);
      if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&block_type);
      if (rc != MPI_SUCCESS) return rc;
      derived.push_back(block_type);
      side.counts.push_back(1);
      side.byte_offsets.push_back(0);
      side.types.push_back(block_type);
    }
    offset += count;
  }
  return MPI_SUCCESS;
}

class MpiCommunicator;

// ---- one outstanding collective ----

class MpiWork final : public WorkImpl {
 public:
  enum State { kPending, kCompleting, kDone, kFailed };

  MpiWork(MpiCommunicator* comm, std::int64_t seq, std::string desc, Clock::time_point deadline)
      : comm_(comm), seq_(seq), desc_(std::move(desc)), deadline_(deadline) {}

  bool test() override;
  void wait() override;
  std::string describe() const override { return desc_; }

  // Test the request once (any thread). Returns true when the work is no longer pending.
  bool poll_once();

  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<Tensor> keep_alive;     // buffers MPI reads or writes until completion
  std::vector<int> counts, displs;    // for the v-variants
  AlltoallwSide send_side, recv_side; // for alltoall
  std::vector<MPI_Datatype> derived_types;  // freed (under the runtime mutex) on completion
  std::function<void()> finalize;     // copy back / divide, after MPI completes
  std::int64_t seq() const { return seq_; }
  std::atomic<int> state{kPending};

 private:
  friend class MpiCommunicator;
  void fail(std::string message);
  MpiCommunicator* comm_;
  std::int64_t seq_;
  std::string desc_;
  Clock::time_point deadline_;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::string error_;
};

// ---- the communicator ----

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const LaunchEnv& env, const CommOptions& opts, Device device)
      : opts_(opts), device_(device) {
    MpiRuntime& rt = MpiRuntime::get();
    {
      std::lock_guard lock(rt.mu);
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
    if (rank_ != env.rank || size_ != env.world_size) {
      BH_THROW(CommError, "MPI says this is rank {} of {}, but the launcher environment says {}: "
               "was benchhost started by a different launcher than the MPI library expects "
               "(e.g. RANK/WORLD_SIZE set without mpirun or srun)?", rank_, size_, env.describe());
    }
    // Communicator creation is itself collective: use the non-blocking form so a peer that
    // never arrives is a timeout, not a hang.
    comm_ = dup_with_deadline(MPI_COMM_WORLD, "creating the collective communicator");
    ctrl_ = dup_with_deadline(MPI_COMM_WORLD, "creating the control communicator");
    {
      std::lock_guard lock(rt.mu);
      MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
      MPI_Comm_set_errhandler(ctrl_, MPI_ERRORS_RETURN);
      MPI_Irecv(&query_buf_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kTagQuery, ctrl_, &query_req_);
    }
    progress_ = std::thread([this] { progress_loop(); });
  }

  ~MpiCommunicator() override {
    // Finish what is outstanding so peers are not left in a collective we abandoned.
    if (!failed_) {
      std::vector<std::shared_ptr<MpiWork>> left;
      {
        std::lock_guard lock(state_mu_);
        left = active_;
      }
      for (auto& w : left) {
        try {
          w->wait();
        } catch (...) {
          break;
        }
      }
    }
    {
      std::lock_guard lock(state_mu_);
      stop_ = true;
    }
    state_cv_.notify_all();
    progress_.join();
    if (failed_) return;  // peers may be gone: free nothing that could block
    MpiRuntime& rt = MpiRuntime::get();
    std::lock_guard lock(rt.mu);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // a communicator that outlived main(): MPI is already gone
    MPI_Cancel(&query_req_);
    MPI_Wait(&query_req_, MPI_STATUS_IGNORE);
    for (auto& s : pending_replies_) MPI_Wait(&s.req, MPI_STATUS_IGNORE);
    MPI_Comm_free(&comm_);
    MPI_Comm_free(&ctrl_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }
  Device device() const override { return device_; }
  bool failed() const override { return failed_; }

  [[noreturn]] void abort(int exit_code) noexcept override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

  Work allreduce(Tensor& t, ReduceOp op) override {
    detail::check_defined(t, "allreduce", "input");
    detail::check_dtype_supported(t, "allreduce", true);
    int count = checked_count(t.numel(), "allreduce", t);
    DType sd = reduce_stage_dtype(t.dtype(), op);
    Tensor buf = stage(t, sd, true);
    auto w = new_work(fmt::format("allreduce #{} ({}, {}, {} elements)", seq_ + 1,
                                  reduce_op_name(op), dtype_name(t.dtype()), t.numel()));
    w->keep_alive = {t, buf};
    int n = size_;
    Tensor user = t;
    w->finalize = [buf, user, op, n]() mutable {
      if (op == ReduceOp::avg) divide_in_place(buf, n);
      if (!same_buffer(buf, user)) user.copy_(buf.to(user.dtype()).to(user.device()));
    };
    post(w, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, buf.raw_data(), count, reduce_type(sd),
                            reduce_mpi_op(sd, op), comm_, r);
    });
    return Work(w);
  }

  Work broadcast(Tensor& t, int root) override {
    detail::check_defined(t, "broadcast", "input");
    BH_CHECK_AS(InvalidArgument, root >= 0 && root < size_,
                "broadcast root {} out of range for world size {}", root, size_);
    int count = checked_count(t.numel(), "broadcast", t);
    Tensor buf = stage(t, t.dtype(), rank_ == root);
    auto w = new_work(fmt::format("broadcast #{} (root {}, {}, {} elements)", seq_ + 1, root,
                                  dtype_name(t.dtype()), t.numel()));
    w->keep_alive = {t, buf};
    Tensor user = t;
    w->finalize = [buf, user]() mutable {
      if (!same_buffer(buf, user)) user.copy_(buf.to(user.device()));
    };
    post(w, [&](MPI_Request* r) {
      return MPI_Ibcast(buf.raw_data(), count, move_type(t.dtype()), root, comm_, r);
    });
    return Work(w);
  }

  Work allgather(const Tensor& in, Tensor& out) override {
    detail::check_chunked(in, out, size_, rank_, "allgather", false);
    checked_count(out.numel(), "allgather", out);
    Tensor src = stage(in, in.dtype(), true);
    Tensor dst = stage(out, out.dtype(), false);
    // MPI forbids overlapping send and receive buffers (in = a slice of out, PyTorch style).
    if (src.storage() == dst.storage()) src = src.clone();
    auto w = new_work(fmt::format("allgather #{} ({}, {} elements)", seq_ + 1,
                                  dtype_name(in.dtype()), out.numel()));
    w->keep_alive = {in, out, src, dst};
    for (int r = 0; r < size_; ++r) {
      w->counts.push_back(static_cast<int>(chunk_count(out.numel(), size_, r)));
      w->displs.push_back(static_cast<int>(chunk_offset(out.numel(), size_, r)));
    }
    Tensor user = out;
    w->finalize = [dst, user]() mutable {
      if (!same_buffer(dst, user)) user.copy_(dst.to(user.device()).reshape(user.shape()));
    };
    MpiWork* raw = w.get();
    post(w, [&](MPI_Request* r) {
      return MPI_Iallgatherv(src.raw_data(), raw->counts[rank_], move_type(in.dtype()),
                             dst.raw_data(), raw->counts.data(), raw->displs.data(),
                             move_type(in.dtype()), comm_, r);
    });
    return Work(w);
  }

  Work reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    detail::check_chunked(out, in, size_, rank_, "reduce_scatter", true);
    checked_count(in.numel(), "reduce_scatter", in);
    DType sd = reduce_stage_dtype(in.dtype(), op);
    Tensor src = stage(in, sd, true);
    Tensor dst = stage(out, sd, false);
    if (src.storage() == dst.storage()) src = src.clone();  // out may be a slice of in
    auto w = new_work(fmt::format("reduce_scatter #{} ({}, {}, {} elements)", seq_ + 1,
                                  reduce_op_name(op), dtype_name(in.dtype()), in.numel()));
    w->keep_alive = {in, out, src, dst};
    for (int r = 0; r < size_; ++r)
      w->counts.push_back(static_cast<int>(chunk_count(in.numel(), size_, r)));
    int n = size_;
    Tensor user = out;
    w->finalize = [dst, user, op, n]() mutable {
      if (op == ReduceOp::avg) divide_in_place(dst, n);
      if (!same_buffer(dst, user))
        user.copy_(dst.to(user.dtype()).to(user.device()).reshape(user.shape()));
    };
    MpiWork* raw = w.get();
    post(w, [&](MPI_Request* r) {
      return MPI_Ireduce_scatter(src.raw_data(), dst.raw_data(), raw->counts.data(),
                                 reduce_type(sd), reduce_mpi_op(sd, op), comm_, r);
    });
    return Work(w);
  }

  Work alltoall(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& send_counts,
               const std::vector<std::int64_t>& recv_counts) override {
    detail::check_alltoall(in, out, send_counts, recv_counts, size_);
    const std::int64_t limit = alltoall_limit_;
    for (const auto* counts : {&send_counts, &recv_counts}) {
      for (std::int64_t c : *counts) {
        // A derived block is `c / limit` runs of `limit` elements: the run count is an int too.
        BH_CHECK_AS(InvalidArgument, c / limit <= INT_MAX, "alltoall: a block of {} elements is "
                    "more than MPI can describe ({} runs of {})", c, c / limit, limit);
      }
    }
    Tensor src = stage(in, in.dtype(), true);
    Tensor dst = stage(out, out.dtype(), false);
    if (src.storage() == dst.storage()) src = src.clone();  // MPI forbids overlapping buffers
    auto w = new_work(fmt::format("alltoall #{} ({}, {} elements sent, {} received)", seq_ + 1,
                                  dtype_name(in.dtype()), in.numel(), out.numel()));
    w->keep_alive = {in, out, src, dst};
    Tensor user = out;
    w->finalize = [dst, user]() mutable {
      if (!same_buffer(dst, user)) user.copy_(dst.to(user.device()));
    };
    MpiWork* raw = w.get();
    const MPI_Datatype type = move_type(in.dtype());
    const auto es = static_cast<std::int64_t>(in.element_size());
    post(w, [&](MPI_Request* r) {
      int rc = describe_alltoallw_side(send_counts, type, es, limit, raw->send_side,
                                       raw->derived_types);
      if (rc == MPI_SUCCESS)
        rc = describe_alltoallw_side(recv_counts, type, es, limit, raw->recv_side,
                                     raw->derived_types);
      if (rc != MPI_SUCCESS) return rc;
      return MPI_Ialltoallw(src.raw_data(), raw->send_side.counts.data(),
                            raw->send_side.byte_offsets.data(), raw->send_side.types.data(),
                            dst.raw_data(), raw->recv_side.counts.data(),
                            raw->recv_side.byte_offsets.data(), raw->recv_side.types.data(),
                            comm_, r);
    });
    return Work(w);
  }
  using Communicator::alltoall;

  void barrier() override {
    auto w = new_work(fmt::format("barrier #{}", seq_ + 1));
    post(w, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
    w->wait();
  }

  // ---- used by MpiWork ----

  std::atomic<int> waiters{0};

  void check_not_failed() {
    if (failed_) {
      std::lock_guard lock(state_mu_);
      throw CommError(failure_message_, __FILE__, __LINE__);
    }
  }

  // The deadline of `w` passed: diagnose, fail the communicator, throw.
  [[noreturn]] void on_timeout(MpiWork& w) {
    std::unique_lock diag(diag_mu_);
    check_not_failed();  // another thread diagnosed first
    std::string msg = fmt::format("{} did not complete within {} s on rank {}: {}", w.describe(),
                                  opts_.timeout_seconds, rank_, diagnose(w.seq()));
    fail_communicator(msg);
    throw CommError(msg, __FILE__, __LINE__);
  }

  [[noreturn]] void on_mpi_error(MpiWork& w, int code) {
    std::string msg = fmt::format("{} failed on rank {}: {} (a peer process probably died)",
                                  w.describe(), rank_, mpi_error_string(code));
    fail_communicator(msg);
    throw CommError(msg, __FILE__, __LINE__);
  }

  [[noreturn]] void on_mpi_error_message(const std::string& msg) {
    fail_communicator(msg);
    check_not_failed();
    throw CommError(msg, __FILE__, __LINE__);
  }

  void work_completed(std::int64_t seq) {
    std::int64_t cur = completed_seq_.load();
    while (seq > cur && !completed_seq_.compare_exchange_weak(cur, seq)) {}
  }

 private:
  struct Reply {
    std::int64_t data[2];
    MPI_Request req;
  };

  MPI_Comm dup_with_deadline(MPI_Comm base, const char* what) {
    MpiRuntime& rt = MpiRuntime::get();
    MPI_Comm out = MPI_COMM_NULL;
    MPI_Request req;
    {
      std::lock_guard lock(rt.mu);
      int rc = MPI_Comm_idup(base, &out, &req);
      if (rc != MPI_SUCCESS) BH_THROW(CommError, "{}: {}", what, mpi_error_string(rc));
    }
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(opts_.timeout_seconds));
    for (;;) {
      int flag = 0;
      {
        std::lock_guard lock(rt.mu);
        int rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) BH_THROW(CommError, "{}: {}", what, mpi_error_string(rc));
      }
      if (flag) return out;
      if (Clock::now() > deadline) {
        std::string msg = fmt::format("{} on rank {} did not complete within {} s: some rank of "
                                      "the {} never created its communicator (still starting, "
                                      "stuck, or dead)", what, rank_, opts_.timeout_seconds, size_);
        detail::report_fatal_error(opts_, CommError(msg, __FILE__, __LINE__), &abort_job);
        BH_THROW(CommError, "{}", msg);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  static void abort_job(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

  std::shared_ptr<MpiWork> new_work(std::string desc) {
    check_not_failed();
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(opts_.timeout_seconds));
    return std::make_shared<MpiWork>(this, seq_ + 1, std::move(desc), deadline);
  }

  template <class PostFn>
  void post(const std::shared_ptr<MpiWork>& w, PostFn&& fn) {
    int rc;
    {
      std::lock_guard lock(MpiRuntime::get().mu);
      rc = fn(&w->request);
      ++seq_;
      posted_seq_.store(seq_);
    }
    if (rc != MPI_SUCCESS) on_mpi_error(*w, rc);
    {
      std::lock_guard lock(state_mu_);
      active_.push_back(w);
    }
    state_cv_.notify_one();
  }

  void fail_communicator(const std::string& msg) {
    bool first = false;
    {
      std::lock_guard lock(state_mu_);
      if (!failed_) {
        failure_message_ = msg;
        failed_ = true;
        first = true;
      }
    }
    if (first) detail::report_fatal_error(opts_, CommError(msg, __FILE__, __LINE__), &abort_job);
  }

  void progress_loop() {
    MpiRuntime& rt = MpiRuntime::get();
    for (;;) {
      std::vector<std::shared_ptr<MpiWork>> snapshot;
      {
        std::unique_lock lock(state_mu_);
        if (stop_) return;
        std::erase_if(active_, [](const auto& w) { return w->state.load() >= MpiWork::kDone; });
        if (active_.empty() || failed_) {
          // Idle: wake now and then to answer peers' queries (Note [Timeout diagnosis]).
          state_cv_.wait_for(lock, std::chrono::milliseconds(10));
        }
        if (stop_) return;
        snapshot = active_;
      }
      if (waiters.load() == 0 && !failed_) {
        for (auto& w : snapshot) {
          w->poll_once();  // errors are recorded in the work and rethrown by its waiter
        }
      }
      service_queries(rt);
      if (!snapshot.empty()) {
        std::this_thread::sleep_for(waiters.load() > 0 ? std::chrono::microseconds(1000)
                                                       : std::chrono::microseconds(opts_.progress_poll_us));
      }
    }
  }

  void service_queries(MpiRuntime& rt) {
    std::lock_guard lock(rt.mu);
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Test(&query_req_, &flag, &st) != MPI_SUCCESS || !flag) break;
      pending_replies_.emplace_back();
      Reply& r = pending_replies_.back();
      r.data[0] = posted_seq_.load();
      r.data[1] = completed_seq_.load();
      MPI_Isend(r.data, 2, MPI_INT64_T, st.MPI_SOURCE, kTagReply, ctrl_, &r.req);
      MPI_Irecv(&query_buf_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kTagQuery, ctrl_, &query_req_);
    }
    for (auto it = pending_replies_.begin(); it != pending_replies_.end();) {
      int flag = 0;
      MPI_Test(&it->req, &flag, MPI_STATUS_IGNORE);
      it = flag ? pending_replies_.erase(it) : std::next(it);
    }
  }

  std::string diagnose(std::int64_t seq) {
    MpiRuntime& rt = MpiRuntime::get();
    std::vector<std::array<std::int64_t, 2>> replies(size_, {-1, -1});
    std::vector<MPI_Request> sends(size_, MPI_REQUEST_NULL), recvs(size_, MPI_REQUEST_NULL);
    std::int64_t query = seq;
    {
      std::lock_guard lock(rt.mu);
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        MPI_Irecv(replies[r].data(), 2, MPI_INT64_T, r, kTagReply, ctrl_, &recvs[r]);
        MPI_Isend(&query, 1, MPI_INT64_T, r, kTagQuery, ctrl_, &sends[r]);
      }
    }
    // Long enough for a busy peer's progress thread to be scheduled; all answers end it early.
    double diag_s = std::min(10.0, std::max(2.0, opts_.timeout_seconds));
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(diag_s));
    std::vector<bool> answered(size_, false);
    answered[rank_] = true;
    int missing = size_ - 1;
    while (missing > 0 && Clock::now() < until) {
      {
        std::lock_guard lock(rt.mu);
        for (int r = 0; r < size_; ++r) {
          if (answered[r]) continue;
          int flag = 0;
          if (MPI_Test(&recvs[r], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
            answered[r] = true;
            --missing;
          }
        }
      }
      service_queries(rt);  // peers diagnosing at the same time ask us too
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    {
      // Leave nothing that could write into `replies` or read `query` after we return.
      std::lock_guard lock(rt.mu);
      for (int r = 0; r < size_; ++r) {
        if (!answered[r] && recvs[r] != MPI_REQUEST_NULL) {
          MPI_Cancel(&recvs[r]);
          MPI_Request_free(&recvs[r]);
        }
        if (sends[r] != MPI_REQUEST_NULL) MPI_Request_free(&sends[r]);
      }
    }
    std::vector<std::string> not_started, silent, waiting;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (!answered[r]) {
        silent.push_back(std::to_string(r));
      } else if (replies[r][0] < seq) {
        not_started.push_back(fmt::format("rank {} has not started it (it has issued {} "
                                          "collectives)", r, replies[r][0]));
      } else {
        waiting.push_back(std::to_string(r));
      }
    }
    std::string out;
    auto add = [&](const std::string& s) { out += out.empty() ? s : "; " + s; };
    for (const std::string& s : not_started) add(s);
    if (!silent.empty())
      add(fmt::format("rank{} {} did not answer within {} s (dead, stopped or unreachable)",
                      silent.size() == 1 ? "" : "s", fmt::join(silent, ", "), diag_s));
    if (!waiting.empty())
      add(fmt::format("rank{} {} started it too", waiting.size() == 1 ? "" : "s",
                      fmt::join(waiting, ", ")));
    if (not_started.empty() && silent.empty())
      add("every rank has started it: the transport stalled or a peer failed mid-collective");
    return out;
  }

  CommOptions opts_;
  Device device_;
  int rank_ = 0, size_ = 1;
  std::int64_t alltoall_limit_ = alltoall_int_limit();  // Note [MPI alltoall and large counts]
  MPI_Comm comm_ = MPI_COMM_NULL, ctrl_ = MPI_COMM_NULL;
  std::int64_t seq_ = 0;  // collectives issued (owned by the issuing thread)
  std::atomic<std::int64_t> posted_seq_{0}, completed_seq_{0};
  std::atomic<bool> failed_{false};
  std::string failure_message_;

  std::mutex state_mu_;
  std::condition_variable state_cv_;
  std::vector<std::shared_ptr<MpiWork>> active_;
  bool stop_ = false;
  std::thread progress_;
  std::mutex diag_mu_;

  // control channel (touched under the runtime mutex)
  std::int64_t query_buf_ = 0;
  MPI_Request query_req_ = MPI_REQUEST_NULL;
  std::list<Reply> pending_replies_;
};

// ---- MpiWork ----

void MpiWork::fail(std::string message) {
  {
    std::lock_guard lock(done_mu_);
    error_ = std::move(message);
    state.store(kFailed);
  }
  done_cv_.notify_all();
}

bool MpiWork::poll_once() {
  int flag = 0, rc;
  {
    std::lock_guard lock(MpiRuntime::get().mu);
    if (state.load() != kPending) return true;
    rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      fail(fmt::format("{} failed on rank {}: {} (a peer process probably died)", desc_,
                       comm_->rank(), mpi_error_string(rc)));
      return true;
    }
    if (!flag) return false;
    state.store(kCompleting);  // this thread alone finishes it
    for (MPI_Datatype& t : derived_types) MPI_Type_free(&t);
    derived_types.clear();
  }
  try {
    if (finalize) finalize();
  } catch (const std::exception& e) {
    fail(fmt::format("{}: copying the result back failed: {}", desc_, e.what()));
    return true;
  }
  finalize = nullptr;
  keep_alive.clear();
  comm_->work_completed(seq_);
  {
    std::lock_guard lock(done_mu_);
    state.store(kDone);
  }
  done_cv_.notify_all();
  return true;
}

bool MpiWork::test() {
  poll_once();
  int s = state.load();
  if (s == kFailed) {
    std::lock_guard lock(done_mu_);
    throw CommError(error_, __FILE__, __LINE__);
  }
  return s == kDone;
}

void MpiWork::wait() {
  comm_->waiters.fetch_add(1);
  struct Leave {
    MpiCommunicator* c;
    ~Leave() { c->waiters.fetch_sub(1); }
  } leave{comm_};
  for (std::uint32_t spin = 0;; ++spin) {
    poll_once();
    int s = state.load();
    if (s == kDone) return;
    if (s == kFailed) {
      std::string e;
      {
        std::lock_guard lock(done_mu_);
        e = error_;
      }
      // An MPI error means the job is broken: fail the communicator too (once).
      comm_->on_mpi_error_message(e);
    }
    if (s == kCompleting) {  // another thread is copying the result back
      std::unique_lock lock(done_mu_);
      done_cv_.wait(lock, [&] { return state.load() != kCompleting; });
      continue;
    }
    if ((spin & 63) == 0) {
      comm_->check_not_failed();
      if (Clock::now() > deadline_) comm_->on_timeout(*this);
    }
    if ((spin & 1023) == 1023) sched_yield();
  }
}

std::unique_ptr<Communicator> make_mpi(Device device, const LaunchEnv& env, const CommOptions& opts,
                                       std::unique_ptr<Communicator>) {
  if (env.launcher == "torchrun-style" && env.world_size > 1) {
    BH_THROW(Unsupported, "world size {} from RANK/WORLD_SIZE: the MPI backend cannot form a job "
             "from those variables (there is no TCP rendezvous); start benchhost with mpirun or "
             "srun instead", env.world_size);
  }
  return std::make_unique<MpiCommunicator>(env, opts, device);
}

const bool registered = [] {
  detail::register_communicator_backend("mpi", &make_mpi);
  return true;
}();

}  // namespace
}  // namespace benchhost
