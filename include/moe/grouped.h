// The operands of a grouped GEMM as the block's ops and the quantization name them: which rows of the
// expert-major row buffer (pack.h) belong to which expert, and the weights each expert multiplies by.
// The GEMMs themselves are the cpu backend's (src/cpu/gemm/gemm.h).
#pragma once

#include <cstdint>

namespace moe {

// Group e is rows [group_offset[e], group_offset[e+1]) of the row buffer. When live_rows is given,
// only its first live_rows[e] rows hold data: the rest are layout padding (the gmm layout's tile
// rounding, capacity drops), which nn and nt do not multiply but write as zeros and tn leaves out of
// its sums (they would add nothing).
// zero_padding: the caller guarantees that the padding rows of every operand hold zeros, so a form
// may include some of them in its sums when that is faster (tn rounds its reduction up to 16 rows).
// padding_kept: the caller keeps the padding rows of the outputs holding zeros across calls (a forward run's
// row buffers: cpu/ops/kept_zero_padding.h), so nn, nn_swiglu, nt and nt_swiglu_grad do not write them and
// SwiGLU passes skip them (at 64-row tiles and a few rows an expert, the padding is most of every row
// buffer); the GEMM table's split of a call into few-row and many-row groups relies on it
// (cpu/gemm/kernel_table.cpp).
struct GroupedShape {
  const int64_t* group_offset;         // (E+1)
  int64_t experts;                     // E
  const int64_t* live_rows = nullptr;  // (E) or nullptr: every row of a group is live
  bool zero_padding = false;
  bool padding_kept = false;
};

class WeightPacks;  // the cpu kernels' packings of weights kept across calls (src/cpu/gemm/gemm.h)

// The weights a grouped GEMM multiplies by: rhs[e] (Kd, N) of one (E, Kd, N) tensor, or the column
// concatenation [first[e] | second[e]] of two (E, Kd, N/2) tensors, read where they lie (a fused
// impl's w13 = [w1 | w3] without building it).
struct ExpertWeights {
  const void* first;
  const void* second = nullptr;
  // The weights hold their values across calls (a forward run's): an nn kernel may keep a packing of them
  // here (keyed by first; both parts) and read it in later calls. nullptr: read them where they lie.
  WeightPacks* packs = nullptr;
  ExpertWeights(const void* w)
      : first(w) {}  // NOLINT(google-explicit-constructor): one tensor reads as itself
  ExpertWeights(const void* w1, const void* w3) : first(w1), second(w3) {}
  ExpertWeights kept(WeightPacks* p) const {
    ExpertWeights w = *this;
    w.packs = p;
    return w;
  }
  int parts() const { return second ? 2 : 1; }
  const void* part(int p) const { return p == 0 ? first : second; }
};

// nn_s8's operands: quantized values and their scales (moe/quantize.h makes them).
struct Int8Operands {
  const int8_t* lhs;       // (rows, Kd)
  const float* lhs_scale;  // (rows)
  const int8_t* rhs;       // (E, Kd, N)
  const float* rhs_scale;  // (E) or (E, N)
  bool rhs_scale_per_column = false;
  WeightPacks* rhs_packs = nullptr;  // rhs unchanged across calls: kernels may keep their packing here
};

// nn_s8_swiglu's second weight part: the up projection's (E, Kd, M) and its scales, per expert or per
// column as Int8Operands says; rhs nullptr: Int8Operands' rhs is the whole (E, Kd, 2M) [gate | up]. With two
// parts, Int8Operands' rhs_packs keeps the packing of both.
struct Int8UpPart {
  const int8_t* rhs = nullptr;
  const float* rhs_scale = nullptr;
};

// nn_s8_swiglu's outputs.
struct S8SwigluOut {
  void* h;         // (rows, 2M) [gate | up] in out_dtype (a buffer of that size either way)
  void* g;         // (rows, M) in out_dtype
  int8_t* gq;      // (rows, M) g's rows quantized
  float* g_scale;  // (rows)
  bool keep_h = true;
};

}  // namespace moe
