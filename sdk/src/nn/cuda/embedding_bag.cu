// CUDA embedding bags: embedding_bag_forward (gather + sum/mean pool) and embedding_bag_backward
// (sparse: the gradient goes to the looked-up rows only, which are reported unique and
// ascending). Contracts: sdk/include/benchhost/nn/embedding_bag.hpp and
// sdk/src/nn/cpu/embedding_bag.cpp.
//
// Layout and precision: weight f32 [R, D] and out/dout f32 [B, D] contiguous on the device;
// indices i32 or i64 ([B, H] fixed hotness, or [N] with i64 offsets [B + 1]) on the same
// device. Forward: one block per bag, threads over D, the bag's rows added in index order in
// f32 (the CPU's order, so results match it bit for bit). Backward: positions sorted by row
// with a CUB radix sort (stable: positions ascending within a row), runs of equal rows found
// with a run-length encode; one block per unique row then adds its bags' gradients in position
// order into grad_weight: no atomics, deterministic, identical to the CPU's sums.
//
// Validation: a row id outside [0, R) or malformed offsets throw InvalidArgument like the CPU.
// The kernels record the first problem in a small device status block, which the op reads back
// (one synchronisation per call); the backward checks before it writes any gradient.

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include "benchhost/nn/embedding_bag.hpp"
// BH_CHECK_AS/BH_THROW messages here avoid "[" before a string argument: nvcc's front end
// rejects fmt's compile-time check of such format strings.
#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

// Problem codes written into Status::code (first writer wins).
constexpr unsigned long long kBadRow = 1, kBadOffsets = 2;

struct Status {
  unsigned long long code;
  long long position;
  long long value;
};

struct Bags {
  const void* idx = nullptr;
  bool idx64 = false;
  const std::int64_t* offsets = nullptr;  // null: fixed hotness
  std::int64_t hotness = 0, bags = 0, total = 0, rows = 0;

  __device__ std::int64_t begin(std::int64_t b) const { return offsets ? offsets[b] : b * hotness; }
  __device__ std::int64_t end(std::int64_t b) const { return offsets ? offsets[b + 1] : (b + 1) * hotness; }
  __device__ std::int64_t row(std::int64_t p) const {
    return idx64 ? static_cast<const std::int64_t*>(idx)[p] : static_cast<const std::int32_t*>(idx)[p];
  }
  // The bag holding position p: the last b with begin(b) <= p (empty bags are skipped because
  // their begin equals the next bag's).
  __device__ std::int64_t bag_of(std::int64_t p) const {
    if (!offsets) return p / hotness;
    std::int64_t lo = 0, hi = bags;  // answer in [lo, hi)
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (offsets[mid] <= p) lo = mid; else hi = mid;
    }
    return lo;
  }
};

__device__ void report(Status* st, unsigned long long code, long long position, long long value) {
  if (atomicCAS(&st->code, 0ull, code) == 0ull) {
    st->position = position;
    st->value = value;
  }
}

__global__ void check_offsets(Bags g, Status* st) {
  if (g.bags == 0 && blockIdx.x == 0 && threadIdx.x == 0 && (g.offsets[0] != 0 || g.total != 0))
    report(st, kBadOffsets, 0, g.offsets[0]);
  for (std::int64_t b = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; b < g.bags;
       b += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (b == 0 && g.offsets[0] != 0) report(st, kBadOffsets, 0, g.offsets[0]);
    if (b == g.bags - 1 && g.offsets[g.bags] != g.total) report(st, kBadOffsets, g.bags, g.offsets[g.bags]);
    if (g.offsets[b] > g.offsets[b + 1]) report(st, kBadOffsets, b + 1, g.offsets[b + 1]);
  }
}

__global__ void forward_kernel(Bags g, const float* weight, std::int64_t dim, bool mean, float* out,
                               Status* st) {
  for (std::int64_t b = blockIdx.x; b < g.bags; b += gridDim.x) {
    const std::int64_t lo = g.begin(b), hi = g.end(b);
    const bool valid_bag = lo >= 0 && hi <= g.total && lo <= hi;  // offsets are checked separately
    for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0.0f;
      if (valid_bag)
        for (std::int64_t p = lo; p < hi; ++p) {
          const std::int64_t r = g.row(p);
          if (r < 0 || r >= g.rows) {
            if (d == 0) report(st, kBadRow, p, r);
            continue;
          }
          acc += weight[r * dim + d];
        }
      if (mean && valid_bag && hi > lo) acc *= 1.0f / static_cast<float>(hi - lo);
      out[b * dim + d] = acc;
    }
  }
}

// keys[p] = row id (validated), values[p] = p.
__global__ void make_keys(Bags g, unsigned long long* keys, std::int32_t* positions, Status* st) {
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < g.total;
       p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = g.row(p);
    if (r < 0 || r >= g.rows) report(st, kBadRow, p, r);
    keys[p] = (r < 0 || r >= g.rows) ? 0ull : static_cast<unsigned long long>(r);
    positions[p] = static_cast<std::int32_t>(p);
  }
}

// One block per unique row u: grad[row_u] += sum over its positions (ascending) of scale * dout[bag].
__global__ void scatter_rows(Bags g, const std::int64_t* unique_rows, const std::int32_t* run_lengths,
                             const std::int32_t* run_starts, const std::int32_t* num_runs,
                             const std::int32_t* order, const float* dout, std::int64_t dim,
                             bool mean, float* grad) {
  const std::int64_t runs = *num_runs;
  for (std::int64_t u = blockIdx.x; u < runs; u += gridDim.x) {
    float* dst = grad + unique_rows[u] * dim;
    const std::int64_t s0 = run_starts[u], s1 = s0 + run_lengths[u];
    for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = dst[d];
      for (std::int64_t i = s0; i < s1; ++i) {
        const std::int64_t b = g.bag_of(order[i]);
        const float v = dout[b * dim + d];
        if (mean) {
          const float s = 1.0f / static_cast<float>(g.end(b) - g.begin(b));
          acc += s * v;
        } else {
          acc += v;
        }
      }
      dst[d] = acc;
    }
  }
}

// rows_out[i] = unique_rows[i] for i < U, else -1; count_out[0] = U.
__global__ void write_rows(const std::int64_t* unique_rows, const std::int32_t* num_runs,
                           std::int64_t n, std::int64_t* rows_out, std::int64_t* count_out) {
  const std::int64_t runs = *num_runs;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    rows_out[i] = i < runs ? unique_rows[i] : -1;
  if (blockIdx.x == 0 && threadIdx.x == 0) *count_out = runs;
}

Bags make_bags(const Tensor& indices, const Tensor& offsets, std::int64_t rows) {
  BH_CHECK_AS(InvalidArgument, indices.defined(), "embedding bag: indices are undefined");
  BH_CHECK_AS(InvalidArgument, indices.dtype() == DType::i32 || indices.dtype() == DType::i64,
              "embedding bag: indices must be i32 or i64, got {}", indices.describe());
  Bags g;
  g.idx = indices.raw_data();
  g.idx64 = indices.dtype() == DType::i64;
  g.total = indices.numel();
  g.rows = rows;
  if (!offsets.defined()) {
    BH_CHECK_AS(InvalidArgument, indices.dim() == 2,
                "embedding bag: without offsets, indices must be [bags, hotness], got {}",
                indices.describe());
    g.bags = indices.size(0);
    g.hotness = indices.size(1);
    return g;
  }
  BH_CHECK_AS(InvalidArgument, indices.dim() == 1,
              "embedding bag: with offsets, indices must be 1-D, got {}", indices.describe());
  BH_CHECK_AS(InvalidArgument,
              offsets.dtype() == DType::i64 && offsets.dim() == 1 && offsets.numel() >= 1,
              "embedding bag: offsets must be i64 [bags + 1], got {}", offsets.describe());
  g.offsets = offsets.data<std::int64_t>();
  g.bags = offsets.numel() - 1;
  return g;
}

Tensor new_status(const Tensor& like) {
  Tensor st = Tensor::empty({3}, DType::i64, like.device());
  BH_CHECK_CUDA(cudaMemsetAsync(st.raw_data(), 0, sizeof(Status), op_stream()));
  return st;
}

// Reads the status block back (synchronising the stream) and throws on a recorded problem.
void throw_on_status(const Tensor& st, const Bags& g, const char* op) {
  Status host{};
  BH_CHECK_CUDA(cudaMemcpyAsync(&host, st.raw_data(), sizeof(Status), cudaMemcpyDeviceToHost, op_stream()));
  BH_CHECK_CUDA(cudaStreamSynchronize(op_stream()));
  if (host.code == kBadRow)
    BH_THROW(InvalidArgument, "{}: row id {} at position {} is outside the table [0, {})", op,
             host.value, host.position, g.rows);
  if (host.code == kBadOffsets)
    BH_THROW(InvalidArgument,
             "{}: offsets must start at 0, not decrease and end at the number of indices ({}); "
             "offsets[{}] = {}",
             op, g.total, host.position, host.value);
}

void check_matrix(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined() && t.dtype() == DType::f32 && t.dim() == 2 && t.is_contiguous(),
              "{}: {} must be a contiguous f32 matrix, got {}", op, what,
              t.defined() ? t.describe() : std::string("undefined"));
}

bool mean_pooling(const OpCall& c) { return c.attrs.get_int("pooling", 0) != 0; }

// inputs {weight, indices, offsets?}; outputs {out}
void forward(OpCall& call) {
  const Tensor& weight = call.inputs.at(0);
  Tensor& out = call.outputs.at(0);
  check_matrix(weight, "embedding_bag_forward", "weight");
  check_matrix(out, "embedding_bag_forward", "out");
  const Bags g = make_bags(call.inputs.at(1), call.inputs.at(2), weight.size(0));
  const std::int64_t dim = weight.size(1);
  BH_CHECK_AS(InvalidArgument, out.size(0) == g.bags && out.size(1) == dim,
              "embedding bag: out must be [{}, {}], got {}", g.bags, dim, out.describe());
  set_device_of(weight);
  Tensor st = new_status(weight);
  auto* status = static_cast<Status*>(st.raw_data());
  if (g.offsets != nullptr) {
    check_offsets<<<grid_for(g.bags), 256, 0, op_stream()>>>(g, status);
    BH_CHECK_CUDA_LAUNCH("embedding_bag check_offsets");
  }
  if (g.bags > 0 && dim > 0) {
    const unsigned threads = dim >= 256 ? 256 : static_cast<unsigned>((dim + 31) / 32 * 32);
    const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(g.bags, 65535LL * 16));
    forward_kernel<<<blocks, threads, 0, op_stream()>>>(g, weight.data<float>(), dim,
                                                        mean_pooling(call), out.data<float>(), status);
    BH_CHECK_CUDA_LAUNCH("embedding_bag forward");
  }
  throw_on_status(st, g, "embedding bag");
}

// inputs {dout, indices, offsets?}; outputs {grad_weight +=, rows i64 [N], count i64 [1]}
void backward(OpCall& call) {
  const Tensor& dout = call.inputs.at(0);
  Tensor& grad = call.outputs.at(0);
  Tensor& rows_out = call.outputs.at(1);
  Tensor& count_out = call.outputs.at(2);
  check_matrix(dout, "embedding_bag_backward", "dout");
  check_matrix(grad, "embedding_bag_backward", "grad_weight");
  const Bags g = make_bags(call.inputs.at(1), call.inputs.at(2), grad.size(0));
  const std::int64_t dim = grad.size(1), n = g.total;
  BH_CHECK_AS(InvalidArgument, dout.size(0) == g.bags && dout.size(1) == dim,
              "embedding bag backward: dout must be [{}, {}], got {}", g.bags, dim, dout.describe());
  BH_CHECK_AS(InvalidArgument,
              rows_out.dtype() == DType::i64 && rows_out.numel() == n && rows_out.is_contiguous() &&
                  count_out.dtype() == DType::i64 && count_out.numel() == 1,
              "embedding bag backward: rows must be i64 [{}] and count i64 [1], got {} and {}", n,
              rows_out.describe(), count_out.describe());
  BH_CHECK_AS(Unsupported, n < (std::int64_t{1} << 31),
              "embedding bag backward (cuda): {} indices; at most 2^31 - 1 per call", n);
  set_device_of(grad);
  const Device dev = grad.device();
  Tensor st = new_status(grad);
  auto* status = static_cast<Status*>(st.raw_data());
  if (g.offsets != nullptr) {
    check_offsets<<<grid_for(g.bags), 256, 0, op_stream()>>>(g, status);
    BH_CHECK_CUDA_LAUNCH("embedding_bag check_offsets");
  }
  // Sorted (row, position) pairs, run-length encoded into unique rows.
  Tensor keys = Tensor::empty({std::max<std::int64_t>(n, 1)}, DType::i64, dev);
  Tensor keys_sorted = Tensor::empty({std::max<std::int64_t>(n, 1)}, DType::i64, dev);
  Tensor pos = Tensor::empty({std::max<std::int64_t>(n, 1)}, DType::i32, dev);
  Tensor order = Tensor::empty({std::max<std::int64_t>(n, 1)}, DType::i32, dev);
  Tensor unique = Tensor::empty({std::max<std::int64_t>(n, 1)}, DType::i64, dev);
  Tensor lengths = Tensor::empty({std::max<std::int64_t>(n, 1)}, DType::i32, dev);
  Tensor starts = Tensor::empty({std::max<std::int64_t>(n, 1)}, DType::i32, dev);
  Tensor runs = Tensor::zeros({1}, DType::i32, dev);
  // Row ids are in [0, R): sorted as unsigned keys over their low end_bit bits.
  auto* k = static_cast<unsigned long long*>(keys.raw_data());
  auto* ks = static_cast<unsigned long long*>(keys_sorted.raw_data());
  auto* p = pos.data<std::int32_t>();
  auto* o = order.data<std::int32_t>();
  auto* uq = unique.data<std::int64_t>();
  auto* uqu = static_cast<unsigned long long*>(unique.raw_data());
  auto* len = lengths.data<std::int32_t>();
  auto* sts = starts.data<std::int32_t>();
  auto* nr = runs.data<std::int32_t>();
  const int items = static_cast<int>(n);
  if (n > 0) {
    make_keys<<<grid_for(n), 256, 0, op_stream()>>>(g, k, p, status);
    BH_CHECK_CUDA_LAUNCH("embedding_bag make_keys");
  }
  // Check ids and offsets before any gradient is written (the CPU throws with grad untouched).
  throw_on_status(st, g, "embedding bag backward");
  if (n > 0) {
    int end_bit = 1;
    while (end_bit < 63 && (std::int64_t{1} << end_bit) < g.rows) ++end_bit;
    std::size_t sort_bytes = 0, rle_bytes = 0, scan_bytes = 0;
    BH_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, k, ks, p, o, items, 0, end_bit, op_stream()));
    BH_CHECK_CUDA(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, ks, uqu, len, nr, items, op_stream()));
    BH_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, len, sts, items, op_stream()));
    BH_CHECK_CUDA(cudaMemsetAsync(len, 0, static_cast<std::size_t>(n) * sizeof(std::int32_t), op_stream()));
    const std::size_t temp_bytes = std::max({sort_bytes, rle_bytes, scan_bytes, std::size_t{1}});
    Tensor temp = Tensor::empty({static_cast<std::int64_t>(temp_bytes)}, DType::u8, dev);
    BH_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(temp.raw_data(), sort_bytes, k, ks, p, o, items, 0,
                                                  end_bit, op_stream()));
    BH_CHECK_CUDA(cub::DeviceRunLengthEncode::Encode(temp.raw_data(), rle_bytes, ks, uqu, len, nr, items,
                                                     op_stream()));
    // Only the first U run lengths are written; the rest are zeroed above so the scan over all
    // n slots stays defined (only the first U starts are read).
    BH_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(temp.raw_data(), scan_bytes, len, sts, items, op_stream()));
    if (dim > 0) {
      const unsigned threads = dim >= 256 ? 256 : static_cast<unsigned>((dim + 31) / 32 * 32);
      const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(n, 65535LL * 16));
      scatter_rows<<<blocks, threads, 0, op_stream()>>>(g, uq, len, sts, nr, o, dout.data<float>(), dim,
                                                        mean_pooling(call), grad.data<float>());
      BH_CHECK_CUDA_LAUNCH("embedding_bag scatter_rows");
    }
  }
  // The touched rows, on the device, then wherever the caller allocated rows/count.
  Tensor rows_dev = rows_out.device() == dev ? rows_out : Tensor::empty({std::max<std::int64_t>(n, 1)}, DType::i64, dev);
  Tensor count_dev = count_out.device() == dev ? count_out : Tensor::empty({1}, DType::i64, dev);
  write_rows<<<grid_for(std::max<std::int64_t>(n, 1)), 256, 0, op_stream()>>>(
      uq, nr, n, rows_dev.data<std::int64_t>(), count_dev.data<std::int64_t>());
  BH_CHECK_CUDA_LAUNCH("embedding_bag write_rows");
  if (!(rows_out.device() == dev)) rows_out.copy_(n > 0 ? rows_dev.slice(0, 0, n) : rows_dev.slice(0, 0, 0));
  if (!(count_out.device() == dev)) count_out.copy_(count_dev);
}

__global__ void zero_rows_kernel(const std::int64_t* rows, std::int64_t n, std::int64_t num_rows,
                                 std::int64_t dim, float* grad) {
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const std::int64_t r = rows[i];
    if (r < 0 || r >= num_rows) continue;  // checked on the host before the launch
    for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x) grad[r * dim + d] = 0.0f;
  }
}

// inputs {rows i64 [n], on the CPU or the device}; outputs {grad f32 [R, D]}: rows set to zero.
void zero_rows(OpCall& call) {
  const Tensor& rows = call.inputs.at(0);
  Tensor& grad = call.outputs.at(0);
  check_matrix(grad, "zero_rows", "grad");
  BH_CHECK_AS(InvalidArgument, rows.dtype() == DType::i64 && rows.dim() == 1 && rows.is_contiguous(),
              "zero_rows: rows must be a contiguous i64 vector, got {}", rows.describe());
  const std::int64_t n = rows.numel(), num_rows = grad.size(0), dim = grad.size(1);
  if (n == 0 || dim == 0) return;
  // The range check needs the ids on the host; sparse rows normally live there already
  // (embedding_bag_backward returns them on the CPU), so this copy is the exception.
  const Tensor host = rows.device().is_cpu() ? rows : rows.to(Device::cpu());
  const std::int64_t* h = host.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i)
    BH_CHECK_AS(InvalidArgument, h[i] >= 0 && h[i] < num_rows, "zero_rows: row {} is outside [0, {})",
                h[i], num_rows);
  set_device_of(grad);
  const Tensor dev_rows = rows.device() == grad.device() ? rows : rows.to(grad.device());
  const unsigned threads = dim >= 256 ? 256 : static_cast<unsigned>((dim + 31) / 32 * 32);
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(n, 65535LL * 16));
  zero_rows_kernel<<<blocks, threads, 0, op_stream()>>>(dev_rows.data<std::int64_t>(), n, num_rows, dim,
                                                       grad.data<float>());
  BH_CHECK_CUDA_LAUNCH("zero_rows");
}

std::string accepts_zero_rows(const OpCall& c) {
  if (std::string half = refuse_half(c); !half.empty()) return half;
  if (!c.outputs.at(0).device().is_cuda()) return "grad is not on a cuda device";
  const Device rd = c.inputs.at(0).device();
  if (!rd.is_cpu() && !(rd == c.outputs.at(0).device())) return "rows must be on the cpu or on grad's device";
  return {};
}

std::string accepts(const OpCall& c) {
  if (std::string half = refuse_half(c); !half.empty()) return half;
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].defined() && !c.inputs[i].device().is_cuda())
      return fmt::format("input {} is not on a cuda device", i);
  if (!c.outputs.at(0).device().is_cuda()) return "output 0 is not on a cuda device";
  for (const Tensor& t : c.inputs)
    if (t.defined() && !t.is_contiguous()) return "inputs must be contiguous";
  return {};
}

const bool registered = [] {
  register_op_impl("embedding_bag_forward", {"cuda.kernels", DeviceType::cuda, 50, accepts, forward, false});
  register_op_impl("embedding_bag_backward", {"cuda.kernels", DeviceType::cuda, 50, accepts, backward, false});
  register_op_impl("zero_rows", {"cuda.kernels", DeviceType::cuda, 50, accepts_zero_rows, zero_rows, false});
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cuda
