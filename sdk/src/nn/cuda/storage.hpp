#pragma once
// Storage types of the CUDA kernels that take f16 / bf16 natively (Note [Half-precision
// promotion], registry.hpp): f32, f16 or bf16 in memory, f32 (or wider) arithmetic. Values are
// widened on load and rounded once on store to nearest even (__float2half_rn,
// __float2bfloat16_rn), so a kernel's result is the f32 computation rounded to the storage
// type, which is what promotion to f32 would give, without its conversion passes.
//
//   with_storage(x.dtype(), [&](auto tag) { using T = decltype(tag); kernel<T><<<...>>>(...); });
//
// Host code (g++ or nvcc) gets with_storage() and the accepts() helper; device code (nvcc) also
// widen() and narrow<T>().

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn::cuda {

/// Calls f(T{}) with T the storage type of `t`: float, __half or __nv_bfloat16. Other dtypes
/// throw Unsupported (accepts() refuses them first).
template <class F>
decltype(auto) with_storage(DType t, F&& f) {
  switch (t) {
    case DType::f32: return std::forward<F>(f)(float{});
    case DType::f16: return std::forward<F>(f)(__half{});
    case DType::bf16: return std::forward<F>(f)(__nv_bfloat16{});
    default: break;
  }
  BH_THROW(Unsupported, "cuda kernels store f32, f16 or bf16, not {}", dtype_name(t));
}

/// "" when every defined tensor of `ts` is on a cuda device, contiguous and of one dtype among
/// f32, f16 and bf16; else the reason (for OpImpl::accepts).
inline std::string require_one_storage(const std::vector<Tensor>& ts) {
  const Tensor* first = nullptr;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!t.defined()) continue;
    if (!t.device().is_cuda()) return fmt::format("tensor {} is not on a cuda device", i);
    if (!t.is_contiguous()) return fmt::format("tensor {} is not contiguous", i);
    const DType d = t.dtype();
    if (d != DType::f32 && d != DType::f16 && d != DType::bf16)
      return fmt::format("tensor {} is {}, needs f32, f16 or bf16", i, dtype_name(d));
    if (first == nullptr) first = &t;
    if (d != first->dtype())
      return fmt::format("tensor {} is {} and another {}: one storage type per call", i,
                         dtype_name(d), dtype_name(first->dtype()));
  }
  return {};
}

/// OpImpl::accepts for kernels whose every tensor (inputs and outputs) shares one storage type.
inline std::string accept_one_storage(const OpCall& c) {
  std::vector<Tensor> all = c.inputs;
  all.insert(all.end(), c.outputs.begin(), c.outputs.end());
  return require_one_storage(all);
}

#ifdef __CUDACC__
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T narrow(float v);
template <> __device__ __forceinline__ float narrow<float>(float v) { return v; }
template <> __device__ __forceinline__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
#endif

}  // namespace benchhost::nn::cuda
