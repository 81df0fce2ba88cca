// Reductions on CUDA: bias_backward (column sums), sum / mean over dims, amax over one dim and
// its backward.
//
// bias_backward: db (+)= sum over rows of g [R, C], deterministic two-pass column sums
// (column_partial_kernel / column_finish_kernel in cuda_common.hpp). sum/mean: the kept dims
// are moved to the front (one strided gather when the reduced dims are not innermost), then
// one block per output element sums its contiguous run in fp64 with a fixed-order tree (runs
// longer than 16K elements: per-chunk partial sums first, then the chunks in order).
// amax: [outer, n, inner] view, one thread per output; ties pick the first index and NaN
// propagates, as on the CPU. amax_backward writes dy at the arg-max and 0 elsewhere (an index
// outside [0, n) writes nothing there: the CPU throws, a kernel cannot).

#include <numeric>

#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/elementwise.hpp"

namespace benchhost::nn::cuda {
namespace {

struct RowMajor {
  const float* g;
  std::int64_t C;
  __device__ float operator()(std::int64_t r, std::int64_t j) const { return g[r * C + j]; }
};

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t rows,
                               std::int64_t count, double div) {
  __shared__ double scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double s = 0.0;
    for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) s += x[r * count + j];
    s = group_reduce<256>(s, SumOp{}, scratch);
    if (threadIdx.x == 0) out[r] = static_cast<float>(s / div);
  }
}

// Long rows (count > kRowChunk): pass 1 sums fixed chunks of each row (one block per chunk and
// row), pass 2 adds a row's chunks in order; deterministic like the one-block-per-row path.
constexpr std::int64_t kRowChunk = 16384;

__global__ void row_partial_kernel(const float* __restrict__ x, double* __restrict__ part, std::int64_t rows,
                                   std::int64_t count, std::int64_t chunks) {
  __shared__ double scratch[32];
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kRowChunk;
  const std::int64_t c1 = c0 + kRowChunk < count ? c0 + kRowChunk : count;
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    double s = 0.0;
    for (std::int64_t j = c0 + threadIdx.x; j < c1; j += blockDim.x) s += x[r * count + j];
    s = group_reduce<256>(s, SumOp{}, scratch);
    if (threadIdx.x == 0) part[r * chunks + blockIdx.x] = s;
  }
}

__global__ void row_finish_kernel(const double* __restrict__ part, float* __restrict__ out, std::int64_t rows,
                                  std::int64_t chunks, double div) {
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (std::int64_t k = 0; k < chunks; ++k) s += part[r * chunks + k];
    out[r] = static_cast<float>(s / div);
  }
}

__global__ void amax_kernel(const float* __restrict__ x, float* __restrict__ val, std::int64_t* __restrict__ idx,
                            std::int64_t outer, std::int64_t n, std::int64_t inner) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < outer * inner;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t o = i / inner, in = i % inner;
    float best = x[o * n * inner + in];
    std::int64_t bi = 0;
    for (std::int64_t k = 1; k < n && !isnan(best); ++k) {
      const float v = x[(o * n + k) * inner + in];
      if (v > best || isnan(v)) {
        best = v;
        bi = k;
      }
    }
    val[i] = best;
    idx[i] = bi;
  }
}

__global__ void amax_bwd_kernel(const float* __restrict__ dy, const std::int64_t* __restrict__ idx, float* __restrict__ dx,
                                std::int64_t outer, std::int64_t n, std::int64_t inner) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < outer * n * inner;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t in = i % inner, k = (i / inner) % n, o = i / (inner * n);
    dx[i] = idx[o * inner + in] == k ? dy[o * inner + in] : 0.0f;
  }
}

void bias_bwd(OpCall& c) {
  const Tensor& g = c.inputs[0];
  Tensor& db = c.outputs[0];
  const std::int64_t C = g.dim() == 0 ? 1 : g.size(-1), R = rows_of(g);
  BH_CHECK_AS(InvalidArgument, db.numel() == C, "bias_backward: db has {} elements for {} columns", db.numel(), C);
  const bool acc = c.attrs.get_bool("accumulate");
  if (C == 0) return;
  set_device_of(g);
  if (R == 0) {
    if (!acc) BH_CHECK_CUDA(cudaMemsetAsync(db.raw_data(), 0, db.nbytes(), op_stream()));
    return;
  }
  const std::int64_t per = column_rows_per_chunk(R);
  const std::int64_t chunks = (R + per - 1) / per;
  Tensor partial = Tensor::empty({chunks, C}, DType::f32, g.device());
  const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(chunks));
  column_partial_kernel<<<grid, dim3(32, 8), 0, op_stream()>>>(RowMajor{g.data<float>(), C}, partial.data<float>(), R, C, per);
  BH_CHECK_CUDA_LAUNCH("column_partial_kernel");
  column_finish_kernel<<<grid_for(C), 256, 0, op_stream()>>>(partial.data<float>(), db.data<float>(), C, chunks, acc);
  BH_CHECK_CUDA_LAUNCH("column_finish_kernel");
}

void sum_run(OpCall& c) {
  const Tensor& x = c.inputs[0];
  std::vector<bool> red(static_cast<std::size_t>(x.dim()), c.attrs.get_ints("dims").empty());
  for (auto d : c.attrs.get_ints("dims")) {
    const std::int64_t dd = d < 0 ? d + x.dim() : d;
    BH_CHECK_AS(InvalidArgument, dd >= 0 && dd < x.dim(), "reduction dim {} out of range for a {}-d tensor", d, x.dim());
    red[static_cast<std::size_t>(dd)] = true;
  }
  std::vector<std::int64_t> order;
  std::int64_t count = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (!red[static_cast<std::size_t>(d)]) order.push_back(d);
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (red[static_cast<std::size_t>(d)]) {
      order.push_back(d);
      count *= x.size(d);
    }
  Tensor& out = c.outputs[0];
  const std::int64_t rows = out.numel();
  if (rows == 0) return;
  set_device_of(x);
  Tensor src = x;
  std::vector<std::int64_t> identity(order.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (order != identity) {
    Tensor view = x.permute(order);
    src = Tensor::empty(view.shape(), DType::f32, x.device());
    strided_copy(view, src);
  }
  const double div = c.attrs.get_bool("mean") ? static_cast<double>(count) : 1.0;
  if (count > kRowChunk) {
    const std::int64_t chunks = (count + kRowChunk - 1) / kRowChunk;
    Tensor part = Tensor::empty({rows, chunks}, DType::f64, x.device());
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)));
    row_partial_kernel<<<grid, 256, 0, op_stream()>>>(src.data<float>(), static_cast<double*>(part.raw_data()), rows,
                                                      count, chunks);
    BH_CHECK_CUDA_LAUNCH("row_partial_kernel");
    row_finish_kernel<<<grid_for(rows), 256, 0, op_stream()>>>(static_cast<const double*>(part.raw_data()),
                                                               out.data<float>(), rows, chunks, div);
    BH_CHECK_CUDA_LAUNCH("row_finish_kernel");
    return;
  }
  row_sum_kernel<<<static_cast<unsigned>(std::min<std::int64_t>(rows, 65535LL * 32)), 256, 0, op_stream()>>>(
      src.data<float>(), out.data<float>(), rows, count, div);
  BH_CHECK_CUDA_LAUNCH("row_sum_kernel");
}

void dims_of(const Shape& shape, std::int64_t dim, std::int64_t& outer, std::int64_t& n, std::int64_t& inner) {
  n = shape[static_cast<std::size_t>(dim)];
  inner = std::accumulate(shape.begin() + dim + 1, shape.end(), std::int64_t{1}, std::multiplies<>());
  outer = std::accumulate(shape.begin(), shape.begin() + dim, std::int64_t{1}, std::multiplies<>());
}

void amax_run(OpCall& c) {
  const Tensor& x = c.inputs[0];
  std::int64_t dim = c.attrs.get_int("dim", -1);
  if (dim < 0) dim += x.dim();
  BH_CHECK_AS(InvalidArgument, dim >= 0 && dim < x.dim(), "amax dim out of range for a {}-d tensor", x.dim());
  std::int64_t outer, n, inner;
  dims_of(x.shape(), dim, outer, n, inner);
  BH_CHECK_AS(InvalidArgument, n > 0, "amax over an empty dim");
  if (outer * inner == 0) return;
  set_device_of(x);
  amax_kernel<<<grid_for(outer * inner), 256, 0, op_stream()>>>(x.data<float>(), c.outputs[0].data<float>(),
                                                                 c.outputs[1].data<std::int64_t>(), outer, n, inner);
  BH_CHECK_CUDA_LAUNCH("amax_kernel");
}

void amax_bwd_run(OpCall& c) {
  Tensor& dx = c.outputs[0];
  std::int64_t dim = c.attrs.get_int("dim", -1);
  if (dim < 0) dim += dx.dim();
  BH_CHECK_AS(InvalidArgument, dim >= 0 && dim < dx.dim(), "amax_backward dim out of range for a {}-d tensor", dx.dim());
  std::int64_t outer, n, inner;
  dims_of(dx.shape(), dim, outer, n, inner);
  if (dx.numel() == 0) return;
  set_device_of(dx);
  amax_bwd_kernel<<<grid_for(dx.numel()), 256, 0, op_stream()>>>(c.inputs[0].data<float>(), c.inputs[1].data<std::int64_t>(),
                                                                  dx.data<float>(), outer, n, inner);
  BH_CHECK_CUDA_LAUNCH("amax_bwd_kernel");
}

std::string accept_x(const OpCall& c) {
  std::string why = require_cuda_contiguous({c.inputs[0], c.outputs[0]});
  if (!why.empty()) return why;
  return c.outputs.size() > 1 ? require_cuda_contiguous({c.outputs[1]}, DType::i64) : std::string();
}
std::string accept_amax_bwd(const OpCall& c) {
  std::string why = require_cuda_contiguous({c.inputs[0], c.outputs[0]});
  return why.empty() ? require_cuda_contiguous({c.inputs[1]}, DType::i64) : why;
}

const bool registered =
    register_op_impl("bias_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_cuda_f32, bias_bwd, false}) &&
    register_op_impl("sum", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_x, sum_run, false}) &&
    register_op_impl("amax", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_x, amax_run, false}) &&
    register_op_impl("amax_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_amax_bwd, amax_bwd_run, false});

}  // namespace
}  // namespace benchhost::nn::cuda
