// cross_entropy_forward / cross_entropy_backward: softmax cross-entropy with label smoothing and
// an ignore index, over logits [N, C] and class targets (i32/i64 [N]).
//
// Per row r with target t (rows with t == ignore_index are skipped):
//   lp = log_softmax(logits[r]),  loss_r = -((1 - e) lp[t] + (e / C) sum_j lp[j])
// loss = mean over kept rows (0 when none). Backward: dlogits[r, j] = scale (exp(lp[j]) - q_j)
// with q = (1 - e) onehot(t) + e / C and scale = dloss / count. Row losses are summed in fp64
// in row order after the parallel pass, so the loss does not depend on the thread count.
// Targets outside [0, C) (other than ignore_index) throw InvalidArgument.

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/vec_math.hpp"

namespace benchhost::nn::cpu {
namespace {

std::int64_t target_at(const Tensor& t, std::int64_t r) {
  return t.dtype() == DType::i32 ? t.data<std::int32_t>()[r] : t.data<std::int64_t>()[r];
}

void check_targets(const OpCall& c, std::int64_t N, std::int64_t C, std::int64_t ignore) {
  const Tensor& t = c.inputs[1];
  BH_CHECK_AS(InvalidArgument, (t.dtype() == DType::i32 || t.dtype() == DType::i64) && t.numel() == N && t.is_contiguous(),
              "cross entropy targets must be contiguous i32/i64 [N={}], got {}", N, t.describe());
  for (std::int64_t r = 0; r < N; ++r) {
    const std::int64_t y = target_at(t, r);
    BH_CHECK_AS(InvalidArgument, y == ignore || (y >= 0 && y < C),
                "cross entropy target {} at row {} is outside [0, {}) and not ignore_index {}", y, r, C, ignore);
  }
}

// Log-softmax of one row into lp; returns sum_j lp[j] (for label smoothing).
BH_CPU_KERNEL float ce_row(const float* x, float* lp, std::int64_t C) {
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (std::int64_t j = 0; j < C; ++j) m = x[j] > m ? x[j] : m;
  float s = 0, sx = 0;
#pragma omp simd reduction(+ : s, sx)
  for (std::int64_t j = 0; j < C; ++j) {
    s += vexp(x[j] - m);
    sx += x[j];
  }
  const float lse = m + std::log(s);
  for (std::int64_t j = 0; j < C; ++j) lp[j] = x[j] - lse;
  return sx - static_cast<float>(C) * lse;
}

BH_CPU_KERNEL void ce_grad_row(const float* lp, float* d, float scale, float off, std::int64_t C) {
  for (std::int64_t j = 0; j < C; ++j) d[j] = flush_tiny(scale * (vexp(lp[j]) - off));
}

void fwd(OpCall& c, bool parallel) {
  const Tensor& logits = c.inputs[0];
  const std::int64_t N = logits.size(0), C = logits.size(1);
  const double e = c.attrs.get("smoothing", 0.0);
  const std::int64_t ignore = c.attrs.get_int("ignore_index", -100);
  check_targets(c, N, C, ignore);
  const float* x = logits.data<float>();
  float* lp = c.outputs[0].data<float>();
  std::vector<double> row_loss(static_cast<std::size_t>(N), 0.0);
  auto body = [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t t = target_at(c.inputs[1], r);
      double all = 0;
      if (parallel) {
        all = ce_row(x + r * C, lp + r * C, C);
      } else {
        double m = x[r * C], s = 0;
        for (std::int64_t j = 1; j < C; ++j) m = std::max(m, static_cast<double>(x[r * C + j]));
        for (std::int64_t j = 0; j < C; ++j) s += std::exp(x[r * C + j] - m);
        for (std::int64_t j = 0; j < C; ++j) lp[r * C + j] = static_cast<float>(x[r * C + j] - m - std::log(s));
        for (std::int64_t j = 0; j < C; ++j) all += lp[r * C + j];
      }
      if (t == ignore) continue;
      row_loss[static_cast<std::size_t>(r)] = -((1.0 - e) * lp[r * C + t] + e / static_cast<double>(C) * all);
    }
  };
  if (parallel) parallel_range(N, row_grain(C), body);
  else body(0, N);
  double total = 0;
  std::int64_t count = 0;
  for (std::int64_t r = 0; r < N; ++r)
    if (target_at(c.inputs[1], r) != ignore) {
      total += row_loss[static_cast<std::size_t>(r)];
      ++count;
    }
  c.outputs[1].data<float>()[0] = count ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
  c.outputs[1].data<float>()[1] = static_cast<float>(count);
}

void bwd(OpCall& c, bool parallel) {
  const Tensor& lpt = c.inputs[0];
  const std::int64_t N = lpt.size(0), C = lpt.size(1);
  const float e = static_cast<float>(c.attrs.get("smoothing", 0.0));
  const std::int64_t ignore = c.attrs.get_int("ignore_index", -100);
  const float scale = static_cast<float>(c.attrs.get("scale"));
  check_targets(c, N, C, ignore);
  const float* lp = lpt.data<float>();
  float* dx = c.outputs[0].data<float>();
  const float off = e / static_cast<float>(C);
  auto body = [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t t = target_at(c.inputs[1], r);
      float* d = dx + r * C;
      if (t == ignore) {
        std::fill_n(d, C, 0.0f);
        continue;
      }
      if (parallel)
        ce_grad_row(lp + r * C, d, scale, off, C);
      else
        for (std::int64_t j = 0; j < C; ++j) d[j] = static_cast<float>(scale * (std::exp(static_cast<double>(lp[r * C + j])) - off));
      d[t] -= scale * (1.0f - e);
    }
  };
  if (parallel) parallel_range(N, row_grain(C), body);
  else body(0, N);
}

void fwd_tbb(OpCall& c) { fwd(c, true); }
void fwd_ref(OpCall& c) { fwd(c, false); }
void bwd_tbb(OpCall& c) { bwd(c, true); }
void bwd_ref(OpCall& c) { bwd(c, false); }

std::string accepts(const OpCall& c) {
  std::string why = require_f32_contiguous({c.inputs[0]});
  return why.empty() ? require_f32_contiguous(c.outputs) : why;
}

Tensor targets(std::uint64_t seed, std::int64_t N, std::int64_t C) {
  Rng r(seed);
  std::vector<std::int64_t> t(static_cast<std::size_t>(N));
  for (auto& v : t) v = static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(C)));
  t[1] = -100;
  return Tensor::from_vector_i64(t, {N});
}

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (double e : {0.0, 0.1}) {
    OpCall c;
    c.inputs = {case_tensor({9, 17}, seed, -5.0f, 5.0f), targets(seed + 1, 9, 17)};
    c.outputs = {Tensor::empty({9, 17}), Tensor::empty({2})};
    c.attrs.set("smoothing", e).set("ignore_index", -100);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  OpCall f = fwd_cases(seed)[1];
  fwd_ref(f);
  OpCall c;
  c.inputs = {f.outputs[0], f.inputs[1]};
  c.outputs = {Tensor::empty({9, 17})};
  c.attrs.set("smoothing", 0.1).set("ignore_index", -100).set("scale", 0.125);
  return {c};
}

const bool registered =
    register_op(OpDef{"cross_entropy_forward",
                      "inputs {logits [N, C], targets [N]}, outputs {log_probs [N, C], [loss, count]}; "
                      "attrs smoothing, ignore_index",
                      fwd_cases, 2e-6, 2e-6,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"cross_entropy_backward",
                      "inputs {log_probs, targets}, outputs {dlogits}; attrs smoothing, ignore_index, scale",
                      bwd_cases, 1e-6, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
