// addcmul: out = c + alpha * (a * b), or alpha * (a * b) without c (mul is that path with
// alpha 1); b equal to a in shape or a suffix of it, broadcast over the leading dims; out may
// alias c or a. Operand rules: nn/addcmul_common.hpp.
// cpu.tbb: blocks of whole rows of b.numel() elements (or element ranges when there is one
// row); f32 runs vectorised loops, f16 / bf16 convert each element to f32 and round the result
// once to nearest even. The product is formed before scaling, alpha * (a * b), here and on CUDA.
// cpu.ref: element by element in double, rounded once to the storage type.

#include "nn/addcmul_common.hpp"
#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

using addcmul_detail::c_of;
using addcmul_detail::check_call;

// No __restrict__: out may alias c or a.
BH_CPU_KERNEL void scaled_product_rows(const float* a, const float* b, float* out, float alpha, std::int64_t rows,
                                       std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; ++j) out[r * n + j] = alpha * (a[r * n + j] * b[j]);
}

BH_CPU_KERNEL void addcmul_rows(const float* c, const float* a, const float* b, float* out, float alpha,
                                std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; ++j) out[r * n + j] = c[r * n + j] + alpha * (a[r * n + j] * b[j]);
}

template <float (*ToFloat)(std::uint16_t) noexcept, std::uint16_t (*FromFloat)(float) noexcept>
void addcmul_rows_16(const std::uint16_t* c, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out,
                     float alpha, std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t k = r * n + j;
      const float p = alpha * (ToFloat(a[k]) * ToFloat(b[j]));
      out[k] = FromFloat(c ? ToFloat(c[k]) + p : p);
    }
}

// Run block(first, b_first, rows, cols) over the flat [0, total) in parallel chunks: whole rows
// of nb elements when there are several rows, element ranges of the one row otherwise.
template <class Block>
void for_row_blocks(std::int64_t total, std::int64_t nb, Block&& block) {
  if (total == 0) return;
  const std::int64_t rows = total / nb;
  if (rows == 1)
    parallel_range(nb, 16384, [&](std::int64_t s, std::int64_t e) { block(s, s, std::int64_t{1}, e - s); });
  else
    parallel_range(rows, row_grain(nb), [&](std::int64_t r0, std::int64_t r1) { block(r0 * nb, std::int64_t{0}, r1 - r0, nb); });
}

template <float (*ToFloat)(std::uint16_t) noexcept, std::uint16_t (*FromFloat)(float) noexcept>
void run_16(OpCall& call, float alpha) {
  const Tensor& c = c_of(call);
  const auto* a = static_cast<const std::uint16_t*>(call.inputs[0].raw_data());
  const auto* b = static_cast<const std::uint16_t*>(call.inputs[1].raw_data());
  const auto* cp = c.defined() ? static_cast<const std::uint16_t*>(c.raw_data()) : nullptr;
  auto* out = static_cast<std::uint16_t*>(call.outputs[0].raw_data());
  for_row_blocks(call.inputs[0].numel(), call.inputs[1].numel(),
                 [&](std::int64_t first, std::int64_t b_first, std::int64_t rows, std::int64_t n) {
                   addcmul_rows_16<ToFloat, FromFloat>(cp ? cp + first : nullptr, a + first, b + b_first, out + first,
                                                       alpha, rows, n);
                 });
}

std::string accepts_tbb(const OpCall& call) { return addcmul_detail::kernel_refusal(call, DeviceType::cpu); }

void run_tbb(OpCall& call) {
  check_call(call);
  const float alpha = static_cast<float>(call.attrs.get("alpha", 1.0));
  switch (call.inputs[0].dtype()) {
    case DType::f16: return run_16<half_to_float, float_to_half>(call, alpha);
    case DType::bf16: return run_16<bf16_to_float, float_to_bf16>(call, alpha);
    default: break;
  }
  const Tensor& c = c_of(call);
  const float* a = call.inputs[0].data<float>();
  const float* b = call.inputs[1].data<float>();
  const float* cp = c.defined() ? c.data<float>() : nullptr;
  float* out = call.outputs[0].data<float>();
  for_row_blocks(call.inputs[0].numel(), call.inputs[1].numel(),
                 [&](std::int64_t first, std::int64_t b_first, std::int64_t rows, std::int64_t n) {
                   if (cp)
                     addcmul_rows(cp + first, a + first, b + b_first, out + first, alpha, rows, n);
                   else
                     scaled_product_rows(a + first, b + b_first, out + first, alpha, rows, n);
                 });
}

double load(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f16: return half_to_float(static_cast<const std::uint16_t*>(t.raw_data())[i]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(t.raw_data())[i]);
    default: return t.data<float>()[i];
  }
}

void store(const Tensor& t, std::int64_t i, double v) {
  const auto f = static_cast<float>(v);
  switch (t.dtype()) {
    case DType::f16: static_cast<std::uint16_t*>(t.raw_data())[i] = float_to_half(f); break;
    case DType::bf16: static_cast<std::uint16_t*>(t.raw_data())[i] = float_to_bf16(f); break;
    default: t.data<float>()[i] = f;
  }
}

void run_ref(OpCall& call) {
  check_call(call);
  const double alpha = call.attrs.get("alpha", 1.0);
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &c = c_of(call);
  const std::int64_t nb = b.numel();
  for (std::int64_t i = 0; i < a.numel(); ++i)
    store(call.outputs[0], i, (c.defined() ? load(c, i) : 0.0) + alpha * load(a, i) * load(b, i % nb));
}

// Values k/8 with |k| <= 8: with alpha = -2 every product, sum and rounding in f16 / bf16 is
// exact, so the 16-bit cases compare every implementation at the f32 tolerance.
Tensor dyadic_case(const Shape& shape, std::uint64_t seed, DType dtype) {
  Tensor t = case_tensor(shape, seed, -8.0f, 8.0f);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = std::round(p[i]) / 8.0f;
  return t.to(dtype);
}

std::vector<OpCall> cases(std::uint64_t seed) {
  OpCall product, bcast, flat;
  product.inputs = {case_tensor({3, 4, 50}, seed), case_tensor({3, 4, 50}, seed + 1)};
  product.outputs = {Tensor::empty({3, 4, 50})};
  bcast.inputs = {case_tensor({3, 4, 50}, seed + 2), case_tensor({4, 50}, seed + 3), case_tensor({3, 4, 50}, seed + 4)};
  bcast.outputs = {Tensor::empty({3, 4, 50})};
  bcast.attrs.set("alpha", -0.5);
  flat.inputs = {case_tensor({40000}, seed + 5), case_tensor({40000}, seed + 6), case_tensor({40000}, seed + 7)};
  flat.outputs = {Tensor::empty({40000})};
  flat.attrs.set("alpha", 2.0);
  std::vector<OpCall> out{product, bcast, flat};
  for (DType t : {DType::f16, DType::bf16}) {
    OpCall half_product, half_bcast;
    half_product.inputs = {dyadic_case({6, 70}, seed + 8, t), dyadic_case({6, 70}, seed + 9, t)};
    half_product.outputs = {Tensor::empty({6, 70}, t)};
    half_bcast.inputs = {dyadic_case({6, 70}, seed + 10, t), dyadic_case({70}, seed + 11, t),
                         dyadic_case({6, 70}, seed + 12, t)};
    half_bcast.outputs = {Tensor::empty({6, 70}, t)};
    half_bcast.attrs.set("alpha", -2.0);
    out.push_back(half_product);
    out.push_back(half_bcast);
  }
  return out;
}

const bool registered = register_op(OpDef{
    "addcmul",
    "out = c + alpha * a * b, c optional (mul without it); b a suffix-shape broadcast; out may alias c; "
    "f32/f16/bf16; inputs {a, b, c?}, outputs {out}; attr alpha",
    cases, 1e-6, 1e-6,
    {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts_tbb, run_tbb, false},
     OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, run_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
