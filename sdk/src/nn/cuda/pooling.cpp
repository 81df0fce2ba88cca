// CUDA pooling ops (max_pool2d_forward/backward, avg_pool2d_forward/backward; global average
// pooling reaches them as an average pooling over the whole image): attribute parsing and
// registration. The kernels and their conventions are in pooling.cu. Images are f32, f16 or
// bf16, one type per call.

#include "nn/conv_common.hpp"
#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/image_kernels.hpp"
#include "nn/cuda/storage.hpp"

namespace benchhost::nn::cuda {
namespace {

PoolArgs pool_args(const Attrs& attrs, const Shape& x_shape, const char* op) {
  const Pool2dSpec s = conv_detail::pool_spec(attrs);
  const conv_detail::PoolGeometry g = conv_detail::pool_geometry(x_shape, s, op);
  constexpr std::int64_t kMax = 1 << 20;
  BH_CHECK_AS(Unsupported,
              s.kernel_h <= kMax && s.kernel_w <= kMax && s.stride_h <= kMax && s.stride_w <= kMax,
              "{}: kernel {}x{} / stride {}x{} too large for the CUDA kernels", op, s.kernel_h,
              s.kernel_w, s.stride_h, s.stride_w);
  PoolArgs a;
  a.n = g.x.n;
  a.c = g.x.c;
  a.h = g.x.h;
  a.w = g.x.w;
  a.oh = g.y.h;
  a.ow = g.y.w;
  a.kh = static_cast<int>(s.kernel_h);
  a.kw = static_cast<int>(s.kernel_w);
  a.sh = static_cast<int>(s.stride_h);
  a.sw = static_cast<int>(s.stride_w);
  a.ph = static_cast<int>(s.pad_h);
  a.pw = static_cast<int>(s.pad_w);
  a.nhwc = s.layout == ImageLayout::nhwc;
  a.include_pad = s.count_include_pad;
  return a;
}

void check_output(const Tensor& t, const PoolArgs& a, bool input_sized, const char* op) {
  const std::int64_t want = input_sized ? a.n * a.c * a.h * a.w : a.n * a.c * a.oh * a.ow;
  BH_CHECK_AS(InvalidArgument, t.numel() == want, "{}: output {} should have {} elements", op,
              t.describe(), want);
}

void max_forward(OpCall& call) {
  const Tensor& x = call.inputs[0];
  const PoolArgs a = pool_args(call.attrs, x.shape(), "max_pool2d_forward");
  check_output(call.outputs[0], a, false, "max_pool2d_forward");
  set_device_of(x);
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    max_pool_forward(a, static_cast<const T*>(x.raw_data()), static_cast<T*>(call.outputs[0].raw_data()));
  });
}

void avg_forward(OpCall& call) {
  const Tensor& x = call.inputs[0];
  const PoolArgs a = pool_args(call.attrs, x.shape(), "avg_pool2d_forward");
  check_output(call.outputs[0], a, false, "avg_pool2d_forward");
  set_device_of(x);
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    avg_pool_forward(a, static_cast<const T*>(x.raw_data()), static_cast<T*>(call.outputs[0].raw_data()));
  });
}

// inputs {dy, x, y}
void max_backward(OpCall& call) {
  const Tensor &dy = call.inputs[0], &x = call.inputs.at(1);
  const PoolArgs a = pool_args(call.attrs, x.shape(), "max_pool2d_backward");
  check_output(call.outputs[0], a, true, "max_pool2d_backward");
  BH_CHECK_AS(InvalidArgument, dy.numel() == a.n * a.c * a.oh * a.ow,
              "max_pool2d_backward: output gradient {} does not match the forward output",
              dy.describe());
  set_device_of(x);
  // One byte per output for the two-pass backward (Note [Max pooling backward by arg-max codes]).
  const Tensor codes = a.kh * a.kw <= kMaxPoolCodeWindow && dy.numel() > 0
                           ? Tensor::empty({dy.numel()}, DType::u8, x.device())
                           : Tensor();
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    max_pool_backward(a, static_cast<const T*>(dy.raw_data()), static_cast<const T*>(x.raw_data()),
                      static_cast<T*>(call.outputs[0].raw_data()),
                      codes.defined() ? static_cast<std::uint8_t*>(codes.raw_data()) : nullptr);
  });
}

// inputs {dy}
void avg_backward(OpCall& call) {
  const Tensor& dy = call.inputs[0];
  Tensor& dx = call.outputs[0];
  const PoolArgs a = pool_args(call.attrs, dx.shape(), "avg_pool2d_backward");
  BH_CHECK_AS(InvalidArgument, dy.numel() == a.n * a.c * a.oh * a.ow,
              "avg_pool2d_backward: output gradient {} does not match the forward output",
              dy.describe());
  set_device_of(dy);
  with_storage(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    avg_pool_backward(a, static_cast<const T*>(dy.raw_data()), static_cast<T*>(dx.raw_data()));
  });
}

const bool registered = [] {
  register_op_impl("max_pool2d_forward", cuda_impl("cuda.kernels", 50, max_forward, accept_one_storage));
  register_op_impl("max_pool2d_backward", cuda_impl("cuda.kernels", 50, max_backward, accept_one_storage));
  register_op_impl("avg_pool2d_forward", cuda_impl("cuda.kernels", 50, avg_forward, accept_one_storage));
  register_op_impl("avg_pool2d_backward", cuda_impl("cuda.kernels", 50, avg_backward, accept_one_storage));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cuda
