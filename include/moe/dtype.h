// Element types. bfloat16 is stored as uint16_t (upper half of an IEEE float32), float16 as f16_t (IEEE
// binary16: 5 exponent bits, 10 mantissa bits, largest finite 65504); arithmetic on either is done in
// float32 (fast path) or float64 (reference). Conversion rounds to nearest even, NaN kept quiet.
//
// A run's activations and weights are f32, bf16 or f16 (`--dtype`); the others serve accumulators (f64),
// index tensors (s32, s64) and the int8 modes (s8, with s32 accumulation). Every switch over Dtype
// lists every value with no `default`, and the build turns a missing case into an error
// (-Werror=switch), so a new dtype cannot silently fall into "the other case".
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "moe/name_table.h"
#include "moe/status.h"

namespace moe {

enum class Dtype { f32, bf16, f16, f64, s8, s32, s64 };

using bf16_t = uint16_t;
// A float16's bits: a type of its own (not uint16_t, which is bf16_t), so overloads and templates that
// widen a stored value tell the two 16-bit formats apart.
struct f16_t {
  uint16_t bits;
};

inline size_t dtype_size(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
      return 4;
    case Dtype::bf16:
    case Dtype::f16:
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

// numpy's names; float32, bfloat16 and float16 are also the seed's `--dtype` spellings.
inline const char* dtype_name(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
      return "float32";
    case Dtype::bf16:
      return "bfloat16";
    case Dtype::f16:
      return "float16";
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

// The run dtypes `--dtype` accepts (activations and weights).
inline constexpr NameTable<Dtype, 3> kRunDtypes{
    {{{Dtype::f32, "float32"}, {Dtype::bf16, "bfloat16"}, {Dtype::f16, "float16"}}}};
inline std::optional<Dtype> parse_run_dtype(std::string_view s) {
  return kRunDtypes.parse(s);
}

// The dtypes of a run's activations and weights (what the CPU kernels and collectives compute on).
inline bool is_run_dtype(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
    case Dtype::bf16:
    case Dtype::f16:
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
    case Dtype::f16:
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

// float16 -> float, exact. Branch-free (compilers vectorise it in `omp simd` loops) and without float
// subnormals (a flush-to-zero mode cannot change it): a float16 subnormal m * 2^-24 is made as float(m)
// times 2^-24, a normal float. A NaN comes back quiet, as F16C's vcvtph2ps returns it.
inline float f16_to_f32(f16_t h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 0x1fu,
                 mant = h.bits & 0x3ffu;
  const uint32_t normal = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
  const uint32_t special = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u);
  const uint32_t sub = sign | std::bit_cast<uint32_t>(float(mant) * 0x1p-24f);
  return std::bit_cast<float>(exp == 0 ? sub : (exp == 31 ? special : normal));
}

// float -> float16, rounded to nearest even (F16C's vcvtps2ph with _MM_FROUND_TO_NEAREST_INT gives the
// same bits): magnitudes from 65520 (halfway from 65504 to 2^16) become inf, below 2^-14 subnormals,
// below 2^-25 (ties included) zero; NaN stays NaN, quiet, with the top of its payload.
inline f16_t f32_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return {uint16_t(sign | 0x7e00u | ((mag >> 13) & 0x3ffu))};
  if (mag >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};  // >= 65520, inf included
  if (mag < 0x38800000u) {
    // Subnormal or zero: adding 0.5 leaves |f| in units of 2^-24 (0.5's ulp) in the low bits, rounded to
    // nearest even by the addition itself.
    const float units = std::bit_cast<float>(mag) + 0.5f;
    return {uint16_t(sign | (std::bit_cast<uint32_t>(units) - 0x3f000000u))};
  }
  // Normal: rebias 127 -> 15 and round the 13 dropped bits to nearest even (a carry moves the exponent).
  const uint32_t rounded = mag - (112u << 23) + 0xfffu + ((mag >> 13) & 1u);
  return {uint16_t(sign | (rounded >> 13))};
}

// Rounds a float to the nearest float16 value and back (inf beyond the float16 range).
inline float round_to_f16(float f) {
  return f16_to_f32(f32_to_f16(f));
}

// Element i of an array of float dtype dt (f32, bf16, f16, f64) as double, for reference loops.
inline double float_value(const void* p, Dtype dt, int64_t i) {
  switch (dt) {
    case Dtype::f32:
      return static_cast<const float*>(p)[i];
    case Dtype::bf16:
      return bf16_to_f32(static_cast<const bf16_t*>(p)[i]);
    case Dtype::f16:
      return f16_to_f32(static_cast<const f16_t*>(p)[i]);
    case Dtype::f64:
      return static_cast<const double*>(p)[i];
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string("float_value: not a float dtype: ") + dtype_name(dt));
}

// Element i of an array of float dtype dt set to v rounded to dt (nearest even), for reference loops.
inline void set_float_value(void* p, Dtype dt, int64_t i, float v) {
  switch (dt) {
    case Dtype::f32:
      static_cast<float*>(p)[i] = v;
      return;
    case Dtype::bf16:
      static_cast<bf16_t*>(p)[i] = f32_to_bf16(v);
      return;
    case Dtype::f16:
      static_cast<f16_t*>(p)[i] = f32_to_f16(v);
      return;
    case Dtype::f64:
      static_cast<double*>(p)[i] = v;
      return;
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string("set_float_value: not a float dtype: ") + dtype_name(dt));
}

// A value rounded to what a tensor of `dt` stores (float dtypes: nearest even; integers: unchanged).
inline double round_to_dtype(double v, Dtype dt) {
  switch (dt) {
    case Dtype::f32:
      return double(float(v));
    case Dtype::bf16:
      return double(round_to_bf16(float(v)));
    case Dtype::f16:
      return double(round_to_f16(float(v)));
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      return v;
  }
  MOE_CHECK(false, "unknown dtype");
}

}  // namespace moe
