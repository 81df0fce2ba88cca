// cross_entropy_forward / cross_entropy_backward and bce_with_logits_forward / _backward on CUDA.
//
// Cross entropy (conventions of nn/cpu/cross_entropy.cpp): per row r with target t, rows with
// t == ignore_index skipped, lp = log_softmax(logits[r]) (written out for the backward),
// loss_r = -((1 - e) lp[t] + (e / C) sum_j lp[j]); output[1] = [mean loss over kept rows (0 if
// none), kept-row count]. One warp (C <= 1024) or one block per row; the row losses are then
// summed in fp64 by one block in a fixed order (deterministic). A target outside [0, C) other
// than ignore_index sets a device flag; the forward reads it back (it returns a host loss
// anyway, ops.cpp copies it) and throws InvalidArgument. The backward, which runs on targets
// the forward has checked, writes zero gradients for such rows instead of reading out of range.
// BCE: fp64 partial sums over fixed 4096-element blocks, then the blocks in order.

#include <cmath>

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

__device__ __forceinline__ std::int64_t target_at(const void* t, bool is64, std::int64_t r) {
  return is64 ? static_cast<const std::int64_t*>(t)[r] : static_cast<const std::int32_t*>(t)[r];
}

template <int kThreads>
__global__ void ce_fwd_rows(const float* __restrict__ x, const void* targets, bool is64, float* __restrict__ lp,
                            double* __restrict__ row_loss, int* __restrict__ bad, std::int64_t N, std::int64_t C,
                            float e, std::int64_t ignore) {
  __shared__ float scratch[32];
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / kThreads) + threadIdx.x / kThreads;
  const int t = static_cast<int>(threadIdx.x % kThreads);
  const bool valid = row < N;
  const float* xr = x + (valid ? row : 0) * C;
  float m, s;
  row_max_sumexp<kThreads>(xr, C, t, valid, scratch, m, s);
  const float lse = m + logf(s);
  float all = 0.0f;
  if (valid)
    for (std::int64_t j = t; j < C; j += kThreads) {
      const float v = xr[j] - lse;
      lp[row * C + j] = v;
      all += v;
    }
  all = group_reduce<kThreads>(all, SumOp{}, scratch);
  if (!valid || t != 0) return;
  const std::int64_t y = target_at(targets, is64, row);
  if (y == ignore) {
    row_loss[row] = 0.0;
  } else if (y < 0 || y >= C) {
    row_loss[row] = 0.0;
    atomicExch(bad, 1);
  } else {
    const float ly = xr[y] - lse;
    row_loss[row] = -((1.0 - static_cast<double>(e)) * ly + static_cast<double>(e) / static_cast<double>(C) * all);
  }
}

// One block of 256 threads: out = [mean of kept rows' losses, kept count].
__global__ void ce_finish(const double* __restrict__ row_loss, const void* targets, bool is64, float* __restrict__ out,
                          std::int64_t N, std::int64_t C, std::int64_t ignore) {
  __shared__ double scratch[32];
  double s = 0.0, n = 0.0;
  for (std::int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    const std::int64_t y = target_at(targets, is64, r);
    if (y != ignore && y >= 0 && y < C) {
      s += row_loss[r];
      n += 1.0;
    }
  }
  s = group_reduce<256>(s, SumOp{}, scratch);
  n = group_reduce<256>(n, SumOp{}, scratch);
  if (threadIdx.x == 0) {
    out[0] = n > 0.0 ? static_cast<float>(s / n) : 0.0f;
    out[1] = static_cast<float>(n);
  }
}

__global__ void ce_bwd_kernel(const float* __restrict__ lp, const void* targets, bool is64, float* __restrict__ dx,
                              std::int64_t N, std::int64_t C, float e, float scale, std::int64_t ignore) {
  const float off = e / static_cast<float>(C);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < N * C;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / C, j = i % C;
    const std::int64_t y = target_at(targets, is64, r);
    if (y == ignore || y < 0 || y >= C) {
      dx[i] = 0.0f;
      continue;
    }
    float d = scale * (expf(lp[i]) - off);
    if (j == y) d -= scale * (1.0f - e);
    dx[i] = d;
  }
}

constexpr std::int64_t kBceBlock = 4096;

__global__ void bce_partial(const float* __restrict__ x, const float* __restrict__ t, double* __restrict__ part,
                            std::int64_t n) {
  __shared__ double scratch[32];
  const std::int64_t b0 = static_cast<std::int64_t>(blockIdx.x) * kBceBlock;
  const std::int64_t b1 = b0 + kBceBlock < n ? b0 + kBceBlock : n;
  double s = 0.0;
  for (std::int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const float xi = x[i];
    s += static_cast<double>(fmaxf(xi, 0.0f) - xi * t[i] + log1pf(expf(-fabsf(xi))));
  }
  s = group_reduce<256>(s, SumOp{}, scratch);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void bce_finish(const double* __restrict__ part, std::int64_t blocks, std::int64_t n, float* __restrict__ out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = 0.0;
  for (std::int64_t b = 0; b < blocks; ++b) s += part[b];
  out[0] = n ? static_cast<float>(s / static_cast<double>(n)) : 0.0f;
}

__global__ void bce_bwd_kernel(const float* __restrict__ x, const float* __restrict__ t, float scale,
                               float* __restrict__ dx, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dx[i] = scale * (1.0f / (1.0f + expf(-x[i])) - t[i]);
}

std::string accepts_ce(const OpCall& c) {
  std::string why = require_cuda_contiguous({c.inputs[0]});
  if (why.empty()) why = require_cuda_contiguous(c.outputs);
  if (!why.empty()) return why;
  const Tensor& t = c.inputs[1];
  if (!t.device().is_cuda() || !t.is_contiguous() || (t.dtype() != DType::i32 && t.dtype() != DType::i64))
    return "targets must be contiguous i32/i64 on the cuda device";
  return {};
}

void ce_fwd(OpCall& c) {
  const Tensor& logits = c.inputs[0];
  const Tensor& targets = c.inputs[1];
  const std::int64_t N = logits.size(0), C = logits.size(1);
  const std::int64_t ignore = c.attrs.get_int("ignore_index", -100);
  BH_CHECK_AS(InvalidArgument, targets.numel() == N, "cross entropy: {} targets for {} rows", targets.numel(), N);
  set_device_of(logits);
  Tensor& out = c.outputs[1];
  if (N == 0) {
    BH_CHECK_CUDA(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), op_stream()));
    return;
  }
  Tensor row_loss = Tensor::empty({N}, DType::f64, logits.device());
  Tensor bad = Tensor::zeros({1}, DType::i32, logits.device());
  const bool is64 = targets.dtype() == DType::i64;
  const float e = static_cast<float>(c.attrs.get("smoothing", 0.0));
  auto* rl = static_cast<double*>(row_loss.raw_data());
  auto* badp = static_cast<int*>(bad.raw_data());
  if (C <= 1024)
    ce_fwd_rows<32><<<static_cast<unsigned>((N + 7) / 8), 256, 0, op_stream()>>>(
        logits.data<float>(), targets.raw_data(), is64, c.outputs[0].data<float>(), rl, badp, N, C, e, ignore);
  else
    ce_fwd_rows<512><<<static_cast<unsigned>(N), 512, 0, op_stream()>>>(
        logits.data<float>(), targets.raw_data(), is64, c.outputs[0].data<float>(), rl, badp, N, C, e, ignore);
  BH_CHECK_CUDA_LAUNCH("ce_fwd_rows");
  ce_finish<<<1, 256, 0, op_stream()>>>(rl, targets.raw_data(), is64, out.data<float>(), N, C, ignore);
  BH_CHECK_CUDA_LAUNCH("ce_finish");
  int flag = 0;
  BH_CHECK_CUDA(cudaMemcpyAsync(&flag, badp, sizeof(int), cudaMemcpyDeviceToHost, op_stream()));
  BH_CHECK_CUDA(cudaStreamSynchronize(op_stream()));
  BH_CHECK_AS(InvalidArgument, flag == 0, "cross entropy: a target is outside [0, {}) and not ignore_index {}", C, ignore);
}

void ce_bwd(OpCall& c) {
  const Tensor& lp = c.inputs[0];
  const std::int64_t N = lp.size(0), C = lp.size(1);
  if (N * C == 0) return;
  set_device_of(lp);
  ce_bwd_kernel<<<grid_for(N * C), 256, 0, op_stream()>>>(
      lp.data<float>(), c.inputs[1].raw_data(), c.inputs[1].dtype() == DType::i64, c.outputs[0].data<float>(), N, C,
      static_cast<float>(c.attrs.get("smoothing", 0.0)), static_cast<float>(c.attrs.get("scale")),
      c.attrs.get_int("ignore_index", -100));
  BH_CHECK_CUDA_LAUNCH("ce_bwd_kernel");
}

void bce_fwd(OpCall& c) {
  const Tensor& x = c.inputs[0];
  BH_CHECK_AS(InvalidArgument, c.inputs[1].numel() == x.numel(), "bce_with_logits: logits and targets differ in size");
  const std::int64_t n = x.numel();
  set_device_of(x);
  const std::int64_t blocks = n == 0 ? 1 : (n + kBceBlock - 1) / kBceBlock;
  Tensor part = Tensor::empty({blocks}, DType::f64, x.device());
  auto* pp = static_cast<double*>(part.raw_data());
  if (n > 0) {
    bce_partial<<<static_cast<unsigned>(blocks), 256, 0, op_stream()>>>(x.data<float>(), c.inputs[1].data<float>(), pp, n);
    BH_CHECK_CUDA_LAUNCH("bce_partial");
  }
  bce_finish<<<1, 32, 0, op_stream()>>>(pp, n > 0 ? blocks : 0, n, c.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("bce_finish");
}

void bce_bwd(OpCall& c) {
  const Tensor& x = c.inputs[0];
  BH_CHECK_AS(InvalidArgument, c.inputs[1].numel() == x.numel(), "bce_with_logits: logits and targets differ in size");
  const std::int64_t n = x.numel();
  if (n == 0) return;
  set_device_of(x);
  bce_bwd_kernel<<<grid_for(n), 256, 0, op_stream()>>>(x.data<float>(), c.inputs[1].data<float>(),
                                                       static_cast<float>(c.attrs.get("scale")), c.outputs[0].data<float>(), n);
  BH_CHECK_CUDA_LAUNCH("bce_bwd_kernel");
}

const bool registered =
    register_op_impl("cross_entropy_forward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accepts_ce, ce_fwd, false}) &&
    register_op_impl("cross_entropy_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accepts_ce, ce_bwd, false}) &&
    register_op_impl("bce_with_logits_forward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, bce_fwd, false}) &&
    register_op_impl("bce_with_logits_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, bce_bwd, false});

}  // namespace
}  // namespace benchhost::nn::cuda
