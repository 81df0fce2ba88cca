#include "benchhost/dtype.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "benchhost/error.hpp"

namespace benchhost {

std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::f16: case DType::bf16: return 2;
    case DType::f8e4m3: case DType::f8e5m2: case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view n) {
  struct Alias { std::string_view name; DType type; };
  static constexpr Alias aliases[] = {
      {"f32", DType::f32},       {"fp32", DType::f32},       {"float32", DType::f32},
      {"float", DType::f32},     {"f64", DType::f64},        {"fp64", DType::f64},
      {"float64", DType::f64},   {"f16", DType::f16},        {"fp16", DType::f16},
      {"float16", DType::f16},   {"half", DType::f16},       {"bf16", DType::bf16},
      {"bfloat16", DType::bf16}, {"f8e4m3", DType::f8e4m3},  {"e4m3", DType::f8e4m3},
      {"f8e5m2", DType::f8e5m2}, {"e5m2", DType::f8e5m2},    {"i32", DType::i32},
      {"int32", DType::i32},     {"i64", DType::i64},        {"int64", DType::i64},
      {"u8", DType::u8},         {"uint8", DType::u8},       {"bool", DType::boolean}};
  for (const auto& a : aliases)
    if (a.name == n) return a.type;
  BH_THROW(InvalidArgument, "unknown dtype '{}': expected one of f32, f64, f16, bf16, f8e4m3, "
           "f8e5m2, i32, i64, u8, bool", n);
}

bool is_floating(DType t) noexcept {
  switch (t) {
    case DType::f32: case DType::f64: case DType::f16: case DType::bf16:
    case DType::f8e4m3: case DType::f8e5m2: return true;
    default: return false;
  }
}

// IEEE binary16 <-> binary32, round to nearest even, handling subnormals, Inf and NaN.
std::uint16_t float_to_half(float f) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> Inf
  if (abs < 0x38800000u) {  // subnormal half (or zero)
    // value = abs as float; half subnormal unit = 2^-24
    float a = std::bit_cast<float>(abs);
    float scaled = a * 16777216.0f;  // 2^24
    auto r = static_cast<std::uint32_t>(std::nearbyint(scaled));
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t mant = abs & 0x7fffffu;
  std::uint32_t exp = (abs >> 23) - 127 + 15;
  std::uint32_t h = (exp << 10) | (mant >> 13);
  std::uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

float half_to_float(std::uint16_t h) noexcept {
  std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

std::uint16_t float_to_bf16(float f) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

namespace {
// Generic small-float encoder: `mbits` mantissa bits, exponent bias `bias`, largest finite
// value `maxv`; saturates (the OCP FP8 "satfinite" convention used for scaled matmuls).
std::uint8_t encode_fp8(float f, int mbits, int bias, float maxv, bool has_inf) noexcept {
  if (std::isnan(f)) return has_inf ? 0x7f : 0x7f;
  std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a > maxv) a = maxv;
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + bias;
  int min_exp = 1;
  float quantum = exp < min_exp ? std::ldexp(1.0f, min_exp - bias - mbits)
                                : std::ldexp(1.0f, e - 1 - mbits);
  float q = std::nearbyint(a / quantum) * quantum;
  if (q > maxv) q = maxv;
  if (q == 0) return sign;
  std::frexp(q, &e);
  exp = e - 1 + bias;
  std::uint32_t code;
  if (exp < min_exp) {  // subnormal
    code = static_cast<std::uint32_t>(q / std::ldexp(1.0f, min_exp - bias - mbits));
  } else {
    float frac = q / std::ldexp(1.0f, e - 1) - 1.0f;
    code = (static_cast<std::uint32_t>(exp) << mbits) |
           static_cast<std::uint32_t>(std::nearbyint(frac * static_cast<float>(1 << mbits)));
  }
  return static_cast<std::uint8_t>(sign | code);
}

float decode_fp8(std::uint8_t v, int mbits, int bias) noexcept {
  float sign = (v & 0x80) ? -1.0f : 1.0f;
  int exp = (v & 0x7f) >> mbits;
  int mant = v & ((1 << mbits) - 1);
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), 1 - bias - mbits);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / static_cast<float>(1 << mbits), exp - bias);
}
}  // namespace

// e4m3 (OCP "fn" variant): bias 7, no Inf, S.1111.111 is NaN, max 448.
std::uint8_t float_to_e4m3(float f) noexcept { return encode_fp8(f, 3, 7, 448.0f, false); }
float e4m3_to_float(std::uint8_t v) noexcept {
  if ((v & 0x7f) == 0x7f) return std::nanf("");
  return decode_fp8(v, 3, 7);
}
// e5m2: bias 15, IEEE-like Inf/NaN, max finite 57344.
std::uint8_t float_to_e5m2(float f) noexcept {
  if (std::isnan(f)) return 0x7f;
  return encode_fp8(f, 2, 15, 57344.0f, true);
}
float e5m2_to_float(std::uint8_t v) noexcept {
  int exp = (v & 0x7f) >> 2;
  if (exp == 31) {
    if (v & 0x3) return std::nanf("");
    return (v & 0x80) ? -INFINITY : INFINITY;
  }
  return decode_fp8(v, 2, 15);
}

}  // namespace benchhost
