#pragma once
// Error checking for CUDA runtime calls inside libbenchhost_sdk_cuda (private header).
#include <cuda_runtime.h>

#include "benchhost/error.hpp"

#define BH_CHECK_CUDA(call)                                                                   \
  do {                                                                                        \
    cudaError_t bh_err_ = (call);                                                             \
    if (bh_err_ != cudaSuccess) [[unlikely]]                                                  \
      throw ::benchhost::Error(::fmt::format("{} failed: {} ({})", #call,                     \
                                             cudaGetErrorString(bh_err_),                     \
                                             cudaGetErrorName(bh_err_)), __FILE__, __LINE__);   \
  } while (0)
