// addcmul on CUDA: out = c + alpha * (a * b), or alpha * (a * b) without c (mul). Operand
// rules: nn/addcmul_common.hpp.
//
// Layout: contiguous tensors as flat arrays, one grid-stride loop; b is a suffix-shape
// broadcast (element i uses b[i % b.numel()]). out may alias c or a, so no pointer is
// __restrict__. Precision: f32 arithmetic for every storage type; f16 / bf16 are widened on load
// and rounded once on store to nearest even (__float2half_rn, __float2bfloat16_rn, as the CPU's
// float_to_half / float_to_bf16 for finite values). The product is formed before scaling, as on
// the CPU; nvcc may fuse the final add into an FMA, at most an f32 ulp from the CPU's result.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "nn/addcmul_common.hpp"
#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/storage.hpp"

namespace benchhost::nn::cuda {
namespace {

template <class T>
__global__ void addcmul_kernel(const T* c, const T* a, const T* b, T* out, float alpha, std::int64_t n,
                               std::int64_t nb) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float p = alpha * (widen(a[i]) * widen(b[nb == n ? i : i % nb]));
    out[i] = narrow<T>(c ? widen(c[i]) + p : p);
  }
}

template <class T>
void launch(const OpCall& call, float alpha) {
  const Tensor& c = addcmul_detail::c_of(call);
  const std::int64_t n = call.inputs[0].numel(), nb = call.inputs[1].numel();
  addcmul_kernel<T><<<grid_for(n), 256, 0, op_stream()>>>(
      c.defined() ? static_cast<const T*>(c.raw_data()) : nullptr, static_cast<const T*>(call.inputs[0].raw_data()),
      static_cast<const T*>(call.inputs[1].raw_data()), static_cast<T*>(call.outputs[0].raw_data()), alpha, n, nb);
  BH_CHECK_CUDA_LAUNCH("addcmul_kernel");
}

std::string accepts(const OpCall& call) { return addcmul_detail::kernel_refusal(call, DeviceType::cuda); }

void run(OpCall& call) {
  addcmul_detail::check_call(call);
  if (call.inputs[0].numel() == 0) return;
  set_device_of(call.inputs[0]);
  const float alpha = static_cast<float>(call.attrs.get("alpha", 1.0));
  with_storage(call.inputs[0].dtype(), [&](auto tag) { launch<decltype(tag)>(call, alpha); });
}

const bool registered = register_op_impl("addcmul", cuda_impl("cuda.kernel", 50, run, accepts));

}  // namespace
}  // namespace benchhost::nn::cuda
