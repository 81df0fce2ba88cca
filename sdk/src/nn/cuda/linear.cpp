// linear_forward on CUDA: y = act(x @ w^T + bias) as one cuBLASLt GEMM.
//
// x [N, in] row-major, w [out, in] (PyTorch layout, read as a transposed operand, never
// copied), bias f32 [out] or absent, y f32 [N, out]. The bias, and relu, are fused into the GEMM
// through cuBLASLt's epilogues (CUBLASLT_EPILOGUE_BIAS / RELU_BIAS / RELU). Other activations run
// as a separate in-place elementwise pass: cuBLASLt's GELU epilogue is the tanh approximation
// with its own (undocumented) accuracy, so both GELU flavours, sigmoid and tanh use our kernels,
// which match the CPU within the op's parity tolerance. x and w may be f32, f16 or bf16 (both
// the same); accumulation is f32, f32 GEMMs use TF32 iff tf32_enabled().

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
  if (bias.defined()) {
    std::string why = require_cuda_contiguous({bias});
    if (!why.empty()) return "bias " + why;
    if (bias.numel() != w.size(0)) return "bias must be [out]";
  }
  if (y.dtype() != DType::f32) return "needs an f32 output";
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
  p.c_type = y.dtype();
  p.bias = bias.defined() ? bias.data<float>() : nullptr;
  p.relu = static_cast<Activation>(c.attrs.get_int("act", 0)) == Activation::relu;
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
