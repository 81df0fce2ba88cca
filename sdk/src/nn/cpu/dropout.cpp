// dropout_forward / dropout_backward: inverted dropout with counter-based randomness.
//
// Element i is kept iff Rng(seed, mix64(step) ^ stream).uniform_at(i) >= p (ops.hpp Note
// [Dropout randomness]); kept elements are scaled by 1/(1-p). cpu.tbb generates one Philox block
// per 4 elements in chunks aligned to 4, so any chunking gives the same mask as the per-element
// definition that cpu.ref spells out. The mask is stored as u8 (1 kept) for the backward.

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

Rng rng_of(const OpCall& c) {
  return Rng(attr_u64(c.attrs, "rng", 0),
             mix64(attr_u64(c.attrs, "rng", 1)) ^ attr_u64(c.attrs, "rng", 2));
}

// Threshold on the 24-bit uniform: keep iff (bits >> 8) >= p * 2^24.
std::uint32_t threshold_of(double p) {
  return static_cast<std::uint32_t>(std::ceil(p * 16777216.0));
}

BH_CPU_KERNEL void dropout_blocks(std::uint64_t key, std::uint64_t stream, std::uint32_t thr,
                                  float scale, const float* x, float* y, std::uint8_t* mask,
                                  std::int64_t n, std::int64_t b0, std::int64_t b1) {
  std::uint32_t bits[4][64];
  for (std::int64_t g = b0; g < b1; g += 64) {
    const int nb = static_cast<int>(std::min<std::int64_t>(64, b1 - g));
    philox4x32_blocks(key, stream, static_cast<std::uint64_t>(g), nb, bits);
    for (int i = 0; i < nb; ++i) {
      const std::int64_t i0 = (g + i) * 4;
      const std::int64_t lanes = std::min<std::int64_t>(4, n - i0);
      for (std::int64_t l = 0; l < lanes; ++l) {
        const bool keep = (bits[l][i] >> 8) >= thr;
        mask[i0 + l] = keep;
        y[i0 + l] = keep ? x[i0 + l] * scale : 0.0f;
      }
    }
  }
}

void fwd_tbb(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const double p = c.attrs.get("p");
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const std::uint32_t thr = threshold_of(p);
  // The same (key, stream) as rng_of(c): Rng(seed, stream) keys Philox with mix64(seed).
  const std::uint64_t key = mix64(attr_u64(c.attrs, "rng", 0));
  const std::uint64_t stream = mix64(attr_u64(c.attrs, "rng", 1)) ^ attr_u64(c.attrs, "rng", 2);
  const float* xp = x.data<float>();
  float* y = c.outputs[0].data<float>();
  std::uint8_t* mask = c.outputs[1].data<std::uint8_t>();
  const std::int64_t n = x.numel();
  const std::int64_t blocks = (n + 3) / 4;
  // Rng::uniform_at(i) is lane i % 4 of Philox block i / 4 (top 24 bits); blocks are generated
  // 64 at a time (vectorised) and applied in element order.
  parallel_range(blocks, 2048, [&](std::int64_t b0, std::int64_t b1) {
    dropout_blocks(key, stream, thr, scale, xp, y, mask, n, b0, b1);
  });
}

void bwd_tbb(OpCall& c) {
  const double p = c.attrs.get("p");
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const float* dy = c.inputs[0].data<float>();
  const std::uint8_t* mask = c.inputs[1].data<std::uint8_t>();
  float* dx = c.outputs[0].data<float>();
  parallel_range(c.inputs[0].numel(), 16384, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) dx[i] = mask[i] ? dy[i] * scale : 0.0f;
  });
}

void fwd_ref(OpCall& c) {
  const double p = c.attrs.get("p");
  const Rng rng = rng_of(c);
  const float* xp = c.inputs[0].data<float>();
  for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i) {
    const bool keep = rng.uniform_at(static_cast<std::uint64_t>(i)) >= p;
    c.outputs[1].data<std::uint8_t>()[i] = keep;
    c.outputs[0].data<float>()[i] = keep ? static_cast<float>(xp[i] / (1.0 - p)) : 0.0f;
  }
}

void bwd_ref(OpCall& c) {
  const double p = c.attrs.get("p");
  for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i)
    c.outputs[0].data<float>()[i] = c.inputs[1].data<std::uint8_t>()[i]
                                        ? static_cast<float>(c.inputs[0].data<float>()[i] / (1.0 - p))
                                        : 0.0f;
}

std::string accepts(const OpCall& c) {
  if (c.inputs[0].dtype() != DType::f32 || !c.inputs[0].is_contiguous()) return "needs contiguous f32 x";
  if (!c.attrs.has("p")) return "attr p missing";
  return {};
}

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (double p : {0.1, 0.5, 0.9}) {
    OpCall c;
    c.inputs = {case_tensor({3, 1001}, seed)};
    c.outputs = {Tensor::empty({3, 1001}), Tensor::empty({3, 1001}, DType::u8)};
    c.attrs.set("p", p).set_ints("rng", {static_cast<std::int64_t>(seed), 7, 3});
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  Tensor mask = Tensor::empty({2, 77}, DType::u8);
  Rng r(seed);
  for (std::int64_t i = 0; i < mask.numel(); ++i) mask.data<std::uint8_t>()[i] = r.uniform() < 0.7f;
  OpCall c;
  c.inputs = {case_tensor({2, 77}, seed), mask};
  c.outputs = {Tensor::empty({2, 77})};
  c.attrs.set("p", 0.3);
  return {c};
}

const bool registered =
    register_op(OpDef{"dropout_forward",
                      "inputs {x}, outputs {y, mask u8}; attrs p, rng=[seed, step, stream]",
                      fwd_cases, 1e-6, 1e-6,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"dropout_backward", "inputs {dy, mask u8}, outputs {dx}; attr p", bwd_cases,
                      1e-6, 1e-6,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
