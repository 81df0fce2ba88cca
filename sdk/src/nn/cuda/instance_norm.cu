// instance_norm3d_forward / instance_norm3d_backward on CUDA (conventions of
// nn/cpu/instance_norm.cpp: attrs eps, fuse_relu, layout; saved mean and rstd f32 [N*C]).
//
// Why not cuDNN batch norm on the (1, N*C, D, H, W) view: it only fits NCDHW, and its saved
// statistics and fused ReLU differ from the op contract; these kernels follow the CPU
// implementation's arithmetic for both layouts instead.
//
// Reductions per plane (n, c) are two kernels (Note [Instance norm chunks] in the CPU file):
// partial sums in double over fixed chunks of kChunk voxels, one block per (chunk, plane) in
// NCDHW (256 threads over the plane's contiguous voxels) or per (chunk, sample, 32 channels) in
// NDHWC (32 x 8 threads, a warp reading 32 consecutive channels), then a per-plane finish that
// adds the chunks in order: deterministic, no atomics. The statistics take two passes (mean,
// then squared deviations). f32 tensors only; f16/bf16 calls are promoted (nn/registry.hpp).

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr std::int64_t kChunk = 4096;
constexpr int kThreads = 256;

struct InGeo {
  std::int64_t n, c, s, chunks;
  bool cl;
  __host__ __device__ std::int64_t planes() const { return n * c; }
};

InGeo geo_of(const OpCall& call, const Tensor& x) {
  BH_CHECK_AS(InvalidArgument, x.dim() == 5, "instance_norm3d: expected a 5-d input, got {}", shape_str(x.shape()));
  InGeo g{};
  g.cl = call.attrs.get_int("layout", 0) == 1;
  g.n = x.size(0);
  g.c = g.cl ? x.size(4) : x.size(1);
  g.s = x.numel() / (g.n * g.c > 0 ? g.n * g.c : 1);
  g.chunks = (g.s + kChunk - 1) / kChunk;
  return g;
}

__device__ __forceinline__ double2 add2(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

// Per-element quantities summed per plane. `i` is the element, `p` its plane n * C + c.
struct SumX {
  const float* x;
  __device__ double2 operator()(std::int64_t i, std::int64_t) const { return make_double2(x[i], 0.0); }
};
struct SqDev {
  const float* x;
  const float* mean;
  __device__ double2 operator()(std::int64_t i, std::int64_t p) const {
    const float d = x[i] - mean[p];
    return make_double2(static_cast<double>(d) * d, 0.0);
  }
};
struct GradSums {  // (g, g (x - mean)) with g = dy masked by y > 0 when y is given
  const float* dy;
  const float* x;
  const float* y;
  const float* mean;
  __device__ double2 operator()(std::int64_t i, std::int64_t p) const {
    const float g = (y == nullptr || y[i] > 0.0f) ? dy[i] : 0.0f;
    return make_double2(g, static_cast<double>(g) * (x[i] - mean[p]));
  }
};

// NCDHW: block (chunk, plane), the plane's voxels [s0, s1) are contiguous.
template <class F>
__global__ void __launch_bounds__(kThreads) partials_ncdhw(F f, InGeo g, double2* __restrict__ part) {
  const std::int64_t p = blockIdx.y;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x) * kChunk;
  const std::int64_t s1 = min(s0 + kChunk, g.s);
  double2 acc = make_double2(0.0, 0.0);
  for (std::int64_t s = s0 + threadIdx.x; s < s1; s += kThreads) acc = add2(acc, f(p * g.s + s, p));
  for (int o = 16; o > 0; o >>= 1) {
    acc.x += __shfl_down_sync(0xffffffffu, acc.x, o);
    acc.y += __shfl_down_sync(0xffffffffu, acc.y, o);
  }
  __shared__ double2 warps[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double2 t = make_double2(0.0, 0.0);
    for (int w = 0; w < kThreads / 32; ++w) t = add2(t, warps[w]);
    part[p * g.chunks + blockIdx.x] = t;
  }
}

// NDHWC: block (chunk, sample, 32 channels) of 32 x 8 threads.
template <class F>
__global__ void __launch_bounds__(kThreads) partials_ndhwc(F f, InGeo g, double2* __restrict__ part) {
  const std::int64_t n = blockIdx.y;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.z) * 32 + threadIdx.x;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x) * kChunk;
  const std::int64_t s1 = min(s0 + kChunk, g.s);
  double2 acc = make_double2(0.0, 0.0);
  if (c < g.c)
    for (std::int64_t s = s0 + threadIdx.y; s < s1; s += 8) acc = add2(acc, f((n * g.s + s) * g.c + c, n * g.c + c));
  __shared__ double2 tile[8][32];
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < g.c) {
    double2 t = make_double2(0.0, 0.0);
    for (int k = 0; k < 8; ++k) t = add2(t, tile[k][threadIdx.x]);
    part[(n * g.c + c) * g.chunks + blockIdx.x] = t;
  }
}

template <class F>
void launch_partials(F f, const InGeo& g, double2* part) {
  if (g.cl) {
    const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(g.n), static_cast<unsigned>((g.c + 31) / 32));
    partials_ndhwc<<<grid, dim3(32, 8), 0, op_stream()>>>(f, g, part);
  } else {
    const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(g.planes()));
    partials_ncdhw<<<grid, kThreads, 0, op_stream()>>>(f, g, part);
  }
  BH_CHECK_CUDA_LAUNCH("instance_norm partials");
}

// out[p] = sum over chunks of part[p * chunks + k], in chunk order.
__global__ void finish_sums(const double2* __restrict__ part, InGeo g, double2* __restrict__ out) {
  const std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (p >= g.planes()) return;
  double2 t = make_double2(0.0, 0.0);
  for (std::int64_t k = 0; k < g.chunks; ++k) t = add2(t, part[p * g.chunks + k]);
  out[p] = t;
}

__global__ void to_mean(const double2* __restrict__ sums, InGeo g, float* __restrict__ mean) {
  const std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (p < g.planes()) mean[p] = static_cast<float>(sums[p].x / static_cast<double>(g.s));
}

// rstd, and the affine form y = x * scale + shift of each plane.
__global__ void to_rstd(const double2* __restrict__ sums, InGeo g, double eps, const float* __restrict__ mean,
                        const float* __restrict__ gamma, const float* __restrict__ beta, float* __restrict__ rstd,
                        float2* __restrict__ affine) {
  const std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (p >= g.planes()) return;
  const double rs = 1.0 / sqrt(sums[p].x / static_cast<double>(g.s) + eps);
  rstd[p] = static_cast<float>(rs);
  const std::int64_t c = p % g.c;
  const double a = rs * gamma[c];
  affine[p] = make_float2(static_cast<float>(a), static_cast<float>(beta[c] - mean[p] * a));
}

__device__ __forceinline__ std::int64_t plane_of(std::int64_t i, const InGeo& g) {
  return g.cl ? (i / (g.s * g.c)) * g.c + i % g.c : i / g.s;
}

__global__ void apply_fwd(const float* __restrict__ x, const float2* __restrict__ affine, InGeo g, bool relu,
                          float* __restrict__ y) {
  const std::int64_t total = g.planes() * g.s;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float2 a = affine[plane_of(i, g)];
    const float v = x[i] * a.x + a.y;
    y[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

// Per plane: k = (gamma rstd, -gamma rstd^3 mean(g (x - mean)), -gamma rstd mean(g)).
__global__ void grad_coeffs(const double2* __restrict__ sums, InGeo g, const float* __restrict__ gamma,
                            const float* __restrict__ rstd, float4* __restrict__ k) {
  const std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (p >= g.planes()) return;
  const double rs = rstd[p], gm = gamma[p % g.c], S = static_cast<double>(g.s);
  k[p] = make_float4(static_cast<float>(gm * rs), static_cast<float>(-gm * rs * rs * rs * sums[p].y / S),
                     static_cast<float>(-gm * rs * sums[p].x / S), 0.0f);
}

__global__ void apply_bwd(const float* __restrict__ dy, const float* __restrict__ x, const float* __restrict__ y,
                          const float* __restrict__ mean, const float4* __restrict__ k, InGeo g,
                          float* __restrict__ dx) {
  const std::int64_t total = g.planes() * g.s;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t p = plane_of(i, g);
    const float4 kp = k[p];
    const float gr = (y == nullptr || y[i] > 0.0f) ? dy[i] : 0.0f;
    dx[i] = kp.x * gr + kp.y * (x[i] - mean[p]) + kp.z;
  }
}

// dgamma[c] += sum_n sum(g (x - mean)) rstd, dbeta[c] += sum_n sum(g), samples in order.
__global__ void param_grads(const double2* __restrict__ sums, InGeo g, const float* __restrict__ rstd,
                            float* __restrict__ dgamma, float* __restrict__ dbeta) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= g.c) return;
  double dg = 0.0, db = 0.0;
  for (std::int64_t n = 0; n < g.n; ++n) {
    const std::int64_t p = n * g.c + c;
    dg += sums[p].y * rstd[p];
    db += sums[p].x;
  }
  dgamma[c] += static_cast<float>(dg);
  dbeta[c] += static_cast<float>(db);
}

unsigned blocks_for(std::int64_t n, unsigned block = 256) {
  return static_cast<unsigned>((n + block - 1) / block > 0 ? (n + block - 1) / block : 1);
}

// Grid limits: chunks on x (2^31 - 1), planes on y and samples on y/z (65535).
void check_grid(const InGeo& g) {
  BH_CHECK_AS(InvalidArgument, (g.cl ? g.n : g.planes()) <= 65535 && (g.c + 31) / 32 <= 65535,
              "instance_norm3d (cuda): {} samples x {} channels exceed the kernels' grid", g.n, g.c);
}

void fwd(OpCall& call) {
  const Tensor& x = call.inputs[0];
  const InGeo g = geo_of(call, x);
  if (g.planes() * g.s == 0) return;
  check_grid(g);
  set_device_of(x);
  const double eps = call.attrs.get("eps");
  const bool relu = call.attrs.get_bool("fuse_relu");
  Tensor part = Tensor::empty({2 * g.planes() * g.chunks}, DType::f64, x.device());
  Tensor sums = Tensor::empty({2 * g.planes()}, DType::f64, x.device());
  Tensor affine = Tensor::empty({2 * g.planes()}, DType::f32, x.device());
  auto* pp = static_cast<double2*>(part.raw_data());
  auto* sp = static_cast<double2*>(sums.raw_data());
  float* mean = call.outputs[1].data<float>();
  float* rstd = call.outputs[2].data<float>();
  const unsigned pb = blocks_for(g.planes());
  launch_partials(SumX{x.data<float>()}, g, pp);
  finish_sums<<<pb, 256, 0, op_stream()>>>(pp, g, sp);
  BH_CHECK_CUDA_LAUNCH("finish_sums");
  to_mean<<<pb, 256, 0, op_stream()>>>(sp, g, mean);
  BH_CHECK_CUDA_LAUNCH("to_mean");
  launch_partials(SqDev{x.data<float>(), mean}, g, pp);
  finish_sums<<<pb, 256, 0, op_stream()>>>(pp, g, sp);
  BH_CHECK_CUDA_LAUNCH("finish_sums");
  to_rstd<<<pb, 256, 0, op_stream()>>>(sp, g, eps, mean, call.inputs[1].data<float>(), call.inputs[2].data<float>(),
                                       rstd, static_cast<float2*>(affine.raw_data()));
  BH_CHECK_CUDA_LAUNCH("to_rstd");
  apply_fwd<<<grid_for(g.planes() * g.s), 256, 0, op_stream()>>>(
      x.data<float>(), static_cast<const float2*>(affine.raw_data()), g, relu, call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("apply_fwd");
}

void bwd(OpCall& call) {
  const Tensor& x = call.inputs[1];
  const InGeo g = geo_of(call, x);
  if (g.planes() * g.s == 0) return;
  check_grid(g);
  set_device_of(x);
  const bool relu = call.attrs.get_bool("fuse_relu");
  const float* y = relu ? call.inputs[5].data<float>() : nullptr;
  const float* mean = call.inputs[3].data<float>();
  const float* rstd = call.inputs[4].data<float>();
  Tensor part = Tensor::empty({2 * g.planes() * g.chunks}, DType::f64, x.device());
  Tensor sums = Tensor::empty({2 * g.planes()}, DType::f64, x.device());
  Tensor coeffs = Tensor::empty({4 * g.planes()}, DType::f32, x.device());
  auto* pp = static_cast<double2*>(part.raw_data());
  auto* sp = static_cast<double2*>(sums.raw_data());
  auto* kp = static_cast<float4*>(coeffs.raw_data());
  const unsigned pb = blocks_for(g.planes());
  launch_partials(GradSums{call.inputs[0].data<float>(), x.data<float>(), y, mean}, g, pp);
  finish_sums<<<pb, 256, 0, op_stream()>>>(pp, g, sp);
  BH_CHECK_CUDA_LAUNCH("finish_sums");
  grad_coeffs<<<pb, 256, 0, op_stream()>>>(sp, g, call.inputs[2].data<float>(), rstd, kp);
  BH_CHECK_CUDA_LAUNCH("grad_coeffs");
  apply_bwd<<<grid_for(g.planes() * g.s), 256, 0, op_stream()>>>(call.inputs[0].data<float>(), x.data<float>(), y,
                                                                  mean, kp, g, call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("apply_bwd");
  param_grads<<<blocks_for(g.c), 256, 0, op_stream()>>>(sp, g, rstd, call.outputs[1].data<float>(),
                                                        call.outputs[2].data<float>());
  BH_CHECK_CUDA_LAUNCH("param_grads");
}

const bool registered =
    register_op_impl("instance_norm3d_forward", cuda_impl("cuda.kernel", 50, fwd)) &&
    register_op_impl("instance_norm3d_backward", cuda_impl("cuda.kernel", 50, bwd));

}  // namespace
}  // namespace benchhost::nn::cuda
