// matmul on CUDA through cuBLASLt, and the GEMM helper (cuda_common.hpp) that linear and other
// CUDA ops share.
//
// Layout: cuBLASLt is column-major, our tensors row-major. A row-major [M, N] matrix with row
// stride ld is a column-major [N, M] matrix with the same ld, so c = a @ w (row-major) is
// computed as c^T = w^T a^T (column-major): cuBLASLt's "A" is our w, its "B" our a, m = N,
// n = M. An operand whose unit stride is along the other dim (a transpose view) is passed with
// CUBLAS_OP_T instead of being copied; one with no unit stride in either matrix dim is refused.
// Batch dims collapse into one strided batch; a batch-less w broadcasts (batch stride 0), and
// a broadcast w over a row-major a folds the batch into M (one larger GEMM).
// Precision: f32, f16 or bf16 operands, f32 accumulation and scale, f32 (or the operands' type)
// output. f32 GEMMs run on TF32 tensor cores iff nn::tf32_enabled() (math_mode.hpp).
//
// Note [cuBLASLt algorithm cache]
// cublasLtMatmulAlgoGetHeuristic costs tens of microseconds, more than a small GEMM itself, so
// each thread caches the chosen algorithm per problem (shapes, strides, dtypes, epilogue, math
// mode, device). Descriptors are cheap and built per call. Handles and workspaces are per thread
// and per device and live as long as the thread (deliberately never destroyed: tearing them down
// from a thread_local destructor can run after the CUDA runtime has unloaded at process exit).

#include <map>
#include <tuple>

#include "benchhost/nn/math_mode.hpp"
#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {

namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;  // what cuBLAS recommends for Hopper

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  BH_THROW(Unsupported, "cuBLASLt matmul does not take {} operands", dtype_name(t));
}

// A column-major operand as cuBLASLt wants it: the stored matrix (rows x cols, leading dim ld)
// and whether to transpose it.
struct LtOperand {
  cublasOperation_t op = CUBLAS_OP_N;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  bool ok = false;
};

// The logical column-major matrix R x C whose element (i, j) sits at i * si + j * sj.
LtOperand lt_operand(std::int64_t R, std::int64_t C, std::int64_t si, std::int64_t sj) {
  LtOperand o;
  if (si == 1 || R == 1) {  // column-major as stored
    o.op = CUBLAS_OP_N;
    o.rows = static_cast<std::uint64_t>(R);
    o.cols = static_cast<std::uint64_t>(C);
    o.ld = C == 1 ? std::max<std::int64_t>(R, 1) : sj;
    o.ok = o.ld >= std::max<std::int64_t>(R, 1);
    if (o.ok) return o;
  }
  if (sj == 1 || C == 1) {  // stored as its transpose (C x R column-major)
    o.op = CUBLAS_OP_T;
    o.rows = static_cast<std::uint64_t>(C);
    o.cols = static_cast<std::uint64_t>(R);
    o.ld = R == 1 ? std::max<std::int64_t>(C, 1) : si;
    o.ok = o.ld >= std::max<std::int64_t>(C, 1);
    return o;
  }
  o.ok = false;
  return o;
}

// cuBLASLt's A is our w (N x K as "element (n, k)"), its B our a (K x M as "element (k, m)").
LtOperand lt_a(const GemmProblem& p) { return lt_operand(p.N, p.K, p.w_sn, p.w_sk); }
LtOperand lt_b(const GemmProblem& p) { return lt_operand(p.K, p.M, p.a_sk, p.a_sm); }

struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(cudaDataType_t t, std::uint64_t rows, std::uint64_t cols, std::int64_t ld, std::int64_t batch,
         std::int64_t batch_stride) {
    BH_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&h, t, rows, cols, ld));
    if (batch > 1) {
      const auto count = static_cast<std::int32_t>(batch);
      BH_CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      BH_CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                       &batch_stride, sizeof(batch_stride)));
    }
  }
  ~Layout() {
    if (h) cublasLtMatrixLayoutDestroy(h);
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct MatmulDesc {
  cublasLtMatmulDesc_t h = nullptr;
  MatmulDesc(cublasComputeType_t compute) { BH_CHECK_CUBLAS(cublasLtMatmulDescCreate(&h, compute, CUDA_R_32F)); }
  ~MatmulDesc() {
    if (h) cublasLtMatmulDescDestroy(h);
  }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t h = nullptr;
  Preference() { BH_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&h)); }
  ~Preference() {
    if (h) cublasLtMatmulPreferenceDestroy(h);
  }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
};

using AlgoKey = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, std::int64_t,  // device, B, M, N, K
                           std::int64_t, std::int64_t, std::int64_t, std::int64_t,      // a strides, w_sn
                           std::int64_t, std::int64_t, std::int64_t,                    // w_sk, w_sb, c_sm
                           int, int, int, int, bool, bool>;  // types, alignments, epilogue, tf32, beta != 0

// The alignment of a pointer in bytes (a power of two, at most 256). cuBLASLt's heuristic
// assumes 256-byte aligned buffers unless told otherwise (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*),
// and a view into a tensor (a slice) is often less aligned, so the real alignment goes into the
// preference and into the algorithm cache key.
std::uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 1;
  while (a < 256 && (v & a) == 0) a <<= 1;
  return a;
}

}  // namespace

CublasLtContext& cublaslt_context(int device) {
  thread_local std::map<int, CublasLtContext> contexts;
  auto it = contexts.find(device);
  if (it != contexts.end()) return it->second;
  CublasLtContext ctx;
  BH_CHECK_CUDA(cudaSetDevice(device));
  BH_CHECK_CUBLAS(cublasLtCreate(&ctx.handle));
  BH_CHECK_CUDA(cudaMalloc(&ctx.workspace, kWorkspaceBytes));
  ctx.workspace_bytes = kWorkspaceBytes;
  return contexts.emplace(device, ctx).first->second;
}

std::string gemm_accepts(const GemmProblem& p) {
  const auto supported = [](DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; };
  if (!supported(p.a_type) || !supported(p.w_type) || !supported(p.c_type))
    return fmt::format("cuBLASLt path takes f32/f16/bf16, got {} x {} -> {}", dtype_name(p.a_type),
                       dtype_name(p.w_type), dtype_name(p.c_type));
  if (p.a_type != p.w_type) return "a and b must have the same dtype";
  if (p.a_type == DType::f32 && p.c_type != DType::f32) return "f32 operands need an f32 output";
  if (p.c_type != DType::f32 && p.c_type != p.a_type) return "output must be f32 or the operands' dtype";
  if (p.M <= 0 || p.N <= 0 || p.K <= 0 || p.B <= 0) return "";  // nothing to compute (handled by gemm)
  if (!lt_a(p).ok || !lt_b(p).ok)
    return "each operand needs a unit stride in one of its last two dims";
  if (p.c_sm < p.N) return "output rows overlap";
  if (p.B > 0x7fffffff) return "batch too large for cuBLASLt";
  return {};
}

void gemm(const GemmProblem& p, const void* a, const void* w, void* c, int device) {
  if (p.M <= 0 || p.N <= 0 || p.B <= 0) return;
  if (p.K <= 0) BH_THROW(Unsupported, "cuBLASLt GEMM with K = 0 (an empty inner dim)");
  const std::string why = gemm_accepts(p);
  if (!why.empty()) BH_THROW(Unsupported, "cuBLASLt GEMM: {}", why);
  CublasLtContext& ctx = cublaslt_context(device);
  const LtOperand A = lt_a(p), Bop = lt_b(p);
  const bool tf32 = p.a_type == DType::f32 && tf32_enabled();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

  MatmulDesc desc(compute);
  BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &A.op, sizeof(A.op)));
  BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &Bop.op, sizeof(Bop.op)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (p.bias) epi = p.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else if (p.relu) epi = CUBLASLT_EPILOGUE_RELU;
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (p.bias) {
    BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
    const cudaDataType_t bias_type = CUDA_R_32F;
    BH_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                   sizeof(bias_type)));
  }

  Layout la(cuda_type(p.w_type), A.rows, A.cols, A.ld, p.B, p.w_sb);
  Layout lb(cuda_type(p.a_type), Bop.rows, Bop.cols, Bop.ld, p.B, p.a_sb);
  Layout lc(cuda_type(p.c_type), static_cast<std::uint64_t>(p.N), static_cast<std::uint64_t>(p.M), p.c_sm, p.B, p.c_sb);

  const std::uint32_t align_a = alignment_of(a), align_w = alignment_of(w), align_c = alignment_of(c);
  thread_local std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
  const AlgoKey key{device, p.B, p.M, p.N, p.K, p.a_sb, p.a_sm, p.a_sk, p.w_sn, p.w_sk, p.w_sb, p.c_sm,
                    static_cast<int>(p.a_type) * 16 + static_cast<int>(p.c_type),
                    static_cast<int>(align_w * 512 + align_a),
                    static_cast<int>(align_c), static_cast<int>(epi), tf32, p.beta != 0.0f};
  auto it = algos.find(key);
  if (it == algos.end()) {
    Preference pref;
    const std::uint64_t ws = ctx.workspace_bytes;
    BH_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // cuBLASLt's A is our w, its B our a; C and D are both c.
    for (auto [attr, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_w},
                               std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a},
                               std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
                               std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}})
      BH_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref.h, attr, &value, sizeof(value)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(ctx.handle, desc.h, la.h, lb.h, lc.h, lc.h, pref.h, 1, &result, &found);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) BH_CHECK_CUBLAS(st);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || found == 0 || result.state != CUBLAS_STATUS_SUCCESS)
      BH_THROW(Unsupported, "cuBLASLt has no algorithm for a {}x{}x{} (batch {}) {} GEMM with these strides",
               p.M, p.N, p.K, p.B, dtype_name(p.a_type));
    if (algos.size() > 4096) algos.clear();  // a guard against unbounded shape churn
    it = algos.emplace(key, result.algo).first;
  }
  const float alpha = p.alpha, beta = p.beta;
  BH_CHECK_CUDA(cudaSetDevice(device));
  BH_CHECK_CUBLAS(cublasLtMatmul(ctx.handle, desc.h, &alpha, w, la.h, a, lb.h, &beta, c, lc.h, c, lc.h,
                                 &it->second, ctx.workspace, ctx.workspace_bytes, op_stream()));
}

namespace {

// Collapse dims [0, nd) of t into one batch dim: true if they are one strided run (size-1 dims
// ignored); count and stride receive the batch size and the stride between batches.
bool collapse_batch(const Tensor& t, std::int64_t nd, std::int64_t& count, std::int64_t& stride) {
  count = 1;
  stride = 0;
  std::int64_t expect = -1;
  for (std::int64_t d = nd - 1; d >= 0; --d) {
    const std::int64_t n = t.size(d);
    if (n == 1) continue;
    const std::int64_t s = t.strides()[static_cast<std::size_t>(d)];
    if (expect < 0) stride = s;
    else if (s != expect) return false;
    count *= n;
    expect = s * n;
  }
  return true;
}

// The GemmProblem of a matmul call, or the reason it cannot be one.
std::string problem_of(const OpCall& c, GemmProblem& p) {
  const Tensor& a = c.inputs.at(0);
  const Tensor& b = c.inputs.at(1);
  const Tensor& out = c.outputs.at(0);
  for (const Tensor* t : {&a, &b, &out})
    if (!t->defined() || !t->device().is_cuda()) return "needs cuda tensors";
  if (a.device() != b.device() || a.device() != out.device()) return "operands on different devices";
  if (a.dim() < 2 || b.dim() < 2) return "needs >= 2-d operands";
  const bool ta = c.attrs.get_bool("trans_a"), tb = c.attrs.get_bool("trans_b");
  const std::int64_t ad = a.dim(), bd = b.dim();
  p.M = ta ? a.size(-1) : a.size(-2);
  p.K = ta ? a.size(-2) : a.size(-1);
  p.N = tb ? b.size(-2) : b.size(-1);
  if ((tb ? b.size(-1) : b.size(-2)) != p.K) return "inner dims differ";
  const auto& as = a.strides();
  const auto& bs = b.strides();
  p.a_sm = ta ? as[ad - 1] : as[ad - 2];
  p.a_sk = ta ? as[ad - 2] : as[ad - 1];
  p.w_sk = tb ? bs[bd - 1] : bs[bd - 2];
  p.w_sn = tb ? bs[bd - 2] : bs[bd - 1];
  std::int64_t a_batch = 1, b_batch = 1;
  if (!collapse_batch(a, ad - 2, a_batch, p.a_sb)) return "batch dims of a are not one strided run";
  if (!collapse_batch(b, bd - 2, b_batch, p.w_sb)) return "batch dims of b are not one strided run";
  if (b_batch != 1 && b_batch != a_batch) return "batch dims differ";
  if (b_batch == 1) p.w_sb = 0;
  p.B = a_batch;
  Shape want(a.shape().begin(), a.shape().end() - 2);
  want.push_back(p.M);
  want.push_back(p.N);
  if (out.shape() != want || !out.is_contiguous()) return "output must be contiguous " + shape_str(want);
  p.c_sm = p.N;
  p.c_sb = p.M * p.N;
  if (p.B > 1 && p.w_sb == 0 && p.a_sk == 1 && p.a_sb == p.M * p.a_sm) {
    p.M *= p.B;
    p.B = 1;
  }
  if (p.B == 1) {
    p.a_sb = 0;
    p.w_sb = 0;
    p.c_sb = 0;
  }
  p.a_type = a.dtype();
  p.w_type = b.dtype();
  p.c_type = out.dtype();
  p.alpha = static_cast<float>(c.attrs.get("alpha", 1.0));
  p.beta = c.attrs.get_bool("accumulate") ? 1.0f : 0.0f;
  return gemm_accepts(p);
}

std::string accepts_lt(const OpCall& c) {
  GemmProblem p;
  return problem_of(c, p);
}

void run_lt(OpCall& c) {
  GemmProblem p;
  const std::string why = problem_of(c, p);
  BH_CHECK_AS(InvalidArgument, why.empty(), "matmul {} x {} -> {}: {}", c.inputs[0].describe(),
              c.inputs[1].describe(), c.outputs[0].describe(), why);
  Tensor& out = c.outputs[0];
  if (p.K == 0 && out.numel() > 0) {  // an empty sum: c = 0 (or c unchanged when accumulating)
    if (p.beta == 0.0f) BH_CHECK_CUDA(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), op_stream()));
    return;
  }
  gemm(p, c.inputs[0].raw_data(), c.inputs[1].raw_data(), out.raw_data(), out.device().index);
}

const bool registered = register_op_impl(
    "matmul", OpImpl{"cuda.cublaslt", DeviceType::cuda, 100, accepts_lt, run_lt, false});

}  // namespace
}  // namespace benchhost::nn::cuda
