// Mask R-CNN's losses beyond RetinaNet's (nn/detection.hpp): smooth-L1 with beta and the BCE
// with logits of each RoI's labelled mask channel, forward and backward: the op declarations,
// the oneTBB CPU kernels and the plain-loop references (f64). The Tensor-level functions are in
// nn/detection.cpp; the CUDA kernels in nn/cuda/maskrcnn_losses.cu.
//
// Ops:
//   smooth_l1_loss_forward   {input [*], target [*]} -> {[loss]}; attrs beta, scale
//   smooth_l1_loss_backward  {input, target} -> {dinput}; attrs beta, scale, dloss
//   mask_bce_loss_forward    {logits [R, C, M, M], labels i64 [R], targets [R, M, M]} -> {[loss]}
//   mask_bce_loss_backward   {same} -> {dlogits [R, C, M, M]}; attr dloss
//
// Sums: f32 within fixed chunks (kChunk elements, or one RoI's M x M mask), f64 across chunks
// in chunk order, so the losses do not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

constexpr std::int64_t kChunk = 4096;

// ---------------------------------------------------------------------------------------------
// smooth-L1
// ---------------------------------------------------------------------------------------------

std::int64_t smooth_geo(const OpCall& c, const char* op) {
  const std::int64_t n = c.inputs[0].numel();
  BH_CHECK_AS(InvalidArgument, c.inputs[1].numel() == n, "{}: input has {} elements, target {}", op, n,
              c.inputs[1].numel());
  return n;
}

BH_CPU_KERNEL float smooth_chunk(const float* x, const float* t, std::int64_t n, float beta) {
  float s = 0.0f;
  const float half_beta = 0.5f * beta;
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = std::fabs(x[i] - t[i]);
    s += d < beta ? 0.5f * d * d / beta : d - half_beta;
  }
  return s;
}

BH_CPU_KERNEL void smooth_grad_chunk(const float* x, const float* t, std::int64_t n, float beta, float scale,
                                     float* dx) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = x[i] - t[i];
    const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
    dx[i] = scale * (std::fabs(d) < beta ? d / beta : sign);
  }
}

void smooth_fwd_tbb(OpCall& call) {
  const std::int64_t n = smooth_geo(call, "smooth_l1_loss_forward");
  const float beta = static_cast<float>(call.attrs.get("beta", 1.0));
  const float* x = call.inputs[0].data<float>();
  const float* t = call.inputs[1].data<float>();
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<std::size_t>(chunks), 0.0);
  parallel_range(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c)
      part[static_cast<std::size_t>(c)] = smooth_chunk(x + c * kChunk, t + c * kChunk, std::min(kChunk, n - c * kChunk), beta);
  });
  double total = 0.0;
  for (double p : part) total += p;
  call.outputs[0].data<float>()[0] = static_cast<float>(call.attrs.get("scale", 1.0) * total);
}

void smooth_bwd_tbb(OpCall& call) {
  const std::int64_t n = smooth_geo(call, "smooth_l1_loss_backward");
  const float beta = static_cast<float>(call.attrs.get("beta", 1.0));
  const float scale = static_cast<float>(call.attrs.get("scale", 1.0) * call.attrs.get("dloss", 1.0));
  const float* x = call.inputs[0].data<float>();
  const float* t = call.inputs[1].data<float>();
  float* dx = call.outputs[0].data<float>();
  parallel_range(n, kChunk, [&](std::int64_t i0, std::int64_t i1) {
    smooth_grad_chunk(x + i0, t + i0, i1 - i0, beta, scale, dx + i0);
  });
}

// References: maskrcnn_benchmark's smooth_l1_loss literally, in f64.
void smooth_fwd_ref(OpCall& call) {
  const std::int64_t n = smooth_geo(call, "smooth_l1_loss_forward");
  const double beta = call.attrs.get("beta", 1.0);
  const float* x = call.inputs[0].data<float>();
  const float* t = call.inputs[1].data<float>();
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - t[i]);
    s += d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
  }
  call.outputs[0].data<float>()[0] = static_cast<float>(call.attrs.get("scale", 1.0) * s);
}

void smooth_bwd_ref(OpCall& call) {
  const std::int64_t n = smooth_geo(call, "smooth_l1_loss_backward");
  const double beta = call.attrs.get("beta", 1.0);
  const double scale = call.attrs.get("scale", 1.0) * call.attrs.get("dloss", 1.0);
  const float* x = call.inputs[0].data<float>();
  const float* t = call.inputs[1].data<float>();
  float* dx = call.outputs[0].data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - t[i];
    dx[i] = static_cast<float>(scale * (std::fabs(d) < beta ? d / beta : (d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0))));
  }
}

// ---------------------------------------------------------------------------------------------
// mask BCE on the labelled channel
// ---------------------------------------------------------------------------------------------

struct MaskGeo {
  std::int64_t r = 0, c = 0, mm = 0;
};

MaskGeo mask_geo(const OpCall& call, const char* op) {
  const Tensor& z = call.inputs[0];
  BH_CHECK_AS(InvalidArgument, z.dim() == 4 && z.dtype() == DType::f32, "{}: logits must be f32 [R, C, M, M], got {}",
              op, z.describe());
  MaskGeo g{z.size(0), z.size(1), z.size(2) * z.size(3)};
  BH_CHECK_AS(InvalidArgument,
              call.inputs[1].dtype() == DType::i64 && call.inputs[1].numel() == g.r && call.inputs[2].numel() == g.r * g.mm,
              "{}: labels must be i64 [{}] and targets [{}, M, M], got {} and {}", op, g.r, g.r,
              call.inputs[1].describe(), call.inputs[2].describe());
  const std::int64_t* l = call.inputs[1].data<std::int64_t>();
  for (std::int64_t i = 0; i < g.r; ++i)
    if (l[i] < 0 || l[i] >= g.c) [[unlikely]]
      BH_THROW(DataError, "{}: label {} of RoI {} is outside [0, {}) (the mask logits' classes)", op, l[i], i, g.c);
  return g;
}

// BCE with logits, the stable form: max(x, 0) - x t + log1p(exp(-|x|)).
inline float bce_term(float x, float t) { return std::max(x, 0.0f) - x * t + std::log1p(std::exp(-std::fabs(x))); }

BH_CPU_KERNEL float mask_row_loss(const float* x, const float* t, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) s += bce_term(x[i], t[i]);
  return s;
}

BH_CPU_KERNEL void mask_row_grad(const float* x, const float* t, std::int64_t n, float scale, float* dx) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = scale * (1.0f / (1.0f + std::exp(-x[i])) - t[i]);
}

void mask_fwd_tbb(OpCall& call) {
  const MaskGeo g = mask_geo(call, "mask_bce_loss_forward");
  const float* z = call.inputs[0].data<float>();
  const std::int64_t* l = call.inputs[1].data<std::int64_t>();
  const float* t = call.inputs[2].data<float>();
  std::vector<double> part(static_cast<std::size_t>(g.r), 0.0);
  parallel_range(g.r, 1, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      part[static_cast<std::size_t>(r)] = mask_row_loss(z + (r * g.c + l[r]) * g.mm, t + r * g.mm, g.mm);
  });
  double total = 0.0;
  for (double p : part) total += p;
  call.outputs[0].data<float>()[0] = g.r == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(g.r * g.mm));
}

void mask_bwd_tbb(OpCall& call) {
  const MaskGeo g = mask_geo(call, "mask_bce_loss_backward");
  const float* z = call.inputs[0].data<float>();
  const std::int64_t* l = call.inputs[1].data<std::int64_t>();
  const float* t = call.inputs[2].data<float>();
  float* dz = call.outputs[0].data<float>();
  const float scale =
      g.r == 0 ? 0.0f : static_cast<float>(call.attrs.get("dloss", 1.0) / static_cast<double>(g.r * g.mm));
  parallel_range(g.r, 1, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      std::fill(dz + r * g.c * g.mm, dz + (r + 1) * g.c * g.mm, 0.0f);
      const std::int64_t off = (r * g.c + l[r]) * g.mm;
      mask_row_grad(z + off, t + r * g.mm, g.mm, scale, dz + off);
    }
  });
}

void mask_fwd_ref(OpCall& call) {
  const MaskGeo g = mask_geo(call, "mask_bce_loss_forward");
  const float* z = call.inputs[0].data<float>();
  const std::int64_t* l = call.inputs[1].data<std::int64_t>();
  const float* t = call.inputs[2].data<float>();
  double s = 0.0;
  for (std::int64_t r = 0; r < g.r; ++r)
    for (std::int64_t i = 0; i < g.mm; ++i) {
      const double x = z[(r * g.c + l[r]) * g.mm + i], y = t[r * g.mm + i];
      s += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x)));
    }
  call.outputs[0].data<float>()[0] = g.r == 0 ? 0.0f : static_cast<float>(s / static_cast<double>(g.r * g.mm));
}

void mask_bwd_ref(OpCall& call) {
  const MaskGeo g = mask_geo(call, "mask_bce_loss_backward");
  const float* z = call.inputs[0].data<float>();
  const std::int64_t* l = call.inputs[1].data<std::int64_t>();
  const float* t = call.inputs[2].data<float>();
  float* dz = call.outputs[0].data<float>();
  const double scale = g.r == 0 ? 0.0 : call.attrs.get("dloss", 1.0) / static_cast<double>(g.r * g.mm);
  for (std::int64_t r = 0; r < g.r; ++r)
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.mm; ++i) {
        const std::int64_t e = (r * g.c + c) * g.mm + i;
        dz[e] = c != l[r] ? 0.0f
                          : static_cast<float>(scale * (1.0 / (1.0 + std::exp(-static_cast<double>(z[e]))) - t[r * g.mm + i]));
      }
}

// ---------------------------------------------------------------------------------------------
// accepts() and example cases
// ---------------------------------------------------------------------------------------------

std::string accepts(const OpCall& c) {
  std::string why = require_floating_f32(c);
  if (!why.empty()) return why;
  for (const auto* list : {&c.inputs, &c.outputs})
    for (const Tensor& t : *list)
      if (t.defined() && (!t.device().is_cpu() || !t.is_contiguous())) return "tensors must be contiguous cpu tensors";
  return {};
}

std::vector<OpCall> smooth_cases(std::uint64_t seed, bool backward) {
  std::vector<OpCall> out;
  for (auto [n, beta, scale] : {std::tuple{24, 1.0 / 9.0, 1.0 / 256.0}, std::tuple{20000, 1.0, 1.0 / 512.0},
                                std::tuple{64, 0.0, 1.0}, std::tuple{0, 1.0, 1.0}}) {
    OpCall c;
    c.inputs = {case_tensor({n, 4}, seed + static_cast<std::uint64_t>(n), -1.5f, 1.5f),
                case_tensor({n, 4}, seed + 1 + static_cast<std::uint64_t>(n), -1.0f, 1.0f)};
    c.outputs = {backward ? Tensor::empty({n, 4}) : Tensor::empty({1})};
    c.attrs.set("beta", beta).set("scale", scale);
    if (backward) c.attrs.set("dloss", 0.5);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> mask_cases(std::uint64_t seed, bool backward) {
  std::vector<OpCall> out;
  for (auto [r, k, m] : {std::tuple{3, 5, 4}, std::tuple{40, 81, 28}, std::tuple{0, 81, 28}}) {
    OpCall c;
    Tensor labels = Tensor::empty({r}, DType::i64);
    Tensor targets = Tensor::empty({r, m, m});
    Rng rng(seed + static_cast<std::uint64_t>(r), 41);
    for (std::int64_t i = 0; i < r; ++i) labels.data<std::int64_t>()[i] = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(k)));
    for (std::int64_t i = 0; i < targets.numel(); ++i) targets.data<float>()[i] = rng.uniform(0.0f, 1.0f) < 0.4f ? 1.0f : 0.0f;
    c.inputs = {case_tensor({r, k, m, m}, seed + 3 + static_cast<std::uint64_t>(r), -8.0f, 8.0f), labels, targets};
    c.outputs = {backward ? Tensor::empty({r, k, m, m}) : Tensor::empty({1})};
    if (backward) c.attrs.set("dloss", 2.0);
    out.push_back(std::move(c));
  }
  return out;
}

OpDef op_def(const char* name, const char* doc, OpCaseMaker cases, double atol, double rtol, void (*fast)(OpCall&),
             void (*ref)(OpCall&)) {
  return OpDef{name, doc, std::move(cases), atol, rtol,
               {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, fast, false},
                OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, ref, true}}};
}

const bool registered =
    register_op(op_def("smooth_l1_loss_forward",
                       "inputs {input [*], target [*]}, outputs {[scale * sum smooth_l1(input - target, beta)]}; attrs "
                       "beta, scale",
                       [](std::uint64_t s) { return smooth_cases(s, false); }, 1e-6, 1e-5, smooth_fwd_tbb,
                       smooth_fwd_ref)) &&
    register_op(op_def("smooth_l1_loss_backward",
                       "inputs {input [*], target [*]}, outputs {dinput [*]}; attrs beta, scale, dloss",
                       [](std::uint64_t s) { return smooth_cases(s, true); }, 1e-7, 1e-5, smooth_bwd_tbb,
                       smooth_bwd_ref)) &&
    register_op(op_def("mask_bce_loss_forward",
                       "inputs {logits [R, C, M, M], labels i64 [R], targets [R, M, M]}, outputs {[mean BCE with "
                       "logits of channel labels[r]]}",
                       [](std::uint64_t s) { return mask_cases(s, false); }, 1e-6, 1e-5, mask_fwd_tbb, mask_fwd_ref)) &&
    register_op(op_def("mask_bce_loss_backward",
                       "inputs {logits [R, C, M, M], labels i64 [R], targets [R, M, M]}, outputs {dlogits [R, C, M, "
                       "M]}; attr dloss",
                       [](std::uint64_t s) { return mask_cases(s, true); }, 1e-9, 1e-5, mask_bwd_tbb, mask_bwd_ref));

}  // namespace
}  // namespace benchhost::nn::cpu
