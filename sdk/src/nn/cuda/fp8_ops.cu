// CUDA fp8 ops (Hopper): fp8_cast_scaled (a kernel) and matmul_fp8 (cuBLASLt), the pieces of
// the fp8 precision policy's scaled matmuls (Note [Precision policies]); CPU references in
// nn/cpu/fp8_ops.cpp.
//
// fp8_cast_scaled: one grid-stride pass; each element is read once (f32, f16 or bf16), |x| goes
// into a per-thread max, x * scale is converted with __nv_cvt_float_to_fp8 (round to nearest
// even, saturating to the largest finite value, as dtype.hpp's CPU conversion). Per-block
// maxima (warp shuffles, then one warp) meet in one atomicMax on the float's bits, which orders
// non-negative floats like unsigned integers; max is order-independent, so amax is exact and
// deterministic. amax is of the *unscaled* input, what Fp8DelayedScaling::record_amax wants.
//
// matmul_fp8: row-major d[M, N] = (a_scale_inv a[M, K]) (b_scale_inv b[N, K])^T. cuBLASLt is
// column-major and its fp8 kernels on Hopper take only the "TN" form (A transposed, B not).
// A row-major [M, N] output is a column-major N x M matrix, so the op computes
// D (N x M) = op_T(cuBLAS A) op_N(cuBLAS B) with cuBLAS A := b (stored K x N, ld K) and
// cuBLAS B := a (stored K x M, ld K).
// Both operands are K-contiguous, which is exactly the [M, K] x [N, K] contract of the op (the
// linear layer's x and weight). The per-tensor dequantisation scales go in as device pointers
// (A_SCALE_POINTER / B_SCALE_POINTER: cuBLASLt computes alpha * scale_a * scale_b * A B), so a
// scale updated on the device needs no host round trip. Other documented requirements are
// refused with their reason: sm_90+, fp32 compute and scale type, e5m2 x e5m2 not supported,
// M, N, K multiples of 16 and 16-byte aligned pointers. An fp8 d (the next layer's input) is
// scaled by d_scale (D_SCALE_POINTER) and cuBLASLt reports its amax in the epilogue
// (AMAX_D_POINTER, the unscaled result's max |d|), with a bf16 C operand as fp8 outputs
// require (unused: beta = 0). The header documents AMAX_D only for some type combinations, so
// for f32/f16/bf16 outputs amax_d comes from one extra pass over d (launch_abs_max), on the
// stored values.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "nn/cuda/optim_common.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr int kCastThreads = 256;

template <class T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// Max of m over the block into *amax (bits compared as unsigned: m >= 0). blockDim.x == kCastThreads.
__device__ void block_max_to(float m, float* amax) {
  __shared__ float warp_max[kCastThreads / 32];
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < kCastThreads / 32 ? warp_max[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m));
  }
}

template <class In>
__global__ void __launch_bounds__(kCastThreads)
cast_fp8_kernel(const In* x, const float* scale, __nv_fp8_storage_t* y, std::int64_t n,
                __nv_fp8_interpretation_t kind, float* amax) {
  const float s = *scale;
  float m = 0.0f;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = to_float(x[i]);
    m = fmaxf(m, fabsf(v));
    y[i] = __nv_cvt_float_to_fp8(v * s, __NV_SATFINITE, kind);
  }
  if (amax) block_max_to(m, amax);
}

template <class In>
__global__ void __launch_bounds__(kCastThreads) abs_max_kernel(const In* x, std::int64_t n, float* amax) {
  float m = 0.0f;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(to_float(x[i])));
  block_max_to(m, amax);
}

bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }
bool is_half_or_f32(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

std::string scalar_reason(const Tensor& t, const char* what) {
  if (!t.defined() || t.numel() != 1 || t.dtype() != DType::f32 || !t.device().is_cuda())
    return fmt::format("{} must be an f32 cuda tensor of one element", what);
  return {};
}

// ---- fp8_cast_scaled ----------------------------------------------------------------------------

std::string cast_accepts(const OpCall& c) {
  if (c.inputs.size() != 2 || c.outputs.size() != 2) return "expects inputs {x, scale}, outputs {y, amax}";
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  if (!x.device().is_cuda() || !y.device().is_cuda() || x.device() != y.device()) return "x and y must be on one cuda device";
  if (!is_half_or_f32(x.dtype()) || !is_fp8(y.dtype())) return "x must be f32/f16/bf16 and y e4m3/e5m2";
  if (x.shape() != y.shape() || !x.is_contiguous() || !y.is_contiguous()) return "x and y must be contiguous and of one shape";
  std::string why = scalar_reason(c.inputs[1], "scale");
  if (why.empty() && c.outputs[1].defined()) why = scalar_reason(c.outputs[1], "amax");
  return why;
}

void cast_run(OpCall& c) {
  const std::string why = cast_accepts(c);
  BH_CHECK_AS(InvalidArgument, why.empty(), "fp8_cast_scaled: {}", why);
  const Tensor& x = c.inputs[0];
  Tensor& y = c.outputs[0];
  set_device_of(x);
  float* amax = c.outputs[1].defined() ? c.outputs[1].data<float>() : nullptr;
  if (amax) BH_CHECK_CUDA(cudaMemsetAsync(amax, 0, sizeof(float), op_stream()));
  const std::int64_t n = x.numel();
  if (n == 0) return;
  const unsigned grid = grid_for(n, kCastThreads);
  const auto kind = y.dtype() == DType::f8e4m3 ? __NV_E4M3 : __NV_E5M2;
  auto* out = static_cast<__nv_fp8_storage_t*>(y.raw_data());
  const float* scale = c.inputs[1].data<float>();
  switch (x.dtype()) {
    case DType::f32:
      cast_fp8_kernel<float><<<grid, kCastThreads, 0, op_stream()>>>(x.data<float>(), scale, out, n, kind, amax);
      break;
    case DType::f16:
      cast_fp8_kernel<__half><<<grid, kCastThreads, 0, op_stream()>>>(static_cast<const __half*>(x.raw_data()),
                                                                       scale, out, n, kind, amax);
      break;
    default:
      cast_fp8_kernel<__nv_bfloat16><<<grid, kCastThreads, 0, op_stream()>>>(
          static_cast<const __nv_bfloat16*>(x.raw_data()), scale, out, n, kind, amax);
      break;
  }
  BH_CHECK_CUDA_LAUNCH("cast_fp8_kernel");
}

// ---- matmul_fp8 ---------------------------------------------------------------------------------

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f8e4m3: return CUDA_R_8F_E4M3;
    case DType::f8e5m2: return CUDA_R_8F_E5M2;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

int compute_capability_major(int device) {
  int major = 0;
  BH_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

std::string matmul_accepts(const OpCall& c) {
  if ((c.inputs.size() != 4 && c.inputs.size() != 5) || c.outputs.empty() || c.outputs.size() > 2)
    return "expects inputs {a, b, a_scale_inv, b_scale_inv, d_scale}, outputs {d, amax_d}";
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &d = c.outputs[0];
  for (const Tensor* t : {&a, &b, &d})
    if (!t->defined() || !t->device().is_cuda() || t->device() != a.device() || !t->is_contiguous())
      return "a, b and d must be contiguous tensors on one cuda device";
  if (a.dim() != 2 || b.dim() != 2 || !is_fp8(a.dtype()) || !is_fp8(b.dtype()))
    return fmt::format("a and b must be 2-d fp8, got {} and {}", a.describe(), b.describe());
  if (a.dtype() == DType::f8e5m2 && b.dtype() == DType::f8e5m2)
    return "cuBLASLt has no e5m2 x e5m2 matmul; one operand must be e4m3";
  if (a.size(1) != b.size(1)) return fmt::format("a [M, K] and b [N, K] disagree on K: {} vs {}", a.size(1), b.size(1));
  const std::int64_t M = a.size(0), N = b.size(0), K = a.size(1);
  if (d.shape() != Shape({M, N}) || !(is_half_or_f32(d.dtype()) || is_fp8(d.dtype())))
    return fmt::format("d must be f32/f16/bf16/fp8 [{}, {}], got {}", M, N, d.describe());
  const bool fp8_out = is_fp8(d.dtype());
  if (fp8_out != (c.inputs.size() == 5 && c.inputs[4].defined()))
    return "d_scale (input 4) is required for an fp8 d and only then";
  if (fp8_out) {
    std::string why = scalar_reason(c.inputs[4], "d_scale");
    if (!why.empty()) return why;
  }
  if (M % 16 != 0 || N % 16 != 0 || K % 16 != 0)
    return fmt::format("cuBLASLt fp8 matmuls need M, N, K multiples of 16, got {} x {} x {}", M, N, K);
  if (!aligned16(a.raw_data()) || !aligned16(b.raw_data()) || !aligned16(d.raw_data()))
    return "cuBLASLt fp8 matmuls need 16-byte aligned a, b and d";
  std::string why = scalar_reason(c.inputs[2], "a_scale_inv");
  if (why.empty()) why = scalar_reason(c.inputs[3], "b_scale_inv");
  if (why.empty() && c.outputs.size() == 2 && c.outputs[1].defined()) why = scalar_reason(c.outputs[1], "amax_d");
  if (!why.empty()) return why;
  if (compute_capability_major(a.device().index) < 9)
    return fmt::format("fp8 tensor-core matmuls need Hopper (sm_90) or newer; {} is sm_{}x", a.device().str(),
                       compute_capability_major(a.device().index));
  return {};
}

// Owners of the cuBLASLt descriptors of one call.
struct LtDesc {
  cublasLtMatmulDesc_t h = nullptr;
  ~LtDesc() { if (h) cublasLtMatmulDescDestroy(h); }
};
struct LtLayout {
  cublasLtMatrixLayout_t h = nullptr;
  LtLayout(cudaDataType_t t, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    BH_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&h, t, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld));
  }
  ~LtLayout() { if (h) cublasLtMatrixLayoutDestroy(h); }
  LtLayout(const LtLayout&) = delete;
  LtLayout& operator=(const LtLayout&) = delete;
};
struct LtPreference {
  cublasLtMatmulPreference_t h = nullptr;
  ~LtPreference() { if (h) cublasLtMatmulPreferenceDestroy(h); }
};

void matmul_run(OpCall& c) {
  const std::string why = matmul_accepts(c);
  BH_CHECK_AS(Unsupported, why.empty(), "matmul_fp8 on cuda: {}", why);
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  Tensor& d = c.outputs[0];
  const std::int64_t M = a.size(0), N = b.size(0), K = a.size(1);
  const int device = a.device().index;
  set_device_of(a);
  float* amax = c.outputs.size() == 2 && c.outputs[1].defined() ? c.outputs[1].data<float>() : nullptr;
  if (amax) BH_CHECK_CUDA(cudaMemsetAsync(amax, 0, sizeof(float), op_stream()));
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: d = 0 (fp8 zero is the all-zero byte, as for the other types)
    BH_CHECK_CUDA(cudaMemsetAsync(d.raw_data(), 0, d.nbytes(), op_stream()));
    return;
  }
  CublasLtContext& ctx = cublaslt_context(device);

  LtDesc desc;
  BH_CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  // cuBLAS A is our b, cuBLAS B is our a (see the file comment).
  const void* scale_a = c.inputs[3].raw_data();
  const void* scale_b = c.inputs[2].raw_data();
  BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a, sizeof(scale_a)));
  BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b, sizeof(scale_b)));

  const bool fp8_out = is_fp8(d.dtype());
  Tensor c_scratch;  // fp8 outputs take a bf16 C (never read: beta = 0)
  if (fp8_out) {
    const void* scale_d = c.inputs[4].raw_data();
    BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &scale_d, sizeof(scale_d)));
    if (amax)
      BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax, sizeof(amax)));
    c_scratch = Tensor::empty({M, N}, DType::bf16, a.device());
  }
  void* c_ptr = fp8_out ? c_scratch.raw_data() : d.raw_data();

  const LtLayout la(cuda_type(b.dtype()), K, N, K);
  const LtLayout lb(cuda_type(a.dtype()), K, M, K);
  const LtLayout lc(fp8_out ? CUDA_R_16BF : cuda_type(d.dtype()), N, M, N);
  const LtLayout ld(cuda_type(d.dtype()), N, M, N);

  LtPreference pref;
  BH_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref.h));
  const std::size_t ws = ctx.workspace_bytes;
  BH_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(ctx.handle, desc.h, la.h, lb.h, lc.h, ld.h, pref.h, 1, &result, &found);
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) BH_CHECK_CUBLAS(st);
  BH_CHECK_AS(Unsupported, st == CUBLAS_STATUS_SUCCESS && found > 0, "matmul_fp8: cuBLASLt has no algorithm for {} x {} -> {} at {} x {} x {}",
              dtype_name(a.dtype()), dtype_name(b.dtype()), dtype_name(d.dtype()), M, N, K);
  const float alpha = 1.0f, beta = 0.0f;
  BH_CHECK_CUBLAS(cublasLtMatmul(ctx.handle, desc.h, &alpha, b.raw_data(), la.h, a.raw_data(), lb.h, &beta,
                                 c_ptr, lc.h, d.raw_data(), ld.h, &result.algo, ctx.workspace, ws,
                                 op_stream()));
  if (amax && !fp8_out) mt::launch_abs_max(d, amax);
}

const bool registered = [] {
  register_op_impl("fp8_cast_scaled", OpImpl{"cuda.kernel", DeviceType::cuda, 50, cast_accepts, cast_run, false});
  register_op_impl("matmul_fp8", OpImpl{"cuda.cublaslt", DeviceType::cuda, 100, matmul_accepts, matmul_run, false});
  return true;
}();

}  // namespace

void mt::launch_abs_max(const Tensor& x, float* amax) {
  BH_CHECK_AS(InvalidArgument, x.device().is_cuda() && x.is_contiguous() && is_half_or_f32(x.dtype()),
              "abs max: expected a contiguous f32/f16/bf16 cuda tensor, got {}", x.describe());
  set_device_of(x);
  BH_CHECK_CUDA(cudaMemsetAsync(amax, 0, sizeof(float), op_stream()));
  const std::int64_t n = x.numel();
  if (n == 0) return;
  const unsigned grid = grid_for(n, kCastThreads);
  switch (x.dtype()) {
    case DType::f32:
      abs_max_kernel<float><<<grid, kCastThreads, 0, op_stream()>>>(x.data<float>(), n, amax);
      break;
    case DType::f16:
      abs_max_kernel<__half><<<grid, kCastThreads, 0, op_stream()>>>(static_cast<const __half*>(x.raw_data()), n, amax);
      break;
    default:
      abs_max_kernel<__nv_bfloat16><<<grid, kCastThreads, 0, op_stream()>>>(
          static_cast<const __nv_bfloat16*>(x.raw_data()), n, amax);
      break;
  }
  BH_CHECK_CUDA_LAUNCH("abs_max_kernel");
}

}  // namespace benchhost::nn::cuda
