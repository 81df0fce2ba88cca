// The backend-independent part of collectives: the factory, the backend registry, the single-
// process backend and the scalar helpers used for metrics and report aggregation.

#include "benchhost/comm/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/ranges.h>

#include "comm/backend_registry.hpp"
#include "comm/collective_checks.hpp"

namespace benchhost {

const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

namespace detail {

namespace {
struct BackendRegistry {
  std::mutex mu;
  std::map<std::string, CommunicatorFactory> factories;
};
BackendRegistry& backend_registry() {
  static BackendRegistry r;
  return r;
}
}  // namespace

void register_communicator_backend(const std::string& name, CommunicatorFactory factory) {
  BackendRegistry& r = backend_registry();
  std::lock_guard lock(r.mu);
  r.factories[name] = factory;
}

CommunicatorFactory find_communicator_backend(const std::string& name) {
  BackendRegistry& r = backend_registry();
  std::lock_guard lock(r.mu);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? nullptr : it->second;
}

void report_fatal_error(const CommOptions& opts, const CommError& error, void (*abort_fn)(int)) {
  if (opts.on_fatal_error) {
    try {
      opts.on_fatal_error(error);
    } catch (...) {
      // The hook must not turn a communication failure into a different one.
    }
  }
  if (opts.abort_grace_seconds > 0 && abort_fn) {
    double grace = opts.abort_grace_seconds;
    std::string what = error.message();
    std::thread([grace, what, abort_fn] {
      std::this_thread::sleep_for(std::chrono::duration<double>(grace));
      std::fprintf(stderr,
                   "benchhost: aborting the job: the process did not end or call abort() within "
                   "%.0f s of a communication failure: %s\n", grace, what.c_str());
      std::fflush(stderr);
      abort_fn(1);
    }).detach();
  }
}

void check_dtype_supported(const Tensor& t, const char* op, bool reduction) {
  switch (t.dtype()) {
    case DType::f32: case DType::f64: case DType::f16: case DType::bf16:
    case DType::i32: case DType::i64: case DType::u8:
      return;
    default:
      if (!reduction) return;  // data movement works on any dtype (bytes)
      BH_THROW(InvalidArgument, "{} does not support dtype {} ({}): use f32, f64, f16, bf16, "
               "i32, i64 or u8", op, dtype_name(t.dtype()), t.describe());
  }
}

void check_defined(const Tensor& t, const char* op, const char* which) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "{}: the {} tensor is undefined", op, which);
}

namespace {
// "{2, 0, 5}" for an error message; long count lists (large worlds) are cut after 16.
std::string counts_text(const std::vector<std::int64_t>& counts) {
  constexpr std::size_t kShown = 16;
  if (counts.size() <= kShown) return fmt::format("{{{}}}", fmt::join(counts, ", "));
  return fmt::format("{{{}, ... ({} counts)}}",
                     fmt::join(counts.begin(), counts.begin() + kShown, ", "), counts.size());
}

// Validates one side's counts (one per rank, non-negative) against its tensor's numel().
void check_counts(const std::vector<std::int64_t>& counts, const Tensor& t, int world,
                  const char* side, const char* which) {
  if (counts.size() != static_cast<std::size_t>(world)) {
    BH_THROW(InvalidArgument, "alltoall: {} {} counts for a world of {} (one per rank: {})",
             counts.size(), side, world, counts_text(counts));
  }
  std::int64_t sum = 0;
  for (int r = 0; r < world; ++r) {
    std::int64_t c = counts[static_cast<std::size_t>(r)];
    if (c < 0) {
      BH_THROW(InvalidArgument, "alltoall: the {} count for rank {} is {}; counts must be >= 0 "
               "(counts {})", side, r, c, counts_text(counts));
    }
    if (c > t.numel() - sum) {  // also keeps the sum from overflowing
      BH_THROW(InvalidArgument, "alltoall: the {} counts {} add up to more than the {} elements "
               "of the {} tensor ({})", side, counts_text(counts), t.numel(), which, t.describe());
    }
    sum += c;
  }
  if (sum != t.numel()) {
    BH_THROW(InvalidArgument, "alltoall: the {} counts {} add up to {}, but the {} tensor has {} "
             "elements ({})", side, counts_text(counts), sum, which, t.numel(), t.describe());
  }
}
}  // namespace

void check_alltoall(const Tensor& in, const Tensor& out, const std::vector<std::int64_t>& send_counts,
                    const std::vector<std::int64_t>& recv_counts, int world) {
  check_defined(in, "alltoall", "input");
  check_defined(out, "alltoall", "output");
  check_dtype_supported(in, "alltoall", false);
  if (in.dtype() != out.dtype()) {
    BH_THROW(InvalidArgument, "alltoall: input and output dtypes differ ({} vs {})", in.describe(),
             out.describe());
  }
  BH_CHECK_AS(InvalidArgument, in.is_contiguous() && out.is_contiguous(),
              "alltoall needs contiguous tensors, got input {} and output {} (call contiguous() "
              "first)", in.describe(), out.describe());
  check_counts(send_counts, in, world, "send", "input");
  check_counts(recv_counts, out, world, "receive", "output");
}

std::vector<std::int64_t> equal_alltoall_counts(const Tensor& in, const Tensor& out, int world) {
  check_defined(in, "alltoall", "input");
  check_defined(out, "alltoall", "output");
  const std::int64_t n = in.numel();
  if (out.numel() != n) {
    BH_THROW(InvalidArgument, "alltoall (equal blocks): the input has {} elements but the output "
             "has {} ({} vs {}); they must match", n, out.numel(), in.describe(), out.describe());
  }
  if (n % world != 0) {
    BH_THROW(InvalidArgument, "alltoall (equal blocks): {} elements do not split into {} equal "
             "blocks ({} % {} = {}); pad the tensor or pass per-peer counts", n, world, n, world,
             n % world);
  }
  return std::vector<std::int64_t>(static_cast<std::size_t>(world), n / world);
}

}  // namespace detail

Work Communicator::alltoall(const Tensor& in, Tensor& out) {
  std::vector<std::int64_t> counts = detail::equal_alltoall_counts(in, out, size());
  return alltoall(in, out, counts, counts);
}

namespace {

// Note [Single-process backend]
// With one rank every collective is the identity (avg divides by 1) or a copy; results are
// complete on return, so Work is default (completed). Checks match the other backends, so a
// workload that misuses a collective fails on a laptop and not first on a cluster.
class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(Device device) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  Device device() const override { return device_; }

  Work allreduce(Tensor& t, ReduceOp op) override {
    detail::check_defined(t, "allreduce", "input");
    detail::check_dtype_supported(t, "allreduce", true);
    return {};
  }
  Work broadcast(Tensor& t, int root) override {
    detail::check_defined(t, "broadcast", "input");
    BH_CHECK_AS(InvalidArgument, root == 0, "broadcast root {} out of range for world size 1", root);
    return {};
  }
  Work allgather(const Tensor& in, Tensor& out) override {
    detail::check_chunked(in, out, 1, 0, "allgather", false);
    copy_flat(out, in);
    return {};
  }
  Work reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    detail::check_chunked(out, in, 1, 0, "reduce_scatter", true);
    copy_flat(out, in);
    return {};
  }
  Work alltoall(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& send_counts,
               const std::vector<std::int64_t>& recv_counts) override {
    detail::check_alltoall(in, out, send_counts, recv_counts, 1);  // counts are {N}
    copy_flat(out, in);
    return {};
  }
  using Communicator::alltoall;
  void barrier() override {}
  [[noreturn]] void abort(int exit_code) noexcept override {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(exit_code);
  }
  bool failed() const override { return false; }

 private:
  static void copy_flat(Tensor& dst, const Tensor& src) {
    if (dst.storage() == src.storage() && dst.storage_offset() == src.storage_offset() &&
        dst.is_contiguous() && src.is_contiguous())
      return;  // in place
    dst.copy_(src.reshape(dst.shape()));
  }
  Device device_;
};

}  // namespace

std::vector<std::string> available_comm_backends() {
  std::vector<std::string> out{"single"};
  if (detail::find_communicator_backend("mpi")) out.push_back("mpi");
  if (detail::find_communicator_backend("nccl")) out.push_back("nccl");
  return out;
}

std::unique_ptr<Communicator> create_communicator(const std::string& backend, Device device,
                                                  const LaunchEnv& env, const CommOptions& opts) {
  BH_CHECK_AS(InvalidArgument, opts.timeout_seconds > 0,
              "collective timeout must be positive (got {} s)", opts.timeout_seconds);
  if (backend != "auto" && backend != "single" && backend != "mpi" && backend != "nccl") {
    BH_THROW(InvalidArgument, "unknown communicator backend '{}': choose auto, single, mpi or nccl",
             backend);
  }
  // The NCCL backend lives in the CUDA library: make sure it had its chance to register.
  bool cuda_usable = false;
  if (device.is_cuda() && (backend == "auto" || backend == "nccl")) {
    std::string why;
    cuda_usable = device_available(device, &why);
    if (!cuda_usable && backend == "nccl") {
      BH_THROW(Unsupported, "the nccl backend needs a CUDA device: {}", why);
    }
  }
  // auto: NCCL when several processes share usable GPUs; one process needs no communicator
  // library at all, and a device that is not there is the workload's to report (SKIPPED), not a
  // communicator failure.
  std::string chosen = backend;
  if (backend == "auto") {
    if (cuda_usable && env.world_size > 1 && detail::find_communicator_backend("nccl")) {
      chosen = "nccl";
    } else if (env.world_size > 1) {
      chosen = "mpi";
    } else {
      chosen = "single";
    }
  }
  if (chosen == "single") {
    BH_CHECK_AS(InvalidArgument, env.world_size == 1,
                "the single backend runs one process, but the launcher ({}) started {}: use "
                "--comm-backend auto or mpi", env.launcher, env.world_size);
    return std::make_unique<SingleCommunicator>(device);
  }
  detail::CommunicatorFactory mpi = detail::find_communicator_backend("mpi");
  if (chosen == "mpi") {
    if (!mpi) {
      BH_THROW(Unsupported, "world size {} from {} but this benchhost was built without MPI "
               "(install libopenmpi-dev and reconfigure with -DBENCHHOST_MPI=ON)",
               env.world_size, env.launcher);
    }
    return mpi(device, env, opts, nullptr);
  }
  // nccl
  detail::CommunicatorFactory nccl = detail::find_communicator_backend("nccl");
  if (!nccl) {
    BH_THROW(Unsupported, "the nccl backend is not available: this benchhost was built without "
             "CUDA and NCCL (configure on a machine with the CUDA toolkit, cuDNN and NCCL)");
  }
  std::unique_ptr<Communicator> bootstrap;
  if (env.world_size > 1) {
    if (!mpi) {
      BH_THROW(Unsupported, "world size {} from {}: NCCL needs MPI to exchange its unique id, but "
               "this benchhost was built without MPI (install libopenmpi-dev and reconfigure)",
               env.world_size, env.launcher);
    }
    bootstrap = mpi(Device::cpu(), env, opts, nullptr);
  }
  return nccl(device, env, opts, std::move(bootstrap));
}

std::vector<double> allreduce_values(Communicator& comm, std::vector<double> values, ReduceOp op) {
  if (comm.size() == 1 || values.empty()) return values;
  Tensor t = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::f64);
  std::copy(values.begin(), values.end(), t.data<double>());
  Tensor dev = t.to(comm.device());
  comm.allreduce(dev, op).wait();
  Tensor back = dev.to(Device::cpu());
  return {back.data<double>(), back.data<double>() + values.size()};
}

std::vector<std::int64_t> allreduce_values(Communicator& comm, std::vector<std::int64_t> values,
                                           ReduceOp op) {
  if (comm.size() == 1 || values.empty()) return values;
  Tensor t = Tensor::from_vector_i64(values, {static_cast<std::int64_t>(values.size())});
  Tensor dev = t.to(comm.device());
  comm.allreduce(dev, op).wait();
  Tensor back = dev.to(Device::cpu());
  return {back.data<std::int64_t>(), back.data<std::int64_t>() + values.size()};
}

std::vector<double> allgather_values(Communicator& comm, double value) {
  if (comm.size() == 1) return {value};
  Tensor in = Tensor::full({1}, value, DType::f64).to(comm.device());
  Tensor out = Tensor::zeros({comm.size()}, DType::f64, comm.device());
  comm.allgather(in, out).wait();
  Tensor back = out.to(Device::cpu());
  return {back.data<double>(), back.data<double>() + comm.size()};
}

RankSpread rank_spread(Communicator& comm, double value) {
  std::vector<double> v = allgather_values(comm, value);
  RankSpread s;
  for (std::size_t r = 0; r < v.size(); ++r) {
    if (r == 0 || v[r] < v[s.min_rank]) s.min_rank = static_cast<int>(r);
    if (r == 0 || v[r] > v[s.max_rank]) s.max_rank = static_cast<int>(r);
    s.sum += v[r];
  }
  s.min = v[s.min_rank];
  s.max = v[s.max_rank];
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  s.median = sorted[(sorted.size() - 1) / 2];
  return s;
}

}  // namespace benchhost
