#pragma once
// cuDNN plumbing shared by the CUDA conv-net ops (private to sdk/src/nn/cuda): status checks, one
// handle per (thread, device), and RAII wrappers of the legacy descriptors.
//
// Note [cuDNN handles]
// A cudnnHandle_t must not be used by two threads at once, and it is bound to the device that
// was current when it was created. Handles are therefore thread-local, one per device index,
// created on first use and kept for the thread's life (creating one costs milliseconds). Every
// use re-binds the handle to op_stream() (Note [CUDA op streams]), which is cheap.

#include <cudnn.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"
#include "nn/cuda/cuda_common.hpp"

#define BH_CHECK_CUDNN(call)                                                                  \
  do {                                                                                        \
    cudnnStatus_t bh_st_ = (call);                                                            \
    if (bh_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                          \
      throw ::benchhost::Error(                                                               \
          ::fmt::format("{} failed: {}", #call, cudnnGetErrorString(bh_st_)), __FILE__,       \
          __LINE__);                                                                          \
  } while (0)

namespace benchhost::nn::cuda {

/// The calling thread's cuDNN handle for the current device, bound to op_stream().
inline cudnnHandle_t cudnn_handle() {
  struct Handles {
    std::unordered_map<int, cudnnHandle_t> by_device;
    ~Handles() {
      for (auto& [device, h] : by_device) cudnnDestroy(h);
    }
  };
  thread_local Handles handles;
  int device = 0;
  BH_CHECK_CUDA(cudaGetDevice(&device));
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) {
    cudnnHandle_t h = nullptr;
    BH_CHECK_CUDNN(cudnnCreate(&h));
    it = handles.by_device.emplace(device, h).first;
  }
  BH_CHECK_CUDNN(cudnnSetStream(it->second, op_stream()));
  return it->second;
}

/// Owning wrappers of cuDNN descriptors (create in the constructor, destroy in the destructor).
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { BH_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { BH_CHECK_CUDNN(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { BH_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// The bias of a half-precision convolution (Note [Half-precision convolutions] in conv_cudnn.cpp),
// for channels-last y and dy, where the bias is the innermost dim.
/// "" if `bias` (or its gradient) can go with half images of type `t`: f32 or `t`, contiguous on
/// the device, one-dimensional, and `channels` long where channels >= 0.
inline std::string accept_half_bias(const Tensor& bias, DType t, std::int64_t channels) {
  if (bias.dtype() != t && bias.dtype() != DType::f32)
    return "the bias (or its gradient) must be f32 or the images' type";
  if (std::string why = require_cuda_contiguous({bias}, bias.dtype()); !why.empty()) return why;
  if (bias.dim() != 1 || (channels >= 0 && bias.size(0) != channels))
    return "the bias (or its gradient) must be [output channels]";
  return {};
}
/// y += bias, in y's half type (the bias cast, as PyTorch's AMP casts it).
inline void add_half_bias(Tensor& y, const Tensor& bias) {
  add_(y, bias.dtype() == y.dtype() ? bias : cast(bias, y.dtype()));
}
/// dbias += the sum of half dy over all but its innermost dim, added in dbias's type (f32 or half).
inline void add_half_bias_grad(const Tensor& dbias, const Tensor& dy) {
  const Tensor sum = sum_to_shape(dy, dbias.shape());
  Tensor d = dbias;
  add_(d, sum.dtype() == d.dtype() ? sum : cast(sum, d.dtype()));
}

}  // namespace benchhost::nn::cuda
