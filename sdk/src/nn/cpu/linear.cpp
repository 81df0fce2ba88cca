// linear_forward: y = act(x @ w^T + bias), and bias_backward: db (+)= sum over rows of dz.
//
// x: [N, in] (callers flatten leading dims), w: [out, in] row-major (PyTorch layout; used as a
// transposed view, never copied), bias: [out] or absent. cpu.onednn fuses bias and activation
// into the matmul primitive (bias and an eltwise post-op); cpu.ref loops in double.
// linear_backward itself is composed in ops.cpp from activation_backward, matmul (dx = dz w,
// dw += dz^T x with the sum post-op) and bias_backward.

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/onednn_matmul.hpp"
#include "nn/cpu/vec_math.hpp"

namespace benchhost::nn::cpu {
namespace {

MatmulProblem linear_problem(const OpCall& c) {
  const Tensor& x = c.inputs.at(0);
  const Tensor& w = c.inputs.at(1);
  MatmulProblem p = make_matmul_problem(x, w, c.outputs.at(0), false, true);
  p.has_bias = c.inputs.size() > 2 && c.inputs[2].defined();
  p.act = static_cast<Activation>(c.attrs.get_int("act", 0));
  return p;
}

std::string accepts_onednn(const OpCall& c) {
  std::string why = accept_f32(c);
  if (!why.empty()) return why;
  return onednn_matmul_accepts(linear_problem(c));
}

void run_onednn(OpCall& c) {
  MatmulProblem p = linear_problem(c);
  onednn_matmul(p, c.inputs[0].data<float>(), c.inputs[1].data<float>(),
                p.has_bias ? c.inputs[2].data<float>() : nullptr, c.outputs[0].data<float>());
}

void run_ref(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const bool has_bias = c.inputs.size() > 2 && c.inputs[2].defined();
  const auto act = static_cast<Activation>(c.attrs.get_int("act", 0));
  const std::int64_t N = x.size(0), K = x.size(1), M = w.size(0);
  BH_CHECK_AS(InvalidArgument, w.size(1) == K, "linear: x {} and w {} disagree on in_features",
              shape_str(x.shape()), shape_str(w.shape()));
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* y = c.outputs[0].data<float>();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t m = 0; m < M; ++m) {
      double s = has_bias ? c.inputs[2].data<float>()[m] : 0.0;
      for (std::int64_t k = 0; k < K; ++k) s += static_cast<double>(xp[n * K + k]) * wp[m * K + k];
      y[n * M + m] = static_cast<float>(act_fwd_ref(act, s));
    }
}

// db (+)= column sums of g [R, C]: each task owns a slice of columns and walks all rows, so the
// sum order (and the result) does not depend on the thread count.
BH_CPU_KERNEL void colsum_kernel(const float* g, float* db, std::int64_t R, std::int64_t C,
                                 std::int64_t c0, std::int64_t c1, bool acc) {
  float tmp[256];
  for (std::int64_t cb = c0; cb < c1; cb += 256) {
    const std::int64_t ce = std::min(c1, cb + 256);
    for (std::int64_t j = cb; j < ce; ++j) tmp[j - cb] = 0.0f;
    for (std::int64_t r = 0; r < R; ++r) {
      const float* row = g + r * C;
      for (std::int64_t j = cb; j < ce; ++j) tmp[j - cb] += row[j];
    }
    for (std::int64_t j = cb; j < ce; ++j) db[j] = (acc ? db[j] : 0.0f) + tmp[j - cb];
  }
}

void bias_bwd_tbb(OpCall& c) {
  const Tensor& g = c.inputs[0];
  const std::int64_t C = g.size(-1), R = rows_of(g);
  const bool acc = c.attrs.get_bool("accumulate");
  const float* gp = g.data<float>();
  float* db = c.outputs[0].data<float>();
  parallel_range(C, 64, [&](std::int64_t b, std::int64_t e) { colsum_kernel(gp, db, R, C, b, e, acc); });
}

void bias_bwd_ref(OpCall& c) {
  const Tensor& g = c.inputs[0];
  const std::int64_t C = g.size(-1), R = rows_of(g);
  const bool acc = c.attrs.get_bool("accumulate");
  const float* gp = g.data<float>();
  float* db = c.outputs[0].data<float>();
  for (std::int64_t j = 0; j < C; ++j) {
    double s = 0;
    for (std::int64_t r = 0; r < R; ++r) s += gp[r * C + j];
    db[j] = static_cast<float>(s + (acc ? db[j] : 0.0));
  }
}

std::vector<OpCall> linear_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  int i = 0;
  for (Activation a : {Activation::none, Activation::relu, Activation::gelu_erf,
                       Activation::gelu_tanh, Activation::sigmoid, Activation::tanh}) {
    OpCall c;
    const bool bias = (i++ % 2) == 0;
    c.inputs = {case_tensor({6, 10}, seed + i), case_tensor({7, 10}, seed + 10 + i),
                bias ? case_tensor({7}, seed + 20 + i) : Tensor{}};
    c.outputs = {Tensor::empty({6, 7})};
    c.attrs.set("act", static_cast<int>(a));
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> bias_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (bool acc : {false, true}) {
    OpCall c;
    c.inputs = {case_tensor({2, 9, 300}, seed + acc)};
    c.outputs = {case_tensor({300}, seed + 5)};
    c.attrs.set("accumulate", acc);
    out.push_back(std::move(c));
  }
  return out;
}

const bool registered =
    register_op(OpDef{"linear_forward",
                      "y = act(x @ w^T + bias); inputs {x [N,in], w [out,in], bias [out] or -}, "
                      "outputs {y [N,out]}; attr act",
                      linear_cases, 2e-5, 2e-5,
                      {OpImpl{"cpu.onednn", DeviceType::cpu, 100, accepts_onednn, run_onednn, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, run_ref, true}}}) &&
    register_op(OpDef{"bias_backward",
                      "db (+)= sum over rows of g; inputs {g [..., C]}, outputs {db [C]}; attr accumulate",
                      bias_cases, 1e-4, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, bias_bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bias_bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
