// add: c = a + alpha * b, with b equal in shape to a or a suffix of it (broadcast over the
// leading dims: a bias, a position embedding). c may alias a (in-place residual add).
// cpu.tbb: rows of b.numel() elements, vectorised; cpu.ref: one element at a time.

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

void check(const OpCall& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const auto& as = a.shape();
  const auto& bs = b.shape();
  bool suffix = bs.size() <= as.size() && std::equal(bs.rbegin(), bs.rend(), as.rbegin());
  BH_CHECK_AS(InvalidArgument, suffix, "add: b {} must equal a {} or a suffix of its shape",
              shape_str(bs), shape_str(as));
}

BH_CPU_KERNEL void add_rows(const float* a, const float* b, float* c, float alpha, std::int64_t r0,
                            std::int64_t r1, std::int64_t n) {
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t j = 0; j < n; ++j) c[r * n + j] = a[r * n + j] + alpha * b[j];
}

BH_CPU_KERNEL void add_flat(const float* a, const float* b, float* c, float alpha, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) c[j] = a[j] + alpha * b[j];
}

void run_tbb(OpCall& c) {
  check(c);
  const float alpha = static_cast<float>(c.attrs.get("alpha", 1.0));
  const float* a = c.inputs[0].data<float>();
  const float* b = c.inputs[1].data<float>();
  float* out = c.outputs[0].data<float>();
  const std::int64_t n = c.inputs[1].numel(), rows = c.inputs[0].numel() / std::max<std::int64_t>(n, 1);
  if (rows == 1) {
    parallel_range(n, 16384, [&](std::int64_t s, std::int64_t e) { add_flat(a + s, b + s, out + s, alpha, e - s); });
  } else {
    parallel_range(rows, row_grain(n), [&](std::int64_t r0, std::int64_t r1) { add_rows(a, b, out, alpha, r0, r1, n); });
  }
}

void run_ref(OpCall& c) {
  check(c);
  const double alpha = c.attrs.get("alpha", 1.0);
  const std::int64_t n = c.inputs[1].numel();
  for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i)
    c.outputs[0].data<float>()[i] =
        static_cast<float>(c.inputs[0].data<float>()[i] + alpha * c.inputs[1].data<float>()[i % n]);
}

std::vector<OpCall> cases(std::uint64_t seed) {
  OpCall same, bcast;
  same.inputs = {case_tensor({3, 4, 50}, seed), case_tensor({3, 4, 50}, seed + 1)};
  same.outputs = {Tensor::empty({3, 4, 50})};
  bcast.inputs = {case_tensor({3, 4, 50}, seed + 2), case_tensor({4, 50}, seed + 3)};
  bcast.outputs = {Tensor::empty({3, 4, 50})};
  bcast.attrs.set("alpha", -0.5);
  return {same, bcast};
}

const bool registered = register_op(OpDef{
    "add", "c = a + alpha * b (b a suffix-shape broadcast; c may alias a); inputs {a, b}, outputs {c}; attr alpha",
    cases, 1e-6, 1e-6,
    {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, run_tbb, false},
     OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, run_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
