// embedding_forward / embedding_backward (dense) / embedding_backward_sparse on CUDA.
//
// ids i32/i64 [N], table [V, D], rows of D floats. Forward: one thread per output element; an
// id outside [0, V) writes zeros and sets a device flag that the forward reads back (one small
// synchronising copy) to throw InvalidArgument like the CPU. Backward scatter-adds dy rows with
// float atomicAdd (order of additions, hence the last bits, may vary run to run); out-of-range
// ids, already rejected by the forward, are skipped rather than written out of bounds. Sparse
// backward: the sorted unique rows come in (ops.cpp computes them on the host); each element
// finds its slot by binary search and atomically adds into the zeroed [n, D] output.

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

__device__ __forceinline__ std::int64_t id_at(const void* ids, bool is64, std::int64_t i) {
  return is64 ? static_cast<const std::int64_t*>(ids)[i] : static_cast<const std::int32_t*>(ids)[i];
}

__global__ void emb_fwd_kernel(const void* ids, bool is64, const float* __restrict__ table, float* __restrict__ out,
                               int* __restrict__ bad, std::int64_t N, std::int64_t V, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < N * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t id = id_at(ids, is64, i / D);
    if (id < 0 || id >= V) {
      out[i] = 0.0f;
      atomicExch(bad, 1);
    } else {
      out[i] = table[id * D + i % D];
    }
  }
}

__global__ void emb_bwd_kernel(const float* __restrict__ dy, const void* ids, bool is64, float* __restrict__ dtable,
                               std::int64_t N, std::int64_t V, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < N * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t id = id_at(ids, is64, i / D);
    if (id >= 0 && id < V) atomicAdd(dtable + id * D + i % D, dy[i]);
  }
}

__global__ void emb_sparse_kernel(const float* __restrict__ dy, const void* ids, bool is64,
                                  const std::int64_t* __restrict__ rows, std::int64_t n, float* __restrict__ out,
                                  std::int64_t N, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < N * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t id = id_at(ids, is64, i / D);
    std::int64_t lo = 0, hi = n;  // first rows[k] >= id
    while (lo < hi) {
      const std::int64_t mid = (lo + hi) / 2;
      if (rows[mid] < id) lo = mid + 1;
      else hi = mid;
    }
    if (lo < n && rows[lo] == id) atomicAdd(out + lo * D + i % D, dy[i]);
  }
}

std::string accepts(const OpCall& c) {
  if (std::string half = refuse_half(c); !half.empty()) return half;
  std::string why = require_cuda_contiguous(c.outputs);
  if (!why.empty()) return "output " + why;
  for (const Tensor& t : c.inputs)
    if (!t.device().is_cuda() || !t.is_contiguous()) return "needs contiguous cuda inputs";
  const Tensor& ids = c.inputs[0].dtype() == DType::f32 ? c.inputs[1] : c.inputs[0];
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64) return "ids must be i32 or i64";
  return {};
}

void fwd(OpCall& c) {
  const Tensor& ids = c.inputs[0];
  const Tensor& table = c.inputs[1];
  BH_CHECK_AS(InvalidArgument, table.dtype() == DType::f32, "embedding table must be f32");
  const std::int64_t N = ids.numel(), V = table.size(0), D = table.size(1);
  if (N * D == 0) return;
  set_device_of(table);
  Tensor bad = Tensor::zeros({1}, DType::i32, table.device());
  emb_fwd_kernel<<<grid_for(N * D), 256, 0, op_stream()>>>(ids.raw_data(), ids.dtype() == DType::i64, table.data<float>(),
                                                           c.outputs[0].data<float>(), static_cast<int*>(bad.raw_data()), N, V, D);
  BH_CHECK_CUDA_LAUNCH("emb_fwd_kernel");
  int flag = 0;
  BH_CHECK_CUDA(cudaMemcpyAsync(&flag, bad.raw_data(), sizeof(int), cudaMemcpyDeviceToHost, op_stream()));
  BH_CHECK_CUDA(cudaStreamSynchronize(op_stream()));
  BH_CHECK_AS(InvalidArgument, flag == 0, "an embedding id is out of range for a table of {} rows", V);
}

void bwd(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const Tensor& ids = c.inputs[1];
  Tensor& dt = c.outputs[0];
  const std::int64_t N = ids.numel(), V = dt.size(0), D = dt.size(1);
  BH_CHECK_AS(InvalidArgument, dy.dtype() == DType::f32 && dy.numel() == N * D, "embedding_backward: dy does not match ids x D");
  if (N * D == 0) return;
  set_device_of(dt);
  emb_bwd_kernel<<<grid_for(N * D), 256, 0, op_stream()>>>(dy.data<float>(), ids.raw_data(), ids.dtype() == DType::i64,
                                                           dt.data<float>(), N, V, D);
  BH_CHECK_CUDA_LAUNCH("emb_bwd_kernel");
}

void sparse(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const Tensor& ids = c.inputs[1];
  const Tensor& rows = c.inputs[2];
  Tensor& out = c.outputs[0];
  BH_CHECK_AS(InvalidArgument, rows.dtype() == DType::i64, "embedding_backward_sparse: rows must be i64");
  const std::int64_t N = ids.numel(), D = dy.size(-1), n = rows.numel();
  set_device_of(out);
  if (out.numel() > 0) BH_CHECK_CUDA(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), op_stream()));
  if (N * D == 0 || n == 0) return;
  emb_sparse_kernel<<<grid_for(N * D), 256, 0, op_stream()>>>(dy.data<float>(), ids.raw_data(), ids.dtype() == DType::i64,
                                                              rows.data<std::int64_t>(), n, out.data<float>(), N, D);
  BH_CHECK_CUDA_LAUNCH("emb_sparse_kernel");
}

const bool registered =
    register_op_impl("embedding_forward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accepts, fwd, false}) &&
    register_op_impl("embedding_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accepts, bwd, false}) &&
    register_op_impl("embedding_backward_sparse", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accepts, sparse, false});

}  // namespace
}  // namespace benchhost::nn::cuda
