// lstm_forward / lstm_backward (one unidirectional LSTM layer over a sequence) and
// lstm_cell_forward (one step): the op declarations, the oneDNN implementations, the cell's
// oneDNN-matmul + oneTBB kernel and the plain-loop references. The maths and layout are
// PyTorch's (Note [LSTM maths and layout] in nn/lstm.hpp); the public functions are in
// nn/lstm.cpp.
//
// Ops (x [T, B, I]; state tensors [B, H]; undefined h0/c0 and dhT/dcT mean zeros):
//   lstm_forward      {x, h0, c0, w_ih, w_hh, b_ih, b_hh} -> {y [T, B, H], hT, cT}
//   lstm_backward     {x, h0, c0, w_ih, w_hh, b_ih, b_hh, dy, dhT, dcT}
//                     -> {dx, dh0, dc0 (undefined: not wanted), dw_ih +=, dw_hh +=, db_ih +=, db_hh +=}
//   lstm_cell_forward {x [B, I], h, c, w_ih, w_hh, b_ih, b_hh} -> {h', c'}
//
// Note [oneDNN LSTM weights]
// oneDNN describes an LSTM layer's weights as 5-d (layers, directions, input channels, gates,
// output channels) = {1, 1, I, 4, H}; its gate order (i, f, c~, o) is PyTorch's (i, f, g, o).
// PyTorch's weight_ih [4H, I] holds element (gate g, unit o, input i) at (g H + o) I + i, which
// is oneDNN's format tag ldgoi: the parameters are wrapped in place, no copy. The forward
// primitive wants ldigo (training) or a packed format (inference), the backward ldgoi for the
// weights and ldigo for their gradients (formats are queried with "any", never assumed): one
// reorder per weight per call, cheap next to the 8 T B H (I + H) flops of the layer. The single
// bias is b_ih + b_hh (ldgo = PyTorch's order); its gradient goes to both. oneDNN accumulates
// weight gradients into its diff buffers on some paths, so they are zeroed scratch in its own
// format (it refuses ldgoi there), then added into our gradients (+=) by a tiled transpose
// (a oneDNN reorder with a sum post-op when the format is blocked).

#include <cstring>
#include <vector>

#include "benchhost/nn/ops.hpp"
#include "nn/cpu/conv_dnnl.hpp"
#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

using dnnl::memory;
using namespace conv_detail;

struct LstmDims {
  std::int64_t T = 1, B = 0, I = 0, H = 0;
};

// Dims from a call's inputs {x, h0, c0, w_ih, w_hh, ...}; x is [T, B, I] or, for the cell, [B, I].
LstmDims dims_of(const OpCall& c, bool cell) {
  const Tensor& x = c.inputs[0];
  const Tensor& w_hh = c.inputs[4];
  BH_CHECK_AS(InvalidArgument, x.dim() == (cell ? 2 : 3) && w_hh.dim() == 2,
              "lstm op: input {} and weight_hh {} have the wrong rank", shape_str(x.shape()), shape_str(w_hh.shape()));
  LstmDims d;
  d.T = cell ? 1 : x.size(0);
  d.B = x.size(cell ? 0 : 1);
  d.I = x.size(cell ? 1 : 2);
  d.H = w_hh.size(1);
  return d;
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// ---------------------------------------------------------------------------------------------
// References: plain loops in double
// ---------------------------------------------------------------------------------------------

// Everything the reference backward needs from a forward: post-activation gates [T, B, 4H] and
// the states h, c [T + 1, B, H] (index 0: the initial state).
struct RefTrace {
  std::vector<double> gates, h, c;
};

void ref_run(const OpCall& call, const LstmDims& d, RefTrace& tr) {
  const std::int64_t T = d.T, B = d.B, I = d.I, H = d.H, G = 4 * H;
  const float* x = call.inputs[0].data<float>();
  const float* wih = call.inputs[3].data<float>();
  const float* whh = call.inputs[4].data<float>();
  const float* bih = call.inputs[5].data<float>();
  const float* bhh = call.inputs[6].data<float>();
  tr.gates.assign(static_cast<std::size_t>(T * B * G), 0.0);
  tr.h.assign(static_cast<std::size_t>((T + 1) * B * H), 0.0);
  tr.c.assign(tr.h.size(), 0.0);
  if (call.inputs[1].defined())
    for (std::int64_t j = 0; j < B * H; ++j) {
      tr.h[static_cast<std::size_t>(j)] = call.inputs[1].data<float>()[j];
      tr.c[static_cast<std::size_t>(j)] = call.inputs[2].data<float>()[j];
    }
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t b = 0; b < B; ++b) {
      const double* hp = tr.h.data() + (t * B + b) * H;
      const double* cp = tr.c.data() + (t * B + b) * H;
      double* gt = tr.gates.data() + (t * B + b) * G;
      const float* xt = x + (t * B + b) * I;
      for (std::int64_t r = 0; r < G; ++r) {
        double a = static_cast<double>(bih[r]) + bhh[r];
        for (std::int64_t i = 0; i < I; ++i) a += static_cast<double>(wih[r * I + i]) * xt[i];
        for (std::int64_t k = 0; k < H; ++k) a += static_cast<double>(whh[r * H + k]) * hp[k];
        gt[r] = r / H == 2 ? std::tanh(a) : sigmoid(a);
      }
      double* hn = tr.h.data() + ((t + 1) * B + b) * H;
      double* cn = tr.c.data() + ((t + 1) * B + b) * H;
      for (std::int64_t k = 0; k < H; ++k) {
        cn[k] = gt[H + k] * cp[k] + gt[k] * gt[2 * H + k];
        hn[k] = gt[3 * H + k] * std::tanh(cn[k]);
      }
    }
}

void fwd_ref(OpCall& call) {
  const LstmDims d = dims_of(call, false);
  RefTrace tr;
  ref_run(call, d, tr);
  const std::int64_t n = d.B * d.H;
  float* y = call.outputs[0].data<float>();
  for (std::int64_t j = 0; j < d.T * n; ++j) y[j] = static_cast<float>(tr.h[static_cast<std::size_t>(n + j)]);
  for (std::int64_t j = 0; j < n; ++j) {
    call.outputs[1].data<float>()[j] = static_cast<float>(tr.h[static_cast<std::size_t>(d.T * n + j)]);
    call.outputs[2].data<float>()[j] = static_cast<float>(tr.c[static_cast<std::size_t>(d.T * n + j)]);
  }
}

void bwd_ref(OpCall& call) {
  const LstmDims d = dims_of(call, false);
  const std::int64_t T = d.T, B = d.B, I = d.I, H = d.H, G = 4 * H;
  RefTrace tr;
  ref_run(call, d, tr);
  const float* x = call.inputs[0].data<float>();
  const float* wih = call.inputs[3].data<float>();
  const float* whh = call.inputs[4].data<float>();
  const float* dy = call.inputs[7].data<float>();
  std::vector<double> dh(static_cast<std::size_t>(B * H), 0.0), dc(dh.size(), 0.0);
  if (call.inputs[8].defined())
    for (std::int64_t j = 0; j < B * H; ++j) dh[static_cast<std::size_t>(j)] = call.inputs[8].data<float>()[j];
  if (call.inputs[9].defined())
    for (std::int64_t j = 0; j < B * H; ++j) dc[static_cast<std::size_t>(j)] = call.inputs[9].data<float>()[j];
  std::vector<double> dwih(static_cast<std::size_t>(G * I), 0.0), dwhh(static_cast<std::size_t>(G * H), 0.0),
      db(static_cast<std::size_t>(G), 0.0), da(static_cast<std::size_t>(G));
  float* dx = call.outputs[0].data<float>();
  for (std::int64_t t = T - 1; t >= 0; --t)
    for (std::int64_t b = 0; b < B; ++b) {
      const double* gt = tr.gates.data() + (t * B + b) * G;
      const double* cp = tr.c.data() + (t * B + b) * H;
      const double* cn = tr.c.data() + ((t + 1) * B + b) * H;
      const double* hp = tr.h.data() + (t * B + b) * H;
      double* dhb = dh.data() + b * H;
      double* dcb = dc.data() + b * H;
      for (std::int64_t k = 0; k < H; ++k) {
        const double i = gt[k], f = gt[H + k], g = gt[2 * H + k], o = gt[3 * H + k];
        const double h_grad = dy[(t * B + b) * H + k] + dhb[k];
        const double tc = std::tanh(cn[k]);
        const double c_grad = dcb[k] + h_grad * o * (1.0 - tc * tc);
        da[static_cast<std::size_t>(k)] = c_grad * g * i * (1.0 - i);
        da[static_cast<std::size_t>(H + k)] = c_grad * cp[k] * f * (1.0 - f);
        da[static_cast<std::size_t>(2 * H + k)] = c_grad * i * (1.0 - g * g);
        da[static_cast<std::size_t>(3 * H + k)] = h_grad * tc * o * (1.0 - o);
        dcb[k] = c_grad * f;
      }
      const float* xt = x + (t * B + b) * I;
      for (std::int64_t r = 0; r < G; ++r) {
        const double a = da[static_cast<std::size_t>(r)];
        db[static_cast<std::size_t>(r)] += a;
        for (std::int64_t i = 0; i < I; ++i) dwih[static_cast<std::size_t>(r * I + i)] += a * xt[i];
        for (std::int64_t k = 0; k < H; ++k) dwhh[static_cast<std::size_t>(r * H + k)] += a * hp[k];
      }
      for (std::int64_t i = 0; i < I; ++i) {
        double s = 0.0;
        for (std::int64_t r = 0; r < G; ++r) s += da[static_cast<std::size_t>(r)] * wih[r * I + i];
        dx[(t * B + b) * I + i] = static_cast<float>(s);
      }
      for (std::int64_t k = 0; k < H; ++k) {
        double s = 0.0;
        for (std::int64_t r = 0; r < G; ++r) s += da[static_cast<std::size_t>(r)] * whh[r * H + k];
        dhb[k] = s;
      }
    }
  for (std::int64_t j = 0; j < B * H; ++j) {
    if (call.outputs[1].defined()) call.outputs[1].data<float>()[j] = static_cast<float>(dh[static_cast<std::size_t>(j)]);
    if (call.outputs[2].defined()) call.outputs[2].data<float>()[j] = static_cast<float>(dc[static_cast<std::size_t>(j)]);
  }
  auto add = [](Tensor& out, const std::vector<double>& v) {
    float* p = out.data<float>();
    for (std::size_t j = 0; j < v.size(); ++j) p[j] = static_cast<float>(p[j] + v[j]);
  };
  add(call.outputs[3], dwih);
  add(call.outputs[4], dwhh);
  add(call.outputs[5], db);
  add(call.outputs[6], db);
}

void cell_ref(OpCall& call) {
  const LstmDims d = dims_of(call, true);
  RefTrace tr;
  ref_run(call, d, tr);
  const std::int64_t n = d.B * d.H;
  for (std::int64_t j = 0; j < n; ++j) {
    call.outputs[0].data<float>()[j] = static_cast<float>(tr.h[static_cast<std::size_t>(n + j)]);
    call.outputs[1].data<float>()[j] = static_cast<float>(tr.c[static_cast<std::size_t>(n + j)]);
  }
}

// ---------------------------------------------------------------------------------------------
// oneDNN (Note [oneDNN LSTM weights])
// ---------------------------------------------------------------------------------------------

memory::desc seq_md(std::int64_t T, std::int64_t B, std::int64_t C) {
  return memory::desc({T, B, C}, memory::data_type::f32, memory::format_tag::tnc);
}
memory::desc state_md(const LstmDims& d) {
  return memory::desc({1, 1, d.B, d.H}, memory::data_type::f32, memory::format_tag::ldnc);
}
memory::desc weights_user_md(std::int64_t in, std::int64_t H) {
  return memory::desc({1, 1, in, 4, H}, memory::data_type::f32, memory::format_tag::ldgoi);
}
memory::desc weights_any_md(std::int64_t in, std::int64_t H) {
  return memory::desc({1, 1, in, 4, H}, memory::data_type::f32, memory::format_tag::any);
}
memory::desc bias_md(std::int64_t H) {
  return memory::desc({1, 1, 4, H}, memory::data_type::f32, memory::format_tag::ldgo);
}

dnnl::lstm_forward::desc forward_desc(const LstmDims& d, dnnl::prop_kind kind) {
  return dnnl::lstm_forward::desc(kind, dnnl::rnn_direction::unidirectional_left2right, seq_md(d.T, d.B, d.I),
                                  state_md(d), state_md(d), weights_any_md(d.I, d.H), weights_any_md(d.H, d.H),
                                  bias_md(d.H), seq_md(d.T, d.B, d.H), state_md(d), state_md(d));
}

std::string key_of(const char* what, const LstmDims& d) {
  return fmt::format("{}:{}x{}x{}x{}", what, d.T, d.B, d.I, d.H);
}

// Tensors the primitives read that the call may not hold: zero states and the summed bias.
Tensor state_or_zeros(const Tensor& t, const LstmDims& d) { return t.defined() ? t : Tensor::zeros({d.B, d.H}); }

Tensor summed_bias(const OpCall& call, std::int64_t H) {
  Tensor b = Tensor::empty({4 * H});
  const float* bi = call.inputs[5].data<float>();
  const float* bh = call.inputs[6].data<float>();
  float* p = b.data<float>();
  for (std::int64_t r = 0; r < 4 * H; ++r) p[r] = bi[r] + bh[r];
  return b;
}

// A plain (unblocked, unpadded offset) 5-d weights layout {1, 1, in, 4, H}: element strides of
// the input channel, the gate and the unit. oneDNN's reorder from its ldigo gradient into our
// ldgoi one (a transpose) with a sum post-op measured ~100 ms for 1024 x 4096 here, several
// times a blocked transpose; so plain gradients are added by transpose_accumulate() instead.
struct DiffLayout {
  bool plain = false;
  std::int64_t si = 0, sg = 0, so = 0;
};

DiffLayout diff_layout(const memory::desc& md) {
  DiffLayout l;
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 5 || d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || d.offset0 != 0)
    return l;
  l.plain = true;
  l.si = d.format_desc.blocking.strides[2];
  l.sg = d.format_desc.blocking.strides[3];
  l.so = d.format_desc.blocking.strides[4];
  return l;
}

// dst [4H, in] (PyTorch's layout) += src laid out as `l`, in 32 x 32 tiles.
BH_CPU_KERNEL void transpose_accumulate_tile(const float* src, std::int64_t si, std::int64_t so, std::int64_t o0,
                                             std::int64_t o1, std::int64_t i0, std::int64_t i1, std::int64_t in,
                                             float* dst) {
  for (std::int64_t i = i0; i < i1; ++i)
    for (std::int64_t o = o0; o < o1; ++o) dst[o * in + i] += src[i * si + o * so];
}

void transpose_accumulate(const float* src, const DiffLayout& l, std::int64_t in, std::int64_t H, float* dst) {
  constexpr std::int64_t kTile = 32;
  const std::int64_t o_tiles = (H + kTile - 1) / kTile;
  parallel_range(4 * o_tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t g = t / o_tiles, o0 = (t % o_tiles) * kTile, o1 = std::min(H, o0 + kTile);
      for (std::int64_t i0 = 0; i0 < in; i0 += kTile)
        transpose_accumulate_tile(src + g * l.sg, l.si, l.so, o0, o1, i0, std::min(in, i0 + kTile), in,
                                  dst + g * H * in);
    }
  });
}

struct FwdEntry {
  dnnl::lstm_forward::primitive_desc pd;
  dnnl::lstm_forward prim;
  Staged w_layer, w_iter;
};

struct BwdEntry {
  dnnl::lstm_forward::primitive_desc fwd_pd;
  dnnl::lstm_forward fwd;
  dnnl::lstm_backward::primitive_desc pd;
  dnnl::lstm_backward prim;
  Staged fwd_w_layer, fwd_w_iter, w_layer, w_iter;  // user ldgoi -> each primitive's format
  Staged dw_layer, dw_iter;                          // primitive's diff format -> user ldgoi (+=)
  DiffLayout dw_layer_plain, dw_iter_plain;          // the same, when plain: our transpose-add
};

PrimitiveCache<FwdEntry> fwd_cache;
PrimitiveCache<BwdEntry> bwd_cache;

void fwd_onednn(OpCall& call) {
  const LstmDims d = dims_of(call, false);
  FwdEntry& e = fwd_cache.get(key_of("lstm_fwd", d), [&] {
    auto p = std::make_unique<FwdEntry>();
    p->pd = dnnl::lstm_forward::primitive_desc(forward_desc(d, dnnl::prop_kind::forward_inference), cpu_engine());
    p->prim = dnnl::lstm_forward(p->pd);
    p->w_layer.init(weights_user_md(d.I, d.H), p->pd.weights_layer_desc(), true, false);
    p->w_iter.init(weights_user_md(d.H, d.H), p->pd.weights_iter_desc(), true, false);
    return p;
  });
  const Tensor h0 = state_or_zeros(call.inputs[1], d), c0 = state_or_zeros(call.inputs[2], d);
  const Tensor bias = summed_bias(call, d.H);
  Tensor wl_scratch, wi_scratch;
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC_LAYER, wrap(seq_md(d.T, d.B, d.I), call.inputs[0])},
      {DNNL_ARG_SRC_ITER, wrap(state_md(d), h0)},
      {DNNL_ARG_SRC_ITER_C, wrap(state_md(d), c0)},
      {DNNL_ARG_WEIGHTS_LAYER, e.w_layer.input(call.inputs[3], wl_scratch)},
      {DNNL_ARG_WEIGHTS_ITER, e.w_iter.input(call.inputs[4], wi_scratch)},
      {DNNL_ARG_BIAS, wrap(bias_md(d.H), bias)},
      {DNNL_ARG_DST_LAYER, wrap(seq_md(d.T, d.B, d.H), call.outputs[0])},
      {DNNL_ARG_DST_ITER, wrap(state_md(d), call.outputs[1])},
      {DNNL_ARG_DST_ITER_C, wrap(state_md(d), call.outputs[2])}};
  e.prim.execute(cpu_stream(), args);
  cpu_stream().wait();
}

void bwd_onednn(OpCall& call) {
  const LstmDims d = dims_of(call, false);
  BwdEntry& e = bwd_cache.get(key_of("lstm_bwd", d), [&] {
    auto p = std::make_unique<BwdEntry>();
    p->fwd_pd = dnnl::lstm_forward::primitive_desc(forward_desc(d, dnnl::prop_kind::forward_training), cpu_engine());
    p->fwd = dnnl::lstm_forward(p->fwd_pd);
    const memory::desc sl = seq_md(d.T, d.B, d.I), dl = seq_md(d.T, d.B, d.H), st = state_md(d);
    const dnnl::lstm_backward::desc bd(
        dnnl::prop_kind::backward, dnnl::rnn_direction::unidirectional_left2right, sl, st, st,
        weights_any_md(d.I, d.H), weights_any_md(d.H, d.H), bias_md(d.H), dl, st, st, sl, st, st,
        weights_any_md(d.I, d.H), weights_any_md(d.H, d.H), bias_md(d.H), dl, st, st);
    p->pd = dnnl::lstm_backward::primitive_desc(bd, cpu_engine(), p->fwd_pd);
    p->prim = dnnl::lstm_backward(p->pd);
    p->fwd_w_layer.init(weights_user_md(d.I, d.H), p->fwd_pd.weights_layer_desc(), true, false);
    p->fwd_w_iter.init(weights_user_md(d.H, d.H), p->fwd_pd.weights_iter_desc(), true, false);
    p->w_layer.init(weights_user_md(d.I, d.H), p->pd.weights_layer_desc(), true, false);
    p->w_iter.init(weights_user_md(d.H, d.H), p->pd.weights_iter_desc(), true, false);
    // Always through zeroed scratch (see the note): force the reorder even when formats agree.
    p->dw_layer.init(weights_user_md(d.I, d.H), p->pd.diff_weights_layer_desc(), false, true, true, true);
    p->dw_iter.init(weights_user_md(d.H, d.H), p->pd.diff_weights_iter_desc(), false, true, true, true);
    p->dw_layer_plain = diff_layout(p->pd.diff_weights_layer_desc());
    p->dw_iter_plain = diff_layout(p->pd.diff_weights_iter_desc());
    return p;
  });
  const memory::desc sl = seq_md(d.T, d.B, d.I), dl = seq_md(d.T, d.B, d.H), st = state_md(d);
  const Tensor h0 = state_or_zeros(call.inputs[1], d), c0 = state_or_zeros(call.inputs[2], d);
  const Tensor dhT = state_or_zeros(call.inputs[8], d), dcT = state_or_zeros(call.inputs[9], d);
  const Tensor bias = summed_bias(call, d.H);
  // The forward again, for the workspace (Note [LSTM backward recomputes] in nn/lstm.hpp).
  Tensor y = Tensor::empty({d.T, d.B, d.H}), hT = Tensor::empty({d.B, d.H}), cT = Tensor::empty({d.B, d.H});
  Tensor workspace = bytes_tensor(e.fwd_pd.workspace_desc());
  const memory ws(e.fwd_pd.workspace_desc(), cpu_engine(), workspace.raw_data());
  Tensor s0, s1, s2, s3;
  e.fwd.execute(cpu_stream(), {{DNNL_ARG_SRC_LAYER, wrap(sl, call.inputs[0])},
                               {DNNL_ARG_SRC_ITER, wrap(st, h0)},
                               {DNNL_ARG_SRC_ITER_C, wrap(st, c0)},
                               {DNNL_ARG_WEIGHTS_LAYER, e.fwd_w_layer.input(call.inputs[3], s0)},
                               {DNNL_ARG_WEIGHTS_ITER, e.fwd_w_iter.input(call.inputs[4], s1)},
                               {DNNL_ARG_BIAS, wrap(bias_md(d.H), bias)},
                               {DNNL_ARG_DST_LAYER, wrap(dl, y)},
                               {DNNL_ARG_DST_ITER, wrap(st, hT)},
                               {DNNL_ARG_DST_ITER_C, wrap(st, cT)},
                               {DNNL_ARG_WORKSPACE, ws}});
  const Tensor dh0 = call.outputs[1].defined() ? call.outputs[1] : Tensor::empty({d.B, d.H});
  const Tensor dc0 = call.outputs[2].defined() ? call.outputs[2] : Tensor::empty({d.B, d.H});
  Tensor dwl_scratch, dwi_scratch;
  memory dwl = e.dw_layer.output(call.outputs[3], dwl_scratch);
  memory dwi = e.dw_iter.output(call.outputs[4], dwi_scratch);
  std::memset(dwl_scratch.raw_data(), 0, dwl_scratch.nbytes());
  std::memset(dwi_scratch.raw_data(), 0, dwi_scratch.nbytes());
  Tensor dbias = Tensor::zeros({4 * d.H});
  e.prim.execute(cpu_stream(), {{DNNL_ARG_SRC_LAYER, wrap(sl, call.inputs[0])},
                                {DNNL_ARG_SRC_ITER, wrap(st, h0)},
                                {DNNL_ARG_SRC_ITER_C, wrap(st, c0)},
                                {DNNL_ARG_WEIGHTS_LAYER, e.w_layer.input(call.inputs[3], s2)},
                                {DNNL_ARG_WEIGHTS_ITER, e.w_iter.input(call.inputs[4], s3)},
                                {DNNL_ARG_BIAS, wrap(bias_md(d.H), bias)},
                                {DNNL_ARG_DST_LAYER, wrap(dl, y)},
                                {DNNL_ARG_DST_ITER, wrap(st, hT)},
                                {DNNL_ARG_DST_ITER_C, wrap(st, cT)},
                                {DNNL_ARG_WORKSPACE, ws},
                                {DNNL_ARG_DIFF_SRC_LAYER, wrap(sl, call.outputs[0])},
                                {DNNL_ARG_DIFF_SRC_ITER, wrap(st, dh0)},
                                {DNNL_ARG_DIFF_SRC_ITER_C, wrap(st, dc0)},
                                {DNNL_ARG_DIFF_WEIGHTS_LAYER, dwl},
                                {DNNL_ARG_DIFF_WEIGHTS_ITER, dwi},
                                {DNNL_ARG_DIFF_BIAS, wrap(bias_md(d.H), dbias)},
                                {DNNL_ARG_DIFF_DST_LAYER, wrap(dl, call.inputs[7])},
                                {DNNL_ARG_DIFF_DST_ITER, wrap(st, dhT)},
                                {DNNL_ARG_DIFF_DST_ITER_C, wrap(st, dcT)}});
  cpu_stream().wait();
  if (e.dw_layer_plain.plain)
    transpose_accumulate(static_cast<const float*>(dwl_scratch.raw_data()), e.dw_layer_plain, d.I, d.H, call.outputs[3].data<float>());
  else
    e.dw_layer.finish(call.outputs[3], dwl_scratch);
  if (e.dw_iter_plain.plain)
    transpose_accumulate(static_cast<const float*>(dwi_scratch.raw_data()), e.dw_iter_plain, d.H, d.H, call.outputs[4].data<float>());
  else
    e.dw_iter.finish(call.outputs[4], dwi_scratch);
  cpu_stream().wait();
  const float* g = dbias.data<float>();
  float* dbi = call.outputs[5].data<float>();
  float* dbh = call.outputs[6].data<float>();
  for (std::int64_t r = 0; r < 4 * d.H; ++r) {
    dbi[r] += g[r];
    dbh[r] += g[r];
  }
}

// ---------------------------------------------------------------------------------------------
// The cell: gates = x W_ih^T + h W_hh^T (oneDNN matmuls), then one oneTBB pointwise pass
// ---------------------------------------------------------------------------------------------

BH_CPU_KERNEL void cell_pointwise(const float* gates, const float* bih, const float* bhh, const float* c,
                                  std::int64_t H, float* h_out, float* c_out) {
  for (std::int64_t k = 0; k < H; ++k) {
    const float ai = gates[k] + bih[k] + bhh[k];
    const float af = gates[H + k] + bih[H + k] + bhh[H + k];
    const float ag = gates[2 * H + k] + bih[2 * H + k] + bhh[2 * H + k];
    const float ao = gates[3 * H + k] + bih[3 * H + k] + bhh[3 * H + k];
    const float i = 1.0f / (1.0f + std::exp(-ai)), f = 1.0f / (1.0f + std::exp(-af));
    const float g = std::tanh(ag), o = 1.0f / (1.0f + std::exp(-ao));
    const float cn = f * (c ? c[k] : 0.0f) + i * g;
    c_out[k] = cn;
    h_out[k] = o * std::tanh(cn);
  }
}

void cell_fast(OpCall& call) {
  const LstmDims d = dims_of(call, true);
  Tensor gates = Tensor::empty({d.B, 4 * d.H});
  matmul_into(gates, call.inputs[0], call.inputs[3], false, true);
  if (call.inputs[1].defined()) matmul_into(gates, call.inputs[1], call.inputs[4], false, true, 1.0f, true);
  const float* g = gates.data<float>();
  const float* c = call.inputs[2].defined() ? call.inputs[2].data<float>() : nullptr;
  const float* bih = call.inputs[5].data<float>();
  const float* bhh = call.inputs[6].data<float>();
  float* h_out = call.outputs[0].data<float>();
  float* c_out = call.outputs[1].data<float>();
  parallel_range(d.B, row_grain(4 * d.H), [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b)
      cell_pointwise(g + b * 4 * d.H, bih, bhh, c ? c + b * d.H : nullptr, d.H, h_out + b * d.H, c_out + b * d.H);
  });
}

// ---------------------------------------------------------------------------------------------
// Example cases: T 1-5, B 1-3, I 2-6, H 2-5, with and without initial state / final gradients
// ---------------------------------------------------------------------------------------------

struct LstmCase {
  std::int64_t T, B, I, H;
  bool initial, dfinal;
};
const LstmCase kCases[] = {{1, 1, 2, 2, false, false},
                           {3, 2, 4, 3, true, true},
                           {5, 3, 6, 5, true, false},
                           {4, 2, 3, 4, false, true},
                           {2, 3, 5, 2, true, true}};

std::vector<Tensor> case_inputs(const LstmCase& k, std::uint64_t seed, bool cell) {
  const Tensor x = cell ? case_tensor({k.B, k.I}, seed) : case_tensor({k.T, k.B, k.I}, seed);
  return {x,
          k.initial ? case_tensor({k.B, k.H}, seed + 1) : Tensor(),
          k.initial ? case_tensor({k.B, k.H}, seed + 2, -2.0f, 2.0f) : Tensor(),
          case_tensor({4 * k.H, k.I}, seed + 3, -0.7f, 0.7f),
          case_tensor({4 * k.H, k.H}, seed + 4, -0.7f, 0.7f),
          case_tensor({4 * k.H}, seed + 5, -0.5f, 0.5f),
          case_tensor({4 * k.H}, seed + 6, -0.5f, 0.5f)};
}

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t n = 0;
  for (const LstmCase& k : kCases) {
    OpCall c;
    c.inputs = case_inputs(k, seed + 20 * n++, false);
    c.outputs = {Tensor::empty({k.T, k.B, k.H}), Tensor::empty({k.B, k.H}), Tensor::empty({k.B, k.H})};
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t n = 0;
  for (const LstmCase& k : kCases) {
    const std::uint64_t s = seed + 20 * n++;
    OpCall c;
    c.inputs = case_inputs(k, s, false);
    c.inputs.push_back(case_tensor({k.T, k.B, k.H}, s + 7));
    c.inputs.push_back(k.dfinal ? case_tensor({k.B, k.H}, s + 8) : Tensor());
    c.inputs.push_back(k.dfinal ? case_tensor({k.B, k.H}, s + 9) : Tensor());
    // Parameter gradients start non-zero: they accumulate.
    c.outputs = {Tensor::empty({k.T, k.B, k.I}),
                 k.initial ? Tensor::empty({k.B, k.H}) : Tensor(),
                 k.initial ? Tensor::empty({k.B, k.H}) : Tensor(),
                 case_tensor({4 * k.H, k.I}, s + 10),
                 case_tensor({4 * k.H, k.H}, s + 11),
                 case_tensor({4 * k.H}, s + 12),
                 case_tensor({4 * k.H}, s + 13)};
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> cell_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t n = 0;
  for (const LstmCase& k : kCases) {
    OpCall c;
    c.inputs = case_inputs(k, seed + 20 * n++, true);
    c.outputs = {Tensor::empty({k.B, k.H}), Tensor::empty({k.B, k.H})};
    out.push_back(std::move(c));
  }
  return out;
}

const char* const kFwdDoc =
    "inputs {x [T, B, I], h0 [B, H] (optional), c0 (optional), w_ih [4H, I], w_hh [4H, H], b_ih [4H], b_hh [4H]}, "
    "outputs {y [T, B, H], hT, cT}: one unidirectional LSTM layer, PyTorch's gates i, f, g, o";
const char* const kBwdDoc =
    "inputs {x, h0, c0, w_ih, w_hh, b_ih, b_hh, dy [T, B, H], dhT (optional), dcT (optional)}, outputs {dx, dh0, "
    "dc0 (optional), dw_ih +=, dw_hh +=, db_ih +=, db_hh +=}; reruns the forward";
const char* const kCellDoc =
    "inputs {x [B, I], h [B, H] (optional), c (optional), w_ih, w_hh, b_ih, b_hh}, outputs {h', c'}: one LSTM step";

const bool registered =
    register_op(OpDef{"lstm_forward", kFwdDoc, fwd_cases, 1e-5, 1e-4,
                      {OpImpl{"cpu.onednn", DeviceType::cpu, 100, accept_f32, fwd_onednn, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"lstm_backward", kBwdDoc, bwd_cases, 1e-5, 1e-4,
                      {OpImpl{"cpu.onednn", DeviceType::cpu, 100, accept_f32, bwd_onednn, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}}) &&
    register_op(OpDef{"lstm_cell_forward", kCellDoc, cell_cases, 1e-5, 1e-4,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, cell_fast, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, cell_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
