// Mask R-CNN's smooth-L1 and mask BCE on CUDA, forward and backward (op conventions and
// formulas in nn/cpu/maskrcnn_losses.cpp).
//
// Layout and precision: f32 inputs, i64 labels. The forward losses run one block per chunk
// (kChunk elements of smooth-L1, one RoI's M x M mask for the mask loss), reduce in double within
// the block and write one partial per chunk; a one-thread kernel adds the partials in chunk order
// and scales: deterministic. The backward kernels are one thread per element. The mask loss's
// labels are checked on the host before the kernels (R is at most a few hundred RoIs, and the
// forward returns a host float anyway); the backward kernel writes zero for a RoI whose label is
// outside [0, C).

#include <vector>

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kChunk = 4096;

__global__ void finish_kernel(const double* __restrict__ part, std::int64_t chunks, double scale,
                              float* __restrict__ out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double t = 0.0;
  for (std::int64_t c = 0; c < chunks; ++c) t += part[c];
  out[0] = static_cast<float>(scale * t);
}

// ---- smooth-L1 ---------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
smooth_fwd_kernel(const float* __restrict__ x, const float* __restrict__ t, std::int64_t n, float beta,
                  double* __restrict__ part) {
  __shared__ double scratch[kThreads / 32];
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.x) * kChunk;
  const std::int64_t i1 = i0 + kChunk < n ? i0 + kChunk : n;
  double s = 0.0;
  for (std::int64_t i = i0 + threadIdx.x; i < i1; i += kThreads) {
    const float d = fabsf(__fsub_rn(x[i], t[i]));
    s += d < beta ? __fdiv_rn(__fmul_rn(__fmul_rn(0.5f, d), d), beta) : __fsub_rn(d, __fmul_rn(0.5f, beta));
  }
  s = group_reduce<kThreads>(s, SumOp{}, scratch);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void smooth_bwd_kernel(const float* __restrict__ x, const float* __restrict__ t, std::int64_t n, float beta,
                                  float scale, float* __restrict__ dx) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float d = __fsub_rn(x[i], t[i]);
    const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
    dx[i] = __fmul_rn(scale, fabsf(d) < beta ? __fdiv_rn(d, beta) : sign);
  }
}

void smooth_fwd(OpCall& call) {
  const std::int64_t n = call.inputs[0].numel();
  BH_CHECK_AS(InvalidArgument, call.inputs[1].numel() == n, "smooth_l1_loss_forward (cuda): {} inputs, {} targets", n,
              call.inputs[1].numel());
  set_device_of(call.inputs[0]);
  const std::int64_t chunks = std::max<std::int64_t>(1, (n + kChunk - 1) / kChunk);
  Tensor part = Tensor::zeros({chunks}, DType::f64, call.inputs[0].device());
  if (n > 0) {
    smooth_fwd_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, op_stream()>>>(
        call.inputs[0].data<float>(), call.inputs[1].data<float>(), n, static_cast<float>(call.attrs.get("beta", 1.0)),
        static_cast<double*>(part.raw_data()));
    BH_CHECK_CUDA_LAUNCH("smooth_fwd_kernel");
  }
  finish_kernel<<<1, 32, 0, op_stream()>>>(static_cast<const double*>(part.raw_data()), chunks,
                                           call.attrs.get("scale", 1.0), call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("finish_kernel");
}

void smooth_bwd(OpCall& call) {
  const std::int64_t n = call.inputs[0].numel();
  BH_CHECK_AS(InvalidArgument, call.inputs[1].numel() == n, "smooth_l1_loss_backward (cuda): {} inputs, {} targets", n,
              call.inputs[1].numel());
  if (n == 0) return;
  set_device_of(call.inputs[0]);
  smooth_bwd_kernel<<<grid_for(n), 256, 0, op_stream()>>>(
      call.inputs[0].data<float>(), call.inputs[1].data<float>(), n, static_cast<float>(call.attrs.get("beta", 1.0)),
      static_cast<float>(call.attrs.get("scale", 1.0) * call.attrs.get("dloss", 1.0)), call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("smooth_bwd_kernel");
}

// ---- mask BCE ----------------------------------------------------------------------------------

__device__ __forceinline__ float bce_term(float x, float t) {
  return __fadd_rn(__fsub_rn(fmaxf(x, 0.0f), __fmul_rn(x, t)), log1pf(expf(-fabsf(x))));
}

__global__ void __launch_bounds__(kThreads)
mask_fwd_kernel(const float* __restrict__ z, const std::int64_t* __restrict__ labels, const float* __restrict__ t,
                std::int64_t C, std::int64_t mm, double* __restrict__ part) {
  __shared__ double scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x;
  const std::int64_t l = labels[r];
  double s = 0.0;
  if (l >= 0 && l < C)
    for (std::int64_t i = threadIdx.x; i < mm; i += kThreads) s += bce_term(z[(r * C + l) * mm + i], t[r * mm + i]);
  s = group_reduce<kThreads>(s, SumOp{}, scratch);
  if (threadIdx.x == 0) part[r] = s;
}

__global__ void mask_bwd_kernel(const float* __restrict__ z, const std::int64_t* __restrict__ labels,
                                const float* __restrict__ t, std::int64_t R, std::int64_t C, std::int64_t mm,
                                float scale, float* __restrict__ dz) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < R * C * mm;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / (C * mm), c = (e / mm) % C, i = e % mm;
    dz[e] = labels[r] == c ? __fmul_rn(scale, __fsub_rn(__fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z[e]))), t[r * mm + i]))
                           : 0.0f;
  }
}

struct MaskGeo {
  std::int64_t r, c, mm;
};

MaskGeo mask_geo(const OpCall& call, const char* op) {
  const Tensor& z = call.inputs[0];
  BH_CHECK_AS(InvalidArgument, z.dim() == 4 && call.inputs[1].numel() == z.size(0),
              "{} (cuda): logits [R, C, M, M] and labels [R] expected, got {} and {}", op, shape_str(z.shape()),
              shape_str(call.inputs[1].shape()));
  return {z.size(0), z.size(1), z.size(2) * z.size(3)};
}

void mask_fwd(OpCall& call) {
  const MaskGeo g = mask_geo(call, "mask_bce_loss_forward");
  set_device_of(call.inputs[0]);
  // Labels on the host first: a bad one is a DataError naming the RoI, as on the CPU.
  std::vector<std::int64_t> labels(static_cast<std::size_t>(g.r));
  if (g.r > 0)
    BH_CHECK_CUDA(cudaMemcpy(labels.data(), call.inputs[1].data<std::int64_t>(),
                             labels.size() * sizeof(std::int64_t), cudaMemcpyDeviceToHost));
  for (std::int64_t i = 0; i < g.r; ++i)
    if (labels[static_cast<std::size_t>(i)] < 0 || labels[static_cast<std::size_t>(i)] >= g.c) [[unlikely]]
      BH_THROW(DataError, "mask_bce_loss_forward: label {} of RoI {} is outside [0, {}) (the mask logits' classes)",
               labels[static_cast<std::size_t>(i)], i, g.c);
  const std::int64_t chunks = std::max<std::int64_t>(1, g.r);
  Tensor part = Tensor::zeros({chunks}, DType::f64, call.inputs[0].device());
  if (g.r > 0 && g.mm > 0) {
    mask_fwd_kernel<<<static_cast<unsigned>(g.r), kThreads, 0, op_stream()>>>(
        call.inputs[0].data<float>(), call.inputs[1].data<std::int64_t>(), call.inputs[2].data<float>(), g.c, g.mm,
        static_cast<double*>(part.raw_data()));
    BH_CHECK_CUDA_LAUNCH("mask_fwd_kernel");
  }
  const double scale = g.r * g.mm == 0 ? 0.0 : 1.0 / static_cast<double>(g.r * g.mm);
  finish_kernel<<<1, 32, 0, op_stream()>>>(static_cast<const double*>(part.raw_data()), chunks, scale,
                                           call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("finish_kernel");
}

void mask_bwd(OpCall& call) {
  const MaskGeo g = mask_geo(call, "mask_bce_loss_backward");
  if (g.r * g.c * g.mm == 0) return;
  set_device_of(call.inputs[0]);
  const float scale = static_cast<float>(call.attrs.get("dloss", 1.0) / static_cast<double>(g.r * g.mm));
  mask_bwd_kernel<<<grid_for(g.r * g.c * g.mm), 256, 0, op_stream()>>>(
      call.inputs[0].data<float>(), call.inputs[1].data<std::int64_t>(), call.inputs[2].data<float>(), g.r, g.c, g.mm,
      scale, call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("mask_bwd_kernel");
}

std::string accepts(const OpCall& c) {
  for (const auto* list : {&c.inputs, &c.outputs})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Tensor& t = (*list)[i];
      if (!t.defined()) continue;
      if (!t.device().is_cuda() || !t.is_contiguous()) return fmt::format("tensor {} is not contiguous on cuda", i);
      if (t.dtype() != DType::f32 && t.dtype() != DType::i64)
        return fmt::format("tensor {} is {}, needs f32 (or i64 labels)", i, dtype_name(t.dtype()));
    }
  return {};
}

const bool registered =
    register_op_impl("smooth_l1_loss_forward", cuda_impl("cuda.kernel", 50, smooth_fwd, accepts)) &&
    register_op_impl("smooth_l1_loss_backward", cuda_impl("cuda.kernel", 50, smooth_bwd, accepts)) &&
    register_op_impl("mask_bce_loss_forward", cuda_impl("cuda.kernel", 50, mask_fwd, accepts)) &&
    register_op_impl("mask_bce_loss_backward", cuda_impl("cuda.kernel", 50, mask_bwd, accepts));

}  // namespace
}  // namespace benchhost::nn::cuda
