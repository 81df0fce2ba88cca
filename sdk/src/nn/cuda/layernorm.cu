// layernorm_forward / layernorm_backward over the last dim on CUDA.
//
// Layout: x [R, C], gamma/beta [C], saved mean/rstd [R] exactly as the CPU defines them
// (mean, and rstd = 1 / sqrt(var + eps) from a two-pass variance). One warp per row for
// C <= 1024 (8 rows per block), one 512-thread block per row above; row sums in f32 with a
// fixed-order tree (deterministic). Backward: dx per row as on the CPU,
//   dx = rstd (dy gamma - mean(dy gamma) - xhat mean(dy gamma xhat)),
// and dgamma += sum_rows dy xhat, dbeta += sum_rows dy as deterministic two-pass column sums
// (per-chunk partials, then the chunks in order: column_partial_kernel / column_finish_kernel).

#include <cmath>

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

template <int kThreads>
__global__ void ln_fwd_kernel(const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ b,
                              float* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                              std::int64_t R, std::int64_t C, float eps) {
  __shared__ float scratch[32];
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / kThreads) + threadIdx.x / kThreads;
  const int t = static_cast<int>(threadIdx.x % kThreads);
  const bool valid = row < R;
  const float* xr = x + (valid ? row : 0) * C;
  float s = 0.0f;
  if (valid)
    for (std::int64_t j = t; j < C; j += kThreads) s += xr[j];
  const float m = group_reduce<kThreads>(s, SumOp{}, scratch) / static_cast<float>(C);
  float v = 0.0f;
  if (valid)
    for (std::int64_t j = t; j < C; j += kThreads) {
      const float d = xr[j] - m;
      v += d * d;
    }
  v = group_reduce<kThreads>(v, SumOp{}, scratch);
  if (!valid) return;
  const float rs = 1.0f / sqrtf(v / static_cast<float>(C) + eps);
  float* yr = y + row * C;
  for (std::int64_t j = t; j < C; j += kThreads) yr[j] = (xr[j] - m) * rs * g[j] + (b ? b[j] : 0.0f);
  if (t == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

template <int kThreads>
__global__ void ln_bwd_dx_kernel(const float* __restrict__ dy, const float* __restrict__ x, const float* __restrict__ g,
                                 const float* __restrict__ mean, const float* __restrict__ rstd, float* __restrict__ dx,
                                 std::int64_t R, std::int64_t C) {
  __shared__ float scratch[32];
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / kThreads) + threadIdx.x / kThreads;
  const int t = static_cast<int>(threadIdx.x % kThreads);
  const bool valid = row < R;
  const std::int64_t r = valid ? row : 0;
  const float* dyr = dy + r * C;
  const float* xr = x + r * C;
  const float m = mean[r], rs = rstd[r];
  float sg = 0.0f, sgx = 0.0f;
  if (valid)
    for (std::int64_t j = t; j < C; j += kThreads) {
      const float gj = dyr[j] * g[j];
      sg += gj;
      sgx += gj * (xr[j] - m) * rs;
    }
  sg = group_reduce<kThreads>(sg, SumOp{}, scratch);
  sgx = group_reduce<kThreads>(sgx, SumOp{}, scratch);
  if (!valid) return;
  const float mg = sg / static_cast<float>(C), mgx = sgx / static_cast<float>(C);
  float* dxr = dx + row * C;
  for (std::int64_t j = t; j < C; j += kThreads) dxr[j] = rs * (dyr[j] * g[j] - mg - (xr[j] - m) * rs * mgx);
}

struct DyXhat {
  const float *dy, *x, *mean, *rstd;
  std::int64_t C;
  __device__ float operator()(std::int64_t r, std::int64_t j) const {
    return dy[r * C + j] * ((x[r * C + j] - mean[r]) * rstd[r]);
  }
};
struct Dy {
  const float* dy;
  std::int64_t C;
  __device__ float operator()(std::int64_t r, std::int64_t j) const { return dy[r * C + j]; }
};

void fwd(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const std::int64_t C = x.size(-1), R = rows_of(x);
  BH_CHECK_AS(InvalidArgument, c.inputs[1].numel() == C, "layernorm_forward: gamma must have {} elements", C);
  if (x.numel() == 0) return;
  const float* b = c.inputs.size() > 2 && c.inputs[2].defined() ? c.inputs[2].data<float>() : nullptr;
  const float eps = static_cast<float>(c.attrs.get("eps"));
  set_device_of(x);
  float* y = c.outputs[0].data<float>();
  float* mean = c.outputs[1].data<float>();
  float* rstd = c.outputs[2].data<float>();
  if (C <= 1024)
    ln_fwd_kernel<32><<<static_cast<unsigned>((R + 7) / 8), 256, 0, op_stream()>>>(
        x.data<float>(), c.inputs[1].data<float>(), b, y, mean, rstd, R, C, eps);
  else
    ln_fwd_kernel<512><<<static_cast<unsigned>(R), 512, 0, op_stream()>>>(x.data<float>(), c.inputs[1].data<float>(), b,
                                                                          y, mean, rstd, R, C, eps);
  BH_CHECK_CUDA_LAUNCH("ln_fwd_kernel");
}

template <class Load>
void column_sum_into(Load load, Tensor& out, std::int64_t R, std::int64_t C, const Tensor& like) {
  const std::int64_t per = column_rows_per_chunk(R);
  const std::int64_t chunks = (R + per - 1) / per;
  Tensor partial = Tensor::empty({chunks, C}, DType::f32, like.device());
  const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(chunks));
  column_partial_kernel<<<grid, dim3(32, 8), 0, op_stream()>>>(load, partial.data<float>(), R, C, per);
  BH_CHECK_CUDA_LAUNCH("column_partial_kernel");
  column_finish_kernel<<<grid_for(C), 256, 0, op_stream()>>>(partial.data<float>(), out.data<float>(), C, chunks, true);
  BH_CHECK_CUDA_LAUNCH("column_finish_kernel");
}

void bwd(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const std::int64_t C = dy.size(-1), R = rows_of(dy);
  BH_CHECK_AS(InvalidArgument, c.inputs[1].numel() == dy.numel() && c.inputs[3].numel() == R && c.inputs[4].numel() == R,
              "layernorm_backward: x / mean / rstd do not match dy's {} rows", R);
  if (dy.numel() == 0) return;
  set_device_of(dy);
  const float* dyp = dy.data<float>();
  const float* xp = c.inputs[1].data<float>();
  const float* mean = c.inputs[3].data<float>();
  const float* rstd = c.inputs[4].data<float>();
  if (C <= 1024)
    ln_bwd_dx_kernel<32><<<static_cast<unsigned>((R + 7) / 8), 256, 0, op_stream()>>>(
        dyp, xp, c.inputs[2].data<float>(), mean, rstd, c.outputs[0].data<float>(), R, C);
  else
    ln_bwd_dx_kernel<512><<<static_cast<unsigned>(R), 512, 0, op_stream()>>>(
        dyp, xp, c.inputs[2].data<float>(), mean, rstd, c.outputs[0].data<float>(), R, C);
  BH_CHECK_CUDA_LAUNCH("ln_bwd_dx_kernel");
  if (c.outputs.size() > 1 && c.outputs[1].defined()) column_sum_into(DyXhat{dyp, xp, mean, rstd, C}, c.outputs[1], R, C, dy);
  if (c.outputs.size() > 2 && c.outputs[2].defined()) column_sum_into(Dy{dyp, C}, c.outputs[2], R, C, dy);
}

const bool registered =
    register_op_impl("layernorm_forward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, fwd, false}) &&
    register_op_impl("layernorm_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, bwd, false});

}  // namespace
}  // namespace benchhost::nn::cuda
