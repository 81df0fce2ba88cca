// Elementwise CUDA ops: activation_forward / activation_backward, add, cast.
//
// Layout: contiguous tensors treated as flat arrays; one grid-stride loop per op (grid_for).
// Precision: f32 math with the precise CUDA library functions (erff, tanhf, expf; no fast-math
// intrinsics), so results stay within the ops' CPU parity tolerances (2e-6). The activations and
// add store f32, f16 or bf16 (one storage type per call, nn/cuda/storage.hpp): half values are
// widened on load and rounded once on store, so mixed-precision runs do not pay the promotion's
// conversion passes on every GELU, ReLU and residual add. add broadcasts b
// as a suffix of a's shape (element i uses b[i % b.numel()]) and may run in place (c == a).
// cast converts f32 <-> f16 / bf16 with round-to-nearest-even (__float2half_rn,
// __float2bfloat16_rn: IEEE rounding with overflow to inf), bit-identical to dtype.cpp's
// conversions, NaN encodings included.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/elementwise.hpp"
#include "nn/cuda/storage.hpp"

namespace benchhost::nn::cuda {

namespace {

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluC = 0.044715f;

__device__ __forceinline__ float act_fwd(int act, float x) {
  switch (static_cast<Activation>(act)) {
    case Activation::none: return x;
    case Activation::relu: return x > 0.0f ? x : 0.0f;
    case Activation::gelu_erf: return 0.5f * x * (1.0f + erff(x * kSqrt1_2));
    case Activation::gelu_tanh: return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluC * x * x * x)));
    case Activation::sigmoid: return 1.0f / (1.0f + expf(-x));
    case Activation::tanh: return tanhf(x);
  }
  return x;
}

__device__ __forceinline__ float act_grad(int act, float x) {
  switch (static_cast<Activation>(act)) {
    case Activation::none: return 1.0f;
    case Activation::relu: return x > 0.0f ? 1.0f : 0.0f;
    case Activation::gelu_erf: return 0.5f * (1.0f + erff(x * kSqrt1_2)) + x * expf(-0.5f * x * x) * kInvSqrt2Pi;
    case Activation::gelu_tanh: {
      const float t = tanhf(kSqrt2OverPi * (x + kGeluC * x * x * x));
      return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluC * x * x);
    }
    case Activation::sigmoid: {
      const float s = 1.0f / (1.0f + expf(-x));
      return s * (1.0f - s);
    }
    case Activation::tanh: {
      const float t = tanhf(x);
      return 1.0f - t * t;
    }
  }
  return 1.0f;
}

template <class T>
__global__ void act_fwd_kernel(int act, const T* __restrict__ x, T* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = narrow<T>(act_fwd(act, widen(x[i])));
}

template <class T>
__global__ void act_bwd_kernel(int act, const T* __restrict__ dy, const T* __restrict__ x,
                               T* __restrict__ dx, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dx[i] = narrow<T>(widen(dy[i]) * act_grad(act, widen(x[i])));
}

// c may alias a (in-place add), so no __restrict__ on a and c.
template <class T>
__global__ void add_kernel(const T* a, const T* __restrict__ b, T* c, float alpha,
                           std::int64_t n, std::int64_t nb) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    c[i] = narrow<T>(widen(a[i]) + alpha * widen(b[nb == n ? i : i % nb]));
}

// The activation of n values of storage type T, y may alias x.
template <class T>
void launch_act_fwd(Activation act, const T* x, T* y, std::int64_t n) {
  if (n == 0) return;
  if (act == Activation::none) {
    if (x != y)
      BH_CHECK_CUDA(cudaMemcpyAsync(y, x, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, op_stream()));
    return;
  }
  act_fwd_kernel<T><<<grid_for(n), 256, 0, op_stream()>>>(static_cast<int>(act), x, y, n);
  BH_CHECK_CUDA_LAUNCH("act_fwd_kernel");
}

template <class Src, class Dst>
__device__ __forceinline__ Dst convert(Src v);
// NaNs are encoded as dtype.cpp does (quiet NaN keeping the sign; bf16 keeps the payload's top
// bits), so the conversion is bit-identical to the CPU for every input, NaN included.
template <> __device__ __forceinline__ __half convert<float, __half>(float v) {
  if (isnan(v)) return __ushort_as_half(static_cast<unsigned short>(((__float_as_uint(v) >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 convert<float, __nv_bfloat16>(float v) {
  const unsigned x = __float_as_uint(v);
  if ((x & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16(static_cast<unsigned short>((x >> 16) | 0x40u));
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ float convert<__half, float>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float convert<__nv_bfloat16, float>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class Src, class Dst>
__global__ void cast_kernel(const Src* __restrict__ x, Dst* __restrict__ y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = convert<Src, Dst>(x[i]);
}

int act_of(const OpCall& c) { return static_cast<int>(c.attrs.get_int("act", 0)); }

void act_fwd_run(OpCall& c) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  BH_CHECK_AS(InvalidArgument, y.numel() == x.numel(), "activation_forward: y {} does not match x {}",
              y.describe().c_str(), x.describe().c_str());
  set_device_of(x);
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_act_fwd(static_cast<Activation>(act_of(c)), static_cast<const T*>(x.raw_data()),
                   static_cast<T*>(y.raw_data()), x.numel());
  });
}

void act_bwd_run(OpCall& c) {
  const std::int64_t n = c.inputs[0].numel();
  BH_CHECK_AS(InvalidArgument, c.inputs[1].numel() == n && c.outputs[0].numel() == n,
              "activation_backward: dy, x and dx differ in size");
  if (n == 0) return;
  set_device_of(c.inputs[0]);
  with_storage(c.inputs[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    act_bwd_kernel<T><<<grid_for(n), 256, 0, op_stream()>>>(
        act_of(c), static_cast<const T*>(c.inputs[0].raw_data()), static_cast<const T*>(c.inputs[1].raw_data()),
        static_cast<T*>(c.outputs[0].raw_data()), n);
  });
  BH_CHECK_CUDA_LAUNCH("act_bwd_kernel");
}

void add_run(OpCall& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const auto& as = a.shape();
  const auto& bs = b.shape();
  const bool suffix = bs.size() <= as.size() && std::equal(bs.rbegin(), bs.rend(), as.rbegin());
  BH_CHECK_AS(InvalidArgument, suffix, "add: b {} must equal a {} or a suffix of its shape", shape_str(bs).c_str(),
              shape_str(as).c_str());
  BH_CHECK_AS(InvalidArgument, c.outputs[0].numel() == a.numel(), "add: output {} does not match a {}",
              c.outputs[0].describe().c_str(), a.describe().c_str());
  const std::int64_t n = a.numel(), nb = b.numel();
  if (n == 0) return;
  set_device_of(a);
  with_storage(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<grid_for(n), 256, 0, op_stream()>>>(static_cast<const T*>(a.raw_data()),
                                                        static_cast<const T*>(b.raw_data()),
                                                        static_cast<T*>(c.outputs[0].raw_data()),
                                                        static_cast<float>(c.attrs.get("alpha", 1.0)), n, nb);
  });
  BH_CHECK_CUDA_LAUNCH("add_kernel");
}

std::string cast_accepts(const OpCall& c) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  if (!x.device().is_cuda() || !y.device().is_cuda()) return "needs cuda tensors";
  if (!x.is_contiguous() || !y.is_contiguous()) return "needs contiguous tensors";
  const DType a = x.dtype(), b = y.dtype();
  const bool ok = (a == DType::f32 && (b == DType::f16 || b == DType::bf16 || b == DType::f32)) ||
                  (b == DType::f32 && (a == DType::f16 || a == DType::bf16));
  return ok ? std::string() : fmt::format("{} -> {} is not a cuda cast", dtype_name(a), dtype_name(b));
}

void cast_run(OpCall& c) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  const std::int64_t n = x.numel();
  BH_CHECK_AS(InvalidArgument, y.numel() == n, "cast: {} into {}", x.describe().c_str(), y.describe().c_str());
  if (n == 0) return;
  set_device_of(x);
  const DType a = x.dtype(), b = y.dtype();
  const unsigned grid = grid_for(n);
  if (a == b) {
    BH_CHECK_CUDA(cudaMemcpyAsync(y.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice, op_stream()));
    return;
  }
  if (a == DType::f32 && b == DType::f16)
    cast_kernel<float, __half><<<grid, 256, 0, op_stream()>>>(static_cast<const float*>(x.raw_data()),
                                                              static_cast<__half*>(y.raw_data()), n);
  else if (a == DType::f32 && b == DType::bf16)
    cast_kernel<float, __nv_bfloat16><<<grid, 256, 0, op_stream()>>>(static_cast<const float*>(x.raw_data()),
                                                                      static_cast<__nv_bfloat16*>(y.raw_data()), n);
  else if (a == DType::f16)
    cast_kernel<__half, float><<<grid, 256, 0, op_stream()>>>(static_cast<const __half*>(x.raw_data()),
                                                              static_cast<float*>(y.raw_data()), n);
  else if (a == DType::bf16)
    cast_kernel<__nv_bfloat16, float><<<grid, 256, 0, op_stream()>>>(static_cast<const __nv_bfloat16*>(x.raw_data()),
                                                                      static_cast<float*>(y.raw_data()), n);
  else
    BH_THROW(Unsupported, "cast {} -> {} on cuda", dtype_name(a), dtype_name(b));
  BH_CHECK_CUDA_LAUNCH("cast_kernel");
}

const bool registered =
    register_op_impl("activation_forward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_one_storage, act_fwd_run, false}) &&
    register_op_impl("activation_backward", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_one_storage, act_bwd_run, false}) &&
    register_op_impl("add", OpImpl{"cuda.kernel", DeviceType::cuda, 50, accept_one_storage, add_run, false}) &&
    register_op_impl("cast", OpImpl{"cuda.kernel", DeviceType::cuda, 50, cast_accepts, cast_run, false});

}  // namespace

void activation_forward_f32(Activation act, const float* x, float* y, std::int64_t n) {
  launch_act_fwd(act, x, y, n);
}

namespace {
template <class B, class Y>
__global__ void bias_act_store_kernel(int act, const float* __restrict__ x, const B* __restrict__ bias,
                                      std::int64_t N, Y* __restrict__ y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float v = x[i];
    if (bias != nullptr) v += widen(bias[i % N]);
    y[i] = narrow<Y>(act_fwd(act, v));
  }
}
}  // namespace

void bias_activation_store(Activation act, const float* x, const void* bias, DType bias_dtype, std::int64_t N,
                           void* y, DType y_dtype, std::int64_t n) {
  if (n == 0) return;
  BH_CHECK(bias == nullptr || N > 0, "bias_activation_store: a bias needs N > 0");
  with_storage(y_dtype, [&](auto ytag) {
    using Y = decltype(ytag);
    with_storage(bias == nullptr ? DType::f32 : bias_dtype, [&](auto btag) {
      using B = decltype(btag);
      bias_act_store_kernel<B, Y><<<grid_for(n), 256, 0, op_stream()>>>(
          static_cast<int>(act), x, static_cast<const B*>(bias), N, static_cast<Y*>(y), n);
    });
  });
  BH_CHECK_CUDA_LAUNCH("bias_act_store_kernel");
}

}  // namespace benchhost::nn::cuda
