// Our int8 dot-product GEMM (cpu/gemm/gemm.h's nn_s8 and nn_s8_swiglu): what the entry points
// (src/cpu/gemm/gemm_s8.cpp, build ISA) lay out for one call and hand to an instance of the kernel
// (cpu/gemm/gemm_s8_kernel.h). Instances: AVX-512 VNNI on zmm (src/cpu/gemm/avx512/gemm_vnni_avx512.cpp) and
// AVX-VNNI on ymm (src/cpu/gemm/avx2/gemm_vnni_avx2.cpp), the `vnni` variant (src/cpu/gemm/gemm_vnni.cpp);
// AVX2 without VNNI (src/cpu/gemm/avx2/gemm_avx2_s8.cpp), the `avx2_s8` variant; and their plain C++
// emulation (src/cpu/gemm/portable/gemm_s8_emulated.cpp, the tests' instances on any CPU).
//
// Exact sums. vpdpbusd multiplies unsigned by signed bytes (4 products into each int32 lane), so a VNNI
// instance packs the weights shifted, u8 = b + 128 (b xor 0x80), and a row's sum over them is
//   sum_k a[k] * (b[k][n] + 128) = sum_k a[k] * b[k][n] + 128 * sum_k a[k]:
// each accumulator starts at -128 * sum_k a[k] (the row's correction, computed once per call). All of it is
// arithmetic modulo 2^32 (vpdpbusd adds without saturating), so the int32 result is the exact sum whenever
// that fits int32 (nn_s8's contract). AVX2 has no int8 dot product: its instance packs the weights as they
// are and multiplies |a| (vpabsb) by b with a's sign (vpsignb) in vpmaddubsw, whose int16 pair sums never
// saturate on [-127, 127] (at most 2 * 127 * 127 = 32258), widened by vpmaddwd; no correction. Packed
// reduction elements past Kd are 0 either way: they add nothing whatever the activation bytes they meet.
//
// Packed layout of one expert's weights: tiles of two vectors of `lanes` columns; per tile, per quad q of the
// reduction (4 elements), the two vectors, dword j of a vector holding its column j's elements 4q .. 4q + 3
// (u8 shifted or s8), zeros past Kd and past the columns. nn_s8's tile t is columns [2 lanes t, 2 lanes (t +
// 1)) in order; nn_s8_swiglu's tile t is gate columns [lanes t, lanes (t + 1)) in its first vector and the
// same up columns in its second, so SwiGLU runs on a tile's sums before anything is stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cpu/gemm/gemm.h"
#include "moe/dtype.h"

namespace moe::s8 {

// What differs between instances: the vector width, the register tile and how weights are packed.
struct Geometry {
  int lanes;      // int32 lanes of a vector: 16 (zmm), 8 (ymm)
  int tile_rows;  // rows of the register tile (its columns are 2 vectors)
  bool shifted;   // weights packed as u8 = b + 128 with each row's correction (vpdpbusd), else as s8
  // Bytes of one packed tile over a reduction of Kd (quads rounded up).
  int64_t tile_bytes(int64_t Kd) const { return (Kd + 3) / 4 * 2 * int64_t(lanes) * 4; }
};

// The most rows an item has (a multiple of every instance's tile rows: 12, 6, 4).
inline constexpr int64_t kMaxItemRows = 48;
// Staged rows of lhs: Kd bytes and zeros to the next quad, a line longer than whole lines apart (rows a
// power of two bytes apart would share a few L1 sets: at Kd = 1024 an item's 48 rows map to 16 of 64).
inline int64_t stage_ld(int64_t Kd) {
  return (Kd + 63) / 64 * 64 + 64;
}
inline int64_t stage_bytes(int64_t Kd) {
  return kMaxItemRows * stage_ld(Kd);
}

// A work item: `rows` live rows of the row buffer from row0 (one expert's) x tiles [tile0, tile0 + tiles).
struct Item {
  int64_t e, row0, rows, tile0, tiles;
};
// One packing job: quads [quad0, quad1) of the reduction of every tile of expert e.
struct PackJob {
  int64_t e, quad0, quad1;
};

// nn_s8_swiglu's epilogue, where Work::swiglu is set.
struct Swiglu {
  S8SwigluOut out;
  const float* row_weight;  // (rows) or nullptr
  int64_t M;
  Int8UpPart up;  // the up projection's weights where they are a tensor of their own
};

// One call, as the entry point laid it out. The instance corrects (rows [0, rows) of lhs, shifted instances),
// then phase by phase packs the phase's pack jobs and runs its items, each thread taking the next one; a
// phase's packing may overwrite the one two phases back, whose items are done by then.
struct Work {
  Int8Operands in;  // lhs (rows, Kd), rhs, their scales
  int64_t Kd;
  int64_t tiles;  // of the packed weights (nn_s8: N / 2 lanes; nn_s8_swiglu: M / lanes; rounded up)
  // nn_s8's output (swiglu nullptr): out (rows, N) in out_dtype, stored or added to (accumulate).
  void* out;
  Dtype out_dtype;
  int64_t N;
  bool accumulate;
  const Swiglu* swiglu;  // nn_s8_swiglu: h, g and g's quantized rows instead
  bool stream;           // whole vectors of the output leave with non-temporal stores (a large output)
  int64_t rows;          // rows of lhs whose corrections the items read
  int32_t* correction;   // (rows) scratch: -128 x each row's sum, filled by a shifted instance
  const Item* items;
  const PackJob* pack_jobs;   // still to pack (none where a pack cache held them)
  const size_t* phase_items;  // (phases + 1): phase p's items are [phase_items[p], phase_items[p + 1])
  const size_t* phase_jobs;   // (phases + 1): and its pack jobs
  size_t phases;
  const int64_t* packed_at;  // (E): expert e's packed weights in `packed` (bytes), -1 when unused
  uint8_t* packed;           // the packed weights (a pack cache's, or two phase slots), 64-byte aligned
  int8_t* stage;             // (threads, stage_bytes): each thread's staged rows of an item
  int64_t stage_bytes;
  char* swiglu_stage;          // nn_s8_swiglu: (threads, swiglu_stage_bytes), each thread's rows of h and g
  int64_t swiglu_stage_bytes;  // of an item: kMaxItemRows x 3M values
};

// An instance: its geometry and the function that runs a Work laid out for it.
struct Instance {
  const char* name;
  Geometry geometry;
  void (*run)(const Work& w);
};

// The entry points' work for `instance`: lay the call out and run it (pack cache: in.rhs_packs).
void nn_s8_with(const Instance& instance, void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups,
                int64_t Kd, int64_t N, bool accumulate);
void nn_s8_swiglu_with(const Instance& instance, S8SwigluOut out, Dtype out_dtype, Int8Operands in,
                       Int8UpPart up, GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight);

}  // namespace moe::s8

// The instances (each file's namespace names its ISA, docs/design.md "ISA levels").
namespace moe::cpu::isa_avx512::vnni {
extern const moe::s8::Instance kInstance;  // AVX-512 VNNI, 16 lanes
}
namespace moe::cpu::isa_avx2::vnni {
extern const moe::s8::Instance kInstance;  // AVX-VNNI, 8 lanes
}
namespace moe::cpu::isa_avx2::s8 {
extern const moe::s8::Instance kInstance;  // AVX2 (vpmaddubsw), 8 lanes
}
namespace moe::s8_emulated {
// The kernel on plain C++ dot products in each hardware instance's geometry: the tests' instances.
extern const moe::s8::Instance kZmm, kYmm, kAvx2;
}  // namespace moe::s8_emulated

// The answers both variants of this kernel (vnni, avx2_s8) give besides their availability: no float GEMM,
// exact integer sums (alike on any thread count), a candidate for auto, the int8 forms only.
#define MOE_DEFINE_S8_VARIANT_ANSWERS(ns)                                                                \
  namespace moe::ns {                                                                                    \
  bool bf16_arithmetic() {                                                                               \
    return false;                                                                                        \
  }                                                                                                      \
  bool same_sums_on_any_thread_count() {                                                                 \
    return true;                                                                                         \
  }                                                                                                      \
  bool auto_candidate() {                                                                                \
    return true;                                                                                         \
  }                                                                                                      \
  std::string supports(const GemmCall& call, const GemmThresholds& /*k*/) {                              \
    return call.form == GemmForm::nn_s8 || call.form == GemmForm::nn_s8_swiglu ? "" : "int8 forms only"; \
  }                                                                                                      \
  }

namespace moe::vnni {
// "" where `instance` runs on this CPU at the ISA level in use, else why not: AVX-512 VNNI needs the level
// avx512 and the CPU's avx512_vnni, AVX-VNNI the level avx2 and its avx_vnni.
std::string unavailable(const s8::Instance& instance);
// The VNNI instance this CPU runs (AVX-512 VNNI before AVX-VNNI), or nullptr.
const s8::Instance* hardware_instance();
}  // namespace moe::vnni
