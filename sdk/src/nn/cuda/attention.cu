// CUDA scaled dot-product attention: sdpa_forward and sdpa_backward (contracts and masks:
// AttentionMask in nn/ops.hpp, the op docs in sdk/src/nn/cpu/attention.cpp), in two
// implementations: "cuda.gemm" (cuBLASLt products around our softmax kernels, Note [Attention
// through GEMMs] below, taken first) and "cuda.fused" (the kernels described here).
//
// Layout: q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv], out [B, H, T, Dv], probs [B, H, T, S],
// dropmask u8 [B, H, T, S], all contiguous f32 (u8) on one device; D, Dv <= 256 (fused only).
//
// Forward, one fused kernel. A block is 8 warps = 8 query rows of one (b, h); keys stream
// through shared memory in tiles of 32 (K tile, then V tile), lane j of a warp owning key j of
// the tile. Pass 1 computes the masked scores and keeps a per-lane running max and sum
// (online softmax), merged across the warp at the end. Pass 2 recomputes the scores, writes the
// normalised probabilities (the op saves them for the backward) and the dropout keep flags,
// and accumulates out = P' V with lane e owning output dims e, e+32, ... (p_j broadcast by
// shuffle). Scores are computed twice instead of being staged, so shared memory stays O(D).
// Masking is the CPU's: key j is visible from query i iff j < min(S, i + S - T + 1) (causal),
// j < length[b], keep[b, j], keep[b, i, j] and the additive term is not -inf; a row with no
// visible key gets zero probabilities and a zero output.
// Dropout: the keep decision of probs element e (flat index) is lane e % 4 of Philox4x32-10
// block e / 4 with key mix64(seed) and counter high word mix64(step) ^ stream (Note [Dropout
// randomness]), kept iff its top 24 bits >= ceil(p 2^24): bit-identical to the CPU.
//
// Backward, two kernels over the saved P (and dropmask M, scale 1/(1-p) as f):
//   rows:  per query row i (same block shape as the forward), dP'_ij = dO_i . V_j, dP = dP' M f,
//          r_i = sum_j dP_ij P_ij, dS_ij = scale P_ij (dP_ij - r_i) stored to scratch,
//          dQ_i = sum_j dS_ij K_j;
//   keys:  per key row j (8 warps = 8 keys of one (b, h)), queries stream through shared memory
//          in tiles of 32: dK_j = sum_i dS_ij Q_i, dV_j = sum_i P_ij M_ij f dO_i.
// All accumulation is f32 in registers, in a fixed order (deterministic; no atomics).

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "benchhost/random.hpp"
#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr int kWarps = 8;                // rows (query or key) per block
constexpr int kTile = 32;                // keys (forward/rows) or queries (keys kernel) per tile
constexpr int kMaxHeadDim = 256;
constexpr int kMaxAcc = kMaxHeadDim / 32;  // accumulators per lane
constexpr float kNegInf = -__builtin_huge_valf();

struct Mask {
  bool causal = false;
  const void* lengths = nullptr;  // i32/i64 [B]
  bool lengths64 = false;
  const std::uint8_t* keep_bs = nullptr;   // [B, S]
  const std::uint8_t* keep_bts = nullptr;  // [B, T, S]
  const float* add = nullptr;              // [B, T, S] or [B, H, T, S]
  bool add_per_head = false;
};

struct Dims {
  std::int64_t B = 0, H = 0, T = 0, S = 0;
  int D = 0, Dv = 0;
};

struct Dropout {
  bool on = false;
  std::uint64_t key = 0, stream = 0;
  std::uint32_t threshold = 0;  // keep iff (bits >> 8) >= threshold
  float scale = 1.0f;           // 1 / (1 - p)
};

__device__ __forceinline__ bool keep_element(const Dropout& d, std::uint64_t e) {
  std::uint32_t bits[4];
  philox4x32_into(d.key, d.stream, e >> 2, bits);  // random.hpp, the CPU's generator
  return (bits[e & 3] >> 8) >= d.threshold;
}

// Visible keys of row (b, i) before the per-key masks: [0, limit).
__device__ __forceinline__ std::int64_t key_limit(const Mask& m, const Dims& n, std::int64_t b,
                                                  std::int64_t i) {
  std::int64_t limit = n.S;
  if (m.causal) limit = min(limit, i + (n.S - n.T) + 1);
  if (m.lengths != nullptr) {
    const std::int64_t len = m.lengths64 ? static_cast<const std::int64_t*>(m.lengths)[b]
                                         : static_cast<const std::int32_t*>(m.lengths)[b];
    limit = min(limit, len);
  }
  return limit;
}

// Whether key j is visible from (b, h, i); *add receives the additive term.
__device__ __forceinline__ bool visible(const Mask& m, const Dims& n, std::int64_t b, std::int64_t h,
                                        std::int64_t i, std::int64_t j, std::int64_t limit, float* add) {
  *add = 0.0f;
  if (j >= limit) return false;
  if (m.keep_bs != nullptr && m.keep_bs[b * n.S + j] == 0) return false;
  if (m.keep_bts != nullptr && m.keep_bts[(b * n.T + i) * n.S + j] == 0) return false;
  if (m.add != nullptr) {
    const std::int64_t plane = m.add_per_head ? b * n.H + h : b;
    const float a = m.add[(plane * n.T + i) * n.S + j];
    if (a == kNegInf) return false;
    *add = a;
  }
  return true;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Odd row stride for tiles read row-per-lane: lane r reading element e of row r hits bank
// (r * ld + e) % 32, distinct for all lanes when ld is odd.
__host__ __device__ __forceinline__ int odd_ld(int d) { return d % 2 == 0 ? d + 1 : d; }

// Cooperatively copy rows [r0, r0 + kTile) of a [rows, d] matrix into a tile with row stride ld
// (rows past the end are zero-filled).
__device__ __forceinline__ void load_tile(float* tile, int ld, const float* src, std::int64_t r0,
                                          std::int64_t rows, int d) {
  for (int idx = threadIdx.x; idx < kTile * d; idx += blockDim.x) {
    const int r = idx / d, e = idx - r * d;
    tile[r * ld + e] = (r0 + r < rows) ? src[(r0 + r) * d + e] : 0.0f;
  }
}

struct FwdArgs {
  const float *q, *k, *v;
  float *out, *probs;
  std::uint8_t* dropmask;
  Dims n;
  float scale;
  Mask mask;
  Dropout drop;
};

__global__ void __launch_bounds__(kWarps * 32) sdpa_forward_kernel(FwdArgs a) {
  extern __shared__ float smem[];
  const Dims& n = a.n;
  const int D = n.D, Dv = n.Dv, ldk = odd_ld(D);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::int64_t tiles_t = (n.T + kWarps - 1) / kWarps;
  const std::int64_t bh = blockIdx.x / tiles_t;
  const std::int64_t b = bh / n.H, h = bh % n.H;
  const std::int64_t i = (blockIdx.x % tiles_t) * kWarps + warp;
  const bool active = i < n.T;
  float* qs = smem + warp * D;
  float* ks = smem + kWarps * D;
  float* vs = ks + kTile * ldk;
  const float* kb = a.k + bh * n.S * D;
  const float* vb = a.v + bh * n.S * Dv;
  const std::int64_t row = bh * n.T + i;
  if (active)
    for (int e = lane; e < D; e += 32) qs[e] = a.q[row * D + e];
  const std::int64_t limit = active ? key_limit(a.mask, n, b, i) : 0;

  // Pass 1: per-lane running max m and sum l of exp(score - m).
  float m = kNegInf, l = 0.0f;
  for (std::int64_t j0 = 0; j0 < n.S; j0 += kTile) {
    __syncthreads();
    load_tile(ks, ldk, kb, j0, n.S, D);
    __syncthreads();
    const std::int64_t j = j0 + lane;
    float add;
    if (active && j < n.S && visible(a.mask, n, b, h, i, j, limit, &add)) {
      float dot = 0.0f;
      const float* kr = ks + lane * ldk;
      for (int e = 0; e < D; ++e) dot = fmaf(qs[e], kr[e], dot);
      const float s = dot * a.scale + add;
      if (s > m) {
        l = l * expf(m - s) + 1.0f;
        m = s;
      } else {
        l += expf(s - m);
      }
    }
  }
  const float row_max = warp_max(m);
  const float row_sum = warp_sum(m == kNegInf ? 0.0f : l * expf(m - row_max));
  const float inv = row_max == kNegInf ? 0.0f : 1.0f / row_sum;

  // Pass 2: probabilities, dropout, out = P' V.
  float acc[kMaxAcc];
#pragma unroll
  for (int c = 0; c < kMaxAcc; ++c) acc[c] = 0.0f;
  for (std::int64_t j0 = 0; j0 < n.S; j0 += kTile) {
    __syncthreads();
    load_tile(ks, ldk, kb, j0, n.S, D);
    load_tile(vs, Dv, vb, j0, n.S, Dv);
    __syncthreads();
    const std::int64_t j = j0 + lane;
    float kept = 0.0f;
    if (active && j < n.S) {
      float add, p = 0.0f;
      if (visible(a.mask, n, b, h, i, j, limit, &add)) {
        float dot = 0.0f;
        const float* kr = ks + lane * ldk;
        for (int e = 0; e < D; ++e) dot = fmaf(qs[e], kr[e], dot);
        p = expf(dot * a.scale + add - row_max) * inv;
        if (fabsf(p) < 1.17549435e-38f) p = 0.0f;  // no denormal outputs, as on the CPU
      }
      const std::int64_t e = row * n.S + j;
      if (a.probs != nullptr) a.probs[e] = p;
      kept = p;
      if (a.drop.on) {
        const bool keep = keep_element(a.drop, static_cast<std::uint64_t>(e));
        if (a.dropmask != nullptr) a.dropmask[e] = keep ? 1 : 0;
        kept = keep ? p * a.drop.scale : 0.0f;
      }
    }
    const int width = static_cast<int>(min(static_cast<std::int64_t>(kTile), n.S - j0));
    for (int jj = 0; jj < width; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, kept, jj);
      const float* vr = vs + jj * Dv;
#pragma unroll
      for (int c = 0; c < kMaxAcc; ++c)
        if (lane + 32 * c < Dv) acc[c] = fmaf(pj, vr[lane + 32 * c], acc[c]);
    }
  }
  if (active) {
#pragma unroll
    for (int c = 0; c < kMaxAcc; ++c)
      if (lane + 32 * c < Dv) a.out[row * Dv + lane + 32 * c] = acc[c];
  }
}

struct BwdArgs {
  const float *dout, *q, *k, *v, *probs;
  const std::uint8_t* dropmask;  // null without dropout
  float drop_scale;
  float *dq, *dk, *dv, *ds;      // ds: scratch [B, H, T, S]
  Dims n;
  float scale;
};

// Per query row: dS (to scratch) and dQ.
__global__ void __launch_bounds__(kWarps * 32) sdpa_backward_rows_kernel(BwdArgs a) {
  extern __shared__ float smem[];
  const Dims& n = a.n;
  const int D = n.D, Dv = n.Dv, ldv = odd_ld(Dv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::int64_t tiles_t = (n.T + kWarps - 1) / kWarps;
  const std::int64_t bh = blockIdx.x / tiles_t;
  const std::int64_t i = (blockIdx.x % tiles_t) * kWarps + warp;
  const bool active = i < n.T;
  const std::int64_t row = bh * n.T + i;
  float* dos = smem + warp * Dv;
  float* tile = smem + kWarps * Dv;  // V tile (pass 1), then K tile (pass 2)
  const float* kb = a.k + bh * n.S * D;
  const float* vb = a.v + bh * n.S * Dv;
  if (active)
    for (int e = lane; e < Dv; e += 32) dos[e] = a.dout[row * Dv + e];

  // Pass 1: dP (dropout applied) to scratch, r = sum_j dP P.
  float r = 0.0f;
  for (std::int64_t j0 = 0; j0 < n.S; j0 += kTile) {
    __syncthreads();
    load_tile(tile, ldv, vb, j0, n.S, Dv);
    __syncthreads();
    const std::int64_t j = j0 + lane;
    if (active && j < n.S) {
      float dot = 0.0f;
      const float* vr = tile + lane * ldv;
      for (int e = 0; e < Dv; ++e) dot = fmaf(dos[e], vr[e], dot);
      const std::int64_t idx = row * n.S + j;
      if (a.dropmask != nullptr) dot = a.dropmask[idx] ? dot * a.drop_scale : 0.0f;
      a.ds[idx] = dot;
      r = fmaf(dot, a.probs[idx], r);
    }
  }
  r = warp_sum(r);

  // Pass 2: dS = scale P (dP - r); dQ = sum_j dS_j K_j.
  float acc[kMaxAcc];
#pragma unroll
  for (int c = 0; c < kMaxAcc; ++c) acc[c] = 0.0f;
  for (std::int64_t j0 = 0; j0 < n.S; j0 += kTile) {
    __syncthreads();
    load_tile(tile, D, kb, j0, n.S, D);
    __syncthreads();
    const std::int64_t j = j0 + lane;
    float dsj = 0.0f;
    if (active && j < n.S) {
      const std::int64_t idx = row * n.S + j;
      dsj = a.scale * a.probs[idx] * (a.ds[idx] - r);
      a.ds[idx] = dsj;
    }
    const int width = static_cast<int>(min(static_cast<std::int64_t>(kTile), n.S - j0));
    for (int jj = 0; jj < width; ++jj) {
      const float d = __shfl_sync(0xffffffffu, dsj, jj);
      const float* kr = tile + jj * D;
#pragma unroll
      for (int c = 0; c < kMaxAcc; ++c)
        if (lane + 32 * c < D) acc[c] = fmaf(d, kr[lane + 32 * c], acc[c]);
    }
  }
  if (active) {
#pragma unroll
    for (int c = 0; c < kMaxAcc; ++c)
      if (lane + 32 * c < D) a.dq[row * D + lane + 32 * c] = acc[c];
  }
}

// Per key row: dK = sum_i dS_ij Q_i, dV = sum_i P'_ij dO_i.
__global__ void __launch_bounds__(kWarps * 32) sdpa_backward_keys_kernel(BwdArgs a) {
  extern __shared__ float smem[];
  const Dims& n = a.n;
  const int D = n.D, Dv = n.Dv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::int64_t tiles_s = (n.S + kWarps - 1) / kWarps;
  const std::int64_t bh = blockIdx.x / tiles_s;
  const std::int64_t j = (blockIdx.x % tiles_s) * kWarps + warp;
  const bool active = j < n.S;
  float* qs = smem;
  float* dos = smem + kTile * D;
  const float* qb = a.q + bh * n.T * D;
  const float* dob = a.dout + bh * n.T * Dv;
  float acc_k[kMaxAcc], acc_v[kMaxAcc];
#pragma unroll
  for (int c = 0; c < kMaxAcc; ++c) acc_k[c] = acc_v[c] = 0.0f;
  for (std::int64_t i0 = 0; i0 < n.T; i0 += kTile) {
    __syncthreads();
    load_tile(qs, D, qb, i0, n.T, D);
    load_tile(dos, Dv, dob, i0, n.T, Dv);
    __syncthreads();
    const std::int64_t i = i0 + lane;
    float dsi = 0.0f, pi = 0.0f;
    if (active && i < n.T) {
      const std::int64_t idx = (bh * n.T + i) * n.S + j;
      dsi = a.ds[idx];
      pi = a.probs[idx];
      if (a.dropmask != nullptr) pi = a.dropmask[idx] ? pi * a.drop_scale : 0.0f;
    }
    const int width = static_cast<int>(min(static_cast<std::int64_t>(kTile), n.T - i0));
    for (int ii = 0; ii < width; ++ii) {
      const float d = __shfl_sync(0xffffffffu, dsi, ii);
      const float p = __shfl_sync(0xffffffffu, pi, ii);
      const float* qr = qs + ii * D;
      const float* dor = dos + ii * Dv;
#pragma unroll
      for (int c = 0; c < kMaxAcc; ++c) {
        if (lane + 32 * c < D) acc_k[c] = fmaf(d, qr[lane + 32 * c], acc_k[c]);
        if (lane + 32 * c < Dv) acc_v[c] = fmaf(p, dor[lane + 32 * c], acc_v[c]);
      }
    }
  }
  if (active) {
    const std::int64_t krow = bh * n.S + j;
#pragma unroll
    for (int c = 0; c < kMaxAcc; ++c) {
      if (lane + 32 * c < D) a.dk[krow * D + lane + 32 * c] = acc_k[c];
      if (lane + 32 * c < Dv) a.dv[krow * Dv + lane + 32 * c] = acc_v[c];
    }
  }
}

// Launch with `bytes` of dynamic shared memory, raising the kernel's limit past 48 KiB if needed.
template <class Kernel, class Args>
void launch(Kernel kernel, std::int64_t blocks, std::size_t bytes, const Args& args, const char* what) {
  if (blocks <= 0) return;
  BH_CHECK(blocks <= 0x7fffffffLL, "{}: {} blocks exceed the grid limit", what, blocks);
  if (bytes > 48 * 1024)
    BH_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kWarps * 32, bytes, op_stream()>>>(args);
  BH_CHECK_CUDA_LAUNCH(what);
}

const std::uint8_t* bytes_of(const Tensor& t) { return static_cast<const std::uint8_t*>(t.raw_data()); }

bool is_byte_mask(const Tensor& t) { return t.dtype() == DType::u8 || t.dtype() == DType::boolean; }

Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  BH_CHECK_AS(InvalidArgument,
              q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(0) == q.size(0) &&
                  v.size(0) == q.size(0) && k.size(1) == q.size(1) && v.size(1) == q.size(1) &&
                  k.size(3) == q.size(3) && v.size(2) == k.size(2),
              "sdpa (cuda): shapes must be q (B,H,T,D), k (B,H,S,D), v (B,H,S,Dv); got q {}, k {}, v {}",
              q.describe(), k.describe(), v.describe());
  Dims n;
  n.B = q.size(0);
  n.H = q.size(1);
  n.T = q.size(2);
  n.S = k.size(2);
  n.D = static_cast<int>(q.size(3));
  n.Dv = static_cast<int>(v.size(3));
  return n;
}

float scale_of(const Attrs& attrs, int D) {
  const double s = attrs.get("scale", 0.0);
  return s > 0 ? static_cast<float>(s) : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
}

Mask mask_of(const OpCall& c, const Dims& n) {
  Mask m;
  m.causal = c.attrs.get_bool("causal");
  if (c.inputs.size() > 3 && c.inputs[3].defined()) {
    const Tensor& kp = c.inputs[3];
    if (kp.dtype() == DType::i32 || kp.dtype() == DType::i64) {
      BH_CHECK_AS(InvalidArgument, kp.numel() == n.B, "sdpa: key padding lengths must have B={} elements, got {}",
                  n.B, kp.describe());
      m.lengths = kp.raw_data();
      m.lengths64 = kp.dtype() == DType::i64;
    } else {
      BH_CHECK_AS(InvalidArgument, is_byte_mask(kp) && kp.shape() == Shape({n.B, n.S}),
                  "sdpa: key padding keep-flags must be u8/bool (B={}, S={}), got {}", n.B, n.S, kp.describe());
      m.keep_bs = bytes_of(kp);
    }
  }
  if (c.inputs.size() > 4 && c.inputs[4].defined()) {
    const Tensor& mk = c.inputs[4];
    if (mk.dtype() == DType::f32) {
      const bool per_head = mk.shape() == Shape({n.B, n.H, n.T, n.S});
      BH_CHECK_AS(InvalidArgument, per_head || mk.shape() == Shape({n.B, n.T, n.S}),
                  "sdpa: an additive mask must be (B, T, S) or (B, H, T, S), got {}", mk.describe());
      m.add = mk.data<float>();
      m.add_per_head = per_head;
    } else {
      BH_CHECK_AS(InvalidArgument, is_byte_mask(mk) && mk.shape() == Shape({n.B, n.T, n.S}),
                  "sdpa: a boolean mask must be u8/bool (B, T, S), got {}", mk.describe());
      m.keep_bts = bytes_of(mk);
    }
  }
  return m;
}

std::uint64_t rng_attr(const Attrs& attrs, std::size_t i) {
  const auto& v = attrs.get_ints("rng");
  BH_CHECK_AS(InvalidArgument, v.size() > i, "sdpa: dropout needs the attribute rng = (seed, step, stream)");
  return static_cast<std::uint64_t>(v[i]);
}

// The forward's dropout from attrs p and rng (off for p = 0); p outside [0, 1) is refused.
Dropout dropout_of(const Attrs& attrs) {
  const double p = attrs.get("p", 0.0);
  BH_CHECK_AS(InvalidArgument, p >= 0.0 && p < 1.0, "sdpa_forward: dropout p must be in [0, 1), got {}", p);
  Dropout d;
  if (p > 0) {
    d.on = true;
    d.key = mix64(rng_attr(attrs, 0));
    d.stream = mix64(rng_attr(attrs, 1)) ^ rng_attr(attrs, 2);
    d.threshold = static_cast<std::uint32_t>(std::ceil(p * 16777216.0));
    d.scale = static_cast<float>(1.0 / (1.0 - p));
  }
  return d;
}

// The backward's dropout mask (undefined for p = 0) after checking the saved tensors' sizes.
Tensor backward_dropmask(const OpCall& c, const Dims& n, double p) {
  const Tensor &dout = c.inputs[0], &probs = c.inputs[4];
  const Tensor dropmask = p > 0 && c.inputs.size() > 5 ? c.inputs[5] : Tensor();
  BH_CHECK_AS(InvalidArgument, p <= 0 || dropmask.defined(), "sdpa_backward: p = {} needs the dropout mask (input 5)", p);
  BH_CHECK_AS(InvalidArgument,
              probs.defined() && probs.numel() == n.B * n.H * n.T * n.S && dout.numel() == n.B * n.H * n.T * n.Dv &&
                  (!dropmask.defined() || dropmask.numel() == probs.numel()),
              "sdpa_backward: probs/dropmask must have B*H*T*S elements and dout B*H*T*Dv");
  return dropmask;
}

// inputs {q, k, v, key_padding?, mask?}; outputs {out, probs?, dropmask?}
void forward(OpCall& c) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const Dims n = dims_of(q, k, v);
  Tensor& out = c.outputs[0];
  const Tensor probs = c.outputs.size() > 1 ? c.outputs[1] : Tensor();
  const Tensor dropmask = c.outputs.size() > 2 ? c.outputs[2] : Tensor();
  BH_CHECK_AS(InvalidArgument, out.numel() == n.B * n.H * n.T * n.Dv &&
                                   (!probs.defined() || probs.numel() == n.B * n.H * n.T * n.S) &&
                                   (!dropmask.defined() || dropmask.numel() == n.B * n.H * n.T * n.S),
              "sdpa_forward: out must have B*H*T*Dv elements and probs/dropmask B*H*T*S");
  set_device_of(q);
  FwdArgs a{};
  a.q = q.data<float>();
  a.k = k.data<float>();
  a.v = v.data<float>();
  a.out = out.data<float>();
  a.probs = probs.defined() ? probs.data<float>() : nullptr;
  a.dropmask = dropmask.defined() ? static_cast<std::uint8_t*>(dropmask.raw_data()) : nullptr;
  a.n = n;
  a.scale = scale_of(c.attrs, n.D);
  a.mask = mask_of(c, n);
  a.drop = dropout_of(c.attrs);
  if (n.S == 0) {  // no keys: every row is fully masked
    if (out.numel() > 0) BH_CHECK_CUDA(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), op_stream()));
    return;
  }
  const std::size_t bytes =
      sizeof(float) * (static_cast<std::size_t>(kWarps) * n.D + static_cast<std::size_t>(kTile) * odd_ld(n.D) +
                       static_cast<std::size_t>(kTile) * n.Dv);
  launch(sdpa_forward_kernel, n.B * n.H * ((n.T + kWarps - 1) / kWarps), bytes, a, "sdpa forward");
}

// inputs {dout, q, k, v, probs, dropmask?}; outputs {dq, dk, dv}
void backward(OpCall& c) {
  const Tensor &dout = c.inputs[0], &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3],
               &probs = c.inputs[4];
  const Dims n = dims_of(q, k, v);
  const double p = c.attrs.get("p", 0.0);
  const Tensor dropmask = backward_dropmask(c, n, p);
  set_device_of(q);
  Tensor ds = Tensor::empty({std::max<std::int64_t>(probs.numel(), 1)}, DType::f32, q.device());
  BwdArgs a{};
  a.dout = dout.data<float>();
  a.q = q.data<float>();
  a.k = k.data<float>();
  a.v = v.data<float>();
  a.probs = probs.data<float>();
  a.dropmask = dropmask.defined() ? bytes_of(dropmask) : nullptr;
  a.drop_scale = p > 0 ? static_cast<float>(1.0 / (1.0 - p)) : 1.0f;
  a.dq = c.outputs[0].data<float>();
  a.dk = c.outputs[1].data<float>();
  a.dv = c.outputs[2].data<float>();
  a.ds = ds.data<float>();
  a.n = n;
  a.scale = scale_of(c.attrs, n.D);
  if (n.S == 0) {
    if (c.outputs[0].numel() > 0)
      BH_CHECK_CUDA(cudaMemsetAsync(c.outputs[0].raw_data(), 0, c.outputs[0].nbytes(), op_stream()));
    return;
  }
  if (n.T == 0) {
    for (int o = 1; o < 3; ++o)
      if (c.outputs[o].numel() > 0)
        BH_CHECK_CUDA(cudaMemsetAsync(c.outputs[o].raw_data(), 0, c.outputs[o].nbytes(), op_stream()));
    return;
  }
  const std::size_t rows_bytes =
      sizeof(float) * (static_cast<std::size_t>(kWarps) * n.Dv +
                       static_cast<std::size_t>(kTile) * std::max(odd_ld(n.Dv), n.D));
  launch(sdpa_backward_rows_kernel, n.B * n.H * ((n.T + kWarps - 1) / kWarps), rows_bytes, a,
         "sdpa backward (rows)");
  const std::size_t keys_bytes = sizeof(float) * static_cast<std::size_t>(kTile) * (n.D + n.Dv);
  launch(sdpa_backward_keys_kernel, n.B * n.H * ((n.S + kWarps - 1) / kWarps), keys_bytes, a,
         "sdpa backward (keys)");
}

// ---- Note [Attention through GEMMs] ---------------------------------------------------------------
// "cuda.gemm" (priority 60, over the fused kernels): the products run as strided batched cuBLASLt
// GEMMs over the B*H heads (TF32 tensor cores iff tf32_enabled(), like every f32 GEMM), and only
// the row-wise softmax and its backward are our kernels. The fused kernels above keep the
// working set in shared memory but compute every product with SIMT FMAs from shared memory (the
// forward twice); at GPT-3's sequence length that was most of a training step. Here the T x S
// matrices go through device memory instead (the probabilities are stored for the backward
// either way):
//   forward:  probs = scale q k^T (GEMM into the probs output), softmax_rows in place (masks,
//             dropout flags, P' = P M f into scratch when dropout is on), out = P' v (GEMM);
//   backward: dP' = dO v^T (GEMM into scratch ds), softmax_grad_rows (dP = dP' M f,
//             r = sum dP P, dS = scale P (dP - r) in place, P' to scratch under dropout),
//             dq = dS k, dk = dS^T q, dv = P'^T dO (GEMMs).
// The masks, the dropout stream and the fully-masked-row rule are the fused kernels' (key_limit,
// visible, keep_element), so both implementations give the same probabilities and flags.

struct RowsArgs {
  float* probs;            // [B, H, T, S]: scores in, probabilities out (forward)
  float* kept;             // [B, H, T, S] P' (dropout applied), or null
  std::uint8_t* dropmask;  // or null
  Dims n;
  Mask mask;
  Dropout drop;
};

// One warp per row (b, h, i) of the scores: masked max, sum of exponentials, then the
// probabilities written over the scores. Lane t reads columns t, t + 32, ... (coalesced).
__global__ void __launch_bounds__(kWarps * 32) softmax_rows_kernel(RowsArgs a) {
  const Dims& n = a.n;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= n.B * n.H * n.T) return;  // whole warps leave together: no block-wide sync below
  const std::int64_t i = row % n.T, bh = row / n.T;
  const std::int64_t b = bh / n.H, h = bh % n.H;
  const std::int64_t limit = key_limit(a.mask, n, b, i);
  float* sr = a.probs + row * n.S;
  float m = kNegInf;
  for (std::int64_t j = lane; j < n.S; j += 32) {
    float add;
    if (visible(a.mask, n, b, h, i, j, limit, &add)) m = fmaxf(m, sr[j] + add);
  }
  m = warp_max(m);
  float l = 0.0f;
  if (m != kNegInf)
    for (std::int64_t j = lane; j < n.S; j += 32) {
      float add;
      if (visible(a.mask, n, b, h, i, j, limit, &add)) l += expf(sr[j] + add - m);
    }
  l = warp_sum(l);
  const float inv = m == kNegInf ? 0.0f : 1.0f / l;
  for (std::int64_t j = lane; j < n.S; j += 32) {
    float add, p = 0.0f;
    if (visible(a.mask, n, b, h, i, j, limit, &add)) {
      p = expf(sr[j] + add - m) * inv;
      if (fabsf(p) < 1.17549435e-38f) p = 0.0f;  // no denormal outputs, as on the CPU
    }
    sr[j] = p;
    const std::int64_t e = row * n.S + j;
    if (a.drop.on) {
      const bool keep = keep_element(a.drop, static_cast<std::uint64_t>(e));
      if (a.dropmask != nullptr) a.dropmask[e] = keep ? 1 : 0;
      if (a.kept != nullptr) a.kept[e] = keep ? p * a.drop.scale : 0.0f;
    } else if (a.kept != nullptr) {
      a.kept[e] = p;
    }
  }
}

struct GradRowsArgs {
  float* ds;                     // [B, H, T, S]: dP' in, dS out
  const float* probs;            // P
  const std::uint8_t* dropmask;  // M, or null
  float drop_scale;              // f
  float* kept;                   // P' = P M f out, or null
  std::int64_t rows, S;
  float scale;
};

// One warp per row: dP = dP' M f, r = sum_j dP_j P_j, dS = scale P (dP - r).
__global__ void __launch_bounds__(kWarps * 32) softmax_grad_rows_kernel(GradRowsArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= a.rows) return;
  float* dr = a.ds + row * a.S;
  const float* pr = a.probs + row * a.S;
  const std::uint8_t* mr = a.dropmask != nullptr ? a.dropmask + row * a.S : nullptr;
  float r = 0.0f;
  for (std::int64_t j = lane; j < a.S; j += 32) {
    float d = dr[j];
    if (mr != nullptr) d = mr[j] ? d * a.drop_scale : 0.0f;
    r = fmaf(d, pr[j], r);
  }
  r = warp_sum(r);
  for (std::int64_t j = lane; j < a.S; j += 32) {
    float d = dr[j];
    const float p = pr[j];
    float pk = p;
    if (mr != nullptr) {
      d = mr[j] ? d * a.drop_scale : 0.0f;
      pk = mr[j] ? p * a.drop_scale : 0.0f;
    }
    dr[j] = a.scale * p * (d - r);
    if (a.kept != nullptr) a.kept[row * a.S + j] = pk;
  }
}

// The strided batched row-major GEMM c[bh] = alpha a[bh] @ w[bh] over the B*H heads, each
// operand given by its per-head element strides (Note [Attention through GEMMs]).
void head_gemm(std::int64_t heads, std::int64_t M, std::int64_t N, std::int64_t K, const float* a,
               std::int64_t a_sb, std::int64_t a_sm, std::int64_t a_sk, const float* w, std::int64_t w_sb,
               std::int64_t w_sk, std::int64_t w_sn, float* c, std::int64_t c_sb, std::int64_t c_sm,
               float alpha, int device) {
  GemmProblem p;
  p.B = heads;
  p.M = M;
  p.N = N;
  p.K = K;
  p.a_sb = a_sb;
  p.a_sm = a_sm;
  p.a_sk = a_sk;
  p.w_sb = w_sb;
  p.w_sk = w_sk;
  p.w_sn = w_sn;
  p.c_sb = c_sb;
  p.c_sm = c_sm;
  p.alpha = alpha;
  gemm(p, a, w, c, device);
}

// inputs {q, k, v, key_padding?, mask?}; outputs {out, probs?, dropmask?}
void forward_gemm(OpCall& c) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const Dims n = dims_of(q, k, v);
  Tensor& out = c.outputs[0];
  Tensor probs = c.outputs.size() > 1 ? c.outputs[1] : Tensor();
  const Tensor dropmask = c.outputs.size() > 2 ? c.outputs[2] : Tensor();
  const std::int64_t TS = n.T * n.S;
  BH_CHECK_AS(InvalidArgument, out.numel() == n.B * n.H * n.T * n.Dv &&
                                   (!probs.defined() || probs.numel() == n.B * n.H * TS) &&
                                   (!dropmask.defined() || dropmask.numel() == n.B * n.H * TS),
              "sdpa_forward: out must have B*H*T*Dv elements and probs/dropmask B*H*T*S");
  set_device_of(q);
  const int device = q.device().index;
  const Dropout drop = dropout_of(c.attrs);
  if (n.S == 0 || n.T == 0) {  // no keys: every row is fully masked
    if (out.numel() > 0) BH_CHECK_CUDA(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), op_stream()));
    return;
  }
  const std::int64_t heads = n.B * n.H;
  if (!probs.defined()) probs = Tensor::empty({heads * TS}, DType::f32, q.device());
  RowsArgs r{};
  r.probs = probs.data<float>();
  r.n = n;
  r.mask = mask_of(c, n);
  r.drop = drop;
  Tensor kept;
  if (r.drop.on) {
    r.dropmask = dropmask.defined() ? static_cast<std::uint8_t*>(dropmask.raw_data()) : nullptr;
    kept = Tensor::empty({heads * TS}, DType::f32, q.device());
    r.kept = kept.data<float>();
  }
  const float scale = scale_of(c.attrs, n.D);
  head_gemm(heads, n.T, n.S, n.D, q.data<float>(), n.T * n.D, n.D, 1, k.data<float>(), n.S * n.D, 1, n.D,
            r.probs, TS, n.S, scale, device);
  launch(softmax_rows_kernel, (heads * n.T + kWarps - 1) / kWarps, 0, r, "sdpa softmax rows");
  const float* pk = r.kept != nullptr ? r.kept : r.probs;
  head_gemm(heads, n.T, n.Dv, n.S, pk, TS, n.S, 1, v.data<float>(), n.S * n.Dv, n.Dv, 1, out.data<float>(),
            n.T * n.Dv, n.Dv, 1.0f, device);
}

// inputs {dout, q, k, v, probs, dropmask?}; outputs {dq, dk, dv}
void backward_gemm(OpCall& c) {
  const Tensor &dout = c.inputs[0], &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3],
               &probs = c.inputs[4];
  const Dims n = dims_of(q, k, v);
  const double p = c.attrs.get("p", 0.0);
  const Tensor dropmask = backward_dropmask(c, n, p);
  const std::int64_t heads = n.B * n.H, TS = n.T * n.S;
  set_device_of(q);
  const int device = q.device().index;
  if (n.S == 0 || n.T == 0) {  // nothing flows: zero gradients
    for (Tensor& o : c.outputs)
      if (o.numel() > 0) BH_CHECK_CUDA(cudaMemsetAsync(o.raw_data(), 0, o.nbytes(), op_stream()));
    return;
  }
  Tensor ds = Tensor::empty({heads * TS}, DType::f32, q.device());
  Tensor kept = dropmask.defined() ? Tensor::empty({heads * TS}, DType::f32, q.device()) : Tensor();
  // dP' = dO v^T
  head_gemm(heads, n.T, n.S, n.Dv, dout.data<float>(), n.T * n.Dv, n.Dv, 1, v.data<float>(), n.S * n.Dv, 1, n.Dv,
            ds.data<float>(), TS, n.S, 1.0f, device);
  GradRowsArgs g{};
  g.ds = ds.data<float>();
  g.probs = probs.data<float>();
  g.dropmask = dropmask.defined() ? bytes_of(dropmask) : nullptr;
  g.drop_scale = p > 0 ? static_cast<float>(1.0 / (1.0 - p)) : 1.0f;
  g.kept = kept.defined() ? kept.data<float>() : nullptr;
  g.rows = heads * n.T;
  g.S = n.S;
  g.scale = scale_of(c.attrs, n.D);
  launch(softmax_grad_rows_kernel, (g.rows + kWarps - 1) / kWarps, 0, g, "sdpa softmax backward rows");
  const float* dS = g.ds;
  const float* pk = g.kept != nullptr ? g.kept : g.probs;
  // dq = dS k; dk = dS^T q; dv = P'^T dO
  head_gemm(heads, n.T, n.D, n.S, dS, TS, n.S, 1, k.data<float>(), n.S * n.D, n.D, 1,
            c.outputs[0].data<float>(), n.T * n.D, n.D, 1.0f, device);
  head_gemm(heads, n.S, n.D, n.T, dS, TS, 1, n.S, q.data<float>(), n.T * n.D, n.D, 1,
            c.outputs[1].data<float>(), n.S * n.D, n.D, 1.0f, device);
  head_gemm(heads, n.S, n.Dv, n.T, pk, TS, 1, n.S, dout.data<float>(), n.T * n.Dv, n.Dv, 1,
            c.outputs[2].data<float>(), n.S * n.Dv, n.Dv, 1.0f, device);
}

// The GEMM path's extra conditions over the fused kernels' checks: head dims of at least one
// (cuBLASLt takes no empty inner dim) and a head count one strided batch can hold.
std::string accepts_gemm_dims(const OpCall& c, std::size_t first_qkv) {
  const Tensor& q = c.inputs[first_qkv];
  const Tensor& k = c.inputs[first_qkv + 1];
  const Tensor& v = c.inputs[first_qkv + 2];
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return "q, k, v must be 4-d";
  if (q.size(3) < 1 || v.size(3) < 1) return "empty head dims";
  if (q.size(0) * q.size(1) > 0x7fffffffLL) return "more heads than one cuBLASLt batch holds";
  return {};
}

// fused: the fused kernels' head-dim limit applies (the GEMM path has none).
std::string accepts_common(const OpCall& c, std::size_t first_qkv, bool fused) {
  std::vector<Tensor> f32s(c.inputs.begin(), c.inputs.begin() + static_cast<std::ptrdiff_t>(first_qkv + 3));
  std::string why = require_cuda_contiguous(f32s);
  if (!why.empty()) return "input " + why;
  const Tensor& q = c.inputs[first_qkv];
  const Tensor& v = c.inputs[first_qkv + 2];
  if (fused && q.dim() == 4 && v.dim() == 4 && (q.size(3) > kMaxHeadDim || v.size(3) > kMaxHeadDim))
    return fmt::format("head dims {} / {}: the fused kernels support up to {}", q.size(3), v.size(3),
                       kMaxHeadDim);
  for (std::size_t i = first_qkv + 3; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    if (!t.defined()) continue;
    if (!t.device().is_cuda()) return fmt::format("input {} is not on a cuda device", i);
    if (!t.is_contiguous()) return fmt::format("input {} is not contiguous", i);
  }
  for (std::size_t i = 0; i < c.outputs.size(); ++i) {
    const Tensor& t = c.outputs[i];
    if (!t.defined()) continue;
    if (!t.device().is_cuda() || !t.is_contiguous())
      return fmt::format("output {} must be a contiguous cuda tensor", i);
  }
  return {};
}

std::string accepts_forward(const OpCall& c, bool fused) {
  std::string why = accepts_common(c, 0, fused);
  if (!why.empty()) return why;
  if (c.inputs.size() > 3 && c.inputs[3].defined()) {
    const DType t = c.inputs[3].dtype();
    if (t != DType::i32 && t != DType::i64 && t != DType::u8 && t != DType::boolean)
      return "key padding must be i32/i64 lengths or u8/bool keep-flags";
  }
  if (c.inputs.size() > 4 && c.inputs[4].defined()) {
    const DType t = c.inputs[4].dtype();
    if (t != DType::f32 && t != DType::u8 && t != DType::boolean) return "mask must be f32 additive or u8/bool";
  }
  if (c.outputs[0].dtype() != DType::f32 || (c.outputs.size() > 1 && c.outputs[1].defined() && c.outputs[1].dtype() != DType::f32))
    return "out and probs must be f32";
  if (c.outputs.size() > 2 && c.outputs[2].defined() && c.outputs[2].dtype() != DType::u8)
    return "dropmask must be u8";
  return {};
}

std::string accepts_backward(const OpCall& c, bool fused) {
  std::vector<Tensor> f32s(c.inputs.begin(), c.inputs.begin() + 5);
  std::string why = require_cuda_contiguous(f32s);
  if (!why.empty()) return "input " + why;
  why = accepts_common(c, 1, fused);
  if (!why.empty()) return why;
  if (c.inputs.size() > 5 && c.inputs[5].defined() && c.inputs[5].dtype() != DType::u8 &&
      c.inputs[5].dtype() != DType::boolean)
    return "dropmask must be u8";
  why = require_cuda_contiguous(c.outputs);
  if (!why.empty()) return "output " + why;
  return {};
}

std::string accepts_forward_fused(const OpCall& c) { return accepts_forward(c, true); }
std::string accepts_backward_fused(const OpCall& c) { return accepts_backward(c, true); }

std::string accepts_forward_gemm(const OpCall& c) {
  std::string why = accepts_forward(c, false);
  return why.empty() ? accepts_gemm_dims(c, 0) : why;
}

std::string accepts_backward_gemm(const OpCall& c) {
  std::string why = accepts_backward(c, false);
  return why.empty() ? accepts_gemm_dims(c, 1) : why;
}

const bool registered = [] {
  register_op_impl("sdpa_forward", {"cuda.gemm", DeviceType::cuda, 60, accepts_forward_gemm, forward_gemm, false});
  register_op_impl("sdpa_backward", {"cuda.gemm", DeviceType::cuda, 60, accepts_backward_gemm, backward_gemm, false});
  register_op_impl("sdpa_forward", {"cuda.fused", DeviceType::cuda, 50, accepts_forward_fused, forward, false});
  register_op_impl("sdpa_backward", {"cuda.fused", DeviceType::cuda, 50, accepts_backward_fused, backward, false});
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cuda
