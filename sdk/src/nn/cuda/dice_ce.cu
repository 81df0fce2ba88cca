// dice_ce_loss_forward / dice_ce_loss_backward / argmax_channels on CUDA (conventions and
// formulas of nn/cpu/dice_ce.cpp).
//
// Forward: one block per (chunk of kChunk voxels, sample). Each thread takes voxels of the chunk,
// computes their softmax over the channels (channel stride S in NCDHW, 1 in NDHWC), writes the
// probabilities and sums -log p[label] in double; then, class by class, the block reduces
// (sum p t, sum t, sum p) over its chunk into a partial row. A finish kernel adds the chunks of
// each (sample, value) in chunk order, and one thread turns the sums into dice_terms and
// [loss, dice_loss, ce] (deterministic, no atomics on values). A label outside [0, C) is
// recorded as the smallest offending voxel index (atomicMin); the forward reads it back (it
// returns host floats anyway, nn/segmentation.cpp copies them) and throws DataError naming the
// label and voxel exactly as the CPU does. The backward runs on labels the forward has checked
// and writes a zero gradient for a voxel with an invalid label instead of reading out of range.
// Logits f32 (f16/bf16 promoted); labels u8 or i32.

#include <climits>

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr std::int64_t kChunk = 2048;
constexpr int kThreads = 256;

struct SegGeo {
  std::int64_t n, c, s, chunks;
  bool cl;
  __host__ __device__ std::int64_t vs() const { return cl ? c : 1; }
  __host__ __device__ std::int64_t cs() const { return cl ? 1 : s; }
  __host__ __device__ std::int64_t base(std::int64_t ni, std::int64_t si) const { return ni * c * s + si * vs(); }
};

SegGeo geo_of(const OpCall& call) {
  const Tensor& z = call.inputs[0];
  BH_CHECK_AS(InvalidArgument, z.dim() == 5, "segmentation op (cuda): expected 5-d logits, got {}", shape_str(z.shape()));
  SegGeo g{};
  g.cl = call.attrs.get_int("layout", 0) == 1;
  g.n = z.size(0);
  g.c = g.cl ? z.size(4) : z.size(1);
  g.s = z.numel() / (g.n * g.c > 0 ? g.n * g.c : 1);
  g.chunks = (g.s + kChunk - 1) / kChunk;
  return g;
}

__device__ __forceinline__ std::int64_t label_at(const void* l, bool u8, std::int64_t i) {
  return u8 ? static_cast<std::int64_t>(static_cast<const std::uint8_t*>(l)[i])
            : static_cast<std::int64_t>(static_cast<const std::int32_t*>(l)[i]);
}

__device__ __forceinline__ double block_sum(double v, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) t += scratch[w];
  __syncthreads();
  return t;  // valid in thread 0
}

// part row (n * chunks + chunk) of width 3C + 1: per class (I, T, P), then the CE sum.
__global__ void __launch_bounds__(kThreads)
dice_fwd_chunks(const float* __restrict__ z, const void* labels, bool u8, SegGeo g, float* __restrict__ p,
                double* __restrict__ part, unsigned long long* __restrict__ bad) {
  __shared__ double scratch[kThreads / 32];
  const std::int64_t n = blockIdx.y;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x) * kChunk;
  const std::int64_t s1 = min(s0 + kChunk, g.s);
  const std::int64_t cs = g.cs();
  double ce = 0.0;
  for (std::int64_t s = s0 + threadIdx.x; s < s1; s += kThreads) {
    const std::int64_t b = g.base(n, s);
    float m = z[b];
    for (std::int64_t c = 1; c < g.c; ++c) m = fmaxf(m, z[b + c * cs]);
    float sum = 0.0f;
    for (std::int64_t c = 0; c < g.c; ++c) sum += expf(z[b + c * cs] - m);
    const float inv = 1.0f / sum;
    for (std::int64_t c = 0; c < g.c; ++c) p[b + c * cs] = expf(z[b + c * cs] - m) * inv;
    const std::int64_t t = label_at(labels, u8, n * g.s + s);
    if (t < 0 || t >= g.c) {
      atomicMin(bad, static_cast<unsigned long long>(n * g.s + s));
    } else {
      ce += static_cast<double>(logf(sum) + m - z[b + t * cs]);
    }
  }
  const std::int64_t width = 3 * g.c + 1;
  double* row = part + (n * g.chunks + blockIdx.x) * width;
  const double ce_total = block_sum(ce, scratch);
  if (threadIdx.x == 0) row[3 * g.c] = ce_total;
  for (std::int64_t c = 0; c < g.c; ++c) {
    double I = 0.0, T = 0.0, P = 0.0;
    for (std::int64_t s = s0 + threadIdx.x; s < s1; s += kThreads) {
      const double q = p[g.base(n, s) + c * cs];
      const bool hit = label_at(labels, u8, n * g.s + s) == c;
      I += hit ? q : 0.0;
      T += hit ? 1.0 : 0.0;
      P += q;
    }
    I = block_sum(I, scratch);
    T = block_sum(T, scratch);
    P = block_sum(P, scratch);
    if (threadIdx.x == 0) {
      row[3 * c] = I;
      row[3 * c + 1] = T;
      row[3 * c + 2] = P;
    }
  }
}

// sums[n * width + j] = sum over chunks of part[(n * chunks + k) * width + j], in chunk order.
__global__ void dice_finish_sums(const double* __restrict__ part, SegGeo g, double* __restrict__ sums) {
  const std::int64_t width = 3 * g.c + 1;
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= g.n * width) return;
  const std::int64_t n = i / width, j = i % width;
  double t = 0.0;
  for (std::int64_t k = 0; k < g.chunks; ++k) t += part[(n * g.chunks + k) * width + j];
  sums[i] = t;
}

// One thread: dice_terms (f32 [N, C, 3]) and out = [loss, dice_loss, ce].
__global__ void dice_finish_loss(const double* __restrict__ sums, SegGeo g, double smooth, float* __restrict__ terms,
                                 float* __restrict__ out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const std::int64_t width = 3 * g.c + 1;
  double dice = 0.0, ce = 0.0;
  for (std::int64_t n = 0; n < g.n; ++n) {
    const double* r = sums + n * width;
    for (std::int64_t c = 0; c < g.c; ++c) {
      for (int k = 0; k < 3; ++k) terms[3 * (n * g.c + c) + k] = static_cast<float>(r[3 * c + k]);
      if (c > 0) dice += 1.0 - (2.0 * r[3 * c] + smooth) / (r[3 * c + 1] + r[3 * c + 2] + smooth);
    }
    ce += r[3 * g.c];
  }
  const double dice_loss = dice / static_cast<double>(g.n * (g.c - 1));
  const double ce_mean = ce / static_cast<double>(g.n * g.s);
  out[0] = static_cast<float>((dice_loss + ce_mean) / 2.0);
  out[1] = static_cast<float>(dice_loss);
  out[2] = static_cast<float>(ce_mean);
}

// g_c = a_c - [label == c] b_c for c >= 1 (nn/cpu/dice_ce.cpp), from the sample's dice_terms.
__device__ __forceinline__ float dice_grad(const float* __restrict__ t, std::int64_t c, bool hit, double smooth,
                                           double K) {
  if (c == 0) return 0.0f;
  const double num = 2.0 * t[3 * c] + smooth, den = static_cast<double>(t[3 * c + 1]) + t[3 * c + 2] + smooth;
  const float a = static_cast<float>(num / (2.0 * K * den * den)), b = static_cast<float>(1.0 / (K * den));
  return a - (hit ? b : 0.0f);
}

__global__ void dice_bwd_kernel(const float* __restrict__ p, const void* labels, bool u8,
                                const float* __restrict__ terms, SegGeo g, double smooth, float cef, float dloss,
                                float* __restrict__ dz) {
  const double K = static_cast<double>(g.n * (g.c - 1));
  const std::int64_t voxels = g.n * g.s, cs = g.cs();
  for (std::int64_t v = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; v < voxels;
       v += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t n = v / g.s, s = v % g.s, b = g.base(n, s);
    const std::int64_t t = label_at(labels, u8, v);
    if (t < 0 || t >= g.c) {
      for (std::int64_t c = 0; c < g.c; ++c) dz[b + c * cs] = 0.0f;
      continue;
    }
    const float* tn = terms + 3 * n * g.c;
    float dot = 0.0f;
    for (std::int64_t c = 1; c < g.c; ++c) dot += p[b + c * cs] * dice_grad(tn, c, c == t, smooth, K);
    for (std::int64_t c = 0; c < g.c; ++c) {
      const float q = p[b + c * cs];
      const bool hit = c == t;
      dz[b + c * cs] = dloss * (cef * (q - (hit ? 1.0f : 0.0f)) + q * (dice_grad(tn, c, hit, smooth, K) - dot));
    }
  }
}

__global__ void argmax_kernel(const float* __restrict__ z, SegGeo g, std::uint8_t* __restrict__ out) {
  const std::int64_t voxels = g.n * g.s, cs = g.cs();
  for (std::int64_t v = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; v < voxels;
       v += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = g.base(v / g.s, v % g.s);
    float best = z[b];
    int arg = 0;
    for (std::int64_t c = 1; c < g.c; ++c)
      if (z[b + c * cs] > best) {
        best = z[b + c * cs];
        arg = static_cast<int>(c);
      }
    out[v] = static_cast<std::uint8_t>(arg);
  }
}

std::string accepts(const OpCall& c) {
  std::string why = require_cuda_contiguous({c.inputs[0]});
  if (why.empty() && c.inputs.size() > 2) why = require_cuda_contiguous({c.inputs[2]});
  if (!why.empty()) return "input " + why;
  if (c.inputs.size() > 1) {
    const Tensor& l = c.inputs[1];
    if (!l.device().is_cuda() || !l.is_contiguous() || (l.dtype() != DType::u8 && l.dtype() != DType::i32))
      return "labels must be contiguous u8/i32 on the cuda device";
  }
  for (const Tensor& t : c.outputs)
    if (!t.device().is_cuda() || !t.is_contiguous() || (t.dtype() != DType::f32 && t.dtype() != DType::u8))
      return "outputs must be contiguous f32 (u8 labels) cuda tensors";
  if (c.outputs[0].dtype() != (c.inputs.size() == 1 ? DType::u8 : DType::f32)) return "output 0 has the wrong dtype";
  return {};
}

void check_call(const SegGeo& g, const Tensor& labels, const char* op) {
  BH_CHECK_AS(InvalidArgument, g.c >= 2 && g.n * g.s > 0 && labels.numel() == g.n * g.s,
              "{} (cuda): needs at least 2 classes, one voxel and a label per voxel (got {} classes, {} voxels, {} labels)",
              op, g.c, g.n * g.s, labels.numel());
  BH_CHECK_AS(InvalidArgument, g.n <= 65535, "{} (cuda): {} samples exceed the kernel's grid", op, g.n);
}

void fwd(OpCall& call) {
  const SegGeo g = geo_of(call);
  const Tensor& labels = call.inputs[1];
  check_call(g, labels, "dice_ce_loss_forward");
  set_device_of(call.inputs[0]);
  const Device dev = call.inputs[0].device();
  const bool u8 = labels.dtype() == DType::u8;
  const std::int64_t width = 3 * g.c + 1;
  Tensor part = Tensor::empty({g.n * g.chunks * width}, DType::f64, dev);
  Tensor sums = Tensor::empty({g.n * width}, DType::f64, dev);
  Tensor bad = Tensor::empty({1}, DType::i64, dev);
  BH_CHECK_CUDA(cudaMemsetAsync(bad.raw_data(), 0xff, sizeof(unsigned long long), op_stream()));
  auto* badp = static_cast<unsigned long long*>(bad.raw_data());
  auto* pp = static_cast<double*>(part.raw_data());
  auto* sp = static_cast<double*>(sums.raw_data());
  const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(g.n));
  dice_fwd_chunks<<<grid, kThreads, 0, op_stream()>>>(call.inputs[0].data<float>(), labels.raw_data(), u8, g,
                                                      call.outputs[0].data<float>(), pp, badp);
  BH_CHECK_CUDA_LAUNCH("dice_fwd_chunks");
  dice_finish_sums<<<static_cast<unsigned>((g.n * width + 255) / 256), 256, 0, op_stream()>>>(pp, g, sp);
  BH_CHECK_CUDA_LAUNCH("dice_finish_sums");
  dice_finish_loss<<<1, 32, 0, op_stream()>>>(sp, g, call.attrs.get("smooth", 1e-6), call.outputs[1].data<float>(),
                                              call.outputs[2].data<float>());
  BH_CHECK_CUDA_LAUNCH("dice_finish_loss");
  unsigned long long first_bad = 0;
  BH_CHECK_CUDA(cudaMemcpyAsync(&first_bad, badp, sizeof first_bad, cudaMemcpyDeviceToHost, op_stream()));
  BH_CHECK_CUDA(cudaStreamSynchronize(op_stream()));
  if (first_bad != ULLONG_MAX) [[unlikely]] {
    const auto i = static_cast<std::int64_t>(first_bad);
    std::int64_t value = 0;
    if (u8) {
      std::uint8_t v = 0;
      BH_CHECK_CUDA(cudaMemcpy(&v, static_cast<const std::uint8_t*>(labels.raw_data()) + i, 1, cudaMemcpyDeviceToHost));
      value = v;
    } else {
      std::int32_t v = 0;
      BH_CHECK_CUDA(cudaMemcpy(&v, static_cast<const std::int32_t*>(labels.raw_data()) + i, 4, cudaMemcpyDeviceToHost));
      value = v;
    }
    BH_THROW(DataError, "dice_ce_loss_forward: label {} at voxel {} (sample {}, position {}) is outside [0, {})", value,
             i, i / g.s, i % g.s, g.c);
  }
}

void bwd(OpCall& call) {
  const SegGeo g = geo_of(call);
  const Tensor& labels = call.inputs[1];
  check_call(g, labels, "dice_ce_loss_backward");
  set_device_of(call.inputs[0]);
  const float cef = static_cast<float>(0.5 / static_cast<double>(g.n * g.s));
  dice_bwd_kernel<<<grid_for(g.n * g.s), 256, 0, op_stream()>>>(
      call.inputs[0].data<float>(), labels.raw_data(), labels.dtype() == DType::u8, call.inputs[2].data<float>(), g,
      call.attrs.get("smooth", 1e-6), cef, static_cast<float>(call.attrs.get("dloss", 1.0)),
      call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("dice_bwd_kernel");
}

void argmax(OpCall& call) {
  const SegGeo g = geo_of(call);
  if (g.n * g.s == 0) return;
  set_device_of(call.inputs[0]);
  argmax_kernel<<<grid_for(g.n * g.s), 256, 0, op_stream()>>>(call.inputs[0].data<float>(), g,
                                                             call.outputs[0].data<std::uint8_t>());
  BH_CHECK_CUDA_LAUNCH("argmax_kernel");
}

const bool registered =
    register_op_impl("dice_ce_loss_forward", cuda_impl("cuda.kernel", 50, fwd, accepts)) &&
    register_op_impl("dice_ce_loss_backward", cuda_impl("cuda.kernel", 50, bwd, accepts)) &&
    register_op_impl("argmax_channels", cuda_impl("cuda.kernel", 50, argmax, accepts));

}  // namespace
}  // namespace benchhost::nn::cuda
