// linear_forward on CUDA: y = act(x @ w^T + bias) as one cuBLASLt GEMM.
//
// x [N, in] row-major, w [out, in] (PyTorch layout, read as a transposed operand, never
// copied), bias [out] or absent, y [N, out]. x and w may be f32, f16 or bf16 (both the same);
// accumulation is f32, f32 GEMMs use TF32 iff tf32_enabled().
// An f32 y takes an f32 bias: the bias, and relu, are fused into the GEMM through cuBLASLt's
// epilogues (CUBLASLT_EPILOGUE_BIAS / RELU_BIAS / RELU). Other activations run as a separate
// in-place elementwise pass: cuBLASLt's GELU epilogue is the tanh approximation with its own
// (undocumented) accuracy, so both GELU flavours, sigmoid and tanh use our kernels, which match
// the CPU within the op's parity tolerance.
// A y in x's half type (what a bf16 or fp16 policy's layers allocate) takes a bias in f32 or that
// type: the GEMM accumulates into f32 scratch and one pass adds the bias, applies the activation
// and rounds once to y's type (bias_activation_store), so the result is the f32 computation
// rounded, as promotion would give, without promotion's f32 GEMM and conversion passes.

#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/elementwise.hpp"

namespace benchhost::nn::cuda {
namespace {

std::string problem_of(const OpCall& c, GemmProblem& p) {
  const Tensor& x = c.inputs.at(0);
  const Tensor& w = c.inputs.at(1);
  const Tensor bias = c.inputs.size() > 2 ? c.inputs[2] : Tensor{};
  const Tensor& y = c.outputs.at(0);
  for (const Tensor* t : {&x, &w, &y})
    if (!t->defined() || !t->device().is_cuda()) return "needs cuda tensors";
  if (x.dim() != 2 || w.dim() != 2 || x.size(1) != w.size(1)) return "needs x [N, in] and w [out, in]";
  if (y.shape() != Shape{x.size(0), w.size(0)} || !y.is_contiguous()) return "y must be contiguous [N, out]";
  const bool half_y = y.dtype() != DType::f32;
  if (half_y && y.dtype() != x.dtype()) return "needs an f32 output or one in the operands' half type";
  if (bias.defined()) {
    std::string why = require_cuda_contiguous({bias}, half_y && bias.dtype() != DType::f32 ? y.dtype() : DType::f32);
    if (!why.empty()) return "bias " + why;
    if (bias.numel() != w.size(0)) return "bias must be [out]";
  }
  p.M = x.size(0);
  p.K = x.size(1);
  p.N = w.size(0);
  p.a_sm = x.strides()[0];
  p.a_sk = x.strides()[1];
  p.w_sn = w.strides()[0];
  p.w_sk = w.strides()[1];
  p.c_sm = p.N;
  p.a_type = x.dtype();
  p.w_type = w.dtype();
  p.c_type = DType::f32;  // half outputs: f32 scratch, then bias_activation_store
  p.bias = bias.defined() && !half_y ? bias.data<float>() : nullptr;
  p.relu = !half_y && static_cast<Activation>(c.attrs.get_int("act", 0)) == Activation::relu;
  return gemm_accepts(p);
}

std::string accepts(const OpCall& c) {
  GemmProblem p;
  return problem_of(c, p);
}

void run(OpCall& c) {
  GemmProblem p;
  const std::string why = problem_of(c, p);
  BH_CHECK_AS(InvalidArgument, why.empty(), "linear_forward on cuda: {}", why);
  Tensor& y = c.outputs[0];
  if (y.numel() == 0) return;
  const auto act = static_cast<Activation>(c.attrs.get_int("act", 0));
  set_device_of(y);
  if (y.dtype() != DType::f32) {
    const Tensor bias = c.inputs.size() > 2 ? c.inputs[2] : Tensor{};
    Tensor acc = Tensor::empty({p.M, p.N}, DType::f32, y.device());
    if (p.K == 0)
      BH_CHECK_CUDA(cudaMemsetAsync(acc.raw_data(), 0, acc.nbytes(), op_stream()));
    else
      gemm(p, c.inputs[0].raw_data(), c.inputs[1].raw_data(), acc.raw_data(), y.device().index);
    bias_activation_store(act, acc.data<float>(), bias.defined() ? bias.raw_data() : nullptr,
                          bias.defined() ? bias.dtype() : DType::f32, p.N, y.raw_data(), y.dtype(), y.numel());
    return;
  }
  if (p.K == 0) {  // y = act(bias) broadcast, or act(0)
    BH_CHECK_CUDA(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), op_stream()));
    if (p.bias)
      for (std::int64_t r = 0; r < p.M; ++r)
        BH_CHECK_CUDA(cudaMemcpyAsync(y.data<float>() + r * p.N, p.bias, static_cast<std::size_t>(p.N) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, op_stream()));
    activation_forward_f32(act, y.data<float>(), y.data<float>(), y.numel());
    return;
  }
  gemm(p, c.inputs[0].raw_data(), c.inputs[1].raw_data(), y.raw_data(), y.device().index);
  if (act != Activation::none && act != Activation::relu)
    activation_forward_f32(act, y.data<float>(), y.data<float>(), y.numel());
}

const bool registered =
    register_op_impl("linear_forward", OpImpl{"cuda.cublaslt", DeviceType::cuda, 100, accepts, run, false});

}  // namespace
}  // namespace benchhost::nn::cuda
