// The per-step detection ops on CUDA: box_iou, match_anchors, encode_boxes, decode_boxes,
// retinanet_focal_loss_forward/backward, retinanet_box_loss_forward/backward (op conventions,
// formulas and Notes in nn/cpu/detection.cpp). NMS and post-processing are host code
// (Note [Host-side NMS] in nn/detection.cpp).
//
// Layout and precision: boxes f32 [N, 4] xyxy, logits f32 [A, K] row-major, indices i64.
// IoU and the box coder use __f*_rn intrinsics where nvcc would otherwise contract a multiply
// and an add into an FMA, so that they round like the CPU (Note [Detection arithmetic in f32]);
// exp and log are CUDA's (within 2 ulp of the CPU's).
// - box_iou, encode/decode: one thread per output element / box.
// - match_anchors: one block per GT row reduces the row's maximum; then one thread per anchor
//   takes the column maximum (first GT on ties), applies the thresholds and the low-quality
//   restore (any GT whose row maximum the anchor reaches). No atomics: deterministic.
// - Losses: a check kernel counts the foreground anchors (integer atomics, exact) and records
//   the first matched index outside [-2, G) and the first GT label outside [0, K) (atomicMin);
//   the forward reads these back (it returns host floats anyway) and throws DataError as the CPU
//   does. The loss kernels run one block per chunk of anchors (kFocalRows rows x K classes for
//   the focal loss), reduce in double within the block and write one partial per chunk; a
//   finish kernel adds the partials in chunk order: deterministic. Backward kernels treat an
//   anchor with an invalid index as ignored (zero gradient) instead of reading out of range;
//   the forward of the same step has already thrown on it.

#include <climits>

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kFocalRows = 64;
constexpr std::int64_t kBoxRows = 4096;

// ---------------------------------------------------------------------------------------------
// Box arithmetic without contraction
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float area_of(const float* b) {
  return __fmul_rn(__fsub_rn(b[2], b[0]), __fsub_rn(b[3], b[1]));
}

__device__ __forceinline__ float iou_one(const float* a, const float* b) {
  const float w = fmaxf(__fsub_rn(fminf(a[2], b[2]), fmaxf(a[0], b[0])), 0.0f);
  const float h = fmaxf(__fsub_rn(fminf(a[3], b[3]), fmaxf(a[1], b[1])), 0.0f);
  const float inter = __fmul_rn(w, h);
  return __fdiv_rn(inter, __fsub_rn(__fadd_rn(area_of(a), area_of(b)), inter));
}

struct Weights {
  float wx, wy, ww, wh;
  float one = 0.0f;  // 1: maskrcnn_benchmark's +1 widths (attr plus_one); adding 0 changes nothing
};

__device__ __forceinline__ void encode_one(const float* g, const float* a, Weights w, float* out) {
  const float aw = __fadd_rn(__fsub_rn(a[2], a[0]), w.one), ah = __fadd_rn(__fsub_rn(a[3], a[1]), w.one);
  const float ax = __fadd_rn(a[0], __fmul_rn(0.5f, aw)), ay = __fadd_rn(a[1], __fmul_rn(0.5f, ah));
  const float gw = __fadd_rn(__fsub_rn(g[2], g[0]), w.one), gh = __fadd_rn(__fsub_rn(g[3], g[1]), w.one);
  const float gx = __fadd_rn(g[0], __fmul_rn(0.5f, gw)), gy = __fadd_rn(g[1], __fmul_rn(0.5f, gh));
  out[0] = __fdiv_rn(__fmul_rn(w.wx, __fsub_rn(gx, ax)), aw);
  out[1] = __fdiv_rn(__fmul_rn(w.wy, __fsub_rn(gy, ay)), ah);
  out[2] = __fmul_rn(w.ww, logf(__fdiv_rn(gw, aw)));
  out[3] = __fmul_rn(w.wh, logf(__fdiv_rn(gh, ah)));
}

__device__ __forceinline__ void decode_one(const float* d, const float* a, Weights w, float clip, float* out) {
  const float aw = __fadd_rn(__fsub_rn(a[2], a[0]), w.one), ah = __fadd_rn(__fsub_rn(a[3], a[1]), w.one);
  const float cx = __fadd_rn(a[0], __fmul_rn(0.5f, aw)), cy = __fadd_rn(a[1], __fmul_rn(0.5f, ah));
  const float dx = __fdiv_rn(d[0], w.wx), dy = __fdiv_rn(d[1], w.wy);
  const float dw = fminf(__fdiv_rn(d[2], w.ww), clip), dh = fminf(__fdiv_rn(d[3], w.wh), clip);
  const float px = __fadd_rn(__fmul_rn(dx, aw), cx), py = __fadd_rn(__fmul_rn(dy, ah), cy);
  const float hw = __fmul_rn(0.5f, __fmul_rn(expf(dw), aw)), hh = __fmul_rn(0.5f, __fmul_rn(expf(dh), ah));
  out[0] = __fsub_rn(px, hw);
  out[1] = __fsub_rn(py, hh);
  out[2] = __fsub_rn(__fadd_rn(px, hw), w.one);
  out[3] = __fsub_rn(__fadd_rn(py, hh), w.one);
}

Weights weights_of(const Attrs& a) {
  return {static_cast<float>(a.get("wx", 1.0)), static_cast<float>(a.get("wy", 1.0)),
          static_cast<float>(a.get("ww", 1.0)), static_cast<float>(a.get("wh", 1.0)),
          a.get_bool("plus_one") ? 1.0f : 0.0f};
}

// ---------------------------------------------------------------------------------------------
// box_iou, encode_boxes, decode_boxes
// ---------------------------------------------------------------------------------------------

__global__ void iou_kernel(const float* __restrict__ a, const float* __restrict__ b, std::int64_t n, std::int64_t m,
                           float* __restrict__ out) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n * m;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[e] = iou_one(a + 4 * (e / m), b + 4 * (e % m));
}

template <bool kEncode>
__global__ void coder_kernel(const float* __restrict__ x, const float* __restrict__ anchors, std::int64_t n, Weights w,
                             float clip, float* __restrict__ out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float r[4];
    if constexpr (kEncode) encode_one(x + 4 * i, anchors + 4 * i, w, r);
    else decode_one(x + 4 * i, anchors + 4 * i, w, clip, r);
    for (int j = 0; j < 4; ++j) out[4 * i + j] = r[j];
  }
}

void iou(OpCall& call) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1];
  const std::int64_t n = a.size(0), m = b.size(0);
  if (n * m == 0) return;
  set_device_of(a);
  iou_kernel<<<grid_for(n * m), 256, 0, op_stream()>>>(a.data<float>(), b.data<float>(), n, m,
                                                       call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("iou_kernel");
}

template <bool kEncode>
void coder(OpCall& call) {
  const std::int64_t n = call.inputs[0].size(0);
  BH_CHECK_AS(InvalidArgument, call.inputs[1].size(0) == n, "{} (cuda): {} boxes against {} anchors",
              kEncode ? "encode_boxes" : "decode_boxes", n, call.inputs[1].size(0));
  if (n == 0) return;
  set_device_of(call.inputs[0]);
  coder_kernel<kEncode><<<grid_for(n), 256, 0, op_stream()>>>(
      call.inputs[0].data<float>(), call.inputs[1].data<float>(), n, weights_of(call.attrs),
      static_cast<float>(std::log(1000.0 / 16.0)), call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("coder_kernel");
}

// ---------------------------------------------------------------------------------------------
// match_anchors
// ---------------------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads) row_max_kernel(const float* __restrict__ iou, std::int64_t A,
                                                           float* __restrict__ row_max) {
  __shared__ float scratch[kThreads / 32];
  const float* row = iou + static_cast<std::int64_t>(blockIdx.x) * A;
  float m = -INFINITY;
  for (std::int64_t a = threadIdx.x; a < A; a += kThreads) m = row[a] > m ? row[a] : m;
  m = group_reduce<kThreads>(m, MaxOp{}, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void match_kernel(const float* __restrict__ iou, const float* __restrict__ row_max, std::int64_t G,
                             std::int64_t A, float high, float low, bool low_quality, std::int64_t* __restrict__ out) {
  for (std::int64_t a = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; a < A;
       a += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float best = iou[a];
    std::int64_t arg = 0;
    for (std::int64_t g = 1; g < G; ++g)
      if (iou[g * A + a] > best) {
        best = iou[g * A + a];
        arg = g;
      }
    std::int64_t r = best < low ? -1 : (best < high ? -2 : arg);
    if (low_quality && r < 0)
      for (std::int64_t g = 0; g < G; ++g)
        if (iou[g * A + a] == row_max[g]) {
          r = arg;
          break;
        }
    out[a] = r;
  }
}

void match(OpCall& call) {
  const Tensor& iou = call.inputs[0];
  const std::int64_t G = iou.size(0), A = iou.size(1);
  if (A == 0) return;
  set_device_of(iou);
  std::int64_t* out = call.outputs[0].data<std::int64_t>();
  if (G == 0) {  // every anchor background: -1 is all one bits in i64
    BH_CHECK_CUDA(cudaMemsetAsync(out, 0xff, static_cast<std::size_t>(A) * sizeof(std::int64_t), op_stream()));
    return;
  }
  BH_CHECK_AS(InvalidArgument, G <= INT_MAX, "match_anchors (cuda): {} ground-truth boxes exceed the grid", G);
  Tensor row_max = Tensor::empty({G}, DType::f32, iou.device());
  row_max_kernel<<<static_cast<unsigned>(G), kThreads, 0, op_stream()>>>(iou.data<float>(), A, row_max.data<float>());
  BH_CHECK_CUDA_LAUNCH("row_max_kernel");
  match_kernel<<<grid_for(A), 256, 0, op_stream()>>>(
      iou.data<float>(), row_max.data<float>(), G, A, static_cast<float>(call.attrs.get("high", 0.5)),
      static_cast<float>(call.attrs.get("low", 0.4)), call.attrs.get_bool("allow_low_quality", true), out);
  BH_CHECK_CUDA_LAUNCH("match_kernel");
}

// ---------------------------------------------------------------------------------------------
// Loss helpers: validation and the foreground count
// ---------------------------------------------------------------------------------------------

// stats: [0] foreground anchors, [1] first anchor with matched outside [-2, G), [2] first GT with a
// label outside [0, K) (ULLONG_MAX when none).
__global__ void stats_init_kernel(unsigned long long* stats) {
  stats[0] = 0;
  stats[1] = ULLONG_MAX;
  stats[2] = ULLONG_MAX;
}

__global__ void check_count_kernel(const std::int64_t* __restrict__ matched, std::int64_t A, std::int64_t G,
                                   const std::int64_t* __restrict__ labels, std::int64_t K,
                                   unsigned long long* __restrict__ stats) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long fg = 0;
  for (std::int64_t a = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; a < A; a += stride) {
    const std::int64_t m = matched[a];
    if (m < -2 || m >= G) atomicMin(stats + 1, static_cast<unsigned long long>(a));
    else fg += m >= 0 ? 1 : 0;
  }
  for (int o = 16; o > 0; o >>= 1) fg += __shfl_xor_sync(0xffffffffu, fg, o);
  if ((threadIdx.x & 31) == 0 && fg) atomicAdd(stats, fg);
  if (labels)
    for (std::int64_t g = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; g < G; g += stride)
      if (labels[g] < 0 || labels[g] >= K) atomicMin(stats + 2, static_cast<unsigned long long>(g));
}

// Enqueue the check on `matched` (and `labels` when defined); returns the device stats buffer.
Tensor check_count(const Tensor& matched, std::int64_t G, const Tensor& labels, std::int64_t K) {
  Tensor stats = Tensor::empty({3}, DType::i64, matched.device());
  auto* sp = static_cast<unsigned long long*>(stats.raw_data());
  stats_init_kernel<<<1, 1, 0, op_stream()>>>(sp);
  BH_CHECK_CUDA_LAUNCH("stats_init_kernel");
  const std::int64_t n = std::max<std::int64_t>(matched.numel(), labels.defined() ? labels.numel() : 0);
  check_count_kernel<<<std::min<unsigned>(grid_for(n), 1024), 256, 0, op_stream()>>>(
      matched.data<std::int64_t>(), matched.numel(), G, labels.defined() ? labels.data<std::int64_t>() : nullptr, K,
      sp);
  BH_CHECK_CUDA_LAUNCH("check_count_kernel");
  return stats;
}

// After the forward's kernels: read the stats back and throw DataError as the CPU would.
void throw_on_bad(const Tensor& stats, const Tensor& matched, const Tensor& labels, std::int64_t G, std::int64_t K,
                  const char* op) {
  unsigned long long h[3] = {0, 0, 0};
  BH_CHECK_CUDA(cudaMemcpyAsync(h, stats.raw_data(), sizeof h, cudaMemcpyDeviceToHost, op_stream()));
  BH_CHECK_CUDA(cudaStreamSynchronize(op_stream()));
  if (h[1] != ULLONG_MAX) [[unlikely]] {
    std::int64_t v = 0;
    BH_CHECK_CUDA(cudaMemcpy(&v, matched.data<std::int64_t>() + h[1], sizeof v, cudaMemcpyDeviceToHost));
    BH_THROW(DataError, "{}: matched index {} at anchor {} is outside [-2, {}) (-2 ignored, -1 background, else a GT)",
             op, v, h[1], G);
  }
  if (h[2] != ULLONG_MAX) [[unlikely]] {
    std::int64_t v = 0;
    BH_CHECK_CUDA(cudaMemcpy(&v, labels.data<std::int64_t>() + h[2], sizeof v, cudaMemcpyDeviceToHost));
    BH_THROW(DataError, "{}: label {} of ground-truth box {} is outside [0, {}) (the logits' classes)", op, v, h[2], K);
  }
}

// One thread: out = [sum of partials (chunk order) / max(1, fg), fg].
__global__ void loss_finish_kernel(const double* __restrict__ part, std::int64_t chunks,
                                   const unsigned long long* __restrict__ stats, float* __restrict__ out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double t = 0.0;
  for (std::int64_t c = 0; c < chunks; ++c) t += part[c];
  const double fg = static_cast<double>(stats[0]);
  out[0] = static_cast<float>(t / (fg > 1.0 ? fg : 1.0));
  out[1] = static_cast<float>(fg);
}

// Target class of anchor a: its GT's label, -1 background, -2 ignored (also for invalid data).
__device__ __forceinline__ std::int64_t target_class(const std::int64_t* matched, const std::int64_t* labels,
                                                     std::int64_t G, std::int64_t K, std::int64_t a) {
  const std::int64_t m = matched[a];
  if (m == -1) return -1;
  if (m < 0 || m >= G) return -2;
  const std::int64_t l = labels[m];
  return l >= 0 && l < K ? l : -2;
}

// ---------------------------------------------------------------------------------------------
// Focal loss (Note [Focal loss in softplus form] in nn/cpu/detection.cpp)
// ---------------------------------------------------------------------------------------------

struct FocalParams {
  std::int64_t A, K, G;
  float alpha, gamma;
  bool gamma2;
};

// softplus(x), softplus(-x), p = sigmoid(x) and q = 1 - p (without cancellation).
__device__ __forceinline__ void softplus_pair(float x, float& sp_pos, float& sp_neg, float& p, float& q) {
  const float e = expf(-fabsf(x)), l = log1pf(e);
  sp_pos = fmaxf(x, 0.0f) + l;
  sp_neg = fmaxf(-x, 0.0f) + l;
  const float big = 1.0f / (1.0f + e), small = e / (1.0f + e);
  p = x >= 0.0f ? big : small;
  q = x >= 0.0f ? small : big;
}

// p^g given -log p.
__device__ __forceinline__ float power_of(float p, float neg_log_p, const FocalParams& f) {
  return f.gamma2 ? p * p : expf(-f.gamma * neg_log_p);
}

__device__ __forceinline__ float focal_term(float x, bool target, const FocalParams& f) {
  float sp_pos, sp_neg, p, q;
  softplus_pair(x, sp_pos, sp_neg, p, q);
  return target ? f.alpha * power_of(q, sp_pos, f) * sp_neg : (1.0f - f.alpha) * power_of(p, sp_neg, f) * sp_pos;
}

__device__ __forceinline__ float focal_grad(float x, bool target, const FocalParams& f) {
  float sp_pos, sp_neg, p, q;
  softplus_pair(x, sp_pos, sp_neg, p, q);
  return target ? -f.alpha * power_of(q, sp_pos, f) * (q + f.gamma * p * sp_neg)
                : (1.0f - f.alpha) * power_of(p, sp_neg, f) * (p + f.gamma * q * sp_pos);
}

__global__ void __launch_bounds__(kThreads)
focal_fwd_kernel(const float* __restrict__ z, const std::int64_t* __restrict__ matched,
                 const std::int64_t* __restrict__ labels, FocalParams f, double* __restrict__ part) {
  __shared__ double scratch[kThreads / 32];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kFocalRows;
  const std::int64_t r1 = r0 + kFocalRows < f.A ? r0 + kFocalRows : f.A;
  double s = 0.0;
  for (std::int64_t e = r0 * f.K + threadIdx.x; e < r1 * f.K; e += kThreads) {
    const std::int64_t a = e / f.K, k = e % f.K;
    const std::int64_t tc = target_class(matched, labels, f.G, f.K, a);
    if (tc != -2) s += focal_term(z[e], tc == k, f);
  }
  s = group_reduce<kThreads>(s, SumOp{}, scratch);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void focal_bwd_kernel(const float* __restrict__ z, const std::int64_t* __restrict__ matched,
                                 const std::int64_t* __restrict__ labels, FocalParams f,
                                 const unsigned long long* __restrict__ stats, float dloss, float* __restrict__ dz) {
  const double fg = static_cast<double>(stats[0]);
  const float scale = static_cast<float>(dloss / (fg > 1.0 ? fg : 1.0));
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < f.A * f.K;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t a = e / f.K, k = e % f.K;
    const std::int64_t tc = target_class(matched, labels, f.G, f.K, a);
    dz[e] = tc == -2 ? 0.0f : scale * focal_grad(z[e], tc == k, f);
  }
}

FocalParams focal_params(const OpCall& c) {
  const Tensor& z = c.inputs[0];
  BH_CHECK_AS(InvalidArgument, z.dim() == 2 && c.inputs[1].numel() == z.size(0),
              "retinanet focal loss (cuda): logits [A, K] and matched [A] expected, got {} and {}",
              shape_str(z.shape()), shape_str(c.inputs[1].shape()));
  const float gamma = static_cast<float>(c.attrs.get("gamma", 2.0));
  return {z.size(0), z.size(1), c.inputs[2].numel(), static_cast<float>(c.attrs.get("alpha", 0.25)), gamma,
          gamma == 2.0f};
}

void focal_fwd(OpCall& call) {
  const FocalParams f = focal_params(call);
  set_device_of(call.inputs[0]);
  const Tensor stats = check_count(call.inputs[1], f.G, call.inputs[2], f.K);
  const std::int64_t chunks = std::max<std::int64_t>(1, (f.A + kFocalRows - 1) / kFocalRows);
  Tensor part = Tensor::zeros({chunks}, DType::f64, call.inputs[0].device());
  if (f.A > 0) {
    focal_fwd_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, op_stream()>>>(
        call.inputs[0].data<float>(), call.inputs[1].data<std::int64_t>(), call.inputs[2].data<std::int64_t>(), f,
        static_cast<double*>(part.raw_data()));
    BH_CHECK_CUDA_LAUNCH("focal_fwd_kernel");
  }
  loss_finish_kernel<<<1, 32, 0, op_stream()>>>(static_cast<const double*>(part.raw_data()), chunks,
                                                static_cast<const unsigned long long*>(stats.raw_data()),
                                                call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("loss_finish_kernel");
  throw_on_bad(stats, call.inputs[1], call.inputs[2], f.G, f.K, "retinanet_focal_loss_forward");
}

void focal_bwd(OpCall& call) {
  const FocalParams f = focal_params(call);
  if (f.A * f.K == 0) return;
  set_device_of(call.inputs[0]);
  const Tensor stats = check_count(call.inputs[1], f.G, call.inputs[2], f.K);
  focal_bwd_kernel<<<grid_for(f.A * f.K), 256, 0, op_stream()>>>(
      call.inputs[0].data<float>(), call.inputs[1].data<std::int64_t>(), call.inputs[2].data<std::int64_t>(), f,
      static_cast<const unsigned long long*>(stats.raw_data()), static_cast<float>(call.attrs.get("dloss", 1.0)),
      call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("focal_bwd_kernel");
}

// ---------------------------------------------------------------------------------------------
// Box (L1) loss
// ---------------------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
box_fwd_kernel(const float* __restrict__ d, const float* __restrict__ anchors, const std::int64_t* __restrict__ matched,
               const float* __restrict__ gt, std::int64_t A, std::int64_t G, double* __restrict__ part) {
  __shared__ double scratch[kThreads / 32];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kBoxRows;
  const std::int64_t r1 = r0 + kBoxRows < A ? r0 + kBoxRows : A;
  double s = 0.0;
  for (std::int64_t a = r0 + threadIdx.x; a < r1; a += kThreads) {
    const std::int64_t m = matched[a];
    if (m < 0 || m >= G) continue;
    float t[4];
    encode_one(gt + 4 * m, anchors + 4 * a, Weights{1, 1, 1, 1}, t);
    for (int j = 0; j < 4; ++j) s += fabsf(__fsub_rn(d[4 * a + j], t[j]));
  }
  s = group_reduce<kThreads>(s, SumOp{}, scratch);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void box_bwd_kernel(const float* __restrict__ d, const float* __restrict__ anchors,
                               const std::int64_t* __restrict__ matched, const float* __restrict__ gt, std::int64_t A,
                               std::int64_t G, const unsigned long long* __restrict__ stats, float dloss,
                               float* __restrict__ dd) {
  const double fg = static_cast<double>(stats[0]);
  const float scale = static_cast<float>(dloss / (fg > 1.0 ? fg : 1.0));
  for (std::int64_t a = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; a < A;
       a += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t m = matched[a];
    if (m < 0 || m >= G) {
      for (int j = 0; j < 4; ++j) dd[4 * a + j] = 0.0f;
      continue;
    }
    float t[4];
    encode_one(gt + 4 * m, anchors + 4 * a, Weights{1, 1, 1, 1}, t);
    for (int j = 0; j < 4; ++j) {
      const float v = __fsub_rn(d[4 * a + j], t[j]);
      dd[4 * a + j] = scale * (v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f));
    }
  }
}

void box_fwd(OpCall& call) {
  const std::int64_t A = call.inputs[0].size(0), G = call.inputs[3].size(0);
  set_device_of(call.inputs[0]);
  const Tensor stats = check_count(call.inputs[2], G, Tensor(), 0);
  const std::int64_t chunks = std::max<std::int64_t>(1, (A + kBoxRows - 1) / kBoxRows);
  Tensor part = Tensor::zeros({chunks}, DType::f64, call.inputs[0].device());
  if (A > 0) {
    box_fwd_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, op_stream()>>>(
        call.inputs[0].data<float>(), call.inputs[1].data<float>(), call.inputs[2].data<std::int64_t>(),
        call.inputs[3].data<float>(), A, G, static_cast<double*>(part.raw_data()));
    BH_CHECK_CUDA_LAUNCH("box_fwd_kernel");
  }
  loss_finish_kernel<<<1, 32, 0, op_stream()>>>(static_cast<const double*>(part.raw_data()), chunks,
                                                static_cast<const unsigned long long*>(stats.raw_data()),
                                                call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("loss_finish_kernel");
  throw_on_bad(stats, call.inputs[2], Tensor(), G, 0, "retinanet_box_loss_forward");
}

void box_bwd(OpCall& call) {
  const std::int64_t A = call.inputs[0].size(0), G = call.inputs[3].size(0);
  if (A == 0) return;
  set_device_of(call.inputs[0]);
  const Tensor stats = check_count(call.inputs[2], G, Tensor(), 0);
  box_bwd_kernel<<<grid_for(A), 256, 0, op_stream()>>>(
      call.inputs[0].data<float>(), call.inputs[1].data<float>(), call.inputs[2].data<std::int64_t>(),
      call.inputs[3].data<float>(), A, G, static_cast<const unsigned long long*>(stats.raw_data()),
      static_cast<float>(call.attrs.get("dloss", 1.0)), call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("box_bwd_kernel");
}

// f32 floating tensors, i64 index tensors, everything contiguous on a CUDA device.
std::string accepts(const OpCall& c) {
  for (const auto* list : {&c.inputs, &c.outputs})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Tensor& t = (*list)[i];
      if (!t.defined()) continue;
      if (!t.device().is_cuda() || !t.is_contiguous()) return fmt::format("tensor {} is not contiguous on cuda", i);
      if (t.dtype() != DType::f32 && t.dtype() != DType::i64)
        return fmt::format("tensor {} is {}, needs f32 (or i64 indices)", i, dtype_name(t.dtype()));
    }
  return {};
}

const bool registered = register_op_impl("box_iou", cuda_impl("cuda.kernel", 50, iou, accepts)) &&
                        register_op_impl("match_anchors", cuda_impl("cuda.kernel", 50, match, accepts)) &&
                        register_op_impl("encode_boxes", cuda_impl("cuda.kernel", 50, coder<true>, accepts)) &&
                        register_op_impl("decode_boxes", cuda_impl("cuda.kernel", 50, coder<false>, accepts)) &&
                        register_op_impl("retinanet_focal_loss_forward", cuda_impl("cuda.kernel", 50, focal_fwd, accepts)) &&
                        register_op_impl("retinanet_focal_loss_backward", cuda_impl("cuda.kernel", 50, focal_bwd, accepts)) &&
                        register_op_impl("retinanet_box_loss_forward", cuda_impl("cuda.kernel", 50, box_fwd, accepts)) &&
                        register_op_impl("retinanet_box_loss_backward", cuda_impl("cuda.kernel", 50, box_bwd, accepts));

}  // namespace
}  // namespace benchhost::nn::cuda
