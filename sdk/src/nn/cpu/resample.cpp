// Nearest-neighbour resizing on the CPU (nn/resample.hpp): the plain-loop reference (cpu.ref) and
// the oneTBB implementation (cpu.tbb). The ops are declared in nn/resample.cpp.
//
// Why not oneDNN: its resampling primitive's nearest mode uses the half-pixel rule, which reads
// different rows than PyTorch for ratios like 13 -> 25 (Note [Nearest source index]); matching
// torch index for index is the point, so the fast path is our own loop. It is memory-bound:
// forward copies whole rows (NHWC: C contiguous floats per output pixel; NCHW: a gather along W
// through a precomputed column table); backward is a gather per input element over the output
// rectangle that reads it (s is non-decreasing, so the rectangle is a pair of ranges), which
// needs no atomics and is deterministic.

#include <algorithm>
#include <cstring>
#include <vector>

#include "benchhost/nn/resample.hpp"
#include "nn/conv_common.hpp"
#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn {
namespace {

using conv_detail::act_offset;
using conv_detail::layout_attr;

struct Geometry {
  ImageDims x, y;  // forward input and output
  ImageLayout layout;
};

Geometry geometry(const OpCall& c, bool backward) {
  const ImageLayout layout = layout_attr(c.attrs);
  const auto& out = c.attrs.get_ints("out");
  BH_CHECK_AS(InvalidArgument, out.size() == 2, "upsample_nearest2d: attribute out=[h, w] missing");
  const Tensor& x_like = backward ? c.outputs[0] : c.inputs[0];
  const ImageDims x = image_dims(x_like.shape(), layout, "upsample_nearest2d");
  return {x, {x.n, x.c, out[0], out[1]}, layout};
}

/// s(d) for every output index d of one axis.
std::vector<std::int64_t> source_table(std::int64_t in, std::int64_t out) {
  std::vector<std::int64_t> t(static_cast<std::size_t>(out));
  for (std::int64_t d = 0; d < out; ++d) t[static_cast<std::size_t>(d)] = nearest_source_index(d, in, out);
  return t;
}

/// first[i] .. first[i + 1]: the output indices that read input index i (s is non-decreasing).
std::vector<std::int64_t> range_table(std::int64_t in, std::int64_t out) {
  std::vector<std::int64_t> first(static_cast<std::size_t>(in + 1), out);
  for (std::int64_t d = out - 1; d >= 0; --d) first[static_cast<std::size_t>(nearest_source_index(d, in, out))] = d;
  for (std::int64_t i = in - 1; i >= 0; --i)  // inputs no output reads: an empty range
    first[static_cast<std::size_t>(i)] = std::min(first[static_cast<std::size_t>(i)], first[static_cast<std::size_t>(i + 1)]);
  return first;
}

// ---- reference -------------------------------------------------------------------------------

void ref_forward(OpCall& c) {
  const Geometry g = geometry(c, false);
  const float* x = c.inputs[0].data<float>();
  float* y = c.outputs[0].data<float>();
  for (std::int64_t n = 0; n < g.y.n; ++n)
    for (std::int64_t ch = 0; ch < g.y.c; ++ch)
      for (std::int64_t oh = 0; oh < g.y.h; ++oh)
        for (std::int64_t ow = 0; ow < g.y.w; ++ow)
          y[act_offset(g.y, g.layout, n, ch, oh, ow)] =
              x[act_offset(g.x, g.layout, n, ch, nearest_source_index(oh, g.x.h, g.y.h),
                           nearest_source_index(ow, g.x.w, g.y.w))];
}

void ref_backward(OpCall& c) {
  const Geometry g = geometry(c, true);
  const float* dy = c.inputs[0].data<float>();
  Tensor& dx = c.outputs[0];
  std::vector<double> acc(static_cast<std::size_t>(dx.numel()), 0.0);
  for (std::int64_t n = 0; n < g.y.n; ++n)
    for (std::int64_t ch = 0; ch < g.y.c; ++ch)
      for (std::int64_t oh = 0; oh < g.y.h; ++oh)
        for (std::int64_t ow = 0; ow < g.y.w; ++ow)
          acc[static_cast<std::size_t>(act_offset(g.x, g.layout, n, ch, nearest_source_index(oh, g.x.h, g.y.h),
                                                  nearest_source_index(ow, g.x.w, g.y.w)))] +=
              dy[act_offset(g.y, g.layout, n, ch, oh, ow)];
  float* dxp = dx.data<float>();
  for (std::int64_t i = 0; i < dx.numel(); ++i) dxp[i] = static_cast<float>(acc[static_cast<std::size_t>(i)]);
}

// ---- oneTBB ----------------------------------------------------------------------------------

void tbb_forward(OpCall& c) {
  const Geometry g = geometry(c, false);
  const float* x = c.inputs[0].data<float>();
  float* y = c.outputs[0].data<float>();
  const std::vector<std::int64_t> sh = source_table(g.x.h, g.y.h), sw = source_table(g.x.w, g.y.w);
  if (g.layout == ImageLayout::nhwc) {
    const std::int64_t C = g.x.c;
    cpu::parallel_range(g.y.n * g.y.h, cpu::row_grain(g.y.w * C), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        const std::int64_t n = r / g.y.h, oh = r % g.y.h;
        const float* xrow = x + (n * g.x.h + sh[static_cast<std::size_t>(oh)]) * g.x.w * C;
        float* yrow = y + r * g.y.w * C;
        for (std::int64_t ow = 0; ow < g.y.w; ++ow)
          std::memcpy(yrow + ow * C, xrow + sw[static_cast<std::size_t>(ow)] * C, static_cast<std::size_t>(C) * sizeof(float));
      }
    });
  } else {
    cpu::parallel_range(g.y.n * g.y.c * g.y.h, cpu::row_grain(g.y.w), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        const std::int64_t plane = r / g.y.h, oh = r % g.y.h;
        const float* xrow = x + (plane * g.x.h + sh[static_cast<std::size_t>(oh)]) * g.x.w;
        float* yrow = y + r * g.y.w;
        for (std::int64_t ow = 0; ow < g.y.w; ++ow) yrow[ow] = xrow[sw[static_cast<std::size_t>(ow)]];
      }
    });
  }
}

void tbb_backward(OpCall& c) {
  const Geometry g = geometry(c, true);
  const float* dy = c.inputs[0].data<float>();
  float* dx = c.outputs[0].data<float>();
  const std::vector<std::int64_t> fh = range_table(g.x.h, g.y.h), fw = range_table(g.x.w, g.y.w);
  if (g.layout == ImageLayout::nhwc) {
    const std::int64_t C = g.x.c;
    cpu::parallel_range(g.x.n * g.x.h, cpu::row_grain(g.x.w * C), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        const std::int64_t n = r / g.x.h, ih = r % g.x.h;
        float* dxrow = dx + r * g.x.w * C;
        std::fill(dxrow, dxrow + g.x.w * C, 0.0f);
        for (std::int64_t oh = fh[static_cast<std::size_t>(ih)]; oh < fh[static_cast<std::size_t>(ih + 1)]; ++oh) {
          const float* dyrow = dy + (n * g.y.h + oh) * g.y.w * C;
          for (std::int64_t iw = 0; iw < g.x.w; ++iw) {
            float* o = dxrow + iw * C;
            for (std::int64_t ow = fw[static_cast<std::size_t>(iw)]; ow < fw[static_cast<std::size_t>(iw + 1)]; ++ow) {
              const float* s = dyrow + ow * C;
              for (std::int64_t ch = 0; ch < C; ++ch) o[ch] += s[ch];
            }
          }
        }
      }
    });
  } else {
    cpu::parallel_range(g.x.n * g.x.c * g.x.h, cpu::row_grain(g.x.w), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        const std::int64_t plane = r / g.x.h, ih = r % g.x.h;
        float* dxrow = dx + r * g.x.w;
        for (std::int64_t iw = 0; iw < g.x.w; ++iw) {
          float s = 0.0f;
          for (std::int64_t oh = fh[static_cast<std::size_t>(ih)]; oh < fh[static_cast<std::size_t>(ih + 1)]; ++oh) {
            const float* dyrow = dy + (plane * g.y.h + oh) * g.y.w;
            for (std::int64_t ow = fw[static_cast<std::size_t>(iw)]; ow < fw[static_cast<std::size_t>(iw + 1)]; ++ow) s += dyrow[ow];
          }
          dxrow[iw] = s;
        }
      }
    });
  }
}

OpImpl impl(const char* name, int priority, bool reference, void (*run)(OpCall&)) {
  OpImpl i;
  i.name = name;
  i.device = DeviceType::cpu;
  i.priority = priority;
  i.accepts = cpu::accept_f32;
  i.run = run;
  i.is_reference = reference;
  return i;
}

const bool registered = [] {
  register_op_impl("upsample_nearest2d_forward", impl("cpu.tbb", 50, false, tbb_forward));
  register_op_impl("upsample_nearest2d_backward", impl("cpu.tbb", 50, false, tbb_backward));
  register_op_impl("upsample_nearest2d_forward", impl("cpu.ref", 0, true, ref_forward));
  register_op_impl("upsample_nearest2d_backward", impl("cpu.ref", 0, true, ref_backward));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn
