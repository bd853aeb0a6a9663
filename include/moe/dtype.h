// Storage dtypes. bfloat16 is stored as uint16_t (upper half of an IEEE float32); arithmetic is always
// done in float32 (fast path) or float64 (reference). Conversion rounds to nearest even, NaN kept quiet.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace moe {

enum class Dtype { f32, bf16 };

using bf16_t = uint16_t;

inline size_t dtype_size(Dtype dt) {
  return dt == Dtype::f32 ? 4 : 2;
}

// The spelling the seed uses (`--dtype float32|bfloat16`).
inline const char* dtype_name(Dtype dt) {
  return dt == Dtype::f32 ? "float32" : "bfloat16";
}

inline std::optional<Dtype> parse_dtype(std::string_view s) {
  if (s == "float32") return Dtype::f32;
  if (s == "bfloat16") return Dtype::bf16;
  return std::nullopt;
}

inline float bf16_to_f32(bf16_t v) {
  uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline bf16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return bf16_t((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bf16_t(bits >> 16);
}

// Rounds a float to the nearest bf16 value and back; used where the fast path stores bf16.
inline float round_to_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

}  // namespace moe
