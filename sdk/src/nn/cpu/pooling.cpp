// Max and average pooling: the op declarations and the oneDNN CPU implementation, forward and
// backward. The public functions of nn/conv.hpp (global average pooling among them) are in
// nn/conv.cpp.
//
// Layout and precision: fp32 NCHW or NHWC in place (oneDNN's JIT pooling reads both plain
// layouts). Global average pooling is an average pooling whose window is the whole image.
// Max pooling backward takes (dy, x, y) rather than an index tensor so that the op is
// implementation-neutral; oneDNN's backward needs its own workspace (argmax in its encoding),
// so the oneDNN implementation re-runs the forward to produce it. Max pooling is one layer of
// ResNet-50 and memory-bound; the extra forward costs about as much as reading dy once.

#include <fmt/format.h>

#include "nn/conv_common.hpp"
#include "nn/cpu/conv_dnnl.hpp"

namespace benchhost::nn {

using namespace conv_detail;
using dnnl::memory;

namespace {

struct PoolEntry {
  dnnl::pooling_forward::primitive_desc fwd_pd;
  dnnl::pooling_forward fwd;
  std::once_flag bwd_once;
  dnnl::pooling_backward::primitive_desc bwd_pd;
  dnnl::pooling_backward bwd;
};

PrimitiveCache<PoolEntry> g_pool_cache;

dnnl::algorithm pool_algorithm(bool max, const Pool2dSpec& s) {
  if (max) return dnnl::algorithm::pooling_max;
  return s.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                             : dnnl::algorithm::pooling_avg_exclude_padding;
}

PoolEntry& pool_entry(const PoolGeometry& g, const Pool2dSpec& s, bool max) {
  const std::string key = fmt::format(
      "pool|{}|{}|{}x{}x{}x{}|k{}x{}s{}x{}p{}x{}|inc{}", max ? "max" : "avg",
      image_layout_name(s.layout), g.x.n, g.x.c, g.x.h, g.x.w, s.kernel_h, s.kernel_w,
      s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.count_include_pad ? 1 : 0);
  return g_pool_cache.get(key, [&] {
    auto e = std::make_unique<PoolEntry>();
    const memory::dims strides{s.stride_h, s.stride_w}, kernel{s.kernel_h, s.kernel_w},
        pad{s.pad_h, s.pad_w};
    dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_training, pool_algorithm(max, s),
                                  act_md(g.x, s.layout), act_md(g.y, s.layout), strides, kernel,
                                  pad, pad);
    e->fwd_pd = dnnl::pooling_forward::primitive_desc(d, cpu_engine());
    e->fwd = dnnl::pooling_forward(e->fwd_pd);
    return e;
  });
}

void build_backward(PoolEntry& e, const PoolGeometry& g, const Pool2dSpec& s, bool max) {
  std::call_once(e.bwd_once, [&] {
    const memory::dims strides{s.stride_h, s.stride_w}, kernel{s.kernel_h, s.kernel_w},
        pad{s.pad_h, s.pad_w};
    dnnl::pooling_backward::desc d(pool_algorithm(max, s), act_md(g.x, s.layout),
                                   act_md(g.y, s.layout), strides, kernel, pad, pad);
    e.bwd_pd = dnnl::pooling_backward::primitive_desc(d, cpu_engine(), e.fwd_pd);
    e.bwd = dnnl::pooling_backward(e.bwd_pd);
  });
}

void onednn_pool_forward(OpCall& call, bool max) {
  const Pool2dSpec s = pool_spec(call.attrs);
  const Tensor& x = call.inputs[0];
  Tensor& y = call.outputs[0];
  const PoolGeometry g = pool_geometry(x.shape(), s, "pool2d_forward");
  PoolEntry& e = pool_entry(g, s, max);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(act_md(g.x, s.layout), x)},
                                       {DNNL_ARG_DST, wrap(act_md(g.y, s.layout), y)}};
  Tensor workspace;
  if (max) {
    workspace = bytes_tensor(e.fwd_pd.workspace_desc());
    args.emplace(DNNL_ARG_WORKSPACE,
                 memory(e.fwd_pd.workspace_desc(), cpu_engine(), workspace.raw_data()));
  }
  e.fwd.execute(cpu_stream(), args);
  cpu_stream().wait();
}

void onednn_pool_backward(OpCall& call, bool max) {
  const Pool2dSpec s = pool_spec(call.attrs);
  const Tensor& dy = call.inputs[0];
  Tensor& dx = call.outputs[0];
  const PoolGeometry g = pool_geometry(dx.shape(), s, "pool2d_backward");
  PoolEntry& e = pool_entry(g, s, max);
  build_backward(e, g, s, max);
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, wrap(act_md(g.y, s.layout), dy)},
                                       {DNNL_ARG_DIFF_SRC, wrap(act_md(g.x, s.layout), dx)}};
  Tensor workspace, y_scratch;
  if (max) {
    // Recompute the argmax workspace from x (inputs[1]); see the note at the top.
    workspace = bytes_tensor(e.fwd_pd.workspace_desc());
    y_scratch = Tensor::empty(image_shape(g.y, s.layout));
    memory ws(e.fwd_pd.workspace_desc(), cpu_engine(), workspace.raw_data());
    e.fwd.execute(cpu_stream(), {{DNNL_ARG_SRC, wrap(act_md(g.x, s.layout), call.inputs[1])},
                                 {DNNL_ARG_DST, wrap(act_md(g.y, s.layout), y_scratch)},
                                 {DNNL_ARG_WORKSPACE, ws}});
    args.emplace(DNNL_ARG_WORKSPACE, ws);
  }
  e.bwd.execute(cpu_stream(), args);
  cpu_stream().wait();
}

std::string onednn_accepts(const OpCall& call) {
  for (const Tensor& t : call.inputs)
    if (t.defined() && (t.dtype() != DType::f32 || !t.device().is_cpu()))
      return "needs f32 CPU tensors";
  return "";
}

std::vector<Pool2dSpec> example_specs(bool max) {
  std::vector<Pool2dSpec> v;
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    Pool2dSpec a;  // ResNet stem: 3x3 stride 2 pad 1
    a.kernel_h = a.kernel_w = 3;
    a.stride_h = a.stride_w = 2;
    a.pad_h = a.pad_w = 1;
    a.layout = layout;
    a.count_include_pad = !max && layout == ImageLayout::nchw;
    Pool2dSpec b;  // non-square, non-overlapping
    b.kernel_h = 2;
    b.kernel_w = 3;
    b.stride_h = 2;
    b.stride_w = 3;
    b.layout = layout;
    v.push_back(a);
    v.push_back(b);
  }
  return v;
}

std::vector<OpCall> make_cases(std::uint64_t seed, bool max, bool backward) {
  std::vector<OpCall> out;
  int k = 0;
  for (const Pool2dSpec& s : example_specs(max)) {
    const Shape xs = image_shape({2, 3, 7, 9}, s.layout);
    const Shape ys = pool2d_output_shape(xs, s);
    OpCall c;
    c.attrs = pool_attrs(s);
    if (!backward) {
      c.inputs = {conv_random(xs, seed + 10 * k + 1)};
      c.outputs = {Tensor::empty(ys)};
    } else {
      c.inputs = {conv_random(ys, seed + 10 * k + 2)};
      if (max) {
        Tensor x = conv_random(xs, seed + 10 * k + 1);
        c.inputs.push_back(x);
        c.inputs.push_back(max_pool2d_forward(x, s));
      }
      c.outputs = {Tensor::empty(xs)};
    }
    out.push_back(c);
    ++k;
  }
  return out;
}

const bool registered = [] {
  const char* attrs = "attrs kernel, stride, pad, count_include_pad (avg), layout";
  register_op({"max_pool2d_forward", fmt::format("{{x}} -> {{y}}; {}", attrs),
               [](std::uint64_t seed) { return make_cases(seed, true, false); }, 1e-6, 1e-6, {}});
  register_op({"max_pool2d_backward",
               fmt::format("{{dy, x, y}} -> {{dx}} (argmax: first maximum of each window); {}",
                           attrs),
               [](std::uint64_t seed) { return make_cases(seed, true, true); }, 1e-6, 1e-6, {}});
  register_op({"avg_pool2d_forward", fmt::format("{{x}} -> {{y}}; {}", attrs),
               [](std::uint64_t seed) { return make_cases(seed, false, false); }, 1e-5, 1e-5, {}});
  register_op({"avg_pool2d_backward",
               fmt::format("{{dy}} -> {{dx}} (dx has the forward input's shape); {}", attrs),
               [](std::uint64_t seed) { return make_cases(seed, false, true); }, 1e-5, 1e-5, {}});
  register_op_impl("max_pool2d_forward",
                   onednn_impl(onednn_accepts, [](OpCall& c) { onednn_pool_forward(c, true); }));
  register_op_impl("max_pool2d_backward",
                   onednn_impl(onednn_accepts, [](OpCall& c) { onednn_pool_backward(c, true); }));
  register_op_impl("avg_pool2d_forward",
                   onednn_impl(onednn_accepts, [](OpCall& c) { onednn_pool_forward(c, false); }));
  register_op_impl("avg_pool2d_backward",
                   onednn_impl(onednn_accepts, [](OpCall& c) { onednn_pool_backward(c, false); }));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn
