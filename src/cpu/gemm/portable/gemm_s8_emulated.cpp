// Our int8 kernel (cpu/gemm/gemm_s8_kernel.h) on plain C++ dot products, in each hardware instance's
// geometry: 16 lanes x 12 rows and 8 lanes x 6 rows with shifted weights like AVX-512 VNNI and AVX-VNNI, 8
// lanes x 4 rows with signed weights like AVX2. The same packing, corrections, tiles and epilogues as the
// hardware instances, runnable on any CPU: test hooks (tests/test_int8_gemm.cpp), not variants; nothing of
// them is fast.
//
// VPDPBUSD as emulated: per lane i, acc[i] + the sum over j < 4 of u8 byte 4i + j of b times s8 byte j of the
// broadcast a, in uint32 arithmetic (the hardware wraps, never saturates). AVX2's step as emulated: per pair
// of bytes, |a| x (b with a's sign) summed into an int16 with saturation (VPMADDUBSW), then each two int16
// into the int32 (VPMADDWD by ones), wrapping. So the emulated sums equal the hardware's bit for bit.
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/gemm/gemm_s8.h"

#define MOE_S8_NS moe::s8_emulated
#include "cpu/gemm/gemm_s8_kernel.h"

namespace moe::s8_emulated {
namespace {

int32_t saturated16(int32_t v) {
  return v > 32767 ? 32767 : v < -32768 ? -32768 : v;
}

template <class Types, int Lanes, int Rows, bool Shifted>
struct Emulated : Types {
  static constexpr int kLanes = Lanes, kRows = Rows;
  static constexpr bool kShifted = Shifted;
  using Vec = typename Types::Vec;
  static void stream(void* p, Vec v) { std::memcpy(p, &v, sizeof v); }
  static void fence() {}
  using Bits = typename Types::Bits;
  static Bits widen(const int8_t* p) {
    Bits b;
    for (int i = 0; i < Lanes; ++i) b[i] = uint8_t(p[i]);
    return b;
  }
  using Floats = typename Types::Floats;
  static Floats fma(Floats a, Floats b, Floats c) { return a * b + c; }
  static Vec dot(Vec acc, Vec b, int32_t a) {
    uint8_t bb[4 * Lanes];
    int8_t ab[4];
    std::memcpy(bb, &b, sizeof bb);
    std::memcpy(ab, &a, 4);
    for (int i = 0; i < Lanes; ++i) {
      uint32_t sum = uint32_t(acc[i]);
      if constexpr (Shifted) {  // VPDPBUSD
        for (int j = 0; j < 4; ++j) sum += uint32_t(int32_t(bb[4 * i + j]) * int32_t(ab[j]));
      } else {  // VPSIGNB, VPMADDUBSW, VPMADDWD
        for (int pair = 0; pair < 2; ++pair) {
          int32_t s = 0;
          for (int j = 2 * pair; j < 2 * pair + 2; ++j) {
            const int32_t bj = int8_t(bb[4 * i + j]), aj = ab[j];
            const int32_t signed_b = aj < 0 ? -bj : aj == 0 ? 0 : bj;
            s += int32_t(uint8_t(aj < 0 ? -aj : aj)) * int32_t(int8_t(signed_b));
          }
          sum += uint32_t(saturated16(s));
        }
      }
      acc[i] = int32_t(sum);
    }
    return acc;
  }
};

using EmulatedZmm = Emulated<Vectors512, 16, 12, true>;
using EmulatedYmm = Emulated<Vectors256, 8, 6, true>;
using EmulatedAvx2 = Emulated<Vectors256, 8, 4, false>;

}  // namespace

const moe::s8::Instance kZmm = instance_of<EmulatedZmm>("emulated_zmm");
const moe::s8::Instance kYmm = instance_of<EmulatedYmm>("emulated_ymm");
const moe::s8::Instance kAvx2 = instance_of<EmulatedAvx2>("emulated_avx2");

}  // namespace moe::s8_emulated
