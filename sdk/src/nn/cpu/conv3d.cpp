// 3-d convolution and transposed convolution: the op declarations (doc, example cases,
// tolerances), the oneDNN CPU implementations (convolution_* and deconvolution_* primitives on
// 5-d memory) and the plain-loop references. The public functions of nn/conv3d.hpp are in
// nn/conv3d.cpp; the calling conventions in nn/conv3d_common.hpp.
//
// Layout and precision: f32 activations in NCDHW or NDHWC, f32 weights in OIDHW (convolution)
// or IODHW (transposed: PyTorch's [I, O, k...], oneDNN's deconvolution weights are {O, I, k...}
// dims, so the same bytes are described with format tag iodhw), f32 accumulation inside oneDNN.
// Half-precision calls reach the oneDNN path through the registry's f32 promotion. As for the
// 2-d convolution (Note [Memory formats], Note [Primitive cache] in conv_dnnl.hpp): NDHWC
// activations are passed as they are (oneDNN has JIT kernels that read and write ndhwc), NCDHW
// ones are reordered into the blocked format the primitive asks for and back; weights are
// passed as "any" and reordered only when the primitive's format differs from the plain one;
// each primitive, with its reorders, is built once per (op, shapes, geometry, layout, bias).
// The 2-d transposed convolution (conv_transpose2d_*, Mask R-CNN's mask head) is declared here
// too and runs these implementations on its depth-1 view (Note [2-d transposed convolution as
// 3-d] in nn/conv_transpose2d_common.hpp).

#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "nn/conv3d_common.hpp"
#include "nn/conv_transpose2d_common.hpp"
#include "nn/conv_common.hpp"
#include "nn/cpu/conv_dnnl.hpp"

namespace benchhost::nn {

using namespace conv3d_detail;
using conv_detail::bytes_tensor;
using conv_detail::conv_random;
using conv_detail::cpu_engine;
using conv_detail::cpu_stream;
using conv_detail::make_reorder;
using conv_detail::onednn_impl;
using conv_detail::PrimitiveCache;
using conv_detail::run_reorder;
using conv_detail::Staged;
using conv_detail::vec_md;
using conv_detail::wrap;
using dnnl::memory;

namespace {

// =============================================================================================
// Plain-loop references
// =============================================================================================
//
// Written for obviousness, not speed: one loop nest over the definition of the convolution view
// (Note [Convolution view of a transposed convolution] in conv3d_common.hpp), accumulation in
// double, any layout through vol_offset(). For a transposed convolution the same loop is its
// definition read the other way: every input element x[n, c, p] scatters x * w[c, o, t] into
// y[n, o, p * stride - pad + t].

// Visit every (small element, weight tap, big element) triple where the tap reads a valid big
// element: f(big_offset, weight_offset, small_offset).
template <class F>
void for_each_tap(const Conv3dGeometry& g, const Conv3dSpec& s, F&& f) {
  const VolumeDims &b = g.big(), &sm = g.small();
  for (std::int64_t n = 0; n < sm.n; ++n)
    for (std::int64_t o = 0; o < sm.c; ++o)
      for (std::int64_t pd = 0; pd < sm.d; ++pd)
        for (std::int64_t ph = 0; ph < sm.h; ++ph)
          for (std::int64_t pw = 0; pw < sm.w; ++pw) {
            const std::int64_t so = vol_offset(sm, s.layout, n, o, pd, ph, pw);
            for (std::int64_t c = 0; c < b.c; ++c)
              for (std::int64_t td = 0; td < g.kd; ++td) {
                const std::int64_t bd = pd * s.stride_d - s.pad_d + td;
                if (bd < 0 || bd >= b.d) continue;
                for (std::int64_t th = 0; th < g.kh; ++th) {
                  const std::int64_t bh = ph * s.stride_h - s.pad_h + th;
                  if (bh < 0 || bh >= b.h) continue;
                  for (std::int64_t tw = 0; tw < g.kw; ++tw) {
                    const std::int64_t bw = pw * s.stride_w - s.pad_w + tw;
                    if (bw < 0 || bw >= b.w) continue;
                    const std::int64_t wo = (((o * b.c + c) * g.kd + td) * g.kh + th) * g.kw + tw;
                    f(vol_offset(b, s.layout, n, c, bd, bh, bw), wo, so);
                  }
                }
              }
          }
}

// Per-channel sums of an activation gradient of dims `v` (for the bias gradient).
std::vector<double> channel_sums(const float* p, const VolumeDims& v, VolumeLayout layout) {
  std::vector<double> sum(static_cast<std::size_t>(v.c), 0.0);
  for (std::int64_t n = 0; n < v.n; ++n)
    for (std::int64_t c = 0; c < v.c; ++c)
      for (std::int64_t d = 0; d < v.d; ++d)
        for (std::int64_t h = 0; h < v.h; ++h)
          for (std::int64_t w = 0; w < v.w; ++w)
            sum[static_cast<std::size_t>(c)] += p[vol_offset(v, layout, n, c, d, h, w)];
  return sum;
}

void store(const std::vector<double>& acc, Tensor& out, const Tensor& bias, const VolumeDims& v,
           VolumeLayout layout) {
  float* p = out.data<float>();
  for (std::int64_t n = 0; n < v.n; ++n)
    for (std::int64_t c = 0; c < v.c; ++c) {
      const double b = bias.defined() ? bias.data<float>()[c] : 0.0;
      for (std::int64_t d = 0; d < v.d; ++d)
        for (std::int64_t h = 0; h < v.h; ++h)
          for (std::int64_t w = 0; w < v.w; ++w) {
            const std::int64_t off = vol_offset(v, layout, n, c, d, h, w);
            p[off] = static_cast<float>(acc[static_cast<std::size_t>(off)] + b);
          }
    }
}

// {x, w, bias?} -> {y}
void ref_forward(OpCall& call, bool transposed) {
  const Conv3dSpec s = conv3d_spec(call.attrs);
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  Tensor& y = call.outputs[0];
  const Conv3dGeometry g = conv3d_geometry(x.shape(), w.shape(), s, transposed, "reference");
  std::vector<double> acc(static_cast<std::size_t>(y.numel()), 0.0);
  const float *xp = x.data<float>(), *wp = w.data<float>();
  if (!transposed)
    for_each_tap(g, s, [&](std::int64_t bo, std::int64_t wo, std::int64_t so) {
      acc[static_cast<std::size_t>(so)] += static_cast<double>(xp[bo]) * wp[wo];
    });
  else
    for_each_tap(g, s, [&](std::int64_t bo, std::int64_t wo, std::int64_t so) {
      acc[static_cast<std::size_t>(bo)] += static_cast<double>(xp[so]) * wp[wo];
    });
  store(acc, y, bias, g.y, s.layout);
}

// {dy, w} -> {dx}
void ref_backward_data(OpCall& call, bool transposed) {
  const Conv3dSpec s = conv3d_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &w = call.inputs[1];
  Tensor& dx = call.outputs[0];
  const Conv3dGeometry g = conv3d_geometry(dx.shape(), w.shape(), s, transposed, "reference");
  std::vector<double> acc(static_cast<std::size_t>(dx.numel()), 0.0);
  const float *dyp = dy.data<float>(), *wp = w.data<float>();
  if (!transposed)
    for_each_tap(g, s, [&](std::int64_t bo, std::int64_t wo, std::int64_t so) {
      acc[static_cast<std::size_t>(bo)] += static_cast<double>(dyp[so]) * wp[wo];
    });
  else
    for_each_tap(g, s, [&](std::int64_t bo, std::int64_t wo, std::int64_t so) {
      acc[static_cast<std::size_t>(so)] += static_cast<double>(dyp[bo]) * wp[wo];
    });
  store(acc, dx, Tensor(), g.x, s.layout);
}

// {dy, x} -> {dw +=, dbias +=?}
void ref_backward_weights(OpCall& call, bool transposed) {
  const Conv3dSpec s = conv3d_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1];
  Tensor& dw = call.outputs[0];
  const Tensor dbias = call.outputs.size() > 1 ? call.outputs[1] : Tensor();
  const Conv3dGeometry g = conv3d_geometry(x.shape(), dw.shape(), s, transposed, "reference");
  std::vector<double> acc(static_cast<std::size_t>(dw.numel()), 0.0);
  const float *dyp = dy.data<float>(), *xp = x.data<float>();
  // big * small over every tap: conv (big x, small dy), transposed (big dy, small x).
  const float* big = transposed ? dyp : xp;
  const float* small = transposed ? xp : dyp;
  for_each_tap(g, s, [&](std::int64_t bo, std::int64_t wo, std::int64_t so) {
    acc[static_cast<std::size_t>(wo)] += static_cast<double>(big[bo]) * small[so];
  });
  float* dwp = dw.data<float>();
  for (std::int64_t i = 0; i < dw.numel(); ++i)
    dwp[i] += static_cast<float>(acc[static_cast<std::size_t>(i)]);
  if (dbias.defined()) {
    const std::vector<double> sums = channel_sums(dyp, g.y, s.layout);
    float* db = dbias.data<float>();
    for (std::int64_t c = 0; c < g.y.c; ++c)
      db[c] += static_cast<float>(sums[static_cast<std::size_t>(c)]);
  }
}

std::string ref_accepts(const OpCall& call) {
  for (const auto* list : {&call.inputs, &call.outputs})
    for (const Tensor& t : *list)
      if (t.defined() && (t.dtype() != DType::f32 || !t.device().is_cpu() || !t.is_contiguous()))
        return "needs contiguous f32 CPU tensors";
  return "";
}

OpImpl reference(void (*run)(OpCall&, bool), bool transposed) {
  OpImpl impl;
  impl.name = "cpu.ref";
  impl.device = DeviceType::cpu;
  impl.priority = 0;
  impl.accepts = ref_accepts;
  impl.run = [run, transposed](OpCall& call) { run(call, transposed); };
  impl.is_reference = true;
  return impl;
}

// =============================================================================================
// oneDNN
// =============================================================================================

// The primitive families of the two ops: the same descriptors, another algorithm, and the
// weights' plain format (Note [Convolution view of a transposed convolution]: both weight
// tensors hold [small.c, big.c, k...]; oneDNN's dims are {O, I, k...} of the op, so the
// transposed convolution's [I, O, k...] bytes are "iodhw").
struct ConvFamily {
  using Fwd = dnnl::convolution_forward;
  using BwdData = dnnl::convolution_backward_data;
  using BwdWeights = dnnl::convolution_backward_weights;
  static constexpr dnnl::algorithm kAlgorithm = dnnl::algorithm::convolution_direct;
  static constexpr memory::format_tag kWeightTag = memory::format_tag::oidhw;
  static constexpr const char* kName = "conv3d";
};

struct DeconvFamily {
  using Fwd = dnnl::deconvolution_forward;
  using BwdData = dnnl::deconvolution_backward_data;
  using BwdWeights = dnnl::deconvolution_backward_weights;
  static constexpr dnnl::algorithm kAlgorithm = dnnl::algorithm::deconvolution_direct;
  static constexpr memory::format_tag kWeightTag = memory::format_tag::iodhw;
  static constexpr const char* kName = "conv_transpose3d";
};

memory::dims dims5(const VolumeDims& v) { return {v.n, v.c, v.d, v.h, v.w}; }

memory::desc act_md(const VolumeDims& v, VolumeLayout layout) {
  return memory::desc(dims5(v), memory::data_type::f32,
                      layout == VolumeLayout::ncdhw ? memory::format_tag::ncdhw
                                                    : memory::format_tag::ndhwc);
}

memory::desc any_md(const memory::desc& like) {
  return memory::desc(like.dims(), memory::data_type::f32, memory::format_tag::any);
}

/// What the primitive is given for an activation: plain ndhwc as is, "any" for ncdhw.
memory::desc prim_act_md(const VolumeDims& v, VolumeLayout layout) {
  const memory::desc user = act_md(v, layout);
  return layout == VolumeLayout::ndhwc ? user : any_md(user);
}

template <class Family>
memory::desc user_weight_md(const Conv3dGeometry& g) {
  return memory::desc({g.y.c, g.x.c, g.kd, g.kh, g.kw}, memory::data_type::f32,
                      Family::kWeightTag);
}

std::string prim_key(const char* op, const Conv3dGeometry& g, const Conv3dSpec& s, bool bias) {
  return fmt::format("{}|{}|{}x{}x{}x{}x{}|o{}k{}x{}x{}|s{}x{}x{}p{}x{}x{}|b{}", op,
                     volume_layout_name(s.layout), g.x.n, g.x.c, g.x.d, g.x.h, g.x.w, g.y.c, g.kd,
                     g.kh, g.kw, s.stride_d, s.stride_h, s.stride_w, s.pad_d, s.pad_h, s.pad_w,
                     bias ? 1 : 0);
}


struct Geometry3 {
  memory::dims strides, dilates, pad;
};

Geometry3 dnnl_geometry(const Conv3dSpec& s) {
  return {{s.stride_d, s.stride_h, s.stride_w}, {0, 0, 0}, {s.pad_d, s.pad_h, s.pad_w}};
}

template <class Family>
typename Family::Fwd::desc fwd_desc(const Conv3dGeometry& g, const Conv3dSpec& s, bool bias) {
  const Geometry3 q = dnnl_geometry(s);
  const memory::desc w_any = any_md(user_weight_md<Family>(g));
  if (bias)
    return typename Family::Fwd::desc(dnnl::prop_kind::forward_training, Family::kAlgorithm,
                                      prim_act_md(g.x, s.layout), w_any, vec_md(g.y.c),
                                      prim_act_md(g.y, s.layout), q.strides, q.dilates, q.pad,
                                      q.pad);
  return typename Family::Fwd::desc(dnnl::prop_kind::forward_training, Family::kAlgorithm,
                                    prim_act_md(g.x, s.layout), w_any, prim_act_md(g.y, s.layout),
                                    q.strides, q.dilates, q.pad, q.pad);
}

template <class Family>
struct Fwd {
  typename Family::Fwd::primitive_desc pd;
  typename Family::Fwd prim;
  Staged src, weights, dst;
};

template <class Family>
struct BwdData {
  typename Family::BwdData::primitive_desc pd;
  typename Family::BwdData prim;
  Staged diff_dst, weights, diff_src;
};

template <class Family>
struct BwdWeights {
  typename Family::BwdWeights::primitive_desc pd;
  typename Family::BwdWeights prim;
  Staged src, diff_dst, diff_weights;
};

template <class Family>
void onednn_forward(OpCall& call) {
  static PrimitiveCache<Fwd<Family>> cache;
  const Conv3dSpec s = conv3d_spec(call.attrs);
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  Tensor& y = call.outputs[0];
  const bool transposed = std::is_same_v<Family, DeconvFamily>;
  const Conv3dGeometry g = conv3d_geometry(x.shape(), w.shape(), s, transposed, Family::kName);
  const bool has_bias = bias.defined();
  Fwd<Family>& e = cache.get(prim_key("fwd", g, s, has_bias), [&] {
    auto r = std::make_unique<Fwd<Family>>();
    r->pd = typename Family::Fwd::primitive_desc(fwd_desc<Family>(g, s, has_bias), cpu_engine());
    r->prim = typename Family::Fwd(r->pd);
    r->src.init(act_md(g.x, s.layout), r->pd.src_desc(), true, false);
    r->weights.init(user_weight_md<Family>(g), r->pd.weights_desc(), true, false);
    r->dst.init(act_md(g.y, s.layout), r->pd.dst_desc(), false, true);
    return r;
  });
  Tensor xs, ws, ys;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src.input(x, xs)},
                                       {DNNL_ARG_WEIGHTS, e.weights.input(w, ws)},
                                       {DNNL_ARG_DST, e.dst.output(y, ys)}};
  if (has_bias) args.emplace(DNNL_ARG_BIAS, wrap(vec_md(g.y.c), bias));
  e.prim.execute(cpu_stream(), args);
  e.dst.finish(y, ys);
  cpu_stream().wait();
}

template <class Family>
void onednn_backward_data(OpCall& call) {
  static PrimitiveCache<BwdData<Family>> cache;
  const Conv3dSpec s = conv3d_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &w = call.inputs[1];
  Tensor& dx = call.outputs[0];
  const bool transposed = std::is_same_v<Family, DeconvFamily>;
  const Conv3dGeometry g = conv3d_geometry(dx.shape(), w.shape(), s, transposed, Family::kName);
  BwdData<Family>& e = cache.get(prim_key("bwd_data", g, s, false), [&] {
    auto r = std::make_unique<BwdData<Family>>();
    auto hint = typename Family::Fwd::primitive_desc(fwd_desc<Family>(g, s, false), cpu_engine());
    const Geometry3 q = dnnl_geometry(s);
    typename Family::BwdData::desc d(Family::kAlgorithm, prim_act_md(g.x, s.layout),
                                     any_md(user_weight_md<Family>(g)),
                                     prim_act_md(g.y, s.layout), q.strides, q.dilates, q.pad,
                                     q.pad);
    r->pd = typename Family::BwdData::primitive_desc(d, cpu_engine(), hint);
    r->prim = typename Family::BwdData(r->pd);
    r->diff_dst.init(act_md(g.y, s.layout), r->pd.diff_dst_desc(), true, false);
    r->weights.init(user_weight_md<Family>(g), r->pd.weights_desc(), true, false);
    r->diff_src.init(act_md(g.x, s.layout), r->pd.diff_src_desc(), false, true);
    return r;
  });
  Tensor dys, ws, dxs;
  e.prim.execute(cpu_stream(), {{DNNL_ARG_DIFF_DST, e.diff_dst.input(dy, dys)},
                                {DNNL_ARG_WEIGHTS, e.weights.input(w, ws)},
                                {DNNL_ARG_DIFF_SRC, e.diff_src.output(dx, dxs)}});
  e.diff_src.finish(dx, dxs);
  cpu_stream().wait();
}

template <class Family>
void onednn_backward_weights(OpCall& call) {
  static PrimitiveCache<BwdWeights<Family>> cache;
  const Conv3dSpec s = conv3d_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1];
  Tensor& dw = call.outputs[0];
  Tensor dbias = call.outputs.size() > 1 ? call.outputs[1] : Tensor();
  const bool transposed = std::is_same_v<Family, DeconvFamily>;
  const Conv3dGeometry g = conv3d_geometry(x.shape(), dw.shape(), s, transposed, Family::kName);
  const bool has_bias = dbias.defined();
  BwdWeights<Family>& e = cache.get(prim_key("bwd_weights", g, s, has_bias), [&] {
    auto r = std::make_unique<BwdWeights<Family>>();
    auto hint =
        typename Family::Fwd::primitive_desc(fwd_desc<Family>(g, s, has_bias), cpu_engine());
    const Geometry3 q = dnnl_geometry(s);
    const memory::desc w_any = any_md(user_weight_md<Family>(g));
    auto d = has_bias ? typename Family::BwdWeights::desc(
                            Family::kAlgorithm, prim_act_md(g.x, s.layout), w_any, vec_md(g.y.c),
                            prim_act_md(g.y, s.layout), q.strides, q.dilates, q.pad, q.pad)
                      : typename Family::BwdWeights::desc(
                            Family::kAlgorithm, prim_act_md(g.x, s.layout), w_any,
                            prim_act_md(g.y, s.layout), q.strides, q.dilates, q.pad, q.pad);
    r->pd = typename Family::BwdWeights::primitive_desc(d, cpu_engine(), hint);
    r->prim = typename Family::BwdWeights(r->pd);
    r->src.init(act_md(g.x, s.layout), r->pd.src_desc(), true, false);
    r->diff_dst.init(act_md(g.y, s.layout), r->pd.diff_dst_desc(), true, false);
    // The primitive overwrites its output and gradients accumulate: the result goes through
    // scratch and a reorder with a sum post-op into the parameter gradient (as in conv2d.cpp).
    r->diff_weights.init(user_weight_md<Family>(g), r->pd.diff_weights_desc(), false, true,
                         /*accumulate_out=*/true, /*force=*/true);
    return r;
  });
  Tensor xs, dys, dws;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src.input(x, xs)},
                                       {DNNL_ARG_DIFF_DST, e.diff_dst.input(dy, dys)},
                                       {DNNL_ARG_DIFF_WEIGHTS, e.diff_weights.output(dw, dws)}};
  Tensor db_scratch;
  if (has_bias) {
    db_scratch = Tensor::empty({g.y.c});
    args.emplace(DNNL_ARG_DIFF_BIAS, wrap(vec_md(g.y.c), db_scratch));
  }
  e.prim.execute(cpu_stream(), args);
  e.diff_weights.finish(dw, dws);
  cpu_stream().wait();
  if (has_bias) {
    float* dst = dbias.data<float>();
    const float* src = db_scratch.data<float>();
    for (std::int64_t i = 0; i < g.y.c; ++i) dst[i] += src[i];
  }
}

std::string onednn_accepts(const OpCall& call) {
  for (const auto* list : {&call.inputs, &call.outputs})
    for (const Tensor& t : *list)
      if (t.defined() &&
          (t.dtype() != DType::f32 || !t.device().is_cpu() || !t.is_contiguous()))
        return "needs contiguous f32 CPU tensors";
  return "";
}

// =============================================================================================
// Example cases for the parity walk
// =============================================================================================

// One example: the spec, channels in and out, kernel, input spatial size, bias.
struct Example {
  Conv3dSpec spec;
  std::int64_t in_c, out_c, k;
  VolumeDims x;  // n, c (= in_c), d, h, w
  bool bias;
};

Conv3dSpec spec_of(VolumeLayout layout, std::int64_t stride, std::int64_t pad) {
  Conv3dSpec s;
  s.stride_d = s.stride_h = s.stride_w = stride;
  s.pad_d = s.pad_h = s.pad_w = pad;
  s.layout = layout;
  return s;
}

// Both layouts; stride 1 and 2, padding, bias on and off, odd sizes. The last one per layout
// (NDHWC, 8 -> 8 channels, no bias) is a shape cuDNN runs natively in f16/bf16.
std::vector<Example> examples(bool transposed) {
  std::vector<Example> v;
  for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc}) {
    if (!transposed) {
      v.push_back({spec_of(layout, 1, 1), 3, 4, 3, {2, 3, 5, 4, 3}, true});    // 3D U-Net k3 s1 p1
      v.push_back({spec_of(layout, 2, 1), 4, 5, 3, {2, 4, 7, 6, 5}, false});   // k3 s2 p1
      v.push_back({spec_of(layout, 1, 0), 5, 3, 1, {1, 5, 3, 4, 5}, true});    // 1x1x1 head
      Conv3dSpec mixed = spec_of(layout, 2, 0);
      mixed.stride_h = 1;
      mixed.pad_w = 1;
      v.push_back({mixed, 2, 3, 2, {1, 2, 5, 3, 4}, false});                  // anisotropic
    } else {
      v.push_back({spec_of(layout, 2, 0), 4, 3, 2, {2, 4, 3, 2, 3}, true});    // 3D U-Net k2 s2
      v.push_back({spec_of(layout, 2, 1), 3, 5, 3, {2, 3, 3, 4, 2}, false});   // k3 s2 p1
      v.push_back({spec_of(layout, 1, 1), 3, 2, 3, {1, 3, 4, 3, 5}, true});    // k3 s1 p1
      Conv3dSpec mixed = spec_of(layout, 2, 0);
      mixed.stride_w = 3;
      mixed.pad_h = 1;
      v.push_back({mixed, 2, 3, 3, {1, 2, 2, 3, 2}, false});                  // anisotropic
    }
  }
  v.push_back({spec_of(VolumeLayout::ndhwc, transposed ? 2 : 1, transposed ? 0 : 1), 8, 8,
               transposed ? 2 : 3, {1, 8, 4, 3, 4}, false});
  return v;
}

Shape weight_shape(const Example& e, bool transposed) {
  return transposed ? Shape{e.in_c, e.out_c, e.k, e.k, e.k} : Shape{e.out_c, e.in_c, e.k, e.k, e.k};
}

Shape output_shape(const Example& e, bool transposed) {
  const Shape xs = volume_shape(e.x, e.spec.layout);
  return volume_shape(
      conv3d_geometry(xs, weight_shape(e, transposed), e.spec, transposed, "example").y,
      e.spec.layout);
}

std::vector<OpCall> forward_cases(std::uint64_t seed, bool transposed) {
  std::vector<OpCall> out;
  std::uint64_t k = 0;
  for (const Example& e : examples(transposed)) {
    OpCall c;
    c.inputs = {conv_random(volume_shape(e.x, e.spec.layout), seed + 10 * k + 1),
                conv_random(weight_shape(e, transposed), seed + 10 * k + 2),
                e.bias ? conv_random({e.out_c}, seed + 10 * k + 3) : Tensor()};
    c.outputs = {Tensor::empty(output_shape(e, transposed))};
    c.attrs = conv3d_attrs(e.spec);
    out.push_back(c);
    ++k;
  }
  return out;
}

std::vector<OpCall> backward_data_cases(std::uint64_t seed, bool transposed) {
  std::vector<OpCall> out;
  std::uint64_t k = 0;
  for (const Example& e : examples(transposed)) {
    OpCall c;
    c.inputs = {conv_random(output_shape(e, transposed), seed + 10 * k + 1),
                conv_random(weight_shape(e, transposed), seed + 10 * k + 2)};
    c.outputs = {Tensor::empty(volume_shape(e.x, e.spec.layout))};
    c.attrs = conv3d_attrs(e.spec);
    out.push_back(c);
    ++k;
  }
  return out;
}

std::vector<OpCall> backward_weights_cases(std::uint64_t seed, bool transposed) {
  std::vector<OpCall> out;
  std::uint64_t k = 0;
  for (const Example& e : examples(transposed)) {
    OpCall c;
    c.inputs = {conv_random(output_shape(e, transposed), seed + 10 * k + 1),
                conv_random(volume_shape(e.x, e.spec.layout), seed + 10 * k + 2)};
    // Accumulating outputs start from non-zero values so that "+=" is exercised.
    c.outputs = {conv_random(weight_shape(e, transposed), seed + 10 * k + 3),
                 e.bias ? conv_random({e.out_c}, seed + 10 * k + 4) : Tensor()};
    c.attrs = conv3d_attrs(e.spec);
    out.push_back(c);
    ++k;
  }
  return out;
}

// ---- 2-d transposed convolution (Note [2-d transposed convolution as 3-d]) ----

struct Example2d {
  Conv2dSpec spec;
  std::int64_t in_c, out_c, kh, kw;
  ImageDims x;
  bool bias;
};

Conv2dSpec spec2d_of(ImageLayout layout, std::int64_t stride, std::int64_t pad) {
  Conv2dSpec s;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.layout = layout;
  return s;
}

// Both layouts: the mask head's k2 s2 with bias (few channels, a 14x14 RoI in NCHW), k3 s2 p1,
// k3 s1 p1, anisotropic stride / padding / kernel; the last (NHWC, 8 -> 8, no bias) is a shape
// cuDNN runs natively in f16/bf16.
std::vector<Example2d> examples_2d() {
  std::vector<Example2d> v;
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    v.push_back({spec2d_of(layout, 2, 0), 4, 3, 2, 2, {3, 4, layout == ImageLayout::nchw ? 14 : 5, 5}, true});
    v.push_back({spec2d_of(layout, 2, 1), 3, 5, 3, 3, {2, 3, 4, 3}, false});
    v.push_back({spec2d_of(layout, 1, 1), 3, 2, 3, 3, {1, 3, 5, 4}, true});
    Conv2dSpec mixed = spec2d_of(layout, 2, 0);
    mixed.stride_w = 3;
    mixed.pad_h = 1;
    v.push_back({mixed, 2, 3, 3, 2, {2, 2, 3, 4}, false});
  }
  v.push_back({spec2d_of(ImageLayout::nhwc, 2, 0), 8, 8, 2, 2, {2, 8, 4, 3}, false});
  return v;
}

Shape weight_shape_2d(const Example2d& e) { return {e.in_c, e.out_c, e.kh, e.kw}; }

Shape output_shape_2d(const Example2d& e) {
  const Conv3dGeometry g = conv_transpose2d_detail::conv_transpose2d_geometry(
      image_shape(e.x, e.spec.layout), weight_shape_2d(e), e.spec, "example");
  return image_shape({g.y.n, g.y.c, g.y.h, g.y.w}, e.spec.layout);
}

std::vector<OpCall> forward_cases_2d(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t k = 0;
  for (const Example2d& e : examples_2d()) {
    OpCall c;
    c.inputs = {conv_random(image_shape(e.x, e.spec.layout), seed + 10 * k + 1),
                conv_random(weight_shape_2d(e), seed + 10 * k + 2),
                e.bias ? conv_random({e.out_c}, seed + 10 * k + 3) : Tensor()};
    c.outputs = {Tensor::empty(output_shape_2d(e))};
    c.attrs = conv_transpose2d_detail::conv_transpose2d_attrs(e.spec);
    out.push_back(c);
    ++k;
  }
  return out;
}

std::vector<OpCall> backward_data_cases_2d(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t k = 0;
  for (const Example2d& e : examples_2d()) {
    OpCall c;
    c.inputs = {conv_random(output_shape_2d(e), seed + 10 * k + 1), conv_random(weight_shape_2d(e), seed + 10 * k + 2)};
    c.outputs = {Tensor::empty(image_shape(e.x, e.spec.layout))};
    c.attrs = conv_transpose2d_detail::conv_transpose2d_attrs(e.spec);
    out.push_back(c);
    ++k;
  }
  return out;
}

std::vector<OpCall> backward_weights_cases_2d(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t k = 0;
  for (const Example2d& e : examples_2d()) {
    OpCall c;
    c.inputs = {conv_random(output_shape_2d(e), seed + 10 * k + 1),
                conv_random(image_shape(e.x, e.spec.layout), seed + 10 * k + 2)};
    // Accumulating outputs start from non-zero values so that "+=" is exercised.
    c.outputs = {conv_random(weight_shape_2d(e), seed + 10 * k + 3),
                 e.bias ? conv_random({e.out_c}, seed + 10 * k + 4) : Tensor()};
    c.attrs = conv_transpose2d_detail::conv_transpose2d_attrs(e.spec);
    out.push_back(c);
    ++k;
  }
  return out;
}

const bool registered_2d = [] {
  namespace d2 = conv_transpose2d_detail;
  // Up to 4 * 9 products per output element in f32: 1e-4 as for the 3-d op.
  register_op({"conv_transpose2d_forward",
               "{x [N,I,H,W] or [N,H,W,I], w [I,O,KH,KW], bias [O]?} -> {y}, out = (in - 1) * stride - 2 * "
               "pad + k; attrs stride=[h,w], pad=[h,w], layout (0 nchw, 1 nhwc)",
               forward_cases_2d, 1e-4, 1e-4, {}});
  register_op({"conv_transpose2d_backward_data", "{dy, w [I,O,KH,KW]} -> {dx}; attrs as conv_transpose2d_forward",
               backward_data_cases_2d, 1e-4, 1e-4, {}});
  register_op({"conv_transpose2d_backward_weights", "{dy, x} -> {dw +=, dbias +=?}; attrs as conv_transpose2d_forward",
               backward_weights_cases_2d, 1e-4, 1e-4, {}});
  register_op_impl("conv_transpose2d_forward",
                   d2::on_3d_view(onednn_impl(onednn_accepts, onednn_forward<DeconvFamily>), d2::forward_3d));
  register_op_impl("conv_transpose2d_backward_data",
                   d2::on_3d_view(onednn_impl(onednn_accepts, onednn_backward_data<DeconvFamily>), d2::backward_data_3d));
  register_op_impl("conv_transpose2d_backward_weights",
                   d2::on_3d_view(onednn_impl(onednn_accepts, onednn_backward_weights<DeconvFamily>), d2::backward_weights_3d));
  register_op_impl("conv_transpose2d_forward", d2::on_3d_view(reference(ref_forward, true), d2::forward_3d));
  register_op_impl("conv_transpose2d_backward_data", d2::on_3d_view(reference(ref_backward_data, true), d2::backward_data_3d));
  register_op_impl("conv_transpose2d_backward_weights",
                   d2::on_3d_view(reference(ref_backward_weights, true), d2::backward_weights_3d));
  return true;
}();

const bool registered = [] {
  // Up to 4 * 27 * 5 products per output element in f32: 1e-4 as for conv2d.
  register_op({"conv3d_forward",
               "{x [N,C,D,H,W] or [N,D,H,W,C], w [O,C,KD,KH,KW], bias [O]?} -> {y}; attrs "
               "stride=[d,h,w], pad=[d,h,w], layout (0 ncdhw, 1 ndhwc)",
               [](std::uint64_t seed) { return forward_cases(seed, false); }, 1e-4, 1e-4, {}});
  register_op({"conv3d_backward_data",
               "{dy, w [O,C,KD,KH,KW]} -> {dx} (dx has the forward input's shape); attrs as "
               "conv3d_forward",
               [](std::uint64_t seed) { return backward_data_cases(seed, false); }, 1e-4, 1e-4,
               {}});
  register_op({"conv3d_backward_weights",
               "{dy, x} -> {dw +=, dbias +=?}; attrs as conv3d_forward",
               [](std::uint64_t seed) { return backward_weights_cases(seed, false); }, 1e-4, 1e-4,
               {}});
  register_op({"conv_transpose3d_forward",
               "{x [N,I,D,H,W] or [N,D,H,W,I], w [I,O,KD,KH,KW], bias [O]?} -> {y}, out = (in - "
               "1) * stride - 2 * pad + k; attrs stride=[d,h,w], pad=[d,h,w], layout",
               [](std::uint64_t seed) { return forward_cases(seed, true); }, 1e-4, 1e-4, {}});
  register_op({"conv_transpose3d_backward_data",
               "{dy, w [I,O,KD,KH,KW]} -> {dx}; attrs as conv_transpose3d_forward",
               [](std::uint64_t seed) { return backward_data_cases(seed, true); }, 1e-4, 1e-4,
               {}});
  register_op({"conv_transpose3d_backward_weights",
               "{dy, x} -> {dw +=, dbias +=?}; attrs as conv_transpose3d_forward",
               [](std::uint64_t seed) { return backward_weights_cases(seed, true); }, 1e-4, 1e-4,
               {}});
  register_op_impl("conv3d_forward", onednn_impl(onednn_accepts, onednn_forward<ConvFamily>));
  register_op_impl("conv3d_backward_data",
                   onednn_impl(onednn_accepts, onednn_backward_data<ConvFamily>));
  register_op_impl("conv3d_backward_weights",
                   onednn_impl(onednn_accepts, onednn_backward_weights<ConvFamily>));
  register_op_impl("conv_transpose3d_forward",
                   onednn_impl(onednn_accepts, onednn_forward<DeconvFamily>));
  register_op_impl("conv_transpose3d_backward_data",
                   onednn_impl(onednn_accepts, onednn_backward_data<DeconvFamily>));
  register_op_impl("conv_transpose3d_backward_weights",
                   onednn_impl(onednn_accepts, onednn_backward_weights<DeconvFamily>));
  register_op_impl("conv3d_forward", reference(ref_forward, false));
  register_op_impl("conv3d_backward_data", reference(ref_backward_data, false));
  register_op_impl("conv3d_backward_weights", reference(ref_backward_weights, false));
  register_op_impl("conv_transpose3d_forward", reference(ref_forward, true));
  register_op_impl("conv_transpose3d_backward_data", reference(ref_backward_data, true));
  register_op_impl("conv_transpose3d_backward_weights", reference(ref_backward_weights, true));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn
