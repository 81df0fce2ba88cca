// transducer_loss_forward / transducer_loss_backward on CUDA (formulas and op signatures of
// nn/transducer.hpp and nn/transducer_common.hpp; the CPU versions are nn/cpu/transducer.cpp).
//
// Layout: row r = (b T + t)(U+1) + u of the logits holds V contiguous classes and indexes the
// lattices lse, alpha, beta [B, T, U+1], which are f64 (Note [Transducer lattice precision] in
// nn/transducer.hpp); per-class work is f32 (expf). Four kernels:
//   lse_kernel    one warp per row: max and sum of expf over V (warp shuffles), lse = m + log s;
//                 rows outside an utterance's lattice get 0.
//   alpha_kernel  one block per utterance walking the anti-diagonals t + u = n in order (a
//                 __syncthreads between diagonals: every node of diagonal n reads only nodes of
//                 n - 1); the threads of the block stride over u. Writes alpha (0 outside the
//                 lattice) and the utterance's loss.
//   beta_kernel   the same walk backwards from (T_b - 1, U_b) into f32 [B, T, U+1] scratch, and
//                 ll[b] = beta(0, 0).
//   grad_kernel   one block per row, threads over V: occupancy-weighted softmax minus the two
//                 edge terms (Note [Transducer loss saved state] in nn/transducer.hpp); zero rows
//                 outside the lattice.
// Lengths and labels are read on the device; the Tensor-level functions check them on the host
// before the forward (nn/transducer.cpp). Deterministic: no atomics.
// Not yet run on a GPU.

#include <cmath>

#include "nn/cuda/cuda_common.hpp"
#include "nn/transducer_common.hpp"

namespace benchhost::nn::cuda {
namespace {

using transducer::Dims;

constexpr int kRowsPerBlock = 8;  // lse_kernel: one warp per row
constexpr int kLatticeThreads = 256;
constexpr int kGradThreads = 256;

struct Lattice {
  std::int64_t B, T, U1, V, blank;
  const std::int32_t* labels;  // [B, U1 - 1], null when U1 == 1
  const std::int32_t* frames;  // [B]
  const std::int32_t* label_counts;
  __device__ std::int64_t row(std::int64_t b, std::int64_t t, std::int64_t u) const { return (b * T + t) * U1 + u; }
  __device__ std::int32_t label(std::int64_t b, std::int64_t u) const { return labels[b * (U1 - 1) + u]; }
};

Lattice lattice_of(const Dims& d, const OpCall& call) {
  return {d.B,
          d.T,
          d.U1,
          d.V,
          d.blank,
          d.U() > 0 ? call.inputs[1].data<std::int32_t>() : nullptr,
          call.inputs[2].data<std::int32_t>(),
          call.inputs[3].data<std::int32_t>()};
}

__device__ __forceinline__ double log_add(double a, double b) {
  if (a < b) {
    const double c = a;
    a = b;
    b = c;
  }
  if (b == -INFINITY) return a;
  return a + log1p(exp(b - a));
}

__global__ void __launch_bounds__(kRowsPerBlock * 32)
lse_kernel(const float* __restrict__ z, Lattice g, double* __restrict__ lse) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t rows = g.B * g.T * g.U1;
  bool valid = false;
  if (r < rows) {
    const std::int64_t u = r % g.U1, t = (r / g.U1) % g.T, b = r / (g.U1 * g.T);
    valid = t < g.frames[b] && u <= g.label_counts[b];
  }
  float m = 0.0f, s = 0.0f;
  row_max_sumexp<32>(z + (valid ? r * g.V : 0), g.V, lane, valid, static_cast<float*>(nullptr), m, s);
  if (r < rows && lane == 0) lse[r] = valid ? static_cast<double>(m) + log(static_cast<double>(s)) : 0.0;
}

__global__ void __launch_bounds__(kLatticeThreads)
alpha_kernel(const float* __restrict__ z, const double* __restrict__ lse, Lattice g, double* __restrict__ alpha,
             float* __restrict__ loss) {
  const std::int64_t b = blockIdx.x;
  const std::int64_t tb = g.frames[b], ub = g.label_counts[b];
  for (std::int64_t i = threadIdx.x; i < g.T * g.U1; i += blockDim.x) {
    const std::int64_t t = i / g.U1, u = i % g.U1;
    if (t >= tb || u > ub) alpha[g.row(b, t, u)] = 0.0;
  }
  auto lp = [&](std::int64_t t, std::int64_t u, std::int64_t k) {
    const std::int64_t r = g.row(b, t, u);
    return static_cast<double>(z[r * g.V + k]) - lse[r];
  };
  for (std::int64_t n = 0; n < tb + ub; ++n) {
    for (std::int64_t u = threadIdx.x; u <= ub; u += blockDim.x) {
      const std::int64_t t = n - u;
      if (t < 0 || t >= tb) continue;
      double a = -INFINITY;
      if (t == 0 && u == 0) a = 0.0;
      if (t > 0) a = log_add(a, alpha[g.row(b, t - 1, u)] + lp(t - 1, u, g.blank));
      if (u > 0) a = log_add(a, alpha[g.row(b, t, u - 1)] + lp(t, u - 1, g.label(b, u - 1)));
      alpha[g.row(b, t, u)] = a;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    loss[b] = tb == 0 ? 0.0f : static_cast<float>(-(alpha[g.row(b, tb - 1, ub)] + lp(tb - 1, ub, g.blank)));
}

__global__ void __launch_bounds__(kLatticeThreads)
beta_kernel(const float* __restrict__ z, const double* __restrict__ lse, Lattice g, double* __restrict__ beta,
            double* __restrict__ ll) {
  const std::int64_t b = blockIdx.x;
  const std::int64_t tb = g.frames[b], ub = g.label_counts[b];
  auto lp = [&](std::int64_t t, std::int64_t u, std::int64_t k) {
    const std::int64_t r = g.row(b, t, u);
    return static_cast<double>(z[r * g.V + k]) - lse[r];
  };
  for (std::int64_t n = tb + ub - 1; n >= 0; --n) {
    for (std::int64_t u = threadIdx.x; u <= ub; u += blockDim.x) {
      const std::int64_t t = n - u;
      if (t < 0 || t >= tb) continue;
      double v = -INFINITY;
      if (t == tb - 1 && u == ub) v = lp(t, u, g.blank);
      if (t < tb - 1) v = log_add(v, beta[g.row(b, t + 1, u)] + lp(t, u, g.blank));
      if (u < ub) v = log_add(v, beta[g.row(b, t, u + 1)] + lp(t, u, g.label(b, u)));
      beta[g.row(b, t, u)] = v;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ll[b] = tb == 0 ? 0.0 : beta[g.row(b, 0, 0)];
}

__global__ void __launch_bounds__(kGradThreads)
grad_kernel(const float* __restrict__ z, const double* __restrict__ lse, const double* __restrict__ alpha,
            const double* __restrict__ beta, const double* __restrict__ ll, const float* __restrict__ dloss,
            std::int64_t dloss_n, float scale, Lattice g, float* __restrict__ dz) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t u = r % g.U1, t = (r / g.U1) % g.T, b = r / (g.U1 * g.T);
  const std::int64_t tb = g.frames[b], ub = g.label_counts[b];
  const float* zr = z + r * g.V;
  float* gr = dz + r * g.V;
  if (t >= tb || u > ub) {
    for (std::int64_t k = threadIdx.x; k < g.V; k += blockDim.x) gr[k] = 0.0f;
    return;
  }
  const float s = scale * dloss[dloss_n > 1 ? b : 0];
  const double a = alpha[r], llb = ll[b], l = lse[r];
  const float c = static_cast<float>(a + beta[r] - llb - l);  // formed in f64: the terms nearly cancel
  // The edge terms: leaving by blank (to (t+1, u), or the final blank) and by label y_{u+1}.
  float edge_blank = 0.0f, edge_label = 0.0f;
  std::int64_t y = -1;
  if (t < tb - 1) edge_blank = static_cast<float>(exp(a + zr[g.blank] - l + beta[g.row(b, t + 1, u)] - llb));
  else if (u == ub) edge_blank = static_cast<float>(exp(a + zr[g.blank] - l - llb));
  if (u < ub) {
    y = g.label(b, u);
    edge_label = static_cast<float>(exp(a + zr[y] - l + beta[r + 1] - llb));
  }
  for (std::int64_t k = threadIdx.x; k < g.V; k += blockDim.x) {
    float v = expf(zr[k] + c);
    if (k == g.blank) v -= edge_blank;
    if (k == y) v -= edge_label;
    gr[k] = s * v;
  }
}

std::string accepts(const OpCall& c) {
  for (const auto* list : {&c.inputs, &c.outputs})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string why = require_cuda_contiguous({(*list)[i]}, transducer::expected_dtype(list == &c.inputs, i));
      if (!why.empty()) return fmt::format("{} {}: {}", list == &c.inputs ? "input" : "output", i, why);
    }
  return {};
}

Dims dims_of(const OpCall& call, const char* op) {
  const Dims d = transducer::check_shapes(call.inputs[0], call.inputs[1], call.inputs[2], call.inputs[3],
                                          call.attrs.get_int("blank", -1), op);
  BH_CHECK_AS(InvalidArgument, d.B <= 2147483647LL && d.rows() <= 2147483647LL,
              "{} (cuda): {} utterances and {} lattice rows exceed the kernels' grids", op, d.B, d.rows());
  return d;
}

void fwd(OpCall& call) {
  const Dims d = dims_of(call, "transducer_loss_forward");
  set_device_of(call.inputs[0]);
  if (d.rows() == 0) {  // T = 0: every utterance is empty, loss 0
    BH_CHECK_CUDA(cudaMemsetAsync(call.outputs[0].raw_data(), 0, static_cast<std::size_t>(d.B) * sizeof(float),
                                  op_stream()));
    return;
  }
  const Lattice g = lattice_of(d, call);
  const float* z = call.inputs[0].data<float>();
  double* lse = call.outputs[1].data<double>();
  const auto blocks = static_cast<unsigned>((d.rows() + kRowsPerBlock - 1) / kRowsPerBlock);
  lse_kernel<<<blocks, kRowsPerBlock * 32, 0, op_stream()>>>(z, g, lse);
  BH_CHECK_CUDA_LAUNCH("transducer lse_kernel");
  alpha_kernel<<<static_cast<unsigned>(d.B), kLatticeThreads, 0, op_stream()>>>(
      z, lse, g, call.outputs[2].data<double>(), call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("transducer alpha_kernel");
}

void bwd(OpCall& call) {
  const Dims d = dims_of(call, "transducer_loss_backward");
  if (d.rows() == 0 || d.V == 0) return;
  set_device_of(call.inputs[0]);
  const Lattice g = lattice_of(d, call);
  const Device dev = call.inputs[0].device();
  Tensor beta = Tensor::empty({d.rows()}, DType::f64, dev), ll = Tensor::empty({d.B}, DType::f64, dev);
  const float* z = call.inputs[0].data<float>();
  const double* lse = call.inputs[4].data<double>();
  beta_kernel<<<static_cast<unsigned>(d.B), kLatticeThreads, 0, op_stream()>>>(z, lse, g, beta.data<double>(),
                                                                              ll.data<double>());
  BH_CHECK_CUDA_LAUNCH("transducer beta_kernel");
  grad_kernel<<<static_cast<unsigned>(d.rows()), kGradThreads, 0, op_stream()>>>(
      z, lse, call.inputs[5].data<double>(), beta.data<double>(), ll.data<double>(), call.inputs[6].data<float>(),
      call.inputs[6].numel(), static_cast<float>(call.attrs.get("scale", 1.0)), g, call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("transducer grad_kernel");
}

const bool registered =
    register_op_impl("transducer_loss_forward", cuda_impl("cuda.kernel", 50, fwd, accepts)) &&
    register_op_impl("transducer_loss_backward", cuda_impl("cuda.kernel", 50, bwd, accepts));

}  // namespace
}  // namespace benchhost::nn::cuda
