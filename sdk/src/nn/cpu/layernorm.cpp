// layernorm_forward / layernorm_backward over the last dim.
//
// Layout: x [R, C] (leading dims flattened), gamma/beta [C], saved mean/rstd [R].
// Precision: fp32 with fp32 row statistics from a two-pass mean/variance over a row that sits in
// cache (no E[x^2] - E[x]^2 cancellation). Backward per row:
//   xhat = (x - mean) rstd, g = dy gamma,
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),
//   dgamma += sum_rows dy xhat, dbeta += sum_rows dy.
// The parameter gradients are summed per fixed block of 32 rows and then the blocks in order, so
// the result does not depend on the thread count. cpu.tbb parallelises over rows; cpu.ref loops
// in double.

#include <vector>

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

constexpr std::int64_t kBlockRows = 32;

BH_CPU_KERNEL void ln_fwd_rows(const float* x, const float* g, const float* b, float* y,
                               float* mean, float* rstd, std::int64_t r0, std::int64_t r1,
                               std::int64_t C, float eps) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (std::int64_t j = 0; j < C; ++j) s += xr[j];
    const float m = s / static_cast<float>(C);
    float v = 0;
#pragma omp simd reduction(+ : v)
    for (std::int64_t j = 0; j < C; ++j) {
      const float d = xr[j] - m;
      v += d * d;
    }
    const float rs = 1.0f / std::sqrt(v / static_cast<float>(C) + eps);
    if (b) {
      for (std::int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - m) * rs * g[j] + b[j];
    } else {
      for (std::int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - m) * rs * g[j];
    }
    mean[r] = m;
    rstd[r] = rs;
  }
}

// dx for rows [r0, r1) and this block's partial dgamma/dbeta (pg, pb: [C], overwritten).
BH_CPU_KERNEL void ln_bwd_rows(const float* dy, const float* x, const float* g, const float* mean,
                               const float* rstd, float* dx, float* pg, float* pb,
                               std::int64_t r0, std::int64_t r1, std::int64_t C) {
  for (std::int64_t j = 0; j < C; ++j) pg[j] = pb[j] = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* dyr = dy + r * C;
    const float* xr = x + r * C;
    float* dxr = dx + r * C;
    const float m = mean[r], rs = rstd[r];
    float sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (std::int64_t j = 0; j < C; ++j) {
      const float xh = (xr[j] - m) * rs;
      const float gj = dyr[j] * g[j];
      sum_g += gj;
      sum_gx += gj * xh;
      pg[j] += dyr[j] * xh;
      pb[j] += dyr[j];
    }
    const float mg = sum_g / static_cast<float>(C), mgx = sum_gx / static_cast<float>(C);
    for (std::int64_t j = 0; j < C; ++j) {
      const float xh = (xr[j] - m) * rs;
      dxr[j] = rs * (dyr[j] * g[j] - mg - xh * mgx);
    }
  }
}

void fwd_tbb(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const std::int64_t C = x.size(-1), R = rows_of(x);
  const float* b = c.inputs.size() > 2 && c.inputs[2].defined() ? c.inputs[2].data<float>() : nullptr;
  const float eps = static_cast<float>(c.attrs.get("eps"));
  const float* xp = x.data<float>();
  const float* gp = c.inputs[1].data<float>();
  float* y = c.outputs[0].data<float>();
  float* mean = c.outputs[1].data<float>();
  float* rstd = c.outputs[2].data<float>();
  parallel_range(R, row_grain(C), [&](std::int64_t r0, std::int64_t r1) {
    ln_fwd_rows(xp, gp, b, y, mean, rstd, r0, r1, C, eps);
  });
}

void bwd_tbb(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const std::int64_t C = dy.size(-1), R = rows_of(dy);
  const std::int64_t blocks = (R + kBlockRows - 1) / kBlockRows;
  std::vector<float> partial(static_cast<std::size_t>(2 * blocks * C));
  const float* dyp = dy.data<float>();
  const float* xp = c.inputs[1].data<float>();
  const float* gp = c.inputs[2].data<float>();
  const float* mean = c.inputs[3].data<float>();
  const float* rstd = c.inputs[4].data<float>();
  float* dx = c.outputs[0].data<float>();
  parallel_range(blocks, std::max<std::int64_t>(1, row_grain(C) / kBlockRows),
                 [&](std::int64_t b0, std::int64_t b1) {
                   for (std::int64_t blk = b0; blk < b1; ++blk)
                     ln_bwd_rows(dyp, xp, gp, mean, rstd, dx, partial.data() + 2 * blk * C,
                                 partial.data() + (2 * blk + 1) * C, blk * kBlockRows,
                                 std::min(R, (blk + 1) * kBlockRows), C);
                 });
  Tensor dgamma = c.outputs.size() > 1 ? c.outputs[1] : Tensor{};
  Tensor dbeta = c.outputs.size() > 2 ? c.outputs[2] : Tensor{};
  float* dg = dgamma.defined() ? dgamma.data<float>() : nullptr;
  float* db = dbeta.defined() ? dbeta.data<float>() : nullptr;
  parallel_range(C, 256, [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      const float* pg = partial.data() + 2 * blk * C;
      const float* pb = pg + C;
      if (dg)
        for (std::int64_t j = j0; j < j1; ++j) dg[j] += pg[j];
      if (db)
        for (std::int64_t j = j0; j < j1; ++j) db[j] += pb[j];
    }
  });
}

void fwd_ref(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const std::int64_t C = x.size(-1), R = rows_of(x);
  const bool has_b = c.inputs.size() > 2 && c.inputs[2].defined();
  const double eps = c.attrs.get("eps");
  const float* xp = x.data<float>();
  const float* g = c.inputs[1].data<float>();
  for (std::int64_t r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (std::int64_t j = 0; j < C; ++j) m += xp[r * C + j];
    m /= C;
    for (std::int64_t j = 0; j < C; ++j) v += (xp[r * C + j] - m) * (xp[r * C + j] - m);
    const double rs = 1.0 / std::sqrt(v / C + eps);
    for (std::int64_t j = 0; j < C; ++j)
      c.outputs[0].data<float>()[r * C + j] = static_cast<float>(
          (xp[r * C + j] - m) * rs * g[j] + (has_b ? c.inputs[2].data<float>()[j] : 0.0f));
    c.outputs[1].data<float>()[r] = static_cast<float>(m);
    c.outputs[2].data<float>()[r] = static_cast<float>(rs);
  }
}

void bwd_ref(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const std::int64_t C = dy.size(-1), R = rows_of(dy);
  const float* dyp = dy.data<float>();
  const float* xp = c.inputs[1].data<float>();
  const float* g = c.inputs[2].data<float>();
  const float* mean = c.inputs[3].data<float>();
  const float* rstd = c.inputs[4].data<float>();
  float* dx = c.outputs[0].data<float>();
  std::vector<double> dg(C, 0.0), db(C, 0.0);
  for (std::int64_t r = 0; r < R; ++r) {
    double sg = 0, sgx = 0;
    for (std::int64_t j = 0; j < C; ++j) {
      const double xh = (xp[r * C + j] - mean[r]) * static_cast<double>(rstd[r]);
      sg += static_cast<double>(dyp[r * C + j]) * g[j];
      sgx += static_cast<double>(dyp[r * C + j]) * g[j] * xh;
      dg[j] += dyp[r * C + j] * xh;
      db[j] += dyp[r * C + j];
    }
    for (std::int64_t j = 0; j < C; ++j) {
      const double xh = (xp[r * C + j] - mean[r]) * static_cast<double>(rstd[r]);
      dx[r * C + j] = static_cast<float>(rstd[r] * (static_cast<double>(dyp[r * C + j]) * g[j] - sg / C - xh * sgx / C));
    }
  }
  if (c.outputs.size() > 1 && c.outputs[1].defined())
    for (std::int64_t j = 0; j < C; ++j) c.outputs[1].data<float>()[j] += static_cast<float>(dg[j]);
  if (c.outputs.size() > 2 && c.outputs[2].defined())
    for (std::int64_t j = 0; j < C; ++j) c.outputs[2].data<float>()[j] += static_cast<float>(db[j]);
}

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (int with_beta = 0; with_beta < 2; ++with_beta) {
    OpCall c;
    c.inputs = {case_tensor({5, 3, 24}, seed, -2.0f, 3.0f), case_tensor({24}, seed + 1, 0.5f, 1.5f),
                with_beta ? case_tensor({24}, seed + 2) : Tensor{}};
    c.outputs = {Tensor::empty({5, 3, 24}), Tensor::empty({15}), Tensor::empty({15})};
    c.attrs.set("eps", 1e-5);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  // 70 rows: more than two 32-row blocks, with a ragged last block.
  const std::int64_t R = 70, C = 33;
  Tensor x = case_tensor({R, C}, seed, -2.0f, 2.0f);
  Tensor mean = Tensor::empty({R}), rstd = Tensor::empty({R});
  for (std::int64_t r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (std::int64_t j = 0; j < C; ++j) m += x.data<float>()[r * C + j];
    m /= C;
    for (std::int64_t j = 0; j < C; ++j) v += std::pow(x.data<float>()[r * C + j] - m, 2);
    mean.data<float>()[r] = static_cast<float>(m);
    rstd.data<float>()[r] = static_cast<float>(1.0 / std::sqrt(v / C + 1e-5));
  }
  OpCall c;
  c.inputs = {case_tensor({R, C}, seed + 1), x, case_tensor({C}, seed + 2, 0.5f, 1.5f), mean, rstd};
  c.outputs = {Tensor::empty({R, C}), case_tensor({C}, seed + 3), case_tensor({C}, seed + 4)};
  return {c};
}

const bool registered =
    register_op(OpDef{"layernorm_forward",
                      "inputs {x [.., C], gamma [C], beta [C] or -}, outputs {y, mean [R], rstd [R]}; attr eps",
                      fwd_cases, 2e-5, 2e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"layernorm_backward",
                      "inputs {dy, x, gamma, mean, rstd}, outputs {dx, dgamma += or -, dbeta += or -}",
                      bwd_cases, 5e-5, 5e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
