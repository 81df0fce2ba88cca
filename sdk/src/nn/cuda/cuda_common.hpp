#pragma once
// Helpers shared by the CUDA op implementations (private to sdk/src/nn/cuda; built into
// libbenchhost_sdk_cuda.so). Usable from .cu files (kernels) and plain .cpp files (library
// calls: cuBLASLt, cuDNN).
//
// Note [CUDA op streams]
// Every CUDA op implementation enqueues its work on op_stream() (the legacy default stream for
// now), never synchronises unless it must return a host value, and allocates scratch through the
// caching device allocator (Tensor::empty on the inputs' device). The allocator hands a freed
// block to the next request without waiting, which is safe because all ops and copies run in one
// stream order; an op that uses another stream must record an event and make op_stream() wait
// on it before any tensor it touched is freed.
//
// Kernel launch errors are checked right after each launch with BH_CHECK_CUDA_LAUNCH(what), so a
// bad configuration surfaces as a benchhost::Error naming the kernel, not as a later sticky
// error in an unrelated call.

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/tensor.hpp"
#include "cuda/cuda_check.hpp"

#define BH_CHECK_CUDA_LAUNCH(what) BH_CHECK_CUDA(::benchhost::nn::cuda::launch_status(what))

namespace benchhost::nn::cuda {

/// The stream every CUDA op runs on (see Note [CUDA op streams]).
inline cudaStream_t op_stream() { return nullptr; }

/// cudaGetLastError() after a launch; `what` is only for the macro's message.
inline cudaError_t launch_status(const char*) { return cudaGetLastError(); }

/// Make the calling thread's current CUDA device the one `t` lives on.
inline void set_device_of(const Tensor& t) { BH_CHECK_CUDA(cudaSetDevice(t.device().index)); }

/// Blocks for a grid-stride loop over n items (at most 65535 * 32 blocks, at least 1).
inline unsigned grid_for(std::int64_t n, unsigned block = 256) {
  const std::int64_t want = (n + block - 1) / block;
  const std::int64_t cap = 65535LL * 32;
  return static_cast<unsigned>(want < 1 ? 1 : (want > cap ? cap : want));
}

/// "" if every defined tensor among `ts` is contiguous, on a CUDA device and of dtype `dtype`;
/// else the reason (for OpImpl::accepts).
inline std::string require_cuda_contiguous(const std::vector<Tensor>& ts, DType dtype = DType::f32) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!t.defined()) continue;
    if (!t.device().is_cuda()) return fmt::format("tensor {} is not on a cuda device", i);
    if (t.dtype() != dtype)
      return fmt::format("tensor {} is {}, needs {}", i, dtype_name(t.dtype()), dtype_name(dtype));
    if (!t.is_contiguous()) return fmt::format("tensor {} is not contiguous", i);
  }
  return {};
}

/// Accept f32 contiguous CUDA inputs and outputs (the usual requirement of our kernels).
inline std::string accept_cuda_f32(const OpCall& c) {
  std::string why = require_cuda_contiguous(c.inputs);
  if (!why.empty()) return "input " + why;
  why = require_cuda_contiguous(c.outputs);
  if (!why.empty()) return "output " + why;
  return {};
}

/// Rows of a tensor viewed as [rows, last dim].
inline std::int64_t rows_of(const Tensor& t) { return t.dim() == 0 ? 1 : t.numel() / t.size(-1); }

}  // namespace benchhost::nn::cuda
