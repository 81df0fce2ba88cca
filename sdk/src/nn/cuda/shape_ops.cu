// concat / split / permute on CUDA: materialising copies for any dtype.
//
// concat and split view every tensor as [outer, size(dim) * inner]: each piece is one strided
// 2-D copy (cudaMemcpy2DAsync: `outer` rows of the piece's run, pitched by the big tensor's
// row). permute is a gather: one thread per output element walks the permuted source strides
// (any strides, including 0 for expanded views; at most 8 dims), in element-size-typed loads.

#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/elementwise.hpp"
#include "nn/dtype_checks.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr int kMaxDims = 8;

struct StridedView {
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[kMaxDims];
  int dims;
};

template <class T>
__global__ void gather_kernel(const T* __restrict__ src, T* __restrict__ dst, StridedView v, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t rem = i, off = 0;
    for (int d = v.dims - 1; d >= 0; --d) {
      off += (rem % v.sizes[d]) * v.strides[d];
      rem /= v.sizes[d];
    }
    dst[i] = src[off];
  }
}

// pieces <-> big along dim: to_big copies pieces into big.
void concat_copy(std::vector<Tensor>& pieces, Tensor& big, std::int64_t dim, bool to_big) {
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < dim; ++d) outer *= big.size(d);
  if (big.numel() == 0) return;
  const std::size_t es = big.element_size();
  const std::int64_t big_row = big.numel() / outer;
  std::int64_t off = 0;
  set_device_of(big);
  for (Tensor& p : pieces) {
    BH_CHECK_AS(InvalidArgument, p.dtype() == big.dtype() && p.is_contiguous(), "concat/split: pieces must be contiguous {}",
                dtype_name(big.dtype()));
    const std::int64_t row = p.numel() / outer;
    if (row > 0) {
      char* b = static_cast<char*>(big.raw_data()) + off * es;
      char* q = static_cast<char*>(p.raw_data());
      const std::size_t width = static_cast<std::size_t>(row) * es, bp = static_cast<std::size_t>(big_row) * es;
      if (to_big)
        BH_CHECK_CUDA(cudaMemcpy2DAsync(b, bp, q, width, width, static_cast<std::size_t>(outer), cudaMemcpyDeviceToDevice, op_stream()));
      else
        BH_CHECK_CUDA(cudaMemcpy2DAsync(q, width, b, bp, width, static_cast<std::size_t>(outer), cudaMemcpyDeviceToDevice, op_stream()));
    }
    off += row;
  }
  BH_CHECK_AS(InvalidArgument, off == big_row, "concat/split: piece sizes do not add up to {}", shape_str(big.shape()));
}

std::int64_t norm_dim(std::int64_t d, std::int64_t n) { return d < 0 ? d + n : d; }

std::string accepts_cuda(const OpCall& c) {
  for (const auto* list : {&c.inputs, &c.outputs})
    for (const Tensor& t : *list)
      if (t.defined() && !t.device().is_cuda()) return "needs cuda tensors";
  for (const Tensor& t : c.outputs)
    if (t.defined() && !t.is_contiguous()) return "needs contiguous outputs";
  return mixed_dtype_refusal(c);  // byte copies: any one dtype
}
std::string accepts_contig(const OpCall& c) {
  std::string why = accepts_cuda(c);
  if (!why.empty()) return why;
  for (const Tensor& t : c.inputs)
    if (!t.is_contiguous()) return "needs contiguous inputs";
  return {};
}

void concat_run(OpCall& c) {
  concat_copy(c.inputs, c.outputs[0], norm_dim(c.attrs.get_int("dim", 0), c.outputs[0].dim()), true);
}
void split_run(OpCall& c) {
  concat_copy(c.outputs, c.inputs[0], norm_dim(c.attrs.get_int("dim", 0), c.inputs[0].dim()), false);
}
void permute_run(OpCall& c) { strided_copy(c.inputs[0].permute(c.attrs.get_ints("order")), c.outputs[0]); }

const bool registered =
    register_op_impl("concat", OpImpl{"cuda.memcpy2d", DeviceType::cuda, 50, accepts_contig, concat_run, false}) &&
    register_op_impl("split", OpImpl{"cuda.memcpy2d", DeviceType::cuda, 50, accepts_contig, split_run, false}) &&
    register_op_impl("permute", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accepts_cuda, permute_run, false});

}  // namespace

void strided_copy(const Tensor& src, Tensor& dst) {
  BH_CHECK_AS(InvalidArgument, src.shape() == dst.shape() && src.dtype() == dst.dtype() && dst.is_contiguous(),
              "strided copy into a tensor of another shape or dtype");
  const std::int64_t n = src.numel();
  if (n == 0) return;
  BH_CHECK_AS(Unsupported, src.dim() <= kMaxDims, "cuda permute handles at most {} dims, got {}", kMaxDims, src.dim());
  StridedView v{};
  v.dims = static_cast<int>(src.dim());
  for (int d = 0; d < v.dims; ++d) {
    v.sizes[d] = src.size(d);
    v.strides[d] = src.strides()[static_cast<std::size_t>(d)];
  }
  set_device_of(src);
  const unsigned grid = grid_for(n);
  switch (src.element_size()) {
    case 1: gather_kernel<<<grid, 256, 0, op_stream()>>>(static_cast<const std::uint8_t*>(src.raw_data()), static_cast<std::uint8_t*>(dst.raw_data()), v, n); break;
    case 2: gather_kernel<<<grid, 256, 0, op_stream()>>>(static_cast<const std::uint16_t*>(src.raw_data()), static_cast<std::uint16_t*>(dst.raw_data()), v, n); break;
    case 4: gather_kernel<<<grid, 256, 0, op_stream()>>>(static_cast<const std::uint32_t*>(src.raw_data()), static_cast<std::uint32_t*>(dst.raw_data()), v, n); break;
    case 8: gather_kernel<<<grid, 256, 0, op_stream()>>>(static_cast<const std::uint64_t*>(src.raw_data()), static_cast<std::uint64_t*>(dst.raw_data()), v, n); break;
    default: BH_THROW(Unsupported, "cuda permute of {}-byte elements", src.element_size());
  }
  BH_CHECK_CUDA_LAUNCH("gather_kernel");
}

}  // namespace benchhost::nn::cuda
