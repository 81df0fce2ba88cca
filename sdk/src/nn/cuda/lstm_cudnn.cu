// lstm_forward / lstm_backward on cuDNN's RNN API and lstm_cell_forward on a cuBLASLt matmul plus
// our pointwise kernel (ops declared in nn/cpu/lstm.cpp; maths in nn/lstm.hpp). Not yet run on
// a GPU: the CPU-vs-CUDA parity walk and tests/lstm/cuda_test.cpp check it where one exists.
//
// Layout and precision. One cuDNN RNN per call: CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS (b_ih and b_hh
// are separate parameters, as in PyTorch), unidirectional, one layer, linear input, f32 data
// and maths with CUDNN_FMA_MATH (no TF32, so results match the CPU to f32 rounding).
// Sequences are time-major and packed (every sequence has length T), which is our [T, B, C]
// layout exactly; states are [1, B, H].
//
// Note [cuDNN LSTM weight space]
// cuDNN keeps a layer's parameters in one opaque "weight space". cudnnGetRNNWeightParams gives,
// per linear layer ID, where each matrix and bias lives: IDs 0-3 are the input weights of the
// gates i, f, c~ (g), o, each [H, I] row-major, and their biases (b_ih); IDs 4-7 the recurrent
// weights [H, H] and biases (b_hh). That is PyTorch's gate order, and gate g of weight_ih is
// its rows g H .. g H + H - 1, contiguous: packing is 16 device-to-device copies per call, and
// the weight gradients come back out of a gradient weight space of the same layout, added into
// ours (+=). The backward reruns the training forward for the reserve space (Note [LSTM
// backward recomputes] in nn/lstm.hpp). Workspace, reserve and weight spaces come from the
// caching device allocator (Tensor::empty), all on op_stream().

#include <cstdint>
#include <vector>

#include "benchhost/nn/ops.hpp"
#include "nn/cuda/cudnn_common.hpp"

namespace benchhost::nn::cuda {
namespace {

struct Dims {
  std::int64_t T = 1, B = 0, I = 0, H = 0;
};

Dims dims_of(const OpCall& c, bool cell) {
  const Tensor& x = c.inputs[0];
  Dims d;
  d.T = cell ? 1 : x.size(0);
  d.B = x.size(cell ? 0 : 1);
  d.I = x.size(cell ? 1 : 2);
  d.H = c.inputs[4].size(1);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------

__global__ void accumulate_kernel(const float* __restrict__ src, float* __restrict__ dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

void accumulate(const float* src, float* dst, std::int64_t n) {
  if (n == 0) return;
  accumulate_kernel<<<grid_for(n), 256, 0, op_stream()>>>(src, dst, n);
  BH_CHECK_CUDA_LAUNCH("accumulate_kernel");
}

__device__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }

// One thread per (b, k): the four gate pre-activations from `gates` [B, 4H] plus both biases.
__global__ void cell_kernel(const float* __restrict__ gates, const float* __restrict__ bih,
                            const float* __restrict__ bhh, const float* __restrict__ c, std::int64_t B,
                            std::int64_t H, float* __restrict__ h_out, float* __restrict__ c_out) {
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < B * H;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = j / H, k = j % H;
    const float* g = gates + b * 4 * H;
    const float i = sigmoidf(g[k] + bih[k] + bhh[k]);
    const float f = sigmoidf(g[H + k] + bih[H + k] + bhh[H + k]);
    const float gg = tanhf(g[2 * H + k] + bih[2 * H + k] + bhh[2 * H + k]);
    const float o = sigmoidf(g[3 * H + k] + bih[3 * H + k] + bhh[3 * H + k]);
    const float cn = f * (c ? c[j] : 0.0f) + i * gg;
    c_out[j] = cn;
    h_out[j] = o * tanhf(cn);
  }
}

// ---------------------------------------------------------------------------------------------
// cuDNN descriptors
// ---------------------------------------------------------------------------------------------

struct RnnDesc {
  cudnnRNNDescriptor_t d = nullptr;
  RnnDesc() { BH_CHECK_CUDNN(cudnnCreateRNNDescriptor(&d)); }
  ~RnnDesc() { cudnnDestroyRNNDescriptor(d); }
  RnnDesc(const RnnDesc&) = delete;
  RnnDesc& operator=(const RnnDesc&) = delete;
};

struct RnnDataDesc {
  cudnnRNNDataDescriptor_t d = nullptr;
  RnnDataDesc() { BH_CHECK_CUDNN(cudnnCreateRNNDataDescriptor(&d)); }
  ~RnnDataDesc() { cudnnDestroyRNNDataDescriptor(d); }
  RnnDataDesc(const RnnDataDesc&) = delete;
  RnnDataDesc& operator=(const RnnDataDesc&) = delete;
};

struct DropoutDesc {
  cudnnDropoutDescriptor_t d = nullptr;
  DropoutDesc() { BH_CHECK_CUDNN(cudnnCreateDropoutDescriptor(&d)); }
  ~DropoutDesc() { cudnnDestroyDropoutDescriptor(d); }
  DropoutDesc(const DropoutDesc&) = delete;
  DropoutDesc& operator=(const DropoutDesc&) = delete;
};

int as_int(std::int64_t v, const char* what) {
  BH_CHECK_AS(InvalidArgument, v > 0 && v <= 0x7fffffff, "lstm (cuDNN): {} = {} does not fit cuDNN's int", what, v);
  return static_cast<int>(v);
}

// Everything one cuDNN LSTM layer call needs; built per call (descriptor setup is host-only and
// cheap next to a sequence).
struct CudnnLstm {
  cudnnHandle_t handle;
  Dims d;
  DropoutDesc dropout;
  RnnDesc rnn;
  RnnDataDesc x_desc, y_desc;
  TensorDesc state_desc;
  std::size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
  Tensor seq_lengths;  // i32 [B] on the device, all T

  CudnnLstm(const Dims& dims, bool training, const Device& device) : handle(cudnn_handle()), d(dims) {
    const int T = as_int(d.T, "T"), B = as_int(d.B, "B"), I = as_int(d.I, "I"), H = as_int(d.H, "H");
    // Dropout applies between layers only; one layer never uses it, so no RNG states are needed.
    BH_CHECK_CUDNN(cudnnSetDropoutDescriptor(dropout.d, handle, 0.0f, nullptr, 0, 0));
    BH_CHECK_CUDNN(cudnnSetRNNDescriptor_v8(rnn.d, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                            CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                            CUDNN_DATA_FLOAT, CUDNN_FMA_MATH, I, H, H, 1, dropout.d,
                                            CUDNN_RNN_PADDED_IO_DISABLED));
    const std::vector<int> lengths(static_cast<std::size_t>(B), T);
    BH_CHECK_CUDNN(cudnnSetRNNDataDescriptor(x_desc.d, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, T, B,
                                             I, lengths.data(), nullptr));
    BH_CHECK_CUDNN(cudnnSetRNNDataDescriptor(y_desc.d, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, T, B,
                                             H, lengths.data(), nullptr));
    const int sdims[3] = {1, B, H}, sstrides[3] = {B * H, H, 1};
    BH_CHECK_CUDNN(cudnnSetTensorNdDescriptor(state_desc.d, CUDNN_DATA_FLOAT, 3, sdims, sstrides));
    BH_CHECK_CUDNN(cudnnGetRNNWeightSpaceSize(handle, rnn.d, &weight_bytes));
    BH_CHECK_CUDNN(cudnnGetRNNTempSpaceSizes(handle, rnn.d,
                                             training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                             x_desc.d, &work_bytes, &reserve_bytes));
    seq_lengths = Tensor::from_vector_i32(std::vector<std::int32_t>(static_cast<std::size_t>(B), T), {d.B}).to(device);
  }

  // Where the matrix and bias of linear layer `id` live in `space` (Note [cuDNN LSTM weight
  // space]); checks their sizes.
  void params(void* space, int id, float** matrix, float** bias) const {
    TensorDesc m, b;
    void* maddr = nullptr;
    void* baddr = nullptr;
    BH_CHECK_CUDNN(cudnnGetRNNWeightParams(handle, rnn.d, 0, weight_bytes, space, id, m.d, &maddr, b.d, &baddr));
    const std::int64_t in = id < 4 ? d.I : d.H;
    BH_CHECK_AS(Unsupported, numel(m) == d.H * in && numel(b) == d.H && maddr && baddr,
                "lstm (cuDNN): linear layer {} has {} weights and {} biases, expected {} and {}", id, numel(m),
                numel(b), d.H * in, d.H);
    *matrix = static_cast<float*>(maddr);
    *bias = static_cast<float*>(baddr);
  }

  static std::int64_t numel(const TensorDesc& t) {
    cudnnDataType_t type;
    int nb = 0, dims[8] = {}, strides[8] = {};
    BH_CHECK_CUDNN(cudnnGetTensorNdDescriptor(t.d, 8, &type, &nb, dims, strides));
    std::int64_t n = 1;
    for (int i = 0; i < nb; ++i) n *= dims[i];
    return n;
  }

  // Our parameters (inputs 3..6 of the call) into a fresh weight space.
  Tensor pack(const OpCall& call) const {
    Tensor space = Tensor::empty({static_cast<std::int64_t>(weight_bytes)}, DType::u8, call.inputs[0].device());
    for (int id = 0; id < 8; ++id) {
      float *m = nullptr, *b = nullptr;
      params(space.raw_data(), id, &m, &b);
      const int gate = id % 4;
      const std::int64_t in = id < 4 ? d.I : d.H;
      const float* w = call.inputs[id < 4 ? 3 : 4].data<float>() + gate * d.H * in;
      const float* bias = call.inputs[id < 4 ? 5 : 6].data<float>() + gate * d.H;
      BH_CHECK_CUDA(cudaMemcpyAsync(m, w, static_cast<std::size_t>(d.H * in) * sizeof(float), cudaMemcpyDeviceToDevice,
                                    op_stream()));
      BH_CHECK_CUDA(cudaMemcpyAsync(b, bias, static_cast<std::size_t>(d.H) * sizeof(float), cudaMemcpyDeviceToDevice,
                                    op_stream()));
    }
    return space;
  }

  // Add a gradient weight space into the call's parameter gradients (outputs 3..6).
  void unpack_add(const Tensor& dspace, OpCall& call) const {
    for (int id = 0; id < 8; ++id) {
      float *m = nullptr, *b = nullptr;
      params(dspace.raw_data(), id, &m, &b);
      const int gate = id % 4;
      const std::int64_t in = id < 4 ? d.I : d.H;
      accumulate(m, call.outputs[id < 4 ? 3 : 4].data<float>() + gate * d.H * in, d.H * in);
      accumulate(b, call.outputs[id < 4 ? 5 : 6].data<float>() + gate * d.H, d.H);
    }
  }

  Tensor bytes(std::size_t n, const Device& device) const {
    return Tensor::empty({static_cast<std::int64_t>(n > 0 ? n : 1)}, DType::u8, device);
  }
};

const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
void* out_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

void fwd(OpCall& call) {
  set_device_of(call.inputs[0]);
  const Device device = call.inputs[0].device();
  CudnnLstm l(dims_of(call, false), false, device);
  const Tensor space = l.pack(call);
  Tensor work = l.bytes(l.work_bytes, device);
  BH_CHECK_CUDNN(cudnnRNNForward(l.handle, l.rnn.d, CUDNN_FWD_MODE_INFERENCE, l.seq_lengths.data<std::int32_t>(),
                                 l.x_desc.d, call.inputs[0].raw_data(), l.y_desc.d, call.outputs[0].raw_data(),
                                 l.state_desc.d, ptr_or_null(call.inputs[1]), call.outputs[1].raw_data(),
                                 l.state_desc.d, ptr_or_null(call.inputs[2]), call.outputs[2].raw_data(),
                                 l.weight_bytes, space.raw_data(), l.work_bytes, work.raw_data(), 0, nullptr));
}

void bwd(OpCall& call) {
  set_device_of(call.inputs[0]);
  const Device device = call.inputs[0].device();
  const Dims d = dims_of(call, false);
  CudnnLstm l(d, true, device);
  const Tensor space = l.pack(call);
  Tensor work = l.bytes(l.work_bytes, device), reserve = l.bytes(l.reserve_bytes, device);
  // The training forward again, for the reserve space (Note [LSTM backward recomputes]).
  Tensor y = Tensor::empty({d.T, d.B, d.H}, DType::f32, device);
  BH_CHECK_CUDNN(cudnnRNNForward(l.handle, l.rnn.d, CUDNN_FWD_MODE_TRAINING, l.seq_lengths.data<std::int32_t>(),
                                 l.x_desc.d, call.inputs[0].raw_data(), l.y_desc.d, y.raw_data(), l.state_desc.d,
                                 ptr_or_null(call.inputs[1]), nullptr, l.state_desc.d, ptr_or_null(call.inputs[2]),
                                 nullptr, l.weight_bytes, space.raw_data(), l.work_bytes, work.raw_data(),
                                 l.reserve_bytes, reserve.raw_data()));
  BH_CHECK_CUDNN(cudnnRNNBackwardData_v8(
      l.handle, l.rnn.d, l.seq_lengths.data<std::int32_t>(), l.y_desc.d, y.raw_data(), call.inputs[7].raw_data(),
      l.x_desc.d, call.outputs[0].raw_data(), l.state_desc.d, ptr_or_null(call.inputs[1]),
      ptr_or_null(call.inputs[8]), out_or_null(call.outputs[1]), l.state_desc.d, ptr_or_null(call.inputs[2]),
      ptr_or_null(call.inputs[9]), out_or_null(call.outputs[2]), l.weight_bytes, space.raw_data(), l.work_bytes,
      work.raw_data(), l.reserve_bytes, reserve.raw_data()));
  Tensor dspace = l.bytes(l.weight_bytes, device);
  BH_CHECK_CUDA(cudaMemsetAsync(dspace.raw_data(), 0, dspace.nbytes(), op_stream()));
  BH_CHECK_CUDNN(cudnnRNNBackwardWeights_v8(l.handle, l.rnn.d, CUDNN_WGRAD_MODE_ADD, l.seq_lengths.data<std::int32_t>(),
                                            l.x_desc.d, call.inputs[0].raw_data(), l.state_desc.d,
                                            ptr_or_null(call.inputs[1]), l.y_desc.d, y.raw_data(), l.weight_bytes,
                                            dspace.raw_data(), l.work_bytes, work.raw_data(), l.reserve_bytes,
                                            reserve.raw_data()));
  l.unpack_add(dspace, call);
}

// The cell: gates = x W_ih^T (+ h W_hh^T) through the registry's CUDA matmul (cuBLASLt), then
// one pointwise kernel.
void cell(OpCall& call) {
  set_device_of(call.inputs[0]);
  const Dims d = dims_of(call, true);
  Tensor gates = Tensor::empty({d.B, 4 * d.H}, DType::f32, call.inputs[0].device());
  matmul_into(gates, call.inputs[0], call.inputs[3], false, true);
  if (call.inputs[1].defined()) matmul_into(gates, call.inputs[1], call.inputs[4], false, true, 1.0f, true);
  cell_kernel<<<grid_for(d.B * d.H), 256, 0, op_stream()>>>(
      gates.data<float>(), call.inputs[5].data<float>(), call.inputs[6].data<float>(),
      call.inputs[2].defined() ? call.inputs[2].data<float>() : nullptr, d.B, d.H, call.outputs[0].data<float>(),
      call.outputs[1].data<float>());
  BH_CHECK_CUDA_LAUNCH("cell_kernel");
}

const bool registered = register_op_impl("lstm_forward", cuda_impl("cuda.cudnn", 100, fwd)) &&
                        register_op_impl("lstm_backward", cuda_impl("cuda.cudnn", 100, bwd)) &&
                        register_op_impl("lstm_cell_forward", cuda_impl("cuda.cublaslt", 50, cell));

}  // namespace
}  // namespace benchhost::nn::cuda
