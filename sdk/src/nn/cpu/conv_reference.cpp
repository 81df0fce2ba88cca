// Plain-loop reference implementations of the convolution, batch norm and pooling ops: the
// baseline of the parity test and of the unit tests. Written for obviousness, not speed: direct
// loops over the definitions, accumulation in double, any layout through act_offset().
// Registered last (priority 0, is_reference) so they only run when asked for by name or when
// no faster implementation accepts a call.

#include <cmath>
#include <limits>
#include <vector>

#include "nn/conv_common.hpp"

namespace benchhost::nn {

using namespace conv_detail;

namespace {

// ---- convolution ----

// Visit every (output element, kernel tap) pair that reads a valid input element.
template <class F>
void for_each_tap(const ConvGeometry& g, const Conv2dSpec& s, F&& f) {
  const std::int64_t og = g.out_channels / g.groups, ig = g.x.c / g.groups;
  for (std::int64_t n = 0; n < g.x.n; ++n)
    for (std::int64_t o = 0; o < g.out_channels; ++o) {
      const std::int64_t grp = o / og;
      for (std::int64_t oh = 0; oh < g.y.h; ++oh)
        for (std::int64_t ow = 0; ow < g.y.w; ++ow)
          for (std::int64_t ci = 0; ci < ig; ++ci)
            for (std::int64_t kh = 0; kh < g.kh; ++kh) {
              const std::int64_t ih = oh * s.stride_h - s.pad_h + kh * s.dilation_h;
              if (ih < 0 || ih >= g.x.h) continue;
              for (std::int64_t kw = 0; kw < g.kw; ++kw) {
                const std::int64_t iw = ow * s.stride_w - s.pad_w + kw * s.dilation_w;
                if (iw < 0 || iw >= g.x.w) continue;
                const std::int64_t x_off = act_offset(g.x, s.layout, n, grp * ig + ci, ih, iw);
                const std::int64_t y_off = act_offset(g.y, s.layout, n, o, oh, ow);
                const std::int64_t w_off = ((o * ig + ci) * g.kh + kh) * g.kw + kw;
                f(x_off, w_off, y_off);
              }
            }
    }
}

void ref_conv_forward(OpCall& call) {
  const Conv2dSpec s = conv_spec(call.attrs);
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  Tensor& y = call.outputs[0];
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), s);
  std::vector<double> acc(static_cast<std::size_t>(y.numel()), 0.0);
  const float *xp = x.data<float>(), *wp = w.data<float>();
  for_each_tap(g, s, [&](std::int64_t xo, std::int64_t wo, std::int64_t yo) {
    acc[yo] += static_cast<double>(xp[xo]) * wp[wo];
  });
  float* yp = y.data<float>();
  for (std::int64_t n = 0; n < g.y.n; ++n)
    for (std::int64_t o = 0; o < g.y.c; ++o)
      for (std::int64_t h = 0; h < g.y.h; ++h)
        for (std::int64_t q = 0; q < g.y.w; ++q) {
          const std::int64_t off = act_offset(g.y, s.layout, n, o, h, q);
          yp[off] = static_cast<float>(acc[off] + (bias.defined() ? bias.data<float>()[o] : 0.0));
        }
}

void ref_conv_backward_data(OpCall& call) {
  const Conv2dSpec s = conv_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &w = call.inputs[1];
  Tensor& dx = call.outputs[0];
  const ConvGeometry g = conv_geometry(dx.shape(), w.shape(), s);
  std::vector<double> acc(static_cast<std::size_t>(dx.numel()), 0.0);
  const float *dyp = dy.data<float>(), *wp = w.data<float>();
  for_each_tap(g, s, [&](std::int64_t xo, std::int64_t wo, std::int64_t yo) {
    acc[xo] += static_cast<double>(dyp[yo]) * wp[wo];
  });
  float* dxp = dx.data<float>();
  for (std::int64_t i = 0; i < dx.numel(); ++i) dxp[i] = static_cast<float>(acc[i]);
}

void ref_conv_backward_weights(OpCall& call) {
  const Conv2dSpec s = conv_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1];
  Tensor& dw = call.outputs[0];
  const Tensor dbias = call.outputs.size() > 1 ? call.outputs[1] : Tensor();
  const ConvGeometry g = conv_geometry(x.shape(), dw.shape(), s);
  std::vector<double> acc(static_cast<std::size_t>(dw.numel()), 0.0);
  const float *dyp = dy.data<float>(), *xp = x.data<float>();
  for_each_tap(g, s, [&](std::int64_t xo, std::int64_t wo, std::int64_t yo) {
    acc[wo] += static_cast<double>(dyp[yo]) * xp[xo];
  });
  float* dwp = dw.data<float>();
  for (std::int64_t i = 0; i < dw.numel(); ++i) dwp[i] += static_cast<float>(acc[i]);
  if (dbias.defined()) {
    float* db = dbias.data<float>();
    for (std::int64_t o = 0; o < g.y.c; ++o) {
      double sum = 0;
      for (std::int64_t n = 0; n < g.y.n; ++n)
        for (std::int64_t h = 0; h < g.y.h; ++h)
          for (std::int64_t q = 0; q < g.y.w; ++q)
            sum += dyp[act_offset(g.y, s.layout, n, o, h, q)];
      db[o] += static_cast<float>(sum);
    }
  }
}

// ---- batch norm ----

template <class F>
void for_each_in_channel(const ImageDims& d, ImageLayout layout, std::int64_t c, F&& f) {
  for (std::int64_t n = 0; n < d.n; ++n)
    for (std::int64_t h = 0; h < d.h; ++h)
      for (std::int64_t w = 0; w < d.w; ++w) f(act_offset(d, layout, n, c, h, w));
}

void ref_bn_forward(OpCall& call) {
  const BatchNormSpec s = bn_spec(call.attrs);
  const bool training = call.attrs.get_bool("training", true);
  const Tensor& x = call.inputs[0];
  const ImageDims d = image_dims(x.shape(), s.layout, "batch_norm_forward");
  const float *xp = x.data<float>(), *gp = call.inputs[1].data<float>(),
              *bp = call.inputs[2].data<float>();
  float *yp = call.outputs[0].data<float>(), *mp = call.outputs[1].data<float>(),
        *vp = call.outputs[2].data<float>();
  const double count = static_cast<double>(d.n * d.h * d.w);
  for (std::int64_t c = 0; c < d.c; ++c) {
    double mean, var;
    if (training) {
      double sum = 0;
      for_each_in_channel(d, s.layout, c, [&](std::int64_t i) { sum += xp[i]; });
      mean = sum / count;
      double sq = 0;
      for_each_in_channel(d, s.layout, c, [&](std::int64_t i) {
        sq += (xp[i] - mean) * (xp[i] - mean);
      });
      var = sq / count;
    } else {
      mean = call.inputs[3].data<float>()[c];
      var = call.inputs[4].data<float>()[c];
    }
    mp[c] = static_cast<float>(mean);
    vp[c] = static_cast<float>(var);
    const double inv = 1.0 / std::sqrt(var + s.eps);
    for_each_in_channel(d, s.layout, c, [&](std::int64_t i) {
      double v = gp[c] * (xp[i] - mean) * inv + bp[c];
      if (s.fuse_relu && v < 0) v = 0;
      yp[i] = static_cast<float>(v);
    });
  }
}

void ref_bn_backward(OpCall& call) {
  const BatchNormSpec s = bn_spec(call.attrs);
  const bool training = call.attrs.get_bool("training", true);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1];
  const ImageDims d = image_dims(x.shape(), s.layout, "batch_norm_backward");
  const float *dyp = dy.data<float>(), *xp = x.data<float>(), *gp = call.inputs[2].data<float>(),
              *mp = call.inputs[3].data<float>(), *vp = call.inputs[4].data<float>();
  const float* yp = s.fuse_relu ? call.inputs[5].data<float>() : nullptr;
  float *dxp = call.outputs[0].data<float>(), *dgp = call.outputs[1].data<float>(),
        *dbp = call.outputs[2].data<float>();
  const double count = static_cast<double>(d.n * d.h * d.w);
  auto grad = [&](std::int64_t i) -> double {
    return (yp != nullptr && !(yp[i] > 0.0f)) ? 0.0 : static_cast<double>(dyp[i]);
  };
  for (std::int64_t c = 0; c < d.c; ++c) {
    const double inv = 1.0 / std::sqrt(static_cast<double>(vp[c]) + s.eps);
    double sum_dy = 0, sum_dy_xhat = 0;
    for_each_in_channel(d, s.layout, c, [&](std::int64_t i) {
      const double g = grad(i);
      sum_dy += g;
      sum_dy_xhat += g * (xp[i] - mp[c]) * inv;
    });
    dbp[c] += static_cast<float>(sum_dy);
    dgp[c] += static_cast<float>(sum_dy_xhat);
    for_each_in_channel(d, s.layout, c, [&](std::int64_t i) {
      const double g = grad(i);
      if (!training) {
        dxp[i] = static_cast<float>(gp[c] * inv * g);
      } else {
        const double xhat = (xp[i] - mp[c]) * inv;
        dxp[i] = static_cast<float>(gp[c] * inv / count *
                                    (count * g - sum_dy - xhat * sum_dy_xhat));
      }
    });
  }
}

// ---- pooling ----

struct Window {
  std::int64_t h0, h1, w0, w1;  // valid input range [h0, h1) x [w0, w1)
};

Window window(const Pool2dSpec& s, const ImageDims& x, std::int64_t oh, std::int64_t ow) {
  const std::int64_t hs = oh * s.stride_h - s.pad_h, ws = ow * s.stride_w - s.pad_w;
  return {std::max<std::int64_t>(hs, 0), std::min(hs + s.kernel_h, x.h),
          std::max<std::int64_t>(ws, 0), std::min(ws + s.kernel_w, x.w)};
}

template <class F>
void for_each_output(const PoolGeometry& g, F&& f) {
  for (std::int64_t n = 0; n < g.y.n; ++n)
    for (std::int64_t c = 0; c < g.y.c; ++c)
      for (std::int64_t oh = 0; oh < g.y.h; ++oh)
        for (std::int64_t ow = 0; ow < g.y.w; ++ow) f(n, c, oh, ow);
}

std::int64_t argmax_in_window(const float* xp, const PoolGeometry& g, const Pool2dSpec& s,
                              std::int64_t n, std::int64_t c, std::int64_t oh, std::int64_t ow) {
  const Window wd = window(s, g.x, oh, ow);
  std::int64_t best = -1;
  float best_v = -std::numeric_limits<float>::infinity();
  for (std::int64_t h = wd.h0; h < wd.h1; ++h)
    for (std::int64_t w = wd.w0; w < wd.w1; ++w) {
      const std::int64_t off = act_offset(g.x, s.layout, n, c, h, w);
      if (best < 0 || xp[off] > best_v) {
        best = off;
        best_v = xp[off];
      }
    }
  return best;
}

void ref_max_forward(OpCall& call) {
  const Pool2dSpec s = pool_spec(call.attrs);
  const Tensor& x = call.inputs[0];
  const PoolGeometry g = pool_geometry(x.shape(), s, "max_pool2d_forward");
  const float* xp = x.data<float>();
  float* yp = call.outputs[0].data<float>();
  for_each_output(g, [&](std::int64_t n, std::int64_t c, std::int64_t oh, std::int64_t ow) {
    yp[act_offset(g.y, s.layout, n, c, oh, ow)] = xp[argmax_in_window(xp, g, s, n, c, oh, ow)];
  });
}

void ref_max_backward(OpCall& call) {
  const Pool2dSpec s = pool_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1];
  Tensor& dx = call.outputs[0];
  const PoolGeometry g = pool_geometry(x.shape(), s, "max_pool2d_backward");
  const float *dyp = dy.data<float>(), *xp = x.data<float>();
  std::vector<double> acc(static_cast<std::size_t>(dx.numel()), 0.0);
  for_each_output(g, [&](std::int64_t n, std::int64_t c, std::int64_t oh, std::int64_t ow) {
    acc[argmax_in_window(xp, g, s, n, c, oh, ow)] += dyp[act_offset(g.y, s.layout, n, c, oh, ow)];
  });
  float* dxp = dx.data<float>();
  for (std::int64_t i = 0; i < dx.numel(); ++i) dxp[i] = static_cast<float>(acc[i]);
}

double avg_divisor(const Pool2dSpec& s, const Window& wd) {
  if (s.count_include_pad) return static_cast<double>(s.kernel_h * s.kernel_w);
  return static_cast<double>((wd.h1 - wd.h0) * (wd.w1 - wd.w0));
}

void ref_avg_forward(OpCall& call) {
  const Pool2dSpec s = pool_spec(call.attrs);
  const Tensor& x = call.inputs[0];
  const PoolGeometry g = pool_geometry(x.shape(), s, "avg_pool2d_forward");
  const float* xp = x.data<float>();
  float* yp = call.outputs[0].data<float>();
  for_each_output(g, [&](std::int64_t n, std::int64_t c, std::int64_t oh, std::int64_t ow) {
    const Window wd = window(s, g.x, oh, ow);
    double sum = 0;
    for (std::int64_t h = wd.h0; h < wd.h1; ++h)
      for (std::int64_t w = wd.w0; w < wd.w1; ++w) sum += xp[act_offset(g.x, s.layout, n, c, h, w)];
    yp[act_offset(g.y, s.layout, n, c, oh, ow)] = static_cast<float>(sum / avg_divisor(s, wd));
  });
}

void ref_avg_backward(OpCall& call) {
  const Pool2dSpec s = pool_spec(call.attrs);
  const Tensor& dy = call.inputs[0];
  Tensor& dx = call.outputs[0];
  const PoolGeometry g = pool_geometry(dx.shape(), s, "avg_pool2d_backward");
  const float* dyp = dy.data<float>();
  std::vector<double> acc(static_cast<std::size_t>(dx.numel()), 0.0);
  for_each_output(g, [&](std::int64_t n, std::int64_t c, std::int64_t oh, std::int64_t ow) {
    const Window wd = window(s, g.x, oh, ow);
    const double v = dyp[act_offset(g.y, s.layout, n, c, oh, ow)] / avg_divisor(s, wd);
    for (std::int64_t h = wd.h0; h < wd.h1; ++h)
      for (std::int64_t w = wd.w0; w < wd.w1; ++w) acc[act_offset(g.x, s.layout, n, c, h, w)] += v;
  });
  float* dxp = dx.data<float>();
  for (std::int64_t i = 0; i < dx.numel(); ++i) dxp[i] = static_cast<float>(acc[i]);
}

OpImpl reference(std::function<void(OpCall&)> run) {
  OpImpl impl;
  impl.name = "cpu.ref";
  impl.device = DeviceType::cpu;
  impl.priority = 0;
  impl.accepts = [](const OpCall& call) -> std::string {
    for (const Tensor& t : call.inputs)
      if (t.defined() && (t.dtype() != DType::f32 || !t.device().is_cpu() || !t.is_contiguous()))
        return "needs contiguous f32 CPU tensors";
    return "";
  };
  impl.run = std::move(run);
  impl.is_reference = true;
  return impl;
}

const bool registered = [] {
  register_op_impl("conv2d_forward", reference(ref_conv_forward));
  register_op_impl("conv2d_backward_data", reference(ref_conv_backward_data));
  register_op_impl("conv2d_backward_weights", reference(ref_conv_backward_weights));
  register_op_impl("batch_norm_forward", reference(ref_bn_forward));
  register_op_impl("batch_norm_backward", reference(ref_bn_backward));
  register_op_impl("max_pool2d_forward", reference(ref_max_forward));
  register_op_impl("max_pool2d_backward", reference(ref_max_backward));
  register_op_impl("avg_pool2d_forward", reference(ref_avg_forward));
  register_op_impl("avg_pool2d_backward", reference(ref_avg_backward));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn
