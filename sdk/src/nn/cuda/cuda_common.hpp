#pragma once
// Helpers shared by the CUDA op implementations (private to sdk/src/nn/cuda; built into
// libbenchhost_sdk_cuda.so). Usable from .cu files (kernels) and plain .cpp files (library
// calls: cuBLASLt, cuDNN).
//
// Note [CUDA op streams]
// Every CUDA op implementation enqueues its work on op_stream() (the legacy default stream for
// now), never synchronises unless it must return a host value, and allocates scratch through the
// caching device allocator (Tensor::empty on the inputs' device). The allocator hands a freed
// block to the next request without waiting, which is safe because all ops and copies run in one
// stream order; an op that uses another stream must record an event and make op_stream() wait
// on it before any tensor it touched is freed.
//
// Kernel launch errors are checked right after each launch with BH_CHECK_CUDA_LAUNCH(what), so a
// bad configuration surfaces as a benchhost::Error naming the kernel, not as a later sticky
// error in an unrelated call.

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/tensor.hpp"
#include "cuda/cuda_check.hpp"

#define BH_CHECK_CUDA_LAUNCH(what) BH_CHECK_CUDA(::benchhost::nn::cuda::launch_status(what))

/// Throw a benchhost::Error naming the failing cuBLAS/cuBLASLt call and its status.
#define BH_CHECK_CUBLAS(call)                                                                  \
  do {                                                                                         \
    cublasStatus_t bh_st_ = (call);                                                            \
    if (bh_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                          \
      throw ::benchhost::Error(::fmt::format("{} failed: {} ({})", #call,                      \
                                             cublasLtGetStatusString(bh_st_),                  \
                                             cublasLtGetStatusName(bh_st_)), __FILE__, __LINE__); \
  } while (0)

namespace benchhost::nn::cuda {

/// The stream every CUDA op runs on (see Note [CUDA op streams]).
inline cudaStream_t op_stream() { return nullptr; }

/// cudaGetLastError() after a launch; `what` is only for the macro's message.
inline cudaError_t launch_status(const char*) { return cudaGetLastError(); }

/// Make the calling thread's current CUDA device the one `t` lives on.
inline void set_device_of(const Tensor& t) { BH_CHECK_CUDA(cudaSetDevice(t.device().index)); }

/// Blocks for a grid-stride loop over n items (at most 65535 * 32 blocks, at least 1).
inline unsigned grid_for(std::int64_t n, unsigned block = 256) {
  const std::int64_t want = (n + block - 1) / block;
  const std::int64_t cap = 65535LL * 32;
  return static_cast<unsigned>(want < 1 ? 1 : (want > cap ? cap : want));
}

/// "" if every defined tensor among `ts` is contiguous, on a CUDA device and of dtype `dtype`;
/// else the reason (for OpImpl::accepts).
inline std::string require_cuda_contiguous(const std::vector<Tensor>& ts, DType dtype = DType::f32) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!t.defined()) continue;
    if (!t.device().is_cuda()) return fmt::format("tensor {} is not on a cuda device", i);
    if (t.dtype() != dtype)
      return fmt::format("tensor {} is {}, needs {}", i, dtype_name(t.dtype()), dtype_name(dtype));
    if (!t.is_contiguous()) return fmt::format("tensor {} is not contiguous", i);
  }
  return {};
}

/// "" unless a defined tensor of the call is f16 or bf16, for the accepts() of kernels that read
/// and write f32 only: such a call is then promoted by the registry (Note [Half-precision
/// promotion]) rather than handed to a kernel that would refuse it or misread its bytes.
inline std::string refuse_half(const OpCall& c) {
  for (const auto* list : {&c.inputs, &c.outputs})
    for (const Tensor& t : *list)
      if (t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16))
        return fmt::format("{} is {}: this kernel reads and writes f32", t.describe(), dtype_name(t.dtype()));
  return {};
}

/// Accept f32 contiguous CUDA inputs and outputs (the usual requirement of our kernels).
inline std::string accept_cuda_f32(const OpCall& c) {
  std::string why = require_cuda_contiguous(c.inputs);
  if (!why.empty()) return "input " + why;
  why = require_cuda_contiguous(c.outputs);
  if (!why.empty()) return "output " + why;
  return {};
}

/// An implementation entry for register_op_impl: `name` ("cuda.kernels", "cuda.cudnn", ...),
/// priority 100 for vendor libraries and 50 for our kernels (Note [Op registry]).
inline OpImpl cuda_impl(const char* name, int priority, void (*run)(OpCall&),
                        std::string (*accepts)(const OpCall&) = accept_cuda_f32) {
  OpImpl impl;
  impl.name = name;
  impl.device = DeviceType::cuda;
  impl.priority = priority;
  impl.accepts = accepts;
  impl.run = run;
  return impl;
}

/// Rows of a tensor viewed as [rows, last dim].
inline std::int64_t rows_of(const Tensor& t) { return t.dim() == 0 ? 1 : t.numel() / t.size(-1); }

// ---- cuBLASLt ----------------------------------------------------------------------------------

/// The calling thread's cuBLASLt handle and matmul workspace for one device, created on first
/// use and kept for the thread's lifetime (handles are not shared between threads, so no lock
/// is held while a matmul is enqueued). Defined in matmul.cpp.
struct CublasLtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
CublasLtContext& cublaslt_context(int device);

/// One batched row-major GEMM for cuBLASLt: c[b] = alpha * a[b] @ w[b] (+ beta * c[b]) (+ bias)
/// (then relu). Strides in elements; a batch stride of 0 broadcasts that operand. a: [B, M, K],
/// w: [B, K, N], c: [B, M, N] with unit stride along N. Each of a and w needs a unit stride in
/// one of its two matrix dims (a transpose view is fine). Defined in matmul.cpp.
struct GemmProblem {
  std::int64_t B = 1, M = 0, N = 0, K = 0;
  std::int64_t a_sb = 0, a_sm = 0, a_sk = 0;
  std::int64_t w_sb = 0, w_sk = 0, w_sn = 0;
  std::int64_t c_sb = 0, c_sm = 0;
  DType a_type = DType::f32, w_type = DType::f32, c_type = DType::f32;
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  ///< f32 [N] added to every row (cuBLASLt bias epilogue), or null
  bool relu = false;            ///< relu after the bias (epilogue)
};
/// "" when gemm() can run `p` (dtypes and strides cuBLASLt takes), else the reason.
std::string gemm_accepts(const GemmProblem& p);
/// Enqueue p on op_stream() of `device`. f32 inputs use TF32 tensor cores iff tf32_enabled().
void gemm(const GemmProblem& p, const void* a, const void* w, void* c, int device);

// ---- device-side helpers (kernels only) --------------------------------------------------------

#if defined(__CUDACC__)
/// Reduce v over each group of kThreads consecutive threads of a 1-D block (kThreads a multiple
/// of 32 dividing blockDim.x, at most 1024); every thread of the group gets the result, in the
/// same fixed order on every run (deterministic). For kThreads > 32 every thread of the block
/// must call it (it synchronises the block); scratch: shared memory of blockDim.x / 32 values.
template <int kThreads, class T, class Op>
__device__ __forceinline__ T group_reduce(T v, Op op, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (kThreads == 32) {
    return v;
  } else {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if (threadIdx.x % 32 == 0) scratch[warp] = v;
    __syncthreads();
    const int first = (static_cast<int>(threadIdx.x) / kThreads) * (kThreads / 32);
    T r = scratch[first];
    for (int w = 1; w < kThreads / 32; ++w) r = op(r, scratch[first + w]);
    __syncthreads();
    return r;
  }
}
struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return b > a ? b : a; }
};

/// The max m and sum(exp(x - m)) of row xr[0, C), reduced over a group of kThreads threads
/// (thread t of the group reads columns t, t + kThreads, ...); an invalid row's threads still
/// take part in the reduction (group_reduce synchronises the block) and contribute nothing.
template <int kThreads>
__device__ __forceinline__ void row_max_sumexp(const float* __restrict__ xr, std::int64_t C, int t, bool valid,
                                               float* scratch, float& m, float& s) {
  m = -INFINITY;
  if (valid)
    for (std::int64_t j = t; j < C; j += kThreads) m = xr[j] > m ? xr[j] : m;
  m = group_reduce<kThreads>(m, MaxOp{}, scratch);
  s = 0.0f;
  if (valid)
    for (std::int64_t j = t; j < C; j += kThreads) s += expf(xr[j] - m);
  s = group_reduce<kThreads>(s, SumOp{}, scratch);
}

/// Deterministic column sums over rows, pass 1: block (32, 8) sums load(r, j) for 32 columns
/// over rows [blockIdx.y * rows_per_chunk, +rows_per_chunk) in a fixed order into
/// partial[blockIdx.y * C + j]. Grid (ceil(C / 32), chunks), chunks <= 65535.
template <class Load>
__global__ void column_partial_kernel(Load load, float* __restrict__ partial, std::int64_t R, std::int64_t C,
                                      std::int64_t rows_per_chunk) {
  __shared__ float tile[8][33];
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
  float s = 0.0f;
  if (j < C)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += 8) s += load(r, j);
  tile[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < C) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += tile[k][threadIdx.x];
    partial[static_cast<std::int64_t>(blockIdx.y) * C + j] = t;
  }
}
/// Pass 2: out[j] = (accumulate ? out[j] : 0) + sum of the chunks' partials, in chunk order.
template <class Unused = void>
__global__ void column_finish_kernel(const float* __restrict__ partial, float* __restrict__ out, std::int64_t C,
                                     std::int64_t chunks, bool accumulate) {
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < C;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (std::int64_t k = 0; k < chunks; ++k) s += partial[k * C + j];
    out[j] = accumulate ? out[j] + s : s;
  }
}
#endif

/// Rows per chunk of the column reductions (column_partial_kernel): at least 256, few enough
/// chunks for the grid's y limit.
inline std::int64_t column_rows_per_chunk(std::int64_t R) {
  const std::int64_t by_limit = (R + 65534) / 65535;
  return by_limit > 256 ? by_limit : 256;
}

}  // namespace benchhost::nn::cuda
