// bce_with_logits_forward / bce_with_logits_backward, mean over all elements.
//
// loss_i = max(x, 0) - x t + log(1 + exp(-|x|))  (stable for any x; t may be soft in [0, 1])
// dx_i = scale (sigmoid(x) - t), scale = dloss / n.
// The forward sums in fp64 per fixed 4096-element block, then the blocks in order: the result is
// independent of the thread count.

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/vec_math.hpp"

namespace benchhost::nn::cpu {
namespace {

constexpr std::int64_t kBlock = 4096;

void check(const OpCall& c) {
  BH_CHECK_AS(InvalidArgument, c.inputs[0].shape() == c.inputs[1].shape(),
              "bce_with_logits: logits {} and targets {} differ in shape", shape_str(c.inputs[0].shape()),
              shape_str(c.inputs[1].shape()));
}

void fwd_tbb(OpCall& c) {
  check(c);
  const float* x = c.inputs[0].data<float>();
  const float* t = c.inputs[1].data<float>();
  const std::int64_t n = c.inputs[0].numel(), blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> part(static_cast<std::size_t>(blocks));
  parallel_range(blocks, 4, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      double s = 0;
      for (std::int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i)
        s += std::max(x[i], 0.0f) - x[i] * t[i] + std::log1p(vexp(-std::fabs(x[i])));
      part[static_cast<std::size_t>(b)] = s;
    }
  });
  double total = 0;
  for (double p : part) total += p;
  c.outputs[0].data<float>()[0] = n ? static_cast<float>(total / static_cast<double>(n)) : 0.0f;
}

void fwd_ref(OpCall& c) {
  check(c);
  double s = 0;
  const std::int64_t n = c.inputs[0].numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = c.inputs[0].data<float>()[i], t = c.inputs[1].data<float>()[i];
    s += std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::fabs(x)));
  }
  c.outputs[0].data<float>()[0] = n ? static_cast<float>(s / static_cast<double>(n)) : 0.0f;
}

void bwd_tbb(OpCall& c) {
  check(c);
  const float scale = static_cast<float>(c.attrs.get("scale"));
  const float* x = c.inputs[0].data<float>();
  const float* t = c.inputs[1].data<float>();
  float* d = c.outputs[0].data<float>();
  parallel_range(c.inputs[0].numel(), 16384, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) d[i] = scale * (vsigmoid(x[i]) - t[i]);
  });
}

void bwd_ref(OpCall& c) {
  check(c);
  const double scale = c.attrs.get("scale");
  for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i)
    c.outputs[0].data<float>()[i] = static_cast<float>(
        scale * (1.0 / (1.0 + std::exp(-static_cast<double>(c.inputs[0].data<float>()[i]))) - c.inputs[1].data<float>()[i]));
}

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  OpCall c;
  c.inputs = {case_tensor({5000}, seed, -20.0f, 20.0f), case_tensor({5000}, seed + 1, 0.0f, 1.0f)};
  c.outputs = {Tensor::empty({1})};
  return {c};
}
std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  OpCall c;
  c.inputs = {case_tensor({7, 13}, seed, -20.0f, 20.0f), case_tensor({7, 13}, seed + 1, 0.0f, 1.0f)};
  c.outputs = {Tensor::empty({7, 13})};
  c.attrs.set("scale", 1.0 / 91.0);
  return {c};
}

const bool registered =
    register_op(OpDef{"bce_with_logits_forward", "inputs {logits, targets}, outputs {loss [1]} (mean)",
                      fwd_cases, 1e-6, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"bce_with_logits_backward", "inputs {logits, targets}, outputs {dlogits}; attr scale",
                      bwd_cases, 1e-7, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
