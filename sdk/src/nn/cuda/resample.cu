// Nearest-neighbour resizing on CUDA (nn/resample.hpp), with the CPU reference's index rule
// (Note [Nearest source index]: scale in/out in float, floor of a float product, clamped).
// Forward: one thread per output element. Backward: one thread per INPUT element, which sums
// dy over the output rectangle that reads it (s is non-decreasing, so each axis' set of readers
// is a contiguous range found from an estimate in a few steps): no atomics, no zero-fill, and
// deterministic. f32, NCHW or NHWC; f16/bf16 reach these kernels promoted to f32 by the registry.

#include "benchhost/nn/registry.hpp"
#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

struct Args {
  std::int64_t n = 0, c = 0, h = 0, w = 0;  // forward input
  std::int64_t oh = 0, ow = 0;              // forward output
  bool nhwc = false;
};

__device__ __forceinline__ std::int64_t source(std::int64_t d, std::int64_t in, std::int64_t out) {
  // IEEE-rounded division and product (no fast-math contraction): the CPU's float arithmetic.
  const float scale = __fdiv_rn(static_cast<float>(in), static_cast<float>(out));
  const auto s = static_cast<std::int64_t>(floorf(__fmul_rn(static_cast<float>(d), scale)));
  return s < in - 1 ? s : in - 1;
}

// The first output index d with source(d) >= i (out when none).
__device__ __forceinline__ std::int64_t first_reader(std::int64_t i, std::int64_t in, std::int64_t out) {
  std::int64_t d = i * out / in;
  while (d > 0 && source(d - 1, in, out) >= i) --d;
  while (d < out && source(d, in, out) < i) ++d;
  return d;
}

__device__ __forceinline__ void coords(const Args& a, std::int64_t i, std::int64_t H, std::int64_t W,
                                       std::int64_t& n, std::int64_t& c, std::int64_t& h, std::int64_t& w) {
  if (a.nhwc) {
    c = i % a.c;
    i /= a.c;
    w = i % W;
    i /= W;
    h = i % H;
    n = i / H;
  } else {
    w = i % W;
    i /= W;
    h = i % H;
    i /= H;
    c = i % a.c;
    n = i / a.c;
  }
}

__device__ __forceinline__ std::int64_t offset(const Args& a, std::int64_t n, std::int64_t c, std::int64_t h,
                                               std::int64_t w, std::int64_t H, std::int64_t W) {
  return a.nhwc ? ((n * H + h) * W + w) * a.c + c : ((n * a.c + c) * H + h) * W + w;
}

__global__ void forward_kernel(Args a, const float* __restrict__ x, float* __restrict__ y) {
  const std::int64_t total = a.n * a.c * a.oh * a.ow;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t n, c, oh, ow;
    coords(a, i, a.oh, a.ow, n, c, oh, ow);
    y[i] = x[offset(a, n, c, source(oh, a.h, a.oh), source(ow, a.w, a.ow), a.h, a.w)];
  }
}

__global__ void backward_kernel(Args a, const float* __restrict__ dy, float* __restrict__ dx) {
  const std::int64_t total = a.n * a.c * a.h * a.w;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t n, c, ih, iw;
    coords(a, i, a.h, a.w, n, c, ih, iw);
    const std::int64_t h0 = first_reader(ih, a.h, a.oh), h1 = first_reader(ih + 1, a.h, a.oh);
    const std::int64_t w0 = first_reader(iw, a.w, a.ow), w1 = first_reader(iw + 1, a.w, a.ow);
    float s = 0.0f;
    for (std::int64_t oh = h0; oh < h1; ++oh)
      for (std::int64_t ow = w0; ow < w1; ++ow) s += dy[offset(a, n, c, oh, ow, a.oh, a.ow)];
    dx[i] = s;
  }
}

Args args_of(const OpCall& call, const Tensor& x_like) {
  const auto& out = call.attrs.get_ints("out");
  BH_CHECK_AS(InvalidArgument, out.size() == 2 && x_like.dim() == 4,
              "upsample_nearest2d: attribute out=[h, w] and a 4-d tensor are required");
  Args a;
  a.nhwc = call.attrs.get_int("layout", 0) == 1;
  const Shape& s = x_like.shape();
  a.n = s[0];
  a.c = a.nhwc ? s[3] : s[1];
  a.h = a.nhwc ? s[1] : s[2];
  a.w = a.nhwc ? s[2] : s[3];
  a.oh = out[0];
  a.ow = out[1];
  return a;
}

void forward(OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Args a = args_of(call, x);
  set_device_of(x);
  forward_kernel<<<grid_for(a.n * a.c * a.oh * a.ow), 256, 0, op_stream()>>>(a, x.data<float>(),
                                                                            call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("upsample_nearest2d forward_kernel");
}

void backward(OpCall& call) {
  const Tensor& dy = call.inputs[0];
  const Args a = args_of(call, call.outputs[0]);
  set_device_of(dy);
  backward_kernel<<<grid_for(a.n * a.c * a.h * a.w), 256, 0, op_stream()>>>(a, dy.data<float>(),
                                                                           call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("upsample_nearest2d backward_kernel");
}

const bool registered =
    register_op_impl("upsample_nearest2d_forward", cuda_impl("cuda.kernel", 50, forward)) &&
    register_op_impl("upsample_nearest2d_backward", cuda_impl("cuda.kernel", 50, backward));

}  // namespace
}  // namespace benchhost::nn::cuda
