// matmul: c = alpha * op(a) @ op(b) (+ c), batched, with op = optional transpose.
//
// Layout: any strides whose last two dims are expressible to oneDNN (a transpose view is just
// swapped strides, so trans_a/trans_b never copy). Batch dims collapse into one; a batch-less b
// broadcasts. Precision: fp32 in and out; oneDNN accumulates in fp32, the reference in fp64.
// Implementations: cpu.onednn (the matmul primitive, cached by shape), cpu.ref (plain loops).

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/onednn_matmul.hpp"

namespace benchhost::nn::cpu {
namespace {

MatmulProblem problem_of(const OpCall& c) {
  return make_matmul_problem(c.inputs.at(0), c.inputs.at(1), c.outputs.at(0),
                             c.attrs.get_bool("trans_a"), c.attrs.get_bool("trans_b"));
}

std::string accepts_onednn(const OpCall& c) {
  for (const Tensor* t : {&c.inputs.at(0), &c.inputs.at(1), &c.outputs.at(0)})
    if (t->dtype() != DType::f32) return "needs f32";
  MatmulProblem p = problem_of(c);
  p.alpha = static_cast<float>(c.attrs.get("alpha", 1.0));
  p.accumulate = c.attrs.get_bool("accumulate");
  return onednn_matmul_accepts(p);
}

void run_onednn(OpCall& c) {
  MatmulProblem p = problem_of(c);
  p.alpha = static_cast<float>(c.attrs.get("alpha", 1.0));
  p.accumulate = c.attrs.get_bool("accumulate");
  onednn_matmul(p, c.inputs[0].data<float>(), c.inputs[1].data<float>(), nullptr,
                c.outputs[0].data<float>());
}

// Reference: one dot product per output element, fp64 accumulation.
void run_ref(OpCall& c) {
  MatmulProblem p = problem_of(c);
  const double alpha = c.attrs.get("alpha", 1.0);
  const bool acc = c.attrs.get_bool("accumulate");
  const float* a = c.inputs[0].data<float>();
  const float* w = c.inputs[1].data<float>();
  float* out = c.outputs[0].data<float>();
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t m = 0; m < p.M; ++m)
      for (std::int64_t n = 0; n < p.N; ++n) {
        double s = 0;
        for (std::int64_t k = 0; k < p.K; ++k)
          s += static_cast<double>(a[b * p.a_sb + m * p.a_sm + k * p.a_sk]) *
               w[b * p.w_sb + k * p.w_sk + n * p.w_sn];
        float& dst = out[b * p.c_sb + m * p.c_sm + n * p.c_sn];
        dst = static_cast<float>(alpha * s + (acc ? dst : 0.0));
      }
}

std::vector<OpCall> cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  auto add = [&](Tensor a, Tensor b, Shape c_shape, bool ta, bool tb, double alpha, bool acc) {
    OpCall c;
    c.inputs = {a, b};
    c.outputs = {acc ? case_tensor(c_shape, seed + 9) : Tensor::zeros(c_shape)};
    c.attrs.set("trans_a", ta).set("trans_b", tb).set("alpha", alpha).set("accumulate", acc);
    out.push_back(std::move(c));
  };
  add(case_tensor({7, 5}, seed), case_tensor({5, 9}, seed + 1), {7, 9}, false, false, 1.0, false);
  add(case_tensor({5, 7}, seed + 2), case_tensor({9, 5}, seed + 3), {7, 9}, true, true, 0.5, false);
  add(case_tensor({3, 4, 6}, seed + 4), case_tensor({3, 6, 5}, seed + 5), {3, 4, 5}, false, false, 1.0, true);
  add(case_tensor({2, 3, 4, 6}, seed + 6), case_tensor({5, 6}, seed + 7), {2, 3, 4, 5}, false, true, 1.0, false);
  // a transpose view (non-contiguous input)
  add(case_tensor({6, 4}, seed + 8).transpose(0, 1), case_tensor({6, 3}, seed + 10), {4, 3}, false, false, 1.0, false);
  return out;
}

const bool registered = register_op(OpDef{
    "matmul",
    "c = alpha * op(a) @ op(b) (+ c if accumulate); inputs {a, b}, outputs {c}; "
    "attrs trans_a, trans_b, alpha, accumulate",
    cases, 1e-4, 1e-4,
    {OpImpl{"cpu.onednn", DeviceType::cpu, 100, accepts_onednn, run_onednn, false},
     OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, run_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
