// transducer_loss_forward / transducer_loss_backward (the RNN-T loss, nn/transducer.hpp): the op
// declarations, the oneTBB CPU implementation and the plain-loop reference. The ops' signatures
// are in nn/transducer_common.hpp; the public functions in nn/transducer.cpp.
//
// Layout: a (b, t, u) row of the logits holds V contiguous classes; row r = (b T + t)(U+1) + u
// indexes the lattices lse, alpha, beta [B, T, U+1] as well. Rows outside utterance b's lattice
// (t >= T_b or u > U_b) get lse = alpha = 0 and a zero gradient.
//
// oneTBB implementation. The log-softmax denominators and the gradient are parallel over rows
// (B T (U+1) of them, ~10^5 at the reference's sizes, so there is no need to split a row's V
// further) with vectorised exp (vec_math.hpp); each is one pass over a row (the forward reads
// the logits once more for max and sum, the backward reads them once and writes the gradient
// once). The lattices are parallel over utterances: each is a sequential T_b x (U_b+1) walk of
// scalar log-sum-exps in f64, ~1% of the work (Note [Transducer lattice precision] in
// nn/transducer.hpp); the per-class exps are f32. Each row's result depends on that row only, so
// results do not depend on the thread count.
//
// Reference: the same formulas in plain loops, all in f64 (logits and gradient f32).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/vec_math.hpp"
#include "nn/transducer_common.hpp"

namespace benchhost::nn::cpu {
namespace {

using transducer::Dims;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

template <class F>
F log_add(F a, F b) {
  if (a < b) std::swap(a, b);
  if (b == -std::numeric_limits<F>::infinity()) return a;
  return a + std::log1p(std::exp(b - a));
}

Dims dims_of(const OpCall& call, const char* op) {
  const Dims d = transducer::check_shapes(call.inputs[0], call.inputs[1], call.inputs[2], call.inputs[3],
                                          call.attrs.get_int("blank", -1), op);
  transducer::check_values(d, d.U() > 0 ? call.inputs[1].data<std::int32_t>() : nullptr,
                           call.inputs[2].data<std::int32_t>(), call.inputs[3].data<std::int32_t>(), op);
  return d;
}

struct Lengths {
  const std::int32_t* labels;
  const std::int32_t* frames;
  const std::int32_t* label_counts;
  std::int64_t tb(std::int64_t b) const { return frames[b]; }
  std::int64_t ub(std::int64_t b) const { return label_counts[b]; }
};

Lengths lengths_of(const OpCall& call, const Dims& d) {
  return {d.U() > 0 ? call.inputs[1].data<std::int32_t>() : nullptr, call.inputs[2].data<std::int32_t>(),
          call.inputs[3].data<std::int32_t>()};
}

bool row_valid(const Dims& d, const Lengths& l, std::int64_t r) {
  const std::int64_t u = r % d.U1, t = (r / d.U1) % d.T, b = r / (d.U1 * d.T);
  return t < l.tb(b) && u <= l.ub(b);
}

/// The incoming gradient of utterance b: scale * dloss[b] or scale * dloss[0].
double grad_scale(const OpCall& call, std::int64_t b) {
  const Tensor& dloss = call.inputs[6];
  const double scale = call.attrs.get("scale", 1.0);
  return scale * static_cast<double>(dloss.data<float>()[dloss.numel() > 1 ? b : 0]);
}

// ---------------------------------------------------------------------------------------------
// oneTBB implementation
// ---------------------------------------------------------------------------------------------

// Note [Clamps and trapping math]
// vexp() clamps its argument with two compares and selects. Under GCC's default -ftrapping-math
// the vectoriser will not if-convert those selects for AVX2 (a compare may raise an FP
// exception), so in the x86-64-v3 clone (Note [Kernel multiversioning]) such a loop stays scalar
// (measured: the whole forward + backward 3 times slower at B 16, T 150, U 40, V 1024 on an AVX2
// machine). No code here reads FP exception flags, so the row kernels are compiled without
// trapping math, which changes no arithmetic: it only lets those loops vectorise.
#if defined(__GNUC__) && !defined(__clang__)
#define BH_ROW_KERNEL BH_CPU_KERNEL __attribute__((optimize("no-trapping-math")))
#else
#define BH_ROW_KERNEL BH_CPU_KERNEL
#endif

// log sum_k exp z[k] over a row of V logits.
BH_ROW_KERNEL float row_log_sum_exp(const float* z, std::int64_t V) {
  float m = z[0];
#pragma omp simd reduction(max : m)
  for (std::int64_t k = 0; k < V; ++k) m = z[k] > m ? z[k] : m;
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (std::int64_t k = 0; k < V; ++k) s += vexp(z[k] - m);
  return m + std::log(s);
}

// g[k] = s exp(z[k] + c): the occupancy-weighted softmax of a row, before the edge terms.
BH_ROW_KERNEL void row_scaled_softmax(const float* z, std::int64_t V, float c, float s, float* g) {
#pragma omp simd
  for (std::int64_t k = 0; k < V; ++k) g[k] = s * vexp(z[k] + c);
}

void fwd_tbb(OpCall& call) {
  const Dims d = dims_of(call, "transducer_loss_forward");
  const Lengths l = lengths_of(call, d);
  const float* z = call.inputs[0].data<float>();
  float* loss = call.outputs[0].data<float>();
  double* lse = call.outputs[1].data<double>();
  double* alpha = call.outputs[2].data<double>();
  parallel_range(d.rows(), row_grain(d.V), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) lse[r] = row_valid(d, l, r) ? row_log_sum_exp(z + r * d.V, d.V) : 0.0;
  });
  parallel_range(d.B, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t tb = l.tb(b), ub = l.ub(b);
      const std::int32_t* y = l.labels + b * d.U();
      for (std::int64_t t = 0; t < d.T; ++t)
        for (std::int64_t u = 0; u < d.U1; ++u)
          if (t >= tb || u > ub) alpha[d.row(b, t, u)] = 0.0;
      if (tb == 0) {
        loss[b] = 0.0f;
        continue;
      }
      auto lp = [&](std::int64_t t, std::int64_t u, std::int64_t k) {
        const std::int64_t r = d.row(b, t, u);
        return static_cast<double>(z[r * d.V + k]) - lse[r];
      };
      for (std::int64_t t = 0; t < tb; ++t)
        for (std::int64_t u = 0; u <= ub; ++u) {
          double a;
          if (t == 0 && u == 0)
            a = 0.0;
          else if (u == 0)
            a = alpha[d.row(b, t - 1, 0)] + lp(t - 1, 0, d.blank);
          else if (t == 0)
            a = alpha[d.row(b, 0, u - 1)] + lp(0, u - 1, y[u - 1]);
          else
            a = log_add(alpha[d.row(b, t - 1, u)] + lp(t - 1, u, d.blank),
                        alpha[d.row(b, t, u - 1)] + lp(t, u - 1, y[u - 1]));
          alpha[d.row(b, t, u)] = a;
        }
      loss[b] = static_cast<float>(-(alpha[d.row(b, tb - 1, ub)] + lp(tb - 1, ub, d.blank)));
    }
  });
}

void bwd_tbb(OpCall& call) {
  const Dims d = dims_of(call, "transducer_loss_backward");
  const Lengths l = lengths_of(call, d);
  const float* z = call.inputs[0].data<float>();
  const double* lse = call.inputs[4].data<double>();
  const double* alpha = call.inputs[5].data<double>();
  float* dz = call.outputs[0].data<float>();
  std::vector<double> beta(static_cast<std::size_t>(d.rows()), 0.0), ll(static_cast<std::size_t>(d.B), 0.0);
  auto lp = [&](std::int64_t r, std::int64_t k) { return static_cast<double>(z[r * d.V + k]) - lse[r]; };
  parallel_range(d.B, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t tb = l.tb(b), ub = l.ub(b);
      if (tb == 0) continue;
      const std::int32_t* y = l.labels + b * d.U();
      for (std::int64_t t = tb - 1; t >= 0; --t)
        for (std::int64_t u = ub; u >= 0; --u) {
          const std::int64_t r = d.row(b, t, u);
          double v;
          if (t == tb - 1 && u == ub)
            v = lp(r, d.blank);
          else if (u == ub)
            v = beta[static_cast<std::size_t>(d.row(b, t + 1, u))] + lp(r, d.blank);
          else if (t == tb - 1)
            v = beta[static_cast<std::size_t>(r + 1)] + lp(r, y[u]);
          else
            v = log_add(beta[static_cast<std::size_t>(d.row(b, t + 1, u))] + lp(r, d.blank),
                        beta[static_cast<std::size_t>(r + 1)] + lp(r, y[u]));
          beta[static_cast<std::size_t>(r)] = v;
        }
      ll[static_cast<std::size_t>(b)] = beta[static_cast<std::size_t>(d.row(b, 0, 0))];
    }
  });
  std::vector<double> scale(static_cast<std::size_t>(d.B));
  for (std::int64_t b = 0; b < d.B; ++b) scale[static_cast<std::size_t>(b)] = grad_scale(call, b);
  parallel_range(d.rows(), row_grain(d.V), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* g = dz + r * d.V;
      const std::int64_t u = r % d.U1, t = (r / d.U1) % d.T, b = r / (d.U1 * d.T);
      const std::int64_t tb = l.tb(b), ub = l.ub(b);
      if (t >= tb || u > ub) {
        std::fill(g, g + d.V, 0.0f);
        continue;
      }
      const double a = alpha[r], llb = ll[static_cast<std::size_t>(b)], s = scale[static_cast<std::size_t>(b)];
      // The offset is formed in f64 (alpha, beta and ll are large and nearly cancel), the
      // row's exps in f32.
      row_scaled_softmax(z + r * d.V, d.V, static_cast<float>(a + beta[static_cast<std::size_t>(r)] - llb - lse[r]),
                         static_cast<float>(s), g);
      if (t < tb - 1)
        g[d.blank] -= static_cast<float>(
            s * std::exp(a + lp(r, d.blank) + beta[static_cast<std::size_t>(d.row(b, t + 1, u))] - llb));
      else if (u == ub)
        g[d.blank] -= static_cast<float>(s * std::exp(a + lp(r, d.blank) - llb));
      if (u < ub) {
        const std::int64_t yk = l.labels[b * d.U() + u];
        g[yk] -= static_cast<float>(s * std::exp(a + lp(r, yk) + beta[static_cast<std::size_t>(r + 1)] - llb));
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Reference: plain loops in f64
// ---------------------------------------------------------------------------------------------

void fwd_ref(OpCall& call) {
  const Dims d = dims_of(call, "transducer_loss_forward");
  const Lengths l = lengths_of(call, d);
  const float* z = call.inputs[0].data<float>();
  float* loss = call.outputs[0].data<float>();
  double* lse_out = call.outputs[1].data<double>();
  double* alpha_out = call.outputs[2].data<double>();
  std::vector<double> lse(static_cast<std::size_t>(d.rows()), 0.0), alpha(lse.size(), 0.0);
  for (std::int64_t r = 0; r < d.rows(); ++r) {
    if (!row_valid(d, l, r)) continue;
    const float* zr = z + r * d.V;
    double m = zr[0], s = 0.0;
    for (std::int64_t k = 1; k < d.V; ++k) m = std::max(m, static_cast<double>(zr[k]));
    for (std::int64_t k = 0; k < d.V; ++k) s += std::exp(zr[k] - m);
    lse[static_cast<std::size_t>(r)] = m + std::log(s);
  }
  for (std::int64_t b = 0; b < d.B; ++b) {
    const std::int64_t tb = l.tb(b), ub = l.ub(b);
    auto lp = [&](std::int64_t t, std::int64_t u, std::int64_t k) {
      const std::int64_t r = d.row(b, t, u);
      return static_cast<double>(z[r * d.V + k]) - lse[static_cast<std::size_t>(r)];
    };
    auto A = [&](std::int64_t t, std::int64_t u) -> double& { return alpha[static_cast<std::size_t>(d.row(b, t, u))]; };
    for (std::int64_t t = 0; t < tb; ++t)
      for (std::int64_t u = 0; u <= ub; ++u) {
        double from_blank = kNegInf, from_label = kNegInf;
        if (t > 0) from_blank = A(t - 1, u) + lp(t - 1, u, d.blank);
        if (u > 0) from_label = A(t, u - 1) + lp(t, u - 1, l.labels[b * d.U() + u - 1]);
        A(t, u) = t == 0 && u == 0 ? 0.0 : log_add(from_blank, from_label);
      }
    loss[b] = tb == 0 ? 0.0f : static_cast<float>(-(A(tb - 1, ub) + lp(tb - 1, ub, d.blank)));
  }
  std::copy(lse.begin(), lse.end(), lse_out);
  std::copy(alpha.begin(), alpha.end(), alpha_out);
}

void bwd_ref(OpCall& call) {
  const Dims d = dims_of(call, "transducer_loss_backward");
  const Lengths l = lengths_of(call, d);
  const float* z = call.inputs[0].data<float>();
  const double* lse = call.inputs[4].data<double>();
  const double* alpha = call.inputs[5].data<double>();
  float* dz = call.outputs[0].data<float>();
  std::fill(dz, dz + d.rows() * d.V, 0.0f);
  std::vector<double> beta(static_cast<std::size_t>(d.rows()), kNegInf);
  for (std::int64_t b = 0; b < d.B; ++b) {
    const std::int64_t tb = l.tb(b), ub = l.ub(b);
    if (tb == 0) continue;
    auto lp = [&](std::int64_t t, std::int64_t u, std::int64_t k) {
      const std::int64_t r = d.row(b, t, u);
      return static_cast<double>(z[r * d.V + k]) - lse[r];
    };
    auto B_ = [&](std::int64_t t, std::int64_t u) -> double& { return beta[static_cast<std::size_t>(d.row(b, t, u))]; };
    auto label = [&](std::int64_t u) { return static_cast<std::int64_t>(l.labels[b * d.U() + u]); };
    for (std::int64_t t = tb - 1; t >= 0; --t)
      for (std::int64_t u = ub; u >= 0; --u) {
        if (t == tb - 1 && u == ub) {
          B_(t, u) = lp(t, u, d.blank);
          continue;
        }
        double via_blank = kNegInf, via_label = kNegInf;
        if (t < tb - 1) via_blank = B_(t + 1, u) + lp(t, u, d.blank);
        if (u < ub) via_label = B_(t, u + 1) + lp(t, u, label(u));
        B_(t, u) = log_add(via_blank, via_label);
      }
    const double ll = B_(0, 0), s = grad_scale(call, b);
    for (std::int64_t t = 0; t < tb; ++t)
      for (std::int64_t u = 0; u <= ub; ++u) {
        const std::int64_t r = d.row(b, t, u);
        const double a = alpha[r];
        float* g = dz + r * d.V;
        // d(-ll)/dz_k = occupancy * softmax_k - (the probability of the edge that emits k here).
        for (std::int64_t k = 0; k < d.V; ++k) g[k] = static_cast<float>(s * std::exp(a + B_(t, u) - ll + lp(t, u, k)));
        double edge_blank = 0.0, edge_label = 0.0;
        if (t < tb - 1)
          edge_blank = std::exp(a + lp(t, u, d.blank) + B_(t + 1, u) - ll);
        else if (u == ub)
          edge_blank = std::exp(a + lp(t, u, d.blank) - ll);
        if (u < ub) edge_label = std::exp(a + lp(t, u, label(u)) + B_(t, u + 1) - ll);
        g[d.blank] = static_cast<float>(s * (std::exp(a + B_(t, u) - ll + lp(t, u, d.blank)) - edge_blank));
        if (u < ub) {
          const std::int64_t k = label(u);
          g[k] = static_cast<float>(s * (std::exp(a + B_(t, u) - ll + lp(t, u, k)) - edge_label));
        }
      }
  }
}

std::string accepts(const OpCall& c) {
  for (const auto* list : {&c.inputs, &c.outputs})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Tensor& t = (*list)[i];
      const DType want = transducer::expected_dtype(list == &c.inputs, i);
      if (t.dtype() != want || !t.device().is_cpu() || !t.is_contiguous())
        return fmt::format("{} {} must be contiguous {} on the cpu, got {}", list == &c.inputs ? "input" : "output", i,
                           dtype_name(want), t.describe());
    }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Example cases: B 2-3, T 2-6, U 1-4, V 3-7, unequal lengths, U_b = 0, T_b = U_b = 0, blank first
// or last
// ---------------------------------------------------------------------------------------------

struct LossCase {
  std::int64_t T, U, V, blank;
  std::vector<std::int32_t> frames, labels_per_utt;
};
const LossCase kCases[] = {{3, 2, 5, 4, {3, 2}, {2, 0}},       {4, 3, 6, 0, {4, 1, 3}, {1, 0, 3}},
                           {6, 4, 7, 6, {6, 5}, {4, 2}},       {2, 1, 3, 2, {2, 1}, {1, 1}},
                           {3, 2, 4, 3, {3, 0, 2}, {2, 0, 1}}, {5, 4, 3, 1, {2, 5, 4}, {4, 3, 0}}};

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t i = 0;
  for (const LossCase& k : kCases) {
    const auto B = static_cast<std::int64_t>(k.frames.size());
    Rng r(seed + 10 * i, 3);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(B * k.U), 0);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t u = 0; u < k.labels_per_utt[static_cast<std::size_t>(b)]; ++u) {
        // A class other than the blank.
        auto y = static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(k.V - 1)));
        labels[static_cast<std::size_t>(b * k.U + u)] = static_cast<std::int32_t>(y >= k.blank ? y + 1 : y);
      }
    OpCall c;
    c.inputs = {case_tensor({B, k.T, k.U + 1, k.V}, seed + 10 * i + 1, -3.0f, 3.0f),
                Tensor::from_vector_i32(labels, {B, k.U}), Tensor::from_vector_i32(k.frames, {B}),
                Tensor::from_vector_i32(k.labels_per_utt, {B})};
    c.outputs = {Tensor::empty({B}), Tensor::empty({B, k.T, k.U + 1}, DType::f64),
                 Tensor::empty({B, k.T, k.U + 1}, DType::f64)};
    c.attrs.set("blank", static_cast<double>(k.blank));
    out.push_back(std::move(c));
    ++i;
  }
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  std::vector<OpCall> fwd = fwd_cases(seed), out;
  std::uint64_t i = 0;
  for (OpCall& f : fwd) {
    fwd_ref(f);
    OpCall c;
    const std::int64_t B = f.inputs[0].size(0);
    // Alternately a per-utterance gradient ('none') and one scalar times 1 / B ('mean').
    const bool per_utterance = i % 2 == 0;
    c.inputs = {f.inputs[0],
                f.inputs[1],
                f.inputs[2],
                f.inputs[3],
                f.outputs[1],
                f.outputs[2],
                per_utterance ? case_tensor({B}, seed + 100 + i, 0.5f, 1.5f) : Tensor::from_vector({0.75f}, {1})};
    c.outputs = {Tensor::empty(f.inputs[0].shape())};
    c.attrs = f.attrs;
    c.attrs.set("scale", per_utterance ? 1.0 : 1.0 / static_cast<double>(B));
    out.push_back(std::move(c));
    ++i;
  }
  return out;
}

const bool registered =
    register_op(OpDef{"transducer_loss_forward",
                      "inputs {logits [B, T, U+1, V], labels i32 [B, U], logit_lengths i32 [B], label_lengths i32 "
                      "[B]}, outputs {losses [B], lse f64 [B, T, U+1], alpha f64 [B, T, U+1]}; attr blank",
                      fwd_cases,
                      1e-5,
                      1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"transducer_loss_backward",
                      "inputs {logits, labels, logit_lengths, label_lengths, lse, alpha, dloss [B] or [1]}, outputs "
                      "{dlogits [B, T, U+1, V]}; attrs blank, scale (utterance b's gradient is scale * dloss[b or 0])",
                      bwd_cases,
                      1e-6,
                      1e-4,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
