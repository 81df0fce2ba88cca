// Batch normalisation: the op declarations and the oneDNN CPU implementation (training,
// inference, backward), optionally fused with the ReLU after it. The public functions of
// nn/conv.hpp are in nn/conv.cpp.
//
// Layout and precision: fp32 NCHW or NHWC, used in place (oneDNN's JIT batch norm reads both
// plain layouts, so there are no reorders); statistics and gamma/beta are fp32 [C].
// Statistics: oneDNN returns the biased batch variance, which is what normalises the batch;
// the running variance is updated with the unbiased one (x n/(n-1)), as PyTorch does, so a
// model trained here evaluates like one trained there.
// Fused ReLU: the forward runs oneDNN's fuse_norm_relu; the backward masks dy with the sign of
// the saved output and runs the plain backward, so the op's inputs stay implementation-neutral
// (no oneDNN workspace crosses the registry).

#include <fmt/format.h>

#include "nn/conv_common.hpp"
#include "nn/cpu/conv_dnnl.hpp"

namespace benchhost::nn {

using namespace conv_detail;
using dnnl::memory;
using dnnl::normalization_flags;

// ---------------------------------------------------------------------------------------------
// oneDNN implementation
// ---------------------------------------------------------------------------------------------

namespace {

struct BnEntry {
  dnnl::batch_normalization_forward::primitive_desc fwd_pd;
  dnnl::batch_normalization_forward fwd;
  std::once_flag bwd_once;  // backward built lazily (inference never needs it)
  dnnl::batch_normalization_backward::primitive_desc bwd_pd;
  dnnl::batch_normalization_backward bwd;
};

PrimitiveCache<BnEntry> g_bn_cache;

normalization_flags bn_flags(bool global_stats, bool fuse_relu) {
  auto f = normalization_flags::use_scale | normalization_flags::use_shift;
  if (global_stats) f = f | normalization_flags::use_global_stats;
  if (fuse_relu) f = f | normalization_flags::fuse_norm_relu;
  return f;
}

BnEntry& bn_entry(const ImageDims& d, ImageLayout layout, float eps, dnnl::prop_kind prop,
                  bool global_stats, bool fuse_relu) {
  const std::string key =
      fmt::format("bn|{}|{}x{}x{}x{}|eps{}|relu{}|prop{}|gs{}", image_layout_name(layout), d.n,
                  d.c, d.h, d.w, eps, fuse_relu ? 1 : 0, static_cast<int>(prop),
                  global_stats ? 1 : 0);
  return g_bn_cache.get(key, [&] {
    auto e = std::make_unique<BnEntry>();
    dnnl::batch_normalization_forward::desc desc(prop, act_md(d, layout), eps,
                                                 bn_flags(global_stats, fuse_relu));
    e->fwd_pd = dnnl::batch_normalization_forward::primitive_desc(desc, cpu_engine());
    e->fwd = dnnl::batch_normalization_forward(e->fwd_pd);
    return e;
  });
}

void onednn_forward(OpCall& call) {
  const BatchNormSpec s = bn_spec(call.attrs);
  const bool training = call.attrs.get_bool("training", true);
  const Tensor &x = call.inputs[0], &gamma = call.inputs[1], &beta = call.inputs[2];
  Tensor &y = call.outputs[0], &mean = call.outputs[1], &var = call.outputs[2];
  const ImageDims d = image_dims(x.shape(), s.layout, "batch_norm_forward");
  // Training writes the batch statistics into mean/var; inference reads the running ones.
  // A training-mode primitive with fuse_relu would need a workspace; inference needs none.
  BnEntry& e = bn_entry(d, s.layout, static_cast<float>(s.eps),
                        training ? dnnl::prop_kind::forward_training
                                 : dnnl::prop_kind::forward_inference,
                        !training, s.fuse_relu);
  if (!training) {
    mean.copy_(call.inputs[3]);
    var.copy_(call.inputs[4]);
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(act_md(d, s.layout), x)},
                                       {DNNL_ARG_DST, wrap(act_md(d, s.layout), y)},
                                       {DNNL_ARG_SCALE, wrap(vec_md(d.c), gamma)},
                                       {DNNL_ARG_SHIFT, wrap(vec_md(d.c), beta)},
                                       {DNNL_ARG_MEAN, wrap(vec_md(d.c), mean)},
                                       {DNNL_ARG_VARIANCE, wrap(vec_md(d.c), var)}};
  Tensor workspace;
  if (training && s.fuse_relu) {
    workspace = bytes_tensor(e.fwd_pd.workspace_desc());
    args.emplace(DNNL_ARG_WORKSPACE,
                 memory(e.fwd_pd.workspace_desc(), cpu_engine(), workspace.raw_data()));
  }
  e.fwd.execute(cpu_stream(), args);
  cpu_stream().wait();
}

void onednn_backward(OpCall& call) {
  const BatchNormSpec s = bn_spec(call.attrs);
  const bool global_stats = !call.attrs.get_bool("training", true);
  const Tensor &x = call.inputs[1], &gamma = call.inputs[2], &mean = call.inputs[3],
               &var = call.inputs[4];
  Tensor dy = call.inputs[0];
  Tensor &dx = call.outputs[0], &dgamma = call.outputs[1], &dbeta = call.outputs[2];
  const ImageDims d = image_dims(x.shape(), s.layout, "batch_norm_backward");
  if (s.fuse_relu) {
    const Tensor& y = call.inputs[5];
    Tensor masked = Tensor::empty(dy.shape());
    const float* g = dy.data<float>();
    const float* out = y.data<float>();
    float* m = masked.data<float>();
    const std::int64_t n = dy.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) m[i] = out[i] > 0.0f ? g[i] : 0.0f;
    dy = masked;
  }
  BnEntry& e = bn_entry(d, s.layout, static_cast<float>(s.eps), dnnl::prop_kind::forward_training,
                        global_stats, false);
  std::call_once(e.bwd_once, [&] {
    dnnl::batch_normalization_backward::desc desc(
        dnnl::prop_kind::backward, act_md(d, s.layout), act_md(d, s.layout),
        static_cast<float>(s.eps), bn_flags(global_stats, false));
    e.bwd_pd = dnnl::batch_normalization_backward::primitive_desc(desc, cpu_engine(), e.fwd_pd);
    e.bwd = dnnl::batch_normalization_backward(e.bwd_pd);
  });
  Tensor dscale = Tensor::empty({d.c}), dshift = Tensor::empty({d.c});
  e.bwd.execute(cpu_stream(), {{DNNL_ARG_SRC, wrap(act_md(d, s.layout), x)},
                               {DNNL_ARG_DIFF_DST, wrap(act_md(d, s.layout), dy)},
                               {DNNL_ARG_MEAN, wrap(vec_md(d.c), mean)},
                               {DNNL_ARG_VARIANCE, wrap(vec_md(d.c), var)},
                               {DNNL_ARG_SCALE, wrap(vec_md(d.c), gamma)},
                               // oneDNN 2.6 insists on a SHIFT argument with use_shift even
                               // though the backward never reads it; gamma stands in.
                               {DNNL_ARG_SHIFT, wrap(vec_md(d.c), gamma)},
                               {DNNL_ARG_DIFF_SRC, wrap(act_md(d, s.layout), dx)},
                               {DNNL_ARG_DIFF_SCALE, wrap(vec_md(d.c), dscale)},
                               {DNNL_ARG_DIFF_SHIFT, wrap(vec_md(d.c), dshift)}});
  cpu_stream().wait();
  float* dg = dgamma.data<float>();
  float* db = dbeta.data<float>();
  const float* sg = dscale.data<float>();
  const float* sb = dshift.data<float>();
  for (std::int64_t c = 0; c < d.c; ++c) {
    dg[c] += sg[c];
    db[c] += sb[c];
  }
}

// running = (1 - m) running + m batch; the variance with the unbiased batch variance (x n/(n-1)).
void ref_running_update(OpCall& call) {
  const float m = static_cast<float>(call.attrs.get("momentum", 0.1));
  const std::int64_t count = call.attrs.get_int("count", 2);
  BH_CHECK_AS(InvalidArgument, count > 1, "batch_norm_running_update: count must be > 1, got {}",
              count);
  const float unbias = static_cast<float>(count) / static_cast<float>(count - 1);
  const float* bm = call.inputs[0].data<float>();
  const float* bv = call.inputs[1].data<float>();
  float* rm = call.outputs[0].data<float>();
  float* rv = call.outputs[1].data<float>();
  for (std::int64_t c = 0; c < call.outputs[0].numel(); ++c) {
    rm[c] = (1.0f - m) * rm[c] + m * bm[c];
    rv[c] = (1.0f - m) * rv[c] + m * bv[c] * unbias;
  }
}

std::vector<OpCall> running_update_cases(std::uint64_t seed) {
  OpCall c;
  Tensor var = conv_random({7}, seed + 2), running_var = conv_random({7}, seed + 4);
  for (std::int64_t i = 0; i < 7; ++i) {
    var.data<float>()[i] = std::abs(var.data<float>()[i]);
    running_var.data<float>()[i] = 0.5f + std::abs(running_var.data<float>()[i]);
  }
  c.inputs = {conv_random({7}, seed + 1), var};
  c.outputs = {conv_random({7}, seed + 3), running_var};
  c.attrs.set("momentum", 0.1).set("count", 36);
  return {c};
}

std::string onednn_accepts(const OpCall& call) {
  for (const Tensor& t : call.inputs)
    if (t.defined() && (t.dtype() != DType::f32 || !t.device().is_cpu()))
      return "needs f32 CPU tensors";
  return "";
}

struct BnCase {
  ImageLayout layout;
  bool training, relu;
};
const BnCase kCases[] = {{ImageLayout::nchw, true, false},
                         {ImageLayout::nhwc, true, true},
                         {ImageLayout::nchw, false, true},
                         {ImageLayout::nhwc, false, false}};

std::vector<OpCall> forward_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  int k = 0;
  for (const BnCase& bc : kCases) {
    BatchNormSpec s;
    s.layout = bc.layout;
    s.fuse_relu = bc.relu;
    const Shape xs = image_shape({3, 5, 4, 3}, bc.layout);
    OpCall c;
    Tensor var = conv_random({5}, seed + 10 * k + 5);
    for (std::int64_t i = 0; i < 5; ++i) var.data<float>()[i] = 0.5f + std::abs(var.data<float>()[i]);
    c.inputs = {conv_random(xs, seed + 10 * k + 1), conv_random({5}, seed + 10 * k + 2),
                conv_random({5}, seed + 10 * k + 3),
                bc.training ? Tensor() : conv_random({5}, seed + 10 * k + 4),
                bc.training ? Tensor() : var};
    c.outputs = {Tensor::empty(xs), Tensor::empty({5}), Tensor::empty({5})};
    c.attrs = bn_attrs(s, bc.training);
    out.push_back(c);
    ++k;
  }
  return out;
}

std::vector<OpCall> backward_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  int k = 0;
  for (const BnCase& bc : kCases) {
    BatchNormSpec s;
    s.layout = bc.layout;
    s.fuse_relu = bc.relu;
    const Shape xs = image_shape({3, 5, 4, 3}, bc.layout);
    OpCall c;
    Tensor var = conv_random({5}, seed + 10 * k + 5);
    for (std::int64_t i = 0; i < 5; ++i) var.data<float>()[i] = 0.5f + std::abs(var.data<float>()[i]);
    c.inputs = {conv_random(xs, seed + 10 * k + 1), conv_random(xs, seed + 10 * k + 2),
                conv_random({5}, seed + 10 * k + 3), conv_random({5}, seed + 10 * k + 4), var,
                bc.relu ? conv_random(xs, seed + 10 * k + 6) : Tensor()};
    c.outputs = {Tensor::empty(xs), Tensor::zeros({5}), Tensor::zeros({5})};
    c.attrs = bn_attrs(s, bc.training);
    out.push_back(c);
    ++k;
  }
  return out;
}

const bool registered = [] {
  register_op({"batch_norm_forward",
               "{x, gamma [C], beta [C], mean [C]? var [C]? (eval)} -> {y, mean, var (biased "
               "batch stats, or copies of the running ones)}; attrs eps, training, fuse_relu, "
               "layout",
               forward_cases, 1e-4, 1e-4, {}});
  register_op({"batch_norm_backward",
               "{dy, x, gamma, mean, var, y? (fuse_relu)} -> {dx, dgamma +=, dbeta +=}; attrs "
               "eps, training (false: frozen statistics), fuse_relu, layout",
               backward_cases, 1e-4, 1e-4, {}});
  register_op({"batch_norm_running_update",
               "{batch mean [C], batch var [C] (biased)} -> {running_mean, running_var} (updated "
               "in place); attrs momentum, count (values per channel, > 1)",
               running_update_cases, 1e-6, 1e-6,
               {OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, ref_running_update, true}}});
  register_op_impl("batch_norm_forward", onednn_impl(onednn_accepts, onednn_forward));
  register_op_impl("batch_norm_backward", onednn_impl(onednn_accepts, onednn_backward));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn
