// stack_time_forward / stack_time_backward / joint_add_forward / joint_add_backward on CUDA
// (Note [Transducer layout ops] in nn/transducer.hpp; the CPU versions and the op declarations
// are in nn/cpu/transducer_ops.cpp).
//
// Layout: every kernel is a grid-stride loop with one thread per output element, consecutive
// threads on consecutive elements of the output's last axis, so that writes are coalesced and so
// are reads (a run of H, J or f H output elements reads a run of the input's last axis).
//   stack_kernel     y[s, b, k H + i] = x[f s + k, b, i] or 0 past T; the backward's gather
//                    dx[t, b, i] = dy[t / f, b, (t % f) H + i]. A copy: templated on the element's
//                    width, so f16 and bf16 run natively (4-byte and 2-byte words).
//   joint_fwd_kernel h[b, t, u, j] = f[b, t, j] + g[b, u, j] in f32.
//   joint_df_kernel  df[b, t, j] = sum over u of dh[b, t, u, j], in u order, f32 accumulator;
//   joint_dg_kernel  dg[b, u, j] = sum over t, in t order, f32 accumulator. One thread per
//                    output element walking the reduced axis: each step of a warp reads one
//                    contiguous run of dh. Deterministic (no atomics); the sums differ from the
//                    CPU's f64 ones by f32 rounding only (the op's parity tolerance).
// The joint's ops read and write f32; f16/bf16 calls are promoted by the registry (refuse_half).
// Not yet run on a GPU.

#include "nn/cuda/cuda_common.hpp"
#include "nn/transducer_common.hpp"

namespace benchhost::nn::cuda {
namespace {

using transducer::JointDims;
using transducer::StackDims;

constexpr unsigned kThreads = 256;

template <class Word>
__global__ void stack_fwd_kernel(const Word* __restrict__ x, Word* __restrict__ y, std::int64_t T, std::int64_t B,
                                 std::int64_t H, std::int64_t factor, std::int64_t n) {
  const std::int64_t width = factor * H;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = i % width, r = i / width;  // r = s B + b
    const std::int64_t s = r / B, b = r % B, k = c / H, h = c % H;
    const std::int64_t t = s * factor + k;
    y[i] = t < T ? x[(t * B + b) * H + h] : Word(0);
  }
}

template <class Word>
__global__ void stack_bwd_kernel(const Word* __restrict__ dy, Word* __restrict__ dx, std::int64_t B, std::int64_t H,
                                 std::int64_t factor, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t h = i % H, r = i / H;  // r = t B + b
    const std::int64_t t = r / B, b = r % B;
    dx[i] = dy[((t / factor) * B + b) * factor * H + (t % factor) * H + h];
  }
}

__global__ void joint_fwd_kernel(const float* __restrict__ f, const float* __restrict__ g, float* __restrict__ h,
                                 std::int64_t T, std::int64_t U1, std::int64_t J, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t j = i % J, r = i / J;  // r = (b T + t) U1 + u
    const std::int64_t u = r % U1, bt = r / U1, b = bt / T;
    h[i] = f[bt * J + j] + g[(b * U1 + u) * J + j];
  }
}

__global__ void joint_df_kernel(const float* __restrict__ dh, float* __restrict__ df, std::int64_t U1, std::int64_t J,
                                std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t j = i % J, bt = i / J;
    const float* p = dh + bt * U1 * J + j;
    float s = 0.0f;
    for (std::int64_t u = 0; u < U1; ++u) s += p[u * J];
    df[i] = s;
  }
}

__global__ void joint_dg_kernel(const float* __restrict__ dh, float* __restrict__ dg, std::int64_t T, std::int64_t U1,
                                std::int64_t J, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t j = i % J, r = i / J;  // r = b U1 + u
    const std::int64_t u = r % U1, b = r / U1;
    const float* p = dh + (b * T * U1 + u) * J + j;
    float s = 0.0f;
    for (std::int64_t t = 0; t < T; ++t) s += p[t * U1 * J];
    dg[i] = s;
  }
}

template <class Word>
void launch_stack(const OpCall& call, const StackDims& d, bool forward) {
  const auto* in = static_cast<const Word*>(call.inputs[0].raw_data());
  auto* out = static_cast<Word*>(call.outputs[0].raw_data());
  const std::int64_t n = call.outputs[0].numel();
  if (n == 0) return;
  if (forward) {
    stack_fwd_kernel<Word><<<grid_for(n, kThreads), kThreads, 0, op_stream()>>>(in, out, d.T, d.B, d.H, d.factor, n);
    BH_CHECK_CUDA_LAUNCH("stack_fwd_kernel");
  } else {
    stack_bwd_kernel<Word><<<grid_for(n, kThreads), kThreads, 0, op_stream()>>>(in, out, d.B, d.H, d.factor, n);
    BH_CHECK_CUDA_LAUNCH("stack_bwd_kernel");
  }
}

void run_stack(OpCall& call, const StackDims& d, bool forward) {
  set_device_of(call.inputs[0]);
  if (call.inputs[0].element_size() == 4) launch_stack<std::uint32_t>(call, d, forward);
  else launch_stack<std::uint16_t>(call, d, forward);
}

void stack_fwd(OpCall& call) {
  const StackDims d =
      transducer::check_stack_time(call.inputs[0], call.outputs[0], call.attrs.get_int("factor", 1), "stack_time_forward");
  run_stack(call, d, true);
}

void stack_bwd(OpCall& call) {
  const StackDims d =
      transducer::check_stack_time(call.outputs[0], call.inputs[0], call.attrs.get_int("factor", 1), "stack_time_backward");
  BH_CHECK_AS(InvalidArgument, call.attrs.get_int("frames", d.T) == d.T,
              "stack_time_backward: attr frames {} differs from dx's {} frames", call.attrs.get_int("frames", d.T), d.T);
  run_stack(call, d, false);
}

void joint_fwd(OpCall& call) {
  const JointDims d = transducer::check_joint(call.inputs[0], call.inputs[1], call.outputs[0], "joint_add_forward");
  const std::int64_t n = call.outputs[0].numel();
  if (n == 0) return;
  set_device_of(call.inputs[0]);
  joint_fwd_kernel<<<grid_for(n, kThreads), kThreads, 0, op_stream()>>>(
      call.inputs[0].data<float>(), call.inputs[1].data<float>(), call.outputs[0].data<float>(), d.T, d.U1, d.J, n);
  BH_CHECK_CUDA_LAUNCH("joint_fwd_kernel");
}

void joint_bwd(OpCall& call) {
  const JointDims d = transducer::check_joint(call.outputs[0], call.outputs[1], call.inputs[0], "joint_add_backward");
  set_device_of(call.inputs[0]);
  const float* dh = call.inputs[0].data<float>();
  const std::int64_t n_df = call.outputs[0].numel(), n_dg = call.outputs[1].numel();
  if (n_df > 0) {
    joint_df_kernel<<<grid_for(n_df, kThreads), kThreads, 0, op_stream()>>>(dh, call.outputs[0].data<float>(), d.U1,
                                                                            d.J, n_df);
    BH_CHECK_CUDA_LAUNCH("joint_df_kernel");
  }
  if (n_dg > 0) {
    joint_dg_kernel<<<grid_for(n_dg, kThreads), kThreads, 0, op_stream()>>>(dh, call.outputs[1].data<float>(), d.T,
                                                                            d.U1, d.J, n_dg);
    BH_CHECK_CUDA_LAUNCH("joint_dg_kernel");
  }
}

// StackTime copies 2- or 4-byte words: f32, f16 and bf16 natively, input and output alike.
std::string accepts_stack(const OpCall& c) {
  const Tensor& in = c.inputs[0];
  const Tensor& out = c.outputs[0];
  if (!is_floating(in.dtype()) || (in.element_size() != 4 && in.element_size() != 2))
    return fmt::format("{} is not an f32, f16 or bf16 tensor", in.describe());
  std::string why = require_cuda_contiguous({in, out}, in.dtype());
  return why;
}

std::string accepts_joint(const OpCall& c) {
  std::string why = refuse_half(c);
  if (why.empty()) why = accept_cuda_f32(c);
  return why;
}

const bool registered = register_op_impl("stack_time_forward", cuda_impl("cuda.kernel", 50, stack_fwd, accepts_stack)) &&
                        register_op_impl("stack_time_backward", cuda_impl("cuda.kernel", 50, stack_bwd, accepts_stack)) &&
                        register_op_impl("joint_add_forward", cuda_impl("cuda.kernel", 50, joint_fwd, accepts_joint)) &&
                        register_op_impl("joint_add_backward", cuda_impl("cuda.kernel", 50, joint_bwd, accepts_joint));

}  // namespace
}  // namespace benchhost::nn::cuda
