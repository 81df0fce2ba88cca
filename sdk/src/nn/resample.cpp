// The Tensor-level API of nn/resample.hpp (argument checks, output allocation, dispatch) and the
// declarations of its two ops (doc, example cases for the parity walk, tolerance). The
// implementations: nn/cpu/resample.cpp (cpu.ref, cpu.tbb) and nn/cuda/resample.cu (cuda.kernels).
//
// Registry calling conventions (inputs -> outputs):
//   upsample_nearest2d_forward   {x}  -> {y}    attrs out=[out_h, out_w], layout (0 nchw, 1 nhwc)
//   upsample_nearest2d_backward  {dy} -> {dx}   same attrs; x's shape is dx's shape

#include "benchhost/nn/resample.hpp"

#include <fmt/format.h>

#include "benchhost/nn/registry.hpp"
#include "nn/conv_common.hpp"

namespace benchhost::nn {

using namespace conv_detail;

namespace {

Attrs resample_attrs(std::int64_t out_h, std::int64_t out_w, ImageLayout layout) {
  Attrs a;
  a.set_ints("out", {out_h, out_w});
  a.set("layout", layout == ImageLayout::nhwc ? 1.0 : 0.0);
  return a;
}

void check_size(std::int64_t out_h, std::int64_t out_w, const ImageDims& d, const char* op) {
  BH_CHECK_AS(InvalidArgument, out_h > 0 && out_w > 0 && d.h > 0 && d.w > 0,
              "{}: sizes must be positive, got input {}x{} and output {}x{}", op, d.h, d.w, out_h,
              out_w);
}

std::vector<OpCall> make_cases(std::uint64_t seed, bool backward) {
  struct Size {
    std::int64_t ih, iw, oh, ow;
  };
  // FPN-like odd ratios (13 -> 25, 7 -> 13), exact 2x, shrinking and identity.
  const Size sizes[] = {{13, 7, 25, 13}, {4, 5, 8, 10}, {6, 9, 4, 5}, {3, 3, 3, 3}};
  std::vector<OpCall> out;
  int k = 0;
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    for (const Size& s : sizes) {
      const Shape xs = image_shape({2, 3, s.ih, s.iw}, layout);
      const Shape ys = image_shape({2, 3, s.oh, s.ow}, layout);
      OpCall c;
      c.attrs = resample_attrs(s.oh, s.ow, layout);
      c.inputs = {conv_random(backward ? ys : xs, seed + 17 * k + 1)};
      c.outputs = {Tensor::empty(backward ? xs : ys)};
      out.push_back(std::move(c));
      ++k;
    }
  }
  return out;
}

const bool registered = [] {
  register_op({"upsample_nearest2d_forward",
               "{x} -> {y}: y[n,c,oh,ow] = x[n,c,s(oh),s(ow)] (torch nearest, float scale in/out); "
               "attrs out=[h, w], layout",
               [](std::uint64_t seed) { return make_cases(seed, false); }, 0.0, 0.0, {}});
  register_op({"upsample_nearest2d_backward",
               "{dy} -> {dx}: dx[i,j] = sum of dy over the outputs reading (i, j); attrs out=[h, w] "
               "(dy's size), layout",
               [](std::uint64_t seed) { return make_cases(seed, true); }, 1e-5, 1e-5, {}});
  return true;
}();

}  // namespace

Tensor upsample_nearest2d_forward(const Tensor& x, std::int64_t out_h, std::int64_t out_w,
                                  ImageLayout layout) {
  check_floating(x, "upsample_nearest2d_forward", "input");
  const ImageDims d = image_dims(x.shape(), layout, "upsample_nearest2d_forward");
  check_size(out_h, out_w, d, "upsample_nearest2d_forward");
  OpCall call;
  call.inputs = {x.contiguous()};
  call.outputs = {Tensor::empty(image_shape({d.n, d.c, out_h, out_w}, layout), x.dtype(), x.device())};
  call.attrs = resample_attrs(out_h, out_w, layout);
  dispatch("upsample_nearest2d_forward", call);
  return call.outputs[0];
}

Tensor upsample_nearest2d_backward(const Tensor& dy, const Shape& x_shape, ImageLayout layout) {
  check_floating(dy, "upsample_nearest2d_backward", "output gradient");
  const ImageDims d = image_dims(x_shape, layout, "upsample_nearest2d_backward");
  const ImageDims g = image_dims(dy.shape(), layout, "upsample_nearest2d_backward");
  BH_CHECK_AS(InvalidArgument, g.n == d.n && g.c == d.c,
              "upsample_nearest2d_backward: output gradient {} does not match the input {} "
              "(batch and channels)",
              shape_str(dy.shape()), shape_str(x_shape));
  check_size(g.h, g.w, d, "upsample_nearest2d_backward");
  OpCall call;
  call.inputs = {dy.contiguous()};
  call.outputs = {Tensor::empty(x_shape, dy.dtype(), dy.device())};
  call.attrs = resample_attrs(g.h, g.w, layout);
  dispatch("upsample_nearest2d_backward", call);
  return call.outputs[0];
}

}  // namespace benchhost::nn
