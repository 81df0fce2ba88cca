// CPU implementations of the multi-tensor optimizer ops (Note [Multi-tensor optimizer ops] in
// nn/multi_tensor.hpp). These are the only CPU definition of each update rule: the
// optimizers, clipping, EMA and the loss scaler dispatch to them, and the parity test compares
// the CUDA implementations against them. Each is a plain element loop over [begin, end) spans
// that the compiler vectorises (decisions hoisted per tensor; Note [Vectorising optimizer
// loops] for the loops with a square root), parallel over tensors and over chunks with
// oneTBB; reductions are deterministic (Note [Deterministic chunked reductions]).

#include <cstring>

#include "nn/cpu/cpu_common.hpp"
#include "nn/multi_tensor.hpp"
#include "nn/parallel.hpp"

namespace benchhost::nn::cpu {
namespace {

using detail::check_multi_tensor_call;
using detail::for_each_span;
using detail::kBlock;
using detail::span_sum;
using detail::sqrt_inplace;
using detail::sum_squares;

template <class F>
void for_each_tensor(std::size_t n, F&& f) {
  tbb::parallel_for(std::size_t{0}, n, [&](std::size_t i) { f(i); });
}

float fattr(const OpCall& c, const char* name) { return static_cast<float>(c.attrs.get(name)); }
bool decays(const OpCall& c, std::size_t i) { return c.attrs.get_ints("decay")[i] != 0; }

// ---- SGD ----------------------------------------------------------------------------------------

void sgd(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "optim_sgd_multi", DeviceType::cpu, 0, 1, 2, 0, true, true);
  const float lr = fattr(c, "lr"), mom = fattr(c, "momentum"), wd_all = fattr(c, "weight_decay");
  const bool nesterov = c.attrs.get_bool("nesterov");
  for_each_tensor(n, [&](std::size_t i) {
    float* w = c.outputs[i].data<float>();
    float* buf = c.outputs[n + i].defined() ? c.outputs[n + i].data<float>() : nullptr;
    const float* g = c.inputs[i].data<float>();
    const float wd = decays(c, i) ? wd_all : 0.0f;
    for_each_span(c.outputs[i], c.inputs[n + i], [&](std::int64_t b, std::int64_t e) {
      if (!buf) {
        for (std::int64_t k = b; k < e; ++k) w[k] -= lr * (g[k] + wd * w[k]);
      } else if (!nesterov) {
        for (std::int64_t k = b; k < e; ++k) {
          const float d = g[k] + wd * w[k];
          buf[k] = mom * buf[k] + d;
          w[k] -= lr * buf[k];
        }
      } else {
        for (std::int64_t k = b; k < e; ++k) {
          const float d = g[k] + wd * w[k];
          buf[k] = mom * buf[k] + d;
          w[k] -= lr * (d + mom * buf[k]);
        }
      }
    });
  });
}

// ---- LARS ---------------------------------------------------------------------------------------

void lars(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "optim_lars_multi", DeviceType::cpu, 0, 1, 2, 1, false, true);
  Tensor& trust = c.outputs[2 * n];
  BH_CHECK_AS(InvalidArgument, trust.numel() == static_cast<std::int64_t>(n) && trust.dtype() == DType::f32 && trust.device().is_cpu(),
              "optim_lars_multi: trust must be an f32 cpu tensor of {} elements, is {}", n, trust.describe());
  const float lr = fattr(c, "lr"), mom = fattr(c, "momentum"), wd_all = fattr(c, "weight_decay");
  const float eta = fattr(c, "eta"), eps = fattr(c, "epsilon");
  float* ratios = trust.data<float>();
  const Tensor none;
  for_each_tensor(n, [&](std::size_t i) {
    float* w = c.outputs[i].data<float>();
    float* v = c.outputs[n + i].data<float>();
    const float* g = c.inputs[i].data<float>();
    const bool decay = decays(c, i);
    float ratio = 1.0f, wd = 0.0f;
    if (decay) {
      auto s = span_sum<2>(c.outputs[i], none, [&](std::int64_t b, std::int64_t e) {
        return std::array<double, 2>{sum_squares(w + b, e - b), sum_squares(g + b, e - b)};
      });
      wd = wd_all;
      ratio = detail::lars_trust_ratio(true, std::sqrt(s[0]), std::sqrt(s[1]), eta, wd, eps);
    }
    ratios[i] = ratio;
    const float scaled_lr = decay ? lr * ratio : lr;
    for_each_span(c.outputs[i], none, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k) {
        v[k] = mom * v[k] + scaled_lr * (g[k] + wd * w[k]);
        w[k] -= v[k];
      }
    });
  });
}

// ---- LAMB ---------------------------------------------------------------------------------------

void lamb(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "optim_lamb_multi", DeviceType::cpu, 0, 1, 3, 1, false, true);
  Tensor& trust = c.outputs[3 * n];
  BH_CHECK_AS(InvalidArgument, trust.numel() == static_cast<std::int64_t>(n) && trust.dtype() == DType::f32 && trust.device().is_cpu(),
              "optim_lamb_multi: trust must be an f32 cpu tensor of {} elements, is {}", n, trust.describe());
  const float lr = fattr(c, "lr"), b1 = fattr(c, "beta1"), b2 = fattr(c, "beta2");
  const float eps = fattr(c, "epsilon"), wd_all = fattr(c, "weight_decay");
  const double t = c.attrs.get("step");
  const bool bc = c.attrs.get_bool("bias_correction", true);
  const float inv_bc1 = detail::inverse_bias_correction(b1, t, bc);
  const float inv_bc2 = detail::inverse_bias_correction(b2, t, bc);
  float* ratios = trust.data<float>();
  const Tensor none;
  for_each_tensor(n, [&](std::size_t i) {
    float* w = c.outputs[i].data<float>();
    float* m = c.outputs[n + i].data<float>();
    float* v = c.outputs[2 * n + i].data<float>();
    const float* g = c.inputs[i].data<float>();
    const bool decay = decays(c, i);
    const float wd = decay ? wd_all : 0.0f;
    // Pass 1: moments, and the norms of w and of the update u (recomputed in pass 2 rather
    // than stored: one less tensor-sized buffer, and the loop is memory-bound either way).
    auto s = span_sum<2>(c.outputs[i], none, [&](std::int64_t b, std::int64_t e) {
      double ww = sum_squares(w + b, e - b), uu = 0;
      float buf[kBlock];  // Note [Vectorising optimizer loops]
      for (std::int64_t s0 = b; s0 < e; s0 += kBlock) {
        const std::int64_t len = std::min(kBlock, e - s0);
        float* W = w + s0; const float* G = g + s0; float* M = m + s0; float* V = v + s0;
        for (std::int64_t j = 0; j < len; ++j) {
          M[j] = b1 * M[j] + (1.0f - b1) * G[j];
          V[j] = b2 * V[j] + (1.0f - b2) * G[j] * G[j];
          buf[j] = V[j] * inv_bc2;
        }
        sqrt_inplace(buf, len);
        for (std::int64_t j = 0; j < len; ++j) buf[j] = (M[j] * inv_bc1) / (buf[j] + eps) + wd * W[j];
        uu += sum_squares(buf, len);
      }
      return std::array<double, 2>{ww, uu};
    });
    const float ratio = detail::lamb_trust_ratio(decay, std::sqrt(s[0]), std::sqrt(s[1]));
    ratios[i] = ratio;
    const float step = lr * ratio;
    for_each_span(c.outputs[i], none, [&](std::int64_t b, std::int64_t e) {
      float buf[kBlock];
      for (std::int64_t s0 = b; s0 < e; s0 += kBlock) {
        const std::int64_t len = std::min(kBlock, e - s0);
        float* W = w + s0; const float* M = m + s0; const float* V = v + s0;
        for (std::int64_t j = 0; j < len; ++j) buf[j] = V[j] * inv_bc2;
        sqrt_inplace(buf, len);
        for (std::int64_t j = 0; j < len; ++j)
          W[j] -= step * ((M[j] * inv_bc1) / (buf[j] + eps) + wd * W[j]);
      }
    });
  });
}

// ---- Adam / AdamW -------------------------------------------------------------------------------

void adam(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "optim_adam_multi", DeviceType::cpu, 0, 1, 3, 0, true, true);
  const float lr = fattr(c, "lr"), b1 = fattr(c, "beta1"), b2 = fattr(c, "beta2");
  const float eps = fattr(c, "epsilon"), wd_all = fattr(c, "weight_decay");
  const bool decoupled = c.attrs.get_bool("decoupled");
  const double t = c.attrs.get("step");
  const float inv_bc1 = detail::inverse_bias_correction(b1, t);
  const float inv_bc2 = detail::inverse_bias_correction(b2, t);
  for_each_tensor(n, [&](std::size_t i) {
    float* w = c.outputs[i].data<float>();
    float* m = c.outputs[n + i].data<float>();
    float* v = c.outputs[2 * n + i].data<float>();
    const float* g = c.inputs[i].data<float>();
    const float wd = decays(c, i) ? wd_all : 0.0f;
    const float l2 = decoupled ? 0.0f : wd;   // added to the gradient
    const float dec = decoupled ? wd : 0.0f;  // added to the update
    for_each_span(c.outputs[i], c.inputs[n + i], [&](std::int64_t b, std::int64_t e) {
      float buf[kBlock];  // Note [Vectorising optimizer loops]
      for (std::int64_t s0 = b; s0 < e; s0 += kBlock) {
        const std::int64_t len = std::min(kBlock, e - s0);
        float* W = w + s0; const float* G = g + s0; float* M = m + s0; float* V = v + s0;
        for (std::int64_t j = 0; j < len; ++j) {
          const float gk = G[j] + l2 * W[j];
          M[j] = b1 * M[j] + (1.0f - b1) * gk;
          V[j] = b2 * V[j] + (1.0f - b2) * gk * gk;
          buf[j] = V[j] * inv_bc2;
        }
        sqrt_inplace(buf, len);
        for (std::int64_t j = 0; j < len; ++j)
          W[j] -= lr * ((M[j] * inv_bc1) / (buf[j] + eps) + dec * W[j]);
      }
    });
  });
}

// ---- Adagrad ------------------------------------------------------------------------------------

void adagrad(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "optim_adagrad_multi", DeviceType::cpu, 0, 1, 2, 0, true, true);
  const float lr = fattr(c, "lr"), eps = fattr(c, "epsilon"), wd_all = fattr(c, "weight_decay");
  for_each_tensor(n, [&](std::size_t i) {
    float* w = c.outputs[i].data<float>();
    float* acc = c.outputs[n + i].data<float>();
    const float* g = c.inputs[i].data<float>();
    const float wd = decays(c, i) ? wd_all : 0.0f;
    for_each_span(c.outputs[i], c.inputs[n + i], [&](std::int64_t b, std::int64_t e) {
      float root[kBlock];  // Note [Vectorising optimizer loops]
      for (std::int64_t s0 = b; s0 < e; s0 += kBlock) {
        const std::int64_t len = std::min(kBlock, e - s0);
        float* W = w + s0; const float* G = g + s0; float* A = acc + s0;
        for (std::int64_t j = 0; j < len; ++j) {
          const float gk = G[j] + wd * W[j];
          A[j] += gk * gk;
          root[j] = A[j];
        }
        sqrt_inplace(root, len);
        for (std::int64_t j = 0; j < len; ++j) W[j] -= lr * (G[j] + wd * W[j]) / (root[j] + eps);
      }
    });
  });
}

// ---- norms, unscale/check, lerp -----------------------------------------------------------------

void sumsq(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "multi_tensor_sumsq", DeviceType::cpu, 0, 1, 0, 1, true, false);
  BH_CHECK_AS(InvalidArgument, c.outputs.size() == 1 && c.outputs[0].numel() == static_cast<std::int64_t>(n) &&
              c.outputs[0].dtype() == DType::f64 && c.outputs[0].device().is_cpu(),
              "multi_tensor_sumsq: output must be one f64 cpu tensor of {} elements", n);
  double* out = c.outputs[0].data<double>();
  for_each_tensor(n, [&](std::size_t i) {
    const float* x = c.inputs[i].data<float>();
    out[i] = span_sum<1>(c.inputs[i], c.inputs[n + i], [&](std::int64_t b, std::int64_t e) {
      return std::array<double, 1>{sum_squares(x + b, e - b)};
    })[0];
  });
}

void scale_check(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "multi_tensor_scale_check", DeviceType::cpu, 1, 0, 1, 1, true, false);
  const Tensor& mul_t = c.inputs[0];
  Tensor& found = c.outputs[n];
  BH_CHECK_AS(InvalidArgument, mul_t.numel() == 1 && mul_t.dtype() == DType::f32 && mul_t.device().is_cpu() &&
              found.numel() == 1 && found.dtype() == DType::f32 && found.device().is_cpu(),
              "multi_tensor_scale_check: mul and found_inf must be f32 cpu tensors of one element");
  const float mul = mul_t.data<float>()[0];
  std::vector<double> bad(n, 0.0);
  for_each_tensor(n, [&](std::size_t i) {
    float* g = c.outputs[i].data<float>();
    bad[i] = span_sum<1>(c.outputs[i], c.inputs[1 + i], [&](std::int64_t b, std::int64_t e) {
      if (mul != 1.0f)
        for (std::int64_t k = b; k < e; ++k) g[k] *= mul;
      // Inf/NaN: all exponent bits set. Integer test, so the loop vectorises.
      std::int64_t cnt = 0;
      for (std::int64_t k = b; k < e; ++k) {
        std::uint32_t bits;
        std::memcpy(&bits, &g[k], sizeof bits);
        cnt += (bits & 0x7f800000u) == 0x7f800000u;
      }
      return std::array<double, 1>{static_cast<double>(cnt)};
    })[0];
  });
  double total = 0;
  for (double b : bad) total += b;
  found.data<float>()[0] = total > 0 ? 1.0f : 0.0f;
}

void lerp(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "multi_tensor_lerp", DeviceType::cpu, 0, 1, 1, 0, false, false);
  const float keep = fattr(c, "decay"), take = 1.0f - keep;
  const Tensor none;
  for_each_tensor(n, [&](std::size_t i) {
    float* s = c.outputs[i].data<float>();
    const float* w = c.inputs[i].data<float>();
    for_each_span(c.outputs[i], none, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k) s[k] = keep * s[k] + take * w[k];
    });
  });
}

void fill(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, "multi_tensor_fill", DeviceType::cpu, 1, 0, 1, 0, false, false);
  const Tensor& v = c.inputs[0];
  BH_CHECK_AS(InvalidArgument, v.numel() == 1 && v.dtype() == DType::f32 && v.device().is_cpu(),
              "multi_tensor_fill: value must be an f32 cpu tensor of one element, is {}", v.describe());
  const float value = v.data<float>()[0];
  for_each_tensor(n, [&](std::size_t i) {
    float* x = c.outputs[i].data<float>();
    detail::parallel_chunks(c.outputs[i].numel(), [&](std::int64_t b, std::int64_t e) { std::fill(x + b, x + e, value); });
  });
}

// ---- example cases ------------------------------------------------------------------------------

const std::vector<Shape> kShapes = {{37, 5}, {301}, {9000}, {6, 4}};

Tensor sparse_rows_case() { return Tensor::from_vector_i64({4, 0, 31, 17}, {4}); }

// n tensors: grads, then the rows list (rows on tensor 0 when `sparse`).
void add_grads(OpCall& c, std::uint64_t seed, bool with_rows, bool sparse) {
  for (std::size_t i = 0; i < kShapes.size(); ++i) c.inputs.push_back(case_tensor(kShapes[i], seed + 100 + i));
  if (!with_rows) return;
  for (std::size_t i = 0; i < kShapes.size(); ++i) c.inputs.push_back(sparse && i == 0 ? sparse_rows_case() : Tensor());
}
void add_states(OpCall& c, std::uint64_t seed, float lo, float hi) {
  for (std::size_t i = 0; i < kShapes.size(); ++i) c.outputs.push_back(case_tensor(kShapes[i], seed + 200 + i, lo, hi));
}
void set_decay(OpCall& c) { c.attrs.set_ints("decay", {1, 0, 1, 1}); }
Tensor trust_out() { return Tensor::zeros({static_cast<std::int64_t>(kShapes.size())}); }

std::vector<OpCall> sgd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (int variant = 0; variant < 3; ++variant) {
    OpCall c;
    add_grads(c, seed + variant, true, variant != 1);
    add_states(c, seed, -1, 1);
    if (variant == 0) {
      for (std::size_t i = 0; i < kShapes.size(); ++i) c.outputs.push_back(Tensor());
    } else {
      add_states(c, seed + 7, -0.1f, 0.1f);
    }
    c.attrs.set("lr", 0.1).set("momentum", variant == 0 ? 0.0 : 0.9).set("nesterov", variant == 2 ? 1 : 0)
        .set("weight_decay", variant == 1 ? 1e-3 : 0.0);
    set_decay(c);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> lars_cases(std::uint64_t seed) {
  OpCall c;
  add_grads(c, seed, false, false);
  add_states(c, seed, -1, 1);
  add_states(c, seed + 7, -0.1f, 0.1f);
  c.outputs.push_back(trust_out());
  c.attrs.set("lr", 0.5).set("momentum", 0.9).set("weight_decay", 5e-5).set("eta", 0.001).set("epsilon", 0.0);
  set_decay(c);
  return {c};
}

std::vector<OpCall> lamb_cases(std::uint64_t seed) {
  OpCall c;
  add_grads(c, seed, false, false);
  add_states(c, seed, -1, 1);
  add_states(c, seed + 7, -0.1f, 0.1f);
  add_states(c, seed + 13, 0.0f, 0.01f);
  c.outputs.push_back(trust_out());
  c.attrs.set("lr", 0.01).set("beta1", 0.9).set("beta2", 0.999).set("epsilon", 1e-6).set("weight_decay", 0.01)
      .set("step", 3).set("bias_correction", 1);
  set_decay(c);
  return {c};
}

std::vector<OpCall> adam_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    OpCall c;
    add_grads(c, seed + decoupled, true, decoupled == 0);
    add_states(c, seed, -1, 1);
    add_states(c, seed + 7, -0.1f, 0.1f);
    add_states(c, seed + 13, 0.0f, 0.01f);
    c.attrs.set("lr", 0.01).set("beta1", 0.9).set("beta2", 0.999).set("epsilon", 1e-8)
        .set("weight_decay", decoupled ? 0.01 : 0.0).set("step", 5).set("decoupled", decoupled);
    set_decay(c);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> adagrad_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (int sparse = 0; sparse < 2; ++sparse) {
    OpCall c;
    add_grads(c, seed + sparse, true, sparse == 1);
    add_states(c, seed, -1, 1);
    add_states(c, seed + 7, 0.0f, 0.5f);
    c.attrs.set("lr", 0.05).set("epsilon", 1e-10).set("weight_decay", sparse ? 0.0 : 1e-4);
    set_decay(c);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> sumsq_cases(std::uint64_t seed) {
  OpCall c;
  add_grads(c, seed, true, true);
  c.outputs.push_back(Tensor::zeros({static_cast<std::int64_t>(kShapes.size())}, DType::f64));
  return {c};
}

std::vector<OpCall> scale_check_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (int inject = 0; inject < 2; ++inject) {
    OpCall c;
    c.inputs.push_back(Tensor::full({1}, 1.0 / 1024, DType::f32));
    for (std::size_t i = 0; i < kShapes.size(); ++i) c.inputs.push_back(i == 0 ? sparse_rows_case() : Tensor());
    add_states(c, seed + inject, -1000, 1000);
    if (inject) c.outputs[2].data<float>()[4321] = INFINITY;
    c.outputs.push_back(Tensor::zeros({1}));
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> lerp_cases(std::uint64_t seed) {
  OpCall c;
  add_grads(c, seed, false, false);
  add_states(c, seed, -1, 1);
  c.attrs.set("decay", 0.99);
  return {c};
}

std::vector<OpCall> fill_cases(std::uint64_t seed) {
  OpCall c;
  c.inputs.push_back(Tensor::full({1}, 0.0));
  add_states(c, seed, -1, 1);
  c.outputs[1].data<float>()[17] = NAN;  // a gradient after an overflowed step
  return {c};
}

OpImpl cpu_ref(void (*run)(OpCall&)) { return OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, run, true}; }

const bool registered = [] {
  register_op(OpDef{detail::kSgdOp,
                    "fused SGD (momentum, nesterov, L2 decay): in {grad[n], rows[n]}, out {w[n], momentum_buf[n]}; "
                    "attrs lr, momentum, nesterov, weight_decay, decay (ints)",
                    sgd_cases, 1e-5, 1e-5, {cpu_ref(sgd)}});
  register_op(OpDef{detail::kLarsOp,
                    "fused LARS: in {grad[n]}, out {w[n], velocity[n], trust [n]}; attrs lr, momentum, weight_decay, "
                    "eta, epsilon, decay (ints)",
                    lars_cases, 1e-5, 1e-5, {cpu_ref(lars)}});
  register_op(OpDef{detail::kLambOp,
                    "fused LAMB: in {grad[n]}, out {w[n], exp_avg[n], exp_avg_sq[n], trust [n]}; attrs lr, beta1, "
                    "beta2, epsilon, weight_decay, step, bias_correction, decay (ints)",
                    lamb_cases, 1e-5, 1e-5, {cpu_ref(lamb)}});
  register_op(OpDef{detail::kAdamOp,
                    "fused Adam/AdamW: in {grad[n], rows[n]}, out {w[n], exp_avg[n], exp_avg_sq[n]}; attrs lr, "
                    "beta1, beta2, epsilon, weight_decay, step, decoupled, decay (ints)",
                    adam_cases, 1e-5, 1e-5, {cpu_ref(adam)}});
  register_op(OpDef{detail::kAdagradOp,
                    "fused Adagrad: in {grad[n], rows[n]}, out {w[n], sum[n]}; attrs lr (decayed), epsilon, "
                    "weight_decay, decay (ints)",
                    adagrad_cases, 1e-5, 1e-5, {cpu_ref(adagrad)}});
  register_op(OpDef{detail::kSumSqOp,
                    "per-tensor sum of squares (deterministic): in {x[n], rows[n]}, out {sumsq f64 [n]}",
                    sumsq_cases, 1e-6, 1e-6, {cpu_ref(sumsq)}});
  register_op(OpDef{detail::kScaleCheckOp,
                    "x *= mul over the meaningful spans, found_inf = 1 if any result is Inf/NaN else 0: "
                    "in {mul f32 [1], rows[n]}, out {x[n], found_inf f32 [1]}",
                    scale_check_cases, 1e-6, 1e-6, {cpu_ref(scale_check)}});
  register_op(OpDef{detail::kLerpOp,
                    "shadow = decay * shadow + (1 - decay) * w: in {w[n]}, out {shadow[n]}; attr decay",
                    lerp_cases, 1e-6, 1e-6, {cpu_ref(lerp)}});
  register_op(OpDef{detail::kFillOp, "x[i][:] = value (zero_grad on devices): in {value f32 [1]}, out {x[n]}",
                    fill_cases, 0.0, 0.0, {cpu_ref(fill)}});
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cpu
