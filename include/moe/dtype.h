// Element types. bfloat16 is stored as uint16_t (upper half of an IEEE float32); arithmetic on it is
// done in float32 (fast path) or float64 (reference). Conversion rounds to nearest even, NaN kept quiet.
//
// A run's activations and weights are f32 or bf16 (`--dtype`); the others serve accumulators (f64),
// index tensors (s32, s64) and the int8 modes (s8, with s32 accumulation). Every switch over Dtype
// lists every value with no `default`, and the build turns a missing case into an error
// (-Werror=switch), so a new dtype cannot silently fall into "the other case".
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "moe/status.h"

namespace moe {

enum class Dtype { f32, bf16, f64, s8, s32, s64 };

using bf16_t = uint16_t;

inline size_t dtype_size(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
      return 4;
    case Dtype::bf16:
      return 2;
    case Dtype::f64:
      return 8;
    case Dtype::s8:
      return 1;
    case Dtype::s32:
      return 4;
    case Dtype::s64:
      return 8;
  }
  MOE_CHECK(false, "unknown dtype");
}

// numpy's names; float32 and bfloat16 are also the seed's `--dtype` spellings.
inline const char* dtype_name(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
      return "float32";
    case Dtype::bf16:
      return "bfloat16";
    case Dtype::f64:
      return "float64";
    case Dtype::s8:
      return "int8";
    case Dtype::s32:
      return "int32";
    case Dtype::s64:
      return "int64";
  }
  MOE_CHECK(false, "unknown dtype");
}

// The run dtypes `--dtype` accepts (activations and weights); nullopt for anything else.
inline std::optional<Dtype> parse_run_dtype(std::string_view s) {
  if (s == "float32") return Dtype::f32;
  if (s == "bfloat16") return Dtype::bf16;
  return std::nullopt;
}

// The dtypes of a run's activations and weights (what the CPU kernels and collectives compute on).
inline bool is_run_dtype(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
    case Dtype::bf16:
      return true;
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      return false;
  }
  MOE_CHECK(false, "unknown dtype");
}

inline bool is_float(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
    case Dtype::bf16:
    case Dtype::f64:
      return true;
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      return false;
  }
  MOE_CHECK(false, "unknown dtype");
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

// A value rounded to what a tensor of `dt` stores (float dtypes: nearest even; integers: unchanged).
inline double round_to_dtype(double v, Dtype dt) {
  switch (dt) {
    case Dtype::f32:
      return double(float(v));
    case Dtype::bf16:
      return double(round_to_bf16(float(v)));
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      return v;
  }
  MOE_CHECK(false, "unknown dtype");
}

}  // namespace moe
