#pragma once
/// @file dtype.hpp  Element types and scalar conversions.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace benchhost {

/// Storage element types. tf32 is not a storage type: it is a CUDA math mode chosen by the
/// precision policy (precision.hpp).
enum class DType : std::uint8_t { f32, f64, f16, bf16, f8e4m3, f8e5m2, i32, i64, u8, boolean };

/// Bytes per element.
std::size_t dtype_size(DType t) noexcept;
/// Canonical name: "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i32", "i64", "u8", "f64", "bool".
const char* dtype_name(DType t) noexcept;
/// Parse a canonical name (also accepts "float32", "fp16", "float16", "bfloat16", "int64", ...).
/// Throws InvalidArgument naming the valid choices.
DType parse_dtype(std::string_view name);
bool is_floating(DType t) noexcept;

/// Scalar conversions (round to nearest even; fp8 saturates to the largest finite value).
std::uint16_t float_to_half(float f) noexcept;
float half_to_float(std::uint16_t h) noexcept;
std::uint16_t float_to_bf16(float f) noexcept;
float bf16_to_float(std::uint16_t b) noexcept;
std::uint8_t float_to_e4m3(float f) noexcept;
float e4m3_to_float(std::uint8_t v) noexcept;
std::uint8_t float_to_e5m2(float f) noexcept;
float e5m2_to_float(std::uint8_t v) noexcept;

/// Storage wrappers so templates can tell f16 from bf16 from u16.
struct half_t { std::uint16_t bits; };
struct bfloat16_t { std::uint16_t bits; };

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<half_t>() { return DType::f16; }
template <> constexpr DType dtype_of<bfloat16_t>() { return DType::bf16; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

}  // namespace benchhost
