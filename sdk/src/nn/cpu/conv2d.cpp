// 2-d convolution: the op declarations and the oneDNN CPU implementation (forward, backward
// data, backward weights). The public functions of nn/conv.hpp are in nn/conv.cpp.
//
// Layout and precision: fp32 activations in NCHW or NHWC, fp32 weights in OIHW (groups: the
// same bytes read as GOIHW), fp32 accumulation inside oneDNN. See Note [Memory formats] and
// Note [Primitive cache] in conv_dnnl.hpp for how formats are chosen and primitives reused.

#include <algorithm>

#include <fmt/format.h>

#include "benchhost/random.hpp"
#include "nn/conv_common.hpp"
#include "nn/cpu/conv_dnnl.hpp"

namespace benchhost::nn {

using namespace conv_detail;
using dnnl::memory;

namespace conv_detail {
Tensor conv_random(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed, 0xc0);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(-1.0f, 1.0f);
  return t;
}
}  // namespace conv_detail

// ---------------------------------------------------------------------------------------------
// oneDNN implementation
// ---------------------------------------------------------------------------------------------

namespace {

std::string conv_key(const char* op, const ConvGeometry& g, const Conv2dSpec& s, bool bias) {
  return fmt::format("{}|{}|{}x{}x{}x{}|o{}k{}x{}|s{}x{}p{}x{}d{}x{}g{}|b{}", op,
                     image_layout_name(s.layout), g.x.n, g.x.c, g.x.h, g.x.w, g.out_channels, g.kh,
                     g.kw, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dilation_h, s.dilation_w,
                     s.groups, bias ? 1 : 0);
}

memory::desc user_weight_md(const ConvGeometry& g) {
  if (g.groups == 1)
    return memory::desc({g.out_channels, g.x.c, g.kh, g.kw}, memory::data_type::f32,
                        memory::format_tag::oihw);
  return memory::desc({g.groups, g.out_channels / g.groups, g.x.c / g.groups, g.kh, g.kw},
                      memory::data_type::f32, memory::format_tag::goihw);
}

memory::desc any_md(const memory::desc& like) {
  return memory::desc(like.dims(), memory::data_type::f32, memory::format_tag::any);
}

/// Activation descriptor handed to the primitive: plain nhwc as is; "any" for nchw (Note
/// [Memory formats]).
memory::desc prim_act_md(const ImageDims& d, ImageLayout layout) {
  const memory::desc user = act_md(d, layout);
  return layout == ImageLayout::nhwc ? user : any_md(user);
}


dnnl::convolution_forward::desc fwd_desc(const ConvGeometry& g, const Conv2dSpec& s, bool bias) {
  const memory::desc w_any = any_md(user_weight_md(g));
  const memory::dims strides{s.stride_h, s.stride_w}, dil{s.dilation_h - 1, s.dilation_w - 1},
      pad{s.pad_h, s.pad_w};
  if (bias)
    return dnnl::convolution_forward::desc(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
        prim_act_md(g.x, s.layout), w_any, vec_md(g.out_channels), prim_act_md(g.y, s.layout),
        strides, dil, pad, pad);
  return dnnl::convolution_forward::desc(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
      prim_act_md(g.x, s.layout), w_any, prim_act_md(g.y, s.layout), strides, dil, pad, pad);
}

// Staged members are only touched under the entry's use, which is serialised per entry: the
// reorder primitives are stateless, so concurrent use from several threads is fine.
struct ConvFwd {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  Staged src, weights, dst;
};

struct ConvBwdData {
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
  Staged diff_dst, weights, diff_src;
};

struct ConvBwdWeights {
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
  Staged src, diff_dst, diff_weights;
};

PrimitiveCache<ConvFwd> g_fwd_cache;
PrimitiveCache<ConvBwdData> g_bwd_data_cache;
PrimitiveCache<ConvBwdWeights> g_bwd_weights_cache;

void onednn_forward(OpCall& call) {
  const Conv2dSpec s = conv_spec(call.attrs);
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  Tensor& y = call.outputs[0];
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), s);
  const bool has_bias = bias.defined();
  ConvFwd& e = g_fwd_cache.get(conv_key("fwd", g, s, has_bias), [&] {
    auto r = std::make_unique<ConvFwd>();
    r->pd = dnnl::convolution_forward::primitive_desc(fwd_desc(g, s, has_bias), cpu_engine());
    r->prim = dnnl::convolution_forward(r->pd);
    r->src.init(act_md(g.x, s.layout), r->pd.src_desc(), true, false);
    r->weights.init(user_weight_md(g), r->pd.weights_desc(), true, false);
    r->dst.init(act_md(g.y, s.layout), r->pd.dst_desc(), false, true);
    return r;
  });
  Tensor xs, ws, ys;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src.input(x, xs)},
                                       {DNNL_ARG_WEIGHTS, e.weights.input(w, ws)},
                                       {DNNL_ARG_DST, e.dst.output(y, ys)}};
  if (has_bias) args.emplace(DNNL_ARG_BIAS, wrap(vec_md(g.out_channels), bias));
  e.prim.execute(cpu_stream(), args);
  e.dst.finish(y, ys);
  cpu_stream().wait();
}

void onednn_backward_data(OpCall& call) {
  const Conv2dSpec s = conv_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &w = call.inputs[1];
  Tensor& dx = call.outputs[0];
  const ConvGeometry g = conv_geometry(dx.shape(), w.shape(), s);
  ConvBwdData& e = g_bwd_data_cache.get(conv_key("bwd_data", g, s, false), [&] {
    auto r = std::make_unique<ConvBwdData>();
    auto hint = dnnl::convolution_forward::primitive_desc(fwd_desc(g, s, false), cpu_engine());
    const memory::dims strides{s.stride_h, s.stride_w}, dil{s.dilation_h - 1, s.dilation_w - 1},
        pad{s.pad_h, s.pad_w};
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct,
                                            prim_act_md(g.x, s.layout), any_md(user_weight_md(g)),
                                            prim_act_md(g.y, s.layout), strides, dil, pad, pad);
    r->pd = dnnl::convolution_backward_data::primitive_desc(d, cpu_engine(), hint);
    r->prim = dnnl::convolution_backward_data(r->pd);
    r->diff_dst.init(act_md(g.y, s.layout), r->pd.diff_dst_desc(), true, false);
    r->weights.init(user_weight_md(g), r->pd.weights_desc(), true, false);
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

void onednn_backward_weights(OpCall& call) {
  const Conv2dSpec s = conv_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1];
  Tensor& dw = call.outputs[0];
  Tensor dbias = call.outputs.size() > 1 ? call.outputs[1] : Tensor();
  const ConvGeometry g = conv_geometry(x.shape(), dw.shape(), s);
  const bool has_bias = dbias.defined();
  ConvBwdWeights& e = g_bwd_weights_cache.get(conv_key("bwd_weights", g, s, has_bias), [&] {
    auto r = std::make_unique<ConvBwdWeights>();
    auto hint = dnnl::convolution_forward::primitive_desc(fwd_desc(g, s, has_bias), cpu_engine());
    const memory::dims strides{s.stride_h, s.stride_w}, dil{s.dilation_h - 1, s.dilation_w - 1},
        pad{s.pad_h, s.pad_w};
    const memory::desc w_any = any_md(user_weight_md(g));
    auto d = has_bias
                 ? dnnl::convolution_backward_weights::desc(
                       dnnl::algorithm::convolution_direct, prim_act_md(g.x, s.layout), w_any,
                       vec_md(g.out_channels), prim_act_md(g.y, s.layout), strides, dil, pad, pad)
                 : dnnl::convolution_backward_weights::desc(
                       dnnl::algorithm::convolution_direct, prim_act_md(g.x, s.layout), w_any,
                       prim_act_md(g.y, s.layout), strides, dil, pad, pad);
    r->pd = dnnl::convolution_backward_weights::primitive_desc(d, cpu_engine(), hint);
    r->prim = dnnl::convolution_backward_weights(r->pd);
    r->src.init(act_md(g.x, s.layout), r->pd.src_desc(), true, false);
    r->diff_dst.init(act_md(g.y, s.layout), r->pd.diff_dst_desc(), true, false);
    // The primitive overwrites its output and gradients accumulate: the result always goes
    // through scratch and a reorder with a sum post-op into the parameter gradient.
    r->diff_weights.init(user_weight_md(g), r->pd.diff_weights_desc(), false, true,
                         /*accumulate_out=*/true, /*force=*/true);
    return r;
  });
  Tensor xs, dys, dws;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src.input(x, xs)},
                                       {DNNL_ARG_DIFF_DST, e.diff_dst.input(dy, dys)},
                                       {DNNL_ARG_DIFF_WEIGHTS, e.diff_weights.output(dw, dws)}};
  Tensor db_scratch;
  if (has_bias) {
    db_scratch = Tensor::empty({g.out_channels});
    args.emplace(DNNL_ARG_DIFF_BIAS, wrap(vec_md(g.out_channels), db_scratch));
  }
  e.prim.execute(cpu_stream(), args);
  e.diff_weights.finish(dw, dws);
  cpu_stream().wait();
  if (has_bias) {
    float* dst = dbias.data<float>();
    const float* src = db_scratch.data<float>();
    for (std::int64_t i = 0; i < g.out_channels; ++i) dst[i] += src[i];
  }
}

std::string onednn_accepts(const OpCall& call) {
  for (const Tensor& t : call.inputs)
    if (t.defined() && (t.dtype() != DType::f32 || !t.device().is_cpu()))
      return "needs f32 CPU tensors";
  return "";
}

// Example cases for the parity walk: NCHW and NHWC, stride, padding, dilation, groups, bias.
std::vector<Conv2dSpec> example_specs() {
  std::vector<Conv2dSpec> v;
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    Conv2dSpec a;  // 3x3, stride 1, pad 1
    a.pad_h = a.pad_w = 1;
    a.layout = layout;
    Conv2dSpec b;  // stride 2, dilation 2, groups 2, asymmetric
    b.stride_h = 2;
    b.stride_w = 1;
    b.pad_h = 2;
    b.pad_w = 1;
    b.dilation_h = 2;
    b.groups = 2;
    b.layout = layout;
    v.push_back(a);
    v.push_back(b);
  }
  return v;
}

// Example calls of the three conv ops: a spec, the channels in and out, and whether a bias goes
// with it. The last two are the shapes cuDNN runs natively in f16/bf16 (NHWC, channels per group
// multiples of 8, no bias: Note [Half-precision convolutions] in nn/cuda/conv_cudnn.cpp), so the
// half-precision registry walk reaches that path on a GPU.
struct ConvExample {
  Conv2dSpec spec;
  std::int64_t in_channels = 4, out_channels = 6;
  bool bias = false;
};

std::vector<ConvExample> examples() {
  std::vector<ConvExample> v;
  int k = 0;
  for (const Conv2dSpec& s : example_specs()) v.push_back({s, 4, 6, k++ % 2 == 0});
  for (const Conv2dSpec& s : example_specs())
    if (s.layout == ImageLayout::nhwc) v.push_back({s, 16, 16, false});
  return v;
}

std::vector<OpCall> forward_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  int k = 0;
  for (const auto& [s, ci, co, bias] : examples()) {
    const ImageDims xd{2, ci, 7, 6};
    const Shape ws{co, ci / s.groups, 3, 3};
    OpCall c;
    const Tensor x = conv_random(image_shape(xd, s.layout), seed + 10 * k + 1);
    c.inputs = {x, conv_random(ws, seed + 10 * k + 2), bias ? conv_random({co}, seed + 10 * k + 3) : Tensor()};
    c.outputs = {Tensor::empty(conv2d_output_shape(x.shape(), ws, s))};
    c.attrs = conv_attrs(s);
    out.push_back(c);
    ++k;
  }
  return out;
}

std::vector<OpCall> backward_data_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  int k = 0;
  for (const auto& [s, ci, co, bias] : examples()) {
    const Shape xs = image_shape({2, ci, 7, 6}, s.layout);
    const Shape ws{co, ci / s.groups, 3, 3};
    OpCall c;
    c.inputs = {conv_random(conv2d_output_shape(xs, ws, s), seed + 10 * k + 1),
                conv_random(ws, seed + 10 * k + 2)};
    c.outputs = {Tensor::empty(xs)};
    c.attrs = conv_attrs(s);
    out.push_back(c);
    ++k;
  }
  return out;
}

std::vector<OpCall> backward_weights_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  int k = 0;
  for (const auto& [s, ci, co, bias] : examples()) {
    const Shape xs = image_shape({2, ci, 7, 6}, s.layout);
    const Shape ws{co, ci / s.groups, 3, 3};
    OpCall c;
    c.inputs = {conv_random(conv2d_output_shape(xs, ws, s), seed + 10 * k + 1),
                conv_random(xs, seed + 10 * k + 2)};
    c.outputs = {Tensor::zeros(ws), bias ? Tensor::zeros({co}) : Tensor()};
    c.attrs = conv_attrs(s);
    out.push_back(c);
    ++k;
  }
  return out;
}

const bool registered = [] {
  register_op({"conv2d_forward",
               "{x [N,C,H,W] or [N,H,W,C], w [O,C/g,KH,KW], bias [O]?} -> {y}; attrs stride, "
               "pad, dilation, groups, layout",
               forward_cases, 1e-4, 1e-4, {}});
  register_op({"conv2d_backward_data",
               "{dy, w} -> {dx} (dx has the forward input's shape); attrs as conv2d_forward",
               backward_data_cases, 1e-4, 1e-4, {}});
  register_op({"conv2d_backward_weights",
               "{dy, x} -> {dw +=, dbias +=?}; attrs as conv2d_forward", backward_weights_cases,
               1e-4, 1e-4, {}});
  register_op_impl("conv2d_forward", onednn_impl(onednn_accepts, onednn_forward));
  register_op_impl("conv2d_backward_data", onednn_impl(onednn_accepts, onednn_backward_data));
  register_op_impl("conv2d_backward_weights", onednn_impl(onednn_accepts, onednn_backward_weights));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn
