// fp8 ops (Note [Precision policies], fp8 column): the scaled cast to e4m3/e5m2 that records the
// amax for Fp8DelayedScaling, and the scaled fp8 matmul. The CPU has no fp8 arithmetic, so
// these are *reference* implementations only, for the parity test against the CUDA ones
// (nn/cuda/fp8_ops.cu): plain loops that dequantise to f32 and multiply in f32. They are not a
// speed path (the fp8 policy is Unsupported on CPU and never dispatches here).

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

float load_float(const Tensor& x, std::int64_t i) {
  switch (x.dtype()) {
    case DType::f32: return static_cast<const float*>(x.raw_data())[i];
    case DType::f16: return half_to_float(static_cast<const std::uint16_t*>(x.raw_data())[i]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(x.raw_data())[i]);
    case DType::f8e4m3: return e4m3_to_float(static_cast<const std::uint8_t*>(x.raw_data())[i]);
    case DType::f8e5m2: return e5m2_to_float(static_cast<const std::uint8_t*>(x.raw_data())[i]);
    default: BH_THROW(InvalidArgument, "fp8 ops: {} is not a floating type", dtype_name(x.dtype()));
  }
}

void store_float(Tensor& y, std::int64_t i, float v) {
  switch (y.dtype()) {
    case DType::f32: static_cast<float*>(y.raw_data())[i] = v; return;
    case DType::f16: static_cast<std::uint16_t*>(y.raw_data())[i] = float_to_half(v); return;
    case DType::bf16: static_cast<std::uint16_t*>(y.raw_data())[i] = float_to_bf16(v); return;
    case DType::f8e4m3: static_cast<std::uint8_t*>(y.raw_data())[i] = float_to_e4m3(v); return;
    case DType::f8e5m2: static_cast<std::uint8_t*>(y.raw_data())[i] = float_to_e5m2(v); return;
    default: BH_THROW(InvalidArgument, "fp8 ops: {} is not a floating type", dtype_name(y.dtype()));
  }
}

bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }

float scalar_of(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined() && t.numel() == 1 && t.dtype() == DType::f32,
              "{}: {} must be an f32 tensor of one element, got {}", op, what,
              t.defined() ? t.describe() : std::string("undefined"));
  return static_cast<const float*>(t.raw_data())[0];
}

// ---- fp8_cast_scaled ----------------------------------------------------------------------------

void cast_ref(OpCall& c) {
  BH_CHECK_AS(InvalidArgument, c.inputs.size() == 2 && c.outputs.size() == 2,
              "fp8_cast_scaled: expects inputs {{x, scale}} and outputs {{y, amax}}");
  const Tensor& x = c.inputs[0];
  Tensor& y = c.outputs[0];
  const DType xt = x.dtype();
  BH_CHECK_AS(InvalidArgument, (xt == DType::f32 || xt == DType::f16 || xt == DType::bf16) && is_fp8(y.dtype()) &&
              x.shape() == y.shape() && x.is_contiguous() && y.is_contiguous(),
              "fp8_cast_scaled: x {} must be f32/f16/bf16 and y {} e4m3/e5m2 of the same shape, both contiguous",
              x.describe(), y.describe());
  const float scale = scalar_of(c.inputs[1], "fp8_cast_scaled", "scale");
  float amax = 0.0f;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float v = load_float(x, i);
    amax = std::fmax(amax, std::fabs(v));
    store_float(y, i, v * scale);  // dtype.hpp's fp8 conversions saturate, as __NV_SATFINITE
  }
  if (c.outputs[1].defined()) {
    scalar_of(c.outputs[1], "fp8_cast_scaled", "amax");
    static_cast<float*>(c.outputs[1].raw_data())[0] = amax;
  }
}

std::vector<OpCall> cast_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (DType to : {DType::f8e4m3, DType::f8e5m2}) {
    for (DType from : {DType::f32, DType::bf16}) {
      OpCall c;
      Tensor x = case_tensor({48, 40}, seed + static_cast<int>(from), -3.0f, 3.0f);
      if (from != DType::f32) x = x.to(from);
      c.inputs = {x, Tensor::full({1}, to == DType::f8e4m3 ? 200.0 : 30000.0)};  // |x| > 2.24 (e4m3), 1.9 (e5m2) saturate
      c.outputs = {Tensor::zeros({48, 40}, to), Tensor::zeros({1})};
      out.push_back(std::move(c));
    }
  }
  return out;
}

// ---- matmul_fp8 ---------------------------------------------------------------------------------

void matmul_ref(OpCall& c) {
  BH_CHECK_AS(InvalidArgument, (c.inputs.size() == 4 || c.inputs.size() == 5) && !c.outputs.empty() && c.outputs.size() <= 2,
              "matmul_fp8: expects inputs {{a, b, a_scale_inv, b_scale_inv, d_scale}} and outputs {{d, amax_d}}");
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  Tensor& d = c.outputs[0];
  BH_CHECK_AS(InvalidArgument, a.dim() == 2 && b.dim() == 2 && is_fp8(a.dtype()) && is_fp8(b.dtype()) &&
              a.size(1) == b.size(1) && a.is_contiguous() && b.is_contiguous(),
              "matmul_fp8: a {} and b {} must be contiguous fp8 [M, K] and [N, K]", a.describe(), b.describe());
  const std::int64_t M = a.size(0), N = b.size(0), K = a.size(1);
  BH_CHECK_AS(InvalidArgument, d.shape() == Shape({M, N}) && d.is_contiguous() &&
              (d.dtype() == DType::f32 || d.dtype() == DType::bf16 || d.dtype() == DType::f16 || is_fp8(d.dtype())),
              "matmul_fp8: d {} must be a contiguous f32/bf16/f16/fp8 [{}, {}]", d.describe(), M, N);
  const float sa = scalar_of(c.inputs[2], "matmul_fp8", "a_scale_inv");
  const float sb = scalar_of(c.inputs[3], "matmul_fp8", "b_scale_inv");
  const bool fp8_out = is_fp8(d.dtype());
  BH_CHECK_AS(InvalidArgument, fp8_out == (c.inputs.size() == 5 && c.inputs[4].defined()),
              "matmul_fp8: d_scale (input 4) is required for an fp8 d and only then");
  const float sd = fp8_out ? scalar_of(c.inputs[4], "matmul_fp8", "d_scale") : 1.0f;
  std::vector<float> af(static_cast<std::size_t>(M * K)), bf(static_cast<std::size_t>(N * K));
  for (std::int64_t i = 0; i < M * K; ++i) af[i] = load_float(a, i);
  for (std::int64_t i = 0; i < N * K; ++i) bf[i] = load_float(b, i);
  float amax = 0.0f;
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < K; ++k) acc += af[m * K + k] * bf[n * K + k];
      const float v = sa * sb * acc;
      store_float(d, m * N + n, v * sd);
      // fp8 d: amax of the unscaled result (what the next d_scale derives from), as cuBLASLt's
      // AMAX_D; otherwise of the stored values.
      amax = std::fmax(amax, std::fabs(fp8_out ? v : load_float(d, m * N + n)));
    }
  if (c.outputs.size() == 2 && c.outputs[1].defined()) {
    scalar_of(c.outputs[1], "matmul_fp8", "amax_d");
    static_cast<float*>(c.outputs[1].raw_data())[0] = amax;
  }
}

Tensor fp8_case(const Shape& shape, std::uint64_t seed, DType type, float scale) {
  Tensor x = case_tensor(shape, seed, -2.0f, 2.0f);
  Tensor q = Tensor::empty(shape, type);
  for (std::int64_t i = 0; i < x.numel(); ++i) store_float(q, i, x.data<float>()[i] * scale);
  return q;
}

std::vector<OpCall> matmul_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (int variant = 0; variant < 3; ++variant) {
    const DType at = variant == 2 ? DType::f8e5m2 : DType::f8e4m3;  // e5m2 x e4m3: a gradient times weights
    const DType dt = variant == 0 ? DType::f32 : DType::bf16;
    OpCall c;
    c.inputs = {fp8_case({32, 64}, seed + variant, at, 100.0f), fp8_case({48, 64}, seed + 10 + variant, DType::f8e4m3, 150.0f),
                Tensor::full({1}, 1.0 / 100), Tensor::full({1}, 1.0 / 150)};
    c.outputs = {Tensor::zeros({32, 48}, dt), Tensor::zeros({1})};
    out.push_back(std::move(c));
  }
  return out;
}

const bool registered = [] {
  register_op(OpDef{"fp8_cast_scaled",
                    "y = fp8(x * scale) (saturating, round to nearest even), amax = max |x|: inputs {x f32/f16/bf16, "
                    "scale f32 [1]}, outputs {y f8e4m3/f8e5m2, amax f32 [1] (optional)}",
                    cast_cases, 1e-6, 1e-6, {OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, cast_ref, true}}});
  register_op(OpDef{"matmul_fp8",
                    "d = (a_scale_inv * a) @ (b_scale_inv * b)^T with f32 accumulation (times d_scale, saturated, "
                    "for an fp8 d), amax_d = max |d| (stored values; unscaled result for an fp8 d): inputs {a fp8 "
                    "[M, K], b fp8 [N, K], a_scale_inv f32 [1], b_scale_inv f32 [1], d_scale f32 [1] (fp8 d only)}, "
                    "outputs {d f32/bf16/f16/fp8 [M, N], amax_d f32 [1] (optional)}",
                    matmul_cases, 1e-2, 1e-2, {OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, matmul_ref, true}}});
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cpu
