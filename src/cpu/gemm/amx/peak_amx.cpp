// isa_amx::peak_loop_bf16 and peak_loop_int8 (cpu/gemm/peak.h): four 16 x 16 float32 (int32) accumulator
// tiles fed by two A and two B tiles, so each tile multiply has three others to overlap with. A
// tdpbf16ps is 16 x 16 x 32 multiply-adds, a tdpbssd 16 x 16 x 64. The caller's process has asked for
// AMX state (cpu_isa(), moe/cpu_isa.h); each thread loads its own tile configuration.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/gemm/peak.h"

// The same target as the amx GEMM files (src/cpu/gemm/amx/gemm_amx.cpp, gemm_amx_s8.cpp): the three compile
// cpu/gemm/amx/amx_tiles.h's inline functions, of which the linker keeps one copy.
#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c,bmi,bmi2,amx-tile,amx-bf16,amx-int8")

#include "cpu/gemm/amx/amx_tiles.h"

namespace moe::cpu::isa_amx {
namespace {

// Small operands: accumulators stay finite over any number of steps that fit a measurement.
template <class T>
void load_operands(T value) {
  alignas(64) T data[16 * 64 / sizeof(T)];
  for (T& v : data) v = value;
  _tile_loadd(4, data, 64);
  _tile_loadd(5, data, 64);
  _tile_loadd(6, data, 64);
  _tile_loadd(7, data, 64);
}

void zero_accumulators() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

void keep_result() {
  alignas(64) int32_t out[16 * 16];
  _tile_stored(0, out, 64);
  volatile int32_t sink = out[0];
  (void)sink;
  _tile_release();
}

// `steps` rounds of `four_products` (tile multiplies into accumulators 0-3 from A tiles 4-5 and B
// tiles 6-7, all holding `operand`).
template <class T, class FourProducts>
void run_tiles(int64_t steps, T operand, FourProducts four_products) {
  Tiles::configure();  // palette 1, tiles 0-7 all 16 rows x 64 bytes
  load_operands<T>(operand);
  zero_accumulators();
  for (int64_t s = 0; s < steps; ++s) four_products();
  keep_result();
}

}  // namespace

double peak_loop_bf16(int64_t steps) {
  run_tiles<uint16_t>(steps, 0x3a83, [] {  // bf16 ~1e-3
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  });
  return double(steps) * 4 * 16 * 16 * 32 * 2;
}

double peak_loop_int8(int64_t steps) {
  run_tiles<int8_t>(steps, 1, [] {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  });
  return double(steps) * 4 * 16 * 16 * 64 * 2;
}

}  // namespace moe::cpu::isa_amx

#pragma GCC pop_options
