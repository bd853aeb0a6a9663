// cpu/gemm/gemm.h on oneDNN 2.6 matmul. Shapes and semantics: see the header.
//
// Every GEMM becomes one oneDNN matmul described by a Plan, built on the first call with a given
// (M, K, N, strides, dtypes, transposes, threads) and then cached for the life of the process:
// creating a brgemm primitive JITs kernels (milliseconds), while the benchmark repeats its shapes
// every iteration. Grouped forms run one matmul per non-empty group (one plan per distinct group
// size), or, for nn and nt in a band of small groups, one OpenMP region in which each thread runs a
// single-thread matmul on its slice of the output columns, group after group (split_columns below).
//
// Kernel and layout policy, measured at the acceptance shape on the 2-core Zen 4 box
// (bench/bench_gemm.cpp, numbers in docs/kernels.md):
//  - f32 with B as stored (nn, tn, dense) and M >= 512 rows: gemm:jit, oneDNN's BLAS-style GEMM that
//    packs both operands itself and reads tn's lhs_e^T natively; 2-7% faster than brgemm there.
//    oneDNN 2.6 only dispatches to it when the dims are runtime values. Below 512 rows brgemm wins
//    (gemm:jit is 25% slower at M = 256).
//  - Everything else runs brgemm (brg:avx512_core_bf16 / brg:avx512_core):
//    - B as stored is reordered once per call into brgemm's blocked layout (format_tag::any) when
//      M >= 512: fed a plain B, brgemm re-copies it for every chunk of M (2-8% at M = 1k-16k); below
//      ~512 rows it makes one copy anyway and the extra pass loses.
//    - B transposed (nt's rhs[e]^T) is read through strides below M = 4096: oneDNN's transposing
//      reorder into the blocked layout is slow and pays off only over many rows.
//    - A transposed (tn's lhs_e^T, outside the gemm:jit case): bf16 brgemm reads it through its
//      strides; f32 transposes it into scratch first (5-8% faster on Zen 4). In bf16 the transposing
//      reorder cost tn up to 12 % at 128-1092 rows and Kd = 2048 (1-4 % the other way at Kd = 1024),
//      and made its reduction slow at 4, 8 or 12 rows mod 16 (Zen 5, docs/kernels.md).
//  - Mixed a/b dtypes (the shared expert's f32 activations x bf16 weights) and f32 inputs with a
//    bf16 output have no oneDNN 2.6 kernel: the bf16 operand is widened to f32 (exact) by the same
//    reorders, and an f32 result is rounded to bf16 (nearest even) from scratch.
#ifdef MOE_HAVE_ONEDNN

#include <omp.h>

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/zero_gradient.h"
#include "cpu/ops/vec_math.h"
#include "moe/cpu_isa.h"
#include "moe/status.h"
#include "moe/tensor.h"

namespace moe::onednn {
namespace {

using gemm_detail::at;
using gemm_detail::check_groups;
using gemm_detail::group_rows;
using gemm_detail::GroupRows;
using gemm_detail::zero_padding_rows;

using dnnl::memory;
using Tag = memory::format_tag;

constexpr int64_t kGemmJitMinRows = 512;
constexpr int64_t kPackPlainMinRows = 512;
constexpr int64_t kPackTransposedMinRows = 4096;
// brgemm's tn form with lhs^T transposed into scratch (f32 below gemm:jit's rows) runs ~25 % slower
// when its reduction (the group's rows) is 4, 8 or 12 mod 16 (Zen 5, docs/kernels.md): where zero
// padding rows follow, sum over a multiple of 16 instead.
constexpr int64_t kTnReductionAlign = 16;

// float16 never comes here: the kernel table widens it to float32 before any variant sees it.
memory::data_type dnnl_type(Dtype dt) {
  if (dt == Dtype::f32) return memory::data_type::f32;
  if (dt == Dtype::bf16) return memory::data_type::bf16;
  MOE_CHECK(false, std::string("oneDNN GEMMs here take float32 or bfloat16, not ") + dtype_name(dt));
}

// MOE_MAX_ISA holds oneDNN to the same level as our kernels unless ONEDNN_MAX_CPU_ISA says otherwise.
// oneDNN takes the cap only before its first primitive or ISA query, so everything here asks this first.
void apply_isa_cap() {
  static const bool applied = [] {
    if (!cpu_isa().capped_by_env || std::getenv("ONEDNN_MAX_CPU_ISA")) return false;
    dnnl::cpu_isa cap = dnnl::cpu_isa::all;
    switch (cpu_isa().cap) {
      case IsaLevel::baseline:
        cap = dnnl::cpu_isa::sse41;
        break;
      case IsaLevel::avx2:
        cap = dnnl::cpu_isa::avx2;
        break;
      case IsaLevel::avx512:
        cap = dnnl::cpu_isa::avx512_core;
        break;
      case IsaLevel::avx512_bf16:
        cap = dnnl::cpu_isa::avx512_core_bf16;
        break;
      case IsaLevel::amx:
        break;
    }
    return dnnl::set_max_cpu_isa(cap) == dnnl::status::success;
  }();
  (void)applied;
}

struct Runtime {
  struct CapFirst {
    CapFirst() { apply_isa_cap(); }
  } cap_first;  // before the engine: oneDNN reads its ISA cap once
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// Per calling thread, as every cache of this file: the in-process multi-rank comm runs ranks as threads
// that call GEMMs at once (a shared growing buffer or std::map corrupted the heap there); a process of
// one caller keeps one of each.
Runtime& runtime() {
  thread_local Runtime rt;
  return rt;
}

// Whether oneDNN has a bf16 matmul on this CPU (2.6: AVX-512 from avx512_core up). Where it has none, a
// bf16 GEMM computes in float32: bf16 operands widen (exactly) while the reorders stage them, and the
// float32 result rounds to bf16 on the way out, so bf16 storage runs at float32 GEMM speed.
bool bf16_matmul_native() {
  static const bool native = [] {
    Runtime& rt = runtime();
    const memory::desc bf16_desc({16, 16}, memory::data_type::bf16, Tag::ab);
    try {
      dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(bf16_desc, bf16_desc, memory::desc({16, 16}, memory::data_type::f32, Tag::ab)),
          rt.engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

// oneDNN 2.6's AMX brgemm reading B transposed in place (weights `ba`) dies with SIGILL at odd sizes
// (63 x 63 x 17, bf16, on a 16-core Emerald Rapids Xeon: an instruction its JIT emits that the CPU lacks).
// Where oneDNN runs AMX, a transposed B is always packed first, and bf16 products run only at whole
// tiles (off them it died packed too, and without a transposed B: amx_odd_size_refusal).
bool amx_brgemm() {
  apply_isa_cap();
  static const bool amx = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_amx;
  return amx;
}

// The dtype a product of a and b computes in: their common one, or float32 (mixed, or bf16 without a
// bf16 matmul here).
Dtype compute_dtype(Dtype a, Dtype b) {
  if (a != b) return Dtype::f32;
  return a == Dtype::bf16 && !bf16_matmul_native() ? Dtype::f32 : a;
}

// One growing buffer per role and calling thread, reused by its calls.
// kScratchPart: a group's part of an operand made contiguous before a matmul stages it (A, B, C).
// kWidenA, kWidenB, kNarrowC: bf16 operands widened to float32 and a float32 result before it is rounded
// to bf16, where oneDNN has no bf16 matmul (matmul_in_f32).
enum ScratchSlot { kScratchA, kScratchB, kScratchC, kScratchPart, kWidenA, kWidenB, kNarrowC, kScratchSlots };

void* scratch(ScratchSlot slot, size_t bytes) {
  thread_local Buffer<std::byte> buffers[kScratchSlots];
  Buffer<std::byte>& buf = buffers[slot];
  if (buf.size() < bytes) buf = Buffer<std::byte>(bytes);
  return buf.data();
}

// src (rows, cols) float32, rows ld apart -> the same rows packed densely in a scratch buffer. Below
// gemm:jit's row count oneDNN's float32 matmul does not pack an operand whose rows are further apart
// than its width (grouped_gemm_nt's weight parts, grouped_gemm_tn's dout halves).
const float* contiguous_f32(const void* src, int64_t rows, int64_t cols, int64_t ld) {
  auto* dst = static_cast<float*>(scratch(kScratchPart, size_t(rows * cols) * sizeof(float)));
  const auto* s = static_cast<const float*>(src);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * cols, s + r * ld, size_t(cols) * sizeof(float));
  return dst;
}

// src (rows, cols) bf16, rows ld apart -> float32 (exact), dense, in the slot's scratch.
const float* widened_bf16(ScratchSlot slot, const void* src, int64_t rows, int64_t cols, int64_t ld) {
  auto* dst = static_cast<float*>(scratch(slot, size_t(rows * cols) * sizeof(float)));
  const auto* s = static_cast<const bf16_t*>(src);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) cpu::bf16_to_f32_row(dst + r * cols, s + r * ld, cols);
  return dst;
}

// Row strides in elements; 0 is the dense one. lda applies to a stored (m, k), ldb to b stored (k, n):
// a transposed operand is dense.
struct Strides {
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// c (m, n) = a (m, k) @ b (k, n), or += when accumulate; a is stored (k, m) row-major when trans_a, b
// is (n, k) when trans_b.
struct PlanKey {
  int64_t m, k, n;
  int64_t lda, ldb, ldc;  // resolved: never 0
  Dtype a_dtype, b_dtype, c_dtype;
  bool trans_a, trans_b;
  int threads;  // brgemm bakes the thread count into its work split at creation
  bool accumulate;
  // One thread's column slice of a wider product (split_columns): a and b are read as stored, and
  // the scratchpad is the caller's (threads run one primitive at once).
  bool column_slice;
  auto operator<=>(const PlanKey&) const = default;
};

// A reorder from a caller's operand into scratch in the layout/dtype the matmul reads (or back).
struct Conversion {
  dnnl::reorder reorder;
  memory::desc src, dst;
};

struct Plan {
  dnnl::matmul matmul;
  memory::desc a, b, c;  // the caller's layouts
  std::optional<Conversion> a_in, b_in, c_out;
  memory::desc scratchpad;  // what a column slice's caller provides
};

memory::desc matrix_desc(int64_t rows, int64_t cols, Dtype dt, bool transposed) {
  return memory::desc({rows, cols}, dnnl_type(dt), transposed ? Tag::ba : Tag::ab);
}

Conversion make_conversion(const memory::desc& src, const memory::desc& dst) {
  Runtime& rt = runtime();
  return {dnnl::reorder(dnnl::reorder::primitive_desc(rt.engine, src, rt.engine, dst)), src, dst};
}

Plan make_plan(const PlanKey& key) {
  const Dtype compute = compute_dtype(key.a_dtype, key.b_dtype);
  Plan plan;
  plan.a = key.trans_a ? matrix_desc(key.m, key.k, key.a_dtype, true)
                       : memory::desc({key.m, key.k}, dnnl_type(key.a_dtype), {key.lda, 1});
  plan.b = key.trans_b ? matrix_desc(key.k, key.n, key.b_dtype, true)
                       : memory::desc({key.k, key.n}, dnnl_type(key.b_dtype), {key.ldb, 1});
  plan.c = memory::desc({key.m, key.n}, dnnl_type(key.c_dtype), {key.ldc, 1});

  // gemm:jit takes runtime dims, whose strides are the dense ones: strided operands go through brgemm.
  const bool dense = (key.trans_a || key.lda == key.k) && key.ldb == key.n && key.ldc == key.n;
  const bool gemm_jit = compute == Dtype::f32 && key.b_dtype == Dtype::f32 && !key.trans_b && dense &&
                        key.m >= kGemmJitMinRows && !key.column_slice && !key.accumulate;
  const bool convert_a =
      key.a_dtype != compute || (key.trans_a && !gemm_jit && !key.column_slice && compute == Dtype::f32);
  // Widening B costs one pass anyway, so it writes the blocked layout directly.
  const bool pack_b = !gemm_jit && !key.column_slice &&
                      (key.b_dtype != compute || (key.trans_b && amx_brgemm()) ||
                       key.m >= (key.trans_b ? kPackTransposedMinRows : kPackPlainMinRows));
  const bool convert_c = compute == Dtype::f32 && key.c_dtype == Dtype::bf16;

  const memory::desc a = convert_a ? matrix_desc(key.m, key.k, compute, false) : plan.a;
  const memory::desc b = pack_b ? memory::desc({key.k, key.n}, dnnl_type(compute), Tag::any) : plan.b;
  const memory::desc c = convert_c ? matrix_desc(key.m, key.n, Dtype::f32, false) : plan.c;
  MOE_CHECK(!key.column_slice || (!convert_a && !convert_c), "a column slice runs without conversions");
  MOE_CHECK(!key.accumulate || !convert_c, "matmul accumulates into a float32 c or one of the inputs' dtype");
  Runtime& rt = runtime();
  dnnl::primitive_attr attr;
  if (key.column_slice) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc pd;
  if (gemm_jit) {
    // oneDNN 2.6 only dispatches to gemm:jit when the dims are runtime values (concrete ones get brgemm).
    const memory::dim any = DNNL_RUNTIME_DIM_VAL;
    pd = dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(matrix_desc(any, any, compute, key.trans_a && !convert_a),
                           matrix_desc(any, any, compute, false), matrix_desc(any, any, compute, false)),
        rt.engine);
  } else {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, rt.engine);
  }
  plan.matmul = dnnl::matmul(pd);
  plan.scratchpad = pd.scratchpad_desc();
  if (convert_a) plan.a_in = make_conversion(plan.a, a);
  if (pack_b) plan.b_in = make_conversion(plan.b, pd.weights_desc());
  if (convert_c) plan.c_out = make_conversion(c, plan.c);
  return plan;
}

const Plan& get_plan(const PlanKey& key) {
  thread_local std::map<PlanKey, Plan> cache;
  auto it = cache.find(key);
  if (it == cache.end()) {
    try {
      // brgemm sizes its work split by the OpenMP thread count when it is created.
      struct ThreadCount {
        int saved = omp_get_max_threads();
        ~ThreadCount() { omp_set_num_threads(saved); }
      } restore;
      omp_set_num_threads(key.threads);
      it = cache.emplace(key, make_plan(key)).first;
    } catch (const dnnl::error& e) {
      MOE_CHECK(false, std::string("oneDNN matmul setup failed: ") + e.what());
    }
  }
  return it->second;
}

// Converts `user` into the slot's scratch when the plan asks for it.
memory stage_in(const std::optional<Conversion>& conv, memory user, ScratchSlot slot) {
  if (!conv) return user;
  Runtime& rt = runtime();
  memory staged(conv->dst, rt.engine, scratch(slot, conv->dst.get_size()));
  conv->reorder.execute(rt.stream, user, staged);
  return staged;
}

void matmul(void* c, Dtype c_dtype, const void* a, Dtype a_dtype, const void* b, Dtype b_dtype, int64_t m,
            int64_t k, int64_t n, bool trans_a, bool trans_b, Strides strides = {}, bool accumulate = false);

// matmul where oneDNN has no bf16 matmul (AVX2) and an operand or the result is bf16: bf16 operands are
// widened and a bf16 result rounded (nearest even) here, around a float32 matmul. oneDNN 2.6's reorders
// between bf16 and float32 on such CPUs are its reference loops (a 256 x 256 widening took 3.4 ms on a
// Zen 3, 7x the float32 matmul it fed); these are vector loops.
void matmul_in_f32(void* c, Dtype c_dtype, const void* a, Dtype a_dtype, const void* b, Dtype b_dtype,
                   int64_t m, int64_t k, int64_t n, bool trans_a, bool trans_b, Strides s, bool accumulate) {
  if (a_dtype == Dtype::bf16) {  // a stored (m, k), lda apart, or (k, m) dense
    a = trans_a ? widened_bf16(kWidenA, a, k, m, m) : widened_bf16(kWidenA, a, m, k, s.lda);
    a_dtype = Dtype::f32;
    s.lda = 0;
  }
  if (b_dtype == Dtype::bf16) {  // b stored (k, n), ldb apart, or (n, k) dense
    b = trans_b ? widened_bf16(kWidenB, b, n, k, k) : widened_bf16(kWidenB, b, k, n, s.ldb);
    b_dtype = Dtype::f32;
    s.ldb = 0;
  }
  if (c_dtype != Dtype::bf16)
    return matmul(c, c_dtype, a, a_dtype, b, b_dtype, m, k, n, trans_a, trans_b, s, accumulate);
  MOE_CHECK(!accumulate, "matmul accumulates into a float32 c only");
  auto* c32 = static_cast<float*>(scratch(kNarrowC, size_t(m * n) * sizeof(float)));
  matmul(c32, Dtype::f32, a, a_dtype, b, b_dtype, m, k, n, trans_a, trans_b, {s.lda, s.ldb, 0}, false);
  auto* out = static_cast<bf16_t*>(c);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < m; ++r) cpu::f32_to_bf16_row(out + r * s.ldc, c32 + r * n, n);
}

// c (m, n) = a (m, k) @ b (k, n) (+= c when accumulate), a stored (k, m) when trans_a, b stored (n, k)
// when trans_b, rows as far apart as `strides` says.
void matmul(void* c, Dtype c_dtype, const void* a, Dtype a_dtype, const void* b, Dtype b_dtype, int64_t m,
            int64_t k, int64_t n, bool trans_a, bool trans_b, Strides strides, bool accumulate) {
  MOE_CHECK(m >= 0 && k >= 0 && n >= 0, "negative GEMM dimension");
  const int64_t lda = strides.lda ? strides.lda : k, ldb = strides.ldb ? strides.ldb : n,
                ldc = strides.ldc ? strides.ldc : n;
  MOE_CHECK((trans_a ? lda == k : lda >= k) && (trans_b ? ldb == n : ldb >= n) && ldc >= n,
            "matmul: a row stride must cover its row (plain operands only)");
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i)
        std::memset(at(c, i * ldc, c_dtype), 0, size_t(n) * dtype_size(c_dtype));
    return;
  }
  if (compute_dtype(a_dtype, b_dtype) == Dtype::f32 && !bf16_matmul_native() &&
      (a_dtype == Dtype::bf16 || b_dtype == Dtype::bf16 || c_dtype == Dtype::bf16))
    return matmul_in_f32(c, c_dtype, a, a_dtype, b, b_dtype, m, k, n, trans_a, trans_b, {lda, ldb, ldc},
                         accumulate);
  const Plan& plan = get_plan({m, k, n, lda, ldb, ldc, a_dtype, b_dtype, c_dtype, trans_a, trans_b,
                               omp_get_max_threads(), accumulate, false});
  Runtime& rt = runtime();
  memory a_mem = stage_in(plan.a_in, memory(plan.a, rt.engine, const_cast<void*>(a)), kScratchA);
  memory b_mem = stage_in(plan.b_in, memory(plan.b, rt.engine, const_cast<void*>(b)), kScratchB);
  memory c_user(plan.c, rt.engine, c);
  memory c_mem = plan.c_out
                     ? memory(plan.c_out->src, rt.engine, scratch(kScratchC, plan.c_out->src.get_size()))
                     : c_user;
  plan.matmul.execute(rt.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  if (plan.c_out) plan.c_out->reorder.execute(rt.stream, c_mem, c_user);
  rt.stream.wait();
}

// In a band of row counts per group, nn and nt run as one OpenMP region in which each thread owns a
// fixed slice of the output columns and multiplies it, group after group, with a single-thread
// oneDNN matmul that reads its slice of b as stored. A multi-thread brgemm fed a plain b splits the
// few rows between its threads, so each copies the same b blocks into brgemm's layout, and it ends
// every group at a barrier; the slices copy each block once and never wait. Measured on Zen 5, 2
// threads, grouped over 16-128 experts with rows +-10 % (docs/kernels.md):
//  - nn, bf16: +7 to +13 % from 128 to 546 rows (0.69 -> 0.77 TF/s at 137 x 2048 x 2816), +2 to +4 %
//    at 1024-1092; 2 % slower at 2048, where b packed once per call takes over. f32: +11 to +28 %
//    below 512, where gemm:jit takes over.
//  - nt, bf16: +5 to +26 % from 200 to 546 rows, +11 to +16 % from 1024 to 3600 (0.81 -> 0.94 TF/s
//    at 1092 x 2048 x 2816), up to the rows where b^T is packed per call; 3-7 % slower at 128-137
//    rows, where the multi-thread brgemm's strided read of b^T wins. f32: +7 % at 350 rows. An nt
//    that adds into out (two weight parts, accumulate) takes the slices at every row count: a
//    thread's rows of out are still in its cache when its second product reads them back (137 x 2048
//    x [1408 | 1408]: 0.66 -> 0.75 TF/s; the per-group 2-thread matmul with a sum post-op loses 15 %
//    to the single product).
//  - tn: the slices lose or tie at every size tried; it keeps one matmul per group.
enum class Form { nn, nt };
constexpr int64_t kColumnSliceMaxRowsNnBf16 = 1536;
constexpr int64_t kColumnSliceMaxRowsNtBf16 = kPackTransposedMinRows;
constexpr int64_t kColumnSliceMaxRowsF32 = kGemmJitMinRows;
constexpr int64_t kColumnSliceMinRowsNt = 192;
constexpr int64_t kColumnSliceAlign = 64;

bool column_slices_pay(Form form, int64_t rows, Dtype in_dtype, Dtype out_dtype, bool sums_into_out = false) {
  // f32 computation with a bf16 output needs a rounding pass from scratch, and widened bf16 inputs a
  // staging pass, which a slice does not have.
  if (compute_dtype(in_dtype, in_dtype) == Dtype::f32 && (in_dtype != Dtype::f32 || out_dtype != Dtype::f32))
    return false;
  if (form == Form::nt && !sums_into_out && rows < kColumnSliceMinRowsNt) return false;
  if (form == Form::nt && amx_brgemm()) return false;  // a slice reads b^T in place (amx_brgemm)
  if (in_dtype == Dtype::f32) return rows < kColumnSliceMaxRowsF32;
  return rows < (form == Form::nn ? kColumnSliceMaxRowsNnBf16 : kColumnSliceMaxRowsNtBf16);
}

// One product of split_columns: columns [col0, col0 + n) of the call's c, c (m, n) = a (m, k) @ b (k, n)
// (+= c when accumulate), in the layouts of the call's SliceForm; c points at column 0.
struct SliceJob {
  const void* a;
  const void* b;
  void* c;
  int64_t m, k, n, col0;
  bool accumulate;
};

// The layouts of split_columns' products, total_n columns of c in all: a with rows lda apart, b stored
// (n, k) when trans_b (dense), else with rows ldb apart, c with rows ldc apart.
struct SliceForm {
  bool trans_b;
  int64_t total_n, lda, ldb, ldc;
  Dtype in_dtype, out_dtype;
};

// What each thread of split_columns owns: its stream and the scratchpad its primitives use.
struct SliceWorker {
  dnnl::stream stream;
  Buffer<std::byte> scratchpad;
};

std::vector<SliceWorker>& slice_workers(int threads) {
  thread_local std::vector<SliceWorker> workers;
  while (int(workers.size()) < threads) workers.push_back({dnnl::stream(runtime().engine), {}});
  return workers;
}

// Thread t owns columns [t * width, (t + 1) * width) of c and runs, job after job in order, the part
// of each job that falls in them.
void split_columns(const std::vector<SliceJob>& jobs, const SliceForm& form) {
  const int64_t n = form.total_n;
  if (jobs.empty() || n == 0) return;
  const int threads = omp_get_max_threads();
  const int64_t per_thread = (n + threads - 1) / threads;
  const int64_t width =
      std::min(n, (per_thread + kColumnSliceAlign - 1) / kColumnSliceAlign * kColumnSliceAlign);
  const int slices = int((n + width - 1) / width);
  struct Piece {
    const Plan* plan = nullptr;  // none: the job has no column in this slice
    int64_t local0 = 0;          // the piece's first column within its job
  };
  // Plans are made (and cached) here, before the threads start: the cache is not thread-safe.
  std::vector<Piece> pieces(jobs.size() * size_t(slices));
  size_t scratchpad_bytes = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const SliceJob& job = jobs[j];
    MOE_CHECK(job.m > 0 && job.k > 0, "split_columns takes non-empty products");
    for (int t = 0; t < slices; ++t) {
      const int64_t lo = std::max(t * width, job.col0), hi = std::min((t + 1) * width, job.col0 + job.n);
      if (lo >= hi) continue;
      const int64_t cols = hi - lo;
      const Plan& p =
          get_plan({job.m, job.k, cols, form.lda, form.trans_b ? cols : form.ldb, form.ldc, form.in_dtype,
                    form.in_dtype, form.out_dtype, false, form.trans_b, 1, job.accumulate, true});
      scratchpad_bytes = std::max(scratchpad_bytes, p.scratchpad.get_size());
      pieces[j * size_t(slices) + size_t(t)] = {&p, lo - job.col0};
    }
  }
  std::vector<SliceWorker>& workers = slice_workers(slices);
  for (int t = 0; t < slices; ++t)
    if (workers[t].scratchpad.size() < scratchpad_bytes)
      workers[t].scratchpad = Buffer<std::byte>(scratchpad_bytes);

  Runtime& rt = runtime();
  std::string failure;
#pragma omp parallel num_threads(slices)
  {
    const int t = omp_get_thread_num();
    SliceWorker& worker = workers[t];
    try {
      for (size_t j = 0; j < jobs.size(); ++j) {
        const Piece& piece = pieces[j * size_t(slices) + size_t(t)];
        if (!piece.plan) continue;
        const Plan& p = *piece.plan;
        const SliceJob& job = jobs[j];
        const int64_t b_offset = form.trans_b ? piece.local0 * job.k : piece.local0;
        memory a(p.a, rt.engine, const_cast<void*>(job.a));
        memory b(p.b, rt.engine, const_cast<std::byte*>(at(job.b, b_offset, form.in_dtype)));
        memory c(p.c, rt.engine, at(job.c, job.col0 + piece.local0, form.out_dtype));
        memory pad(p.scratchpad, rt.engine, worker.scratchpad.data());
        p.matmul.execute(
            worker.stream,
            {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, pad}});
      }
      worker.stream.wait();
    } catch (const dnnl::error& e) {
#pragma omp critical(moe_split_columns)
      failure = e.what();
    }
  }
  MOE_CHECK(failure.empty(), "oneDNN matmul failed: " + failure);
}

// ---- int8 (nn_s8) ----------------------------------------------------------------------------------
// One s8 x s8 -> s32 matmul per group into scratch, then the reference's dequantization
// (src/ref/int8_gemm.cpp) in our epilogue: oneDNN's own output scales would multiply by the product of
// the two scales, which rounds differently. Its int32 sums are exact only where it multiplies with a
// dot-product instruction that wraps (VNNI's vpdpbusd, AMX): its AVX2 and plain AVX-512 int8 kernels
// shift s8 src to u8 (+128) and multiply with vpmaddubsw, whose int16 pair sums saturate (255 * 127 * 2
// > 32767), so an extreme operand pair comes out wrong (s8_exact below).

// Whether oneDNN's int8 sums are exact here: VNNI (AVX-512 or AVX) or AMX in its effective ISA.
bool s8_exact() {
  apply_isa_cap();
  const auto isa = unsigned(dnnl::get_effective_cpu_isa());
  const auto has = [isa](dnnl::cpu_isa bits) { return (isa & unsigned(bits)) == unsigned(bits); };
  return has(dnnl::cpu_isa::avx512_core_vnni) || has(dnnl::cpu_isa::avx2_vnni);
}

// c (m, n) s32 = a (m, k) s8 @ b (k, n) s8; b reordered into the layout oneDNN asks for from
// kPackPlainMinRows rows (as the float forms: below that it copies b once anyway).
struct S8Plan {
  dnnl::matmul matmul;
  memory::desc a, b, c;
  std::optional<Conversion> b_in;
};

const S8Plan& s8_plan(int64_t m, int64_t k, int64_t n) {
  thread_local std::map<std::tuple<int64_t, int64_t, int64_t, int>, S8Plan> cache;
  const int threads = omp_get_max_threads();
  auto it = cache.find({m, k, n, threads});
  if (it != cache.end()) return it->second;
  try {
    Runtime& rt = runtime();
    S8Plan p;
    p.a = memory::desc({m, k}, memory::data_type::s8, Tag::ab);
    p.b = memory::desc({k, n}, memory::data_type::s8, Tag::ab);
    p.c = memory::desc({m, n}, memory::data_type::s32, Tag::ab);
    const bool pack_b = m >= kPackPlainMinRows;
    const memory::desc b = pack_b ? memory::desc({k, n}, memory::data_type::s8, Tag::any) : p.b;
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, b, p.c), rt.engine);
    p.matmul = dnnl::matmul(pd);
    // A layout of its own only (gemm:jit, on AVX2, reads b as stored: no copy then).
    if (pack_b && pd.weights_desc() != p.b) p.b_in = make_conversion(p.b, pd.weights_desc());
    return cache.emplace(std::tuple{m, k, n, threads}, std::move(p)).first->second;
  } catch (const dnnl::error& e) {
    MOE_CHECK(false, std::string("oneDNN int8 matmul setup failed: ") + e.what());
  }
}

// Whether oneDNN makes an s8 x s8 -> s32 matmul on this CPU at all.
bool s8_matmul_available() {
  static const bool available = [] {
    try {
      const memory::desc d({16, 16}, memory::data_type::s8, Tag::ab);
      dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(d, d, memory::desc({16, 16}, memory::data_type::s32, Tag::ab)),
          runtime().engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

// Group g's rows of out = float(float(float(sums) * lhs_scale[r]) * rhs_scale), stored or added.
void dequantize_rows(void* out, Dtype out_dtype, const int32_t* sums, const Int8Operands& in, int64_t e,
                     GroupRows g, int64_t N, bool accumulate) {
  const float* rs = in.rhs_scale + (in.rhs_scale_per_column ? e * N : e);
  const int64_t rs_step = in.rhs_scale_per_column ? 1 : 0;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < g.live; ++r) {
    const int64_t row = g.row0 + r;
    const float ls = in.lhs_scale[row];
    const int32_t* s = sums + r * N;
    if (out_dtype == Dtype::bf16) {
      bf16_t* o = static_cast<bf16_t*>(out) + row * N;
      for (int64_t n = 0; n < N; ++n) o[n] = f32_to_bf16(float(float(s[n]) * ls) * rs[n * rs_step]);
    } else {
      float* o = static_cast<float*>(out) + row * N;
      for (int64_t n = 0; n < N; ++n) {
        const float v = float(float(s[n]) * ls) * rs[n * rs_step];
        o[n] = accumulate ? o[n] + v : v;
      }
    }
  }
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::all:
      return "any";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
  }
  return "unknown";
}

}  // namespace

// Two weight parts are two products per group, into column blocks of out (nn) or summed (nt: the
// second accumulates, right after the first, while the group's rows of out are in cache).
void grouped_gemm_nn(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* lhs,
                     ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N) {
  check_groups(groups, Kd, N);
  const int64_t part_cols = N / rhs.parts();
  std::vector<SliceJob> sliced;
  for (int64_t e = 0; e < groups.experts; ++e) {
    const GroupRows g = group_rows(groups, e);
    const bool slice = g.live > 0 && Kd > 0 && column_slices_pay(Form::nn, g.live, in_dtype, out_dtype);
    const void* a = at(lhs, g.row0 * Kd, in_dtype);
    Dtype a_dtype = in_dtype;
    // Both weight parts multiply the same rows: where bf16 is widened (matmul_in_f32), widen them once.
    if (!slice && rhs.parts() > 1 && g.live > 0 && compute_dtype(in_dtype, in_dtype) != in_dtype) {
      a = widened_bf16(kWidenA, a, g.live, Kd, Kd);
      a_dtype = Dtype::f32;
    }
    for (int p = 0; p < rhs.parts(); ++p) {
      const void* b = at(rhs.part(p), e * Kd * part_cols, in_dtype);
      if (slice) {
        sliced.push_back({a, b, at(out, g.row0 * N, out_dtype), g.live, Kd, part_cols, p * part_cols, false});
      } else {
        matmul(at(out, g.row0 * N + p * part_cols, out_dtype), out_dtype, a, a_dtype, b, in_dtype, g.live, Kd,
               part_cols, false, false, {.ldc = N});
      }
    }
    zero_padding_rows(out, out_dtype, g, N);
  }
  split_columns(sliced, {false, N, Kd, part_cols, N, in_dtype, out_dtype});
}

void grouped_gemm_nt(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* dout,
                     ExpertWeights rhs, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
                     bool accumulate) {
  check_groups(groups, Kd, N);
  const int64_t part_cols = N / rhs.parts();
  std::vector<SliceJob> sliced;
  for (int64_t e = 0; e < groups.experts; ++e) {
    const GroupRows g = group_rows(groups, e);
    // A part of float32 dout read in place has rows N apart, not part_cols, and below gemm:jit's row
    // count oneDNN's float32 matmul then takes a path that does not pack it: such a group's part is
    // copied to a contiguous scratch first (137 x 2048 x [1408 | 1408], E = 60: 0.65 -> 0.82 of a dense
    // GEMM; 512 rows +1-2 %; 128 rows, sliced before, -2 %; 1024 rows 0.91 in place, 0.84 copied).
    const bool contiguous_parts = rhs.parts() > 1 && in_dtype == Dtype::f32 && g.live < kGemmJitMinRows;
    const bool slice =
        g.live > 0 && N > 0 && !contiguous_parts &&
        column_slices_pay(Form::nt, g.live, in_dtype, out_dtype, accumulate || rhs.parts() > 1);
    void* c = at(out, g.row0 * Kd, out_dtype);
    for (int p = 0; p < rhs.parts(); ++p) {
      const void* a = at(dout, g.row0 * N + p * part_cols, in_dtype);  // (live, part_cols), N apart
      const void* b = at(rhs.part(p), e * Kd * part_cols, in_dtype);
      if (slice) {
        sliced.push_back({a, b, c, g.live, part_cols, Kd, 0, accumulate || p > 0});
      } else if (contiguous_parts) {
        matmul(c, out_dtype, contiguous_f32(a, g.live, part_cols, N), in_dtype, b, in_dtype, g.live,
               part_cols, Kd, false, true, {}, accumulate || p > 0);
      } else {
        matmul(c, out_dtype, a, in_dtype, b, in_dtype, g.live, part_cols, Kd, false, true, {.lda = N},
               accumulate || p > 0);
      }
    }
    zero_padding_rows(out, out_dtype, g, Kd);
  }
  split_columns(sliced, {true, Kd, N, 0, Kd, in_dtype, out_dtype});
}

void grouped_gemm_tn(const GemmThresholds& /*k*/, void* drhs, Dtype out_dtype, const void* lhs,
                     const void* dout, Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t N,
                     int64_t ld_dout) {
  check_groups(groups, Kd, N);
  gemm_detail::zero_unreached_gradients(drhs, out_dtype, groups, Kd, N);
  for (int64_t e = 0; e < groups.experts; ++e) {
    const GroupRows g = group_rows(groups, e);
    if (g.live == 0) continue;
    const int64_t k =
        groups.zero_padding
            ? std::min(g.rows, (g.live + kTnReductionAlign - 1) / kTnReductionAlign * kTnReductionAlign)
            : g.live;
    const void* b = at(dout, g.row0 * ld_dout, in_dtype);  // (k, N), ld_dout apart
    int64_t ldb = ld_dout;
    // The same float32 path as nt's strided parts (grouped_gemm_nt): 137 x 2048 x 1408 with dout 2816
    // apart (dw1 / dw3 from dh's halves) 0.92 of a dense GEMM in place.
    if (in_dtype == Dtype::f32 && ld_dout != N && k > 0 && g.live < kGemmJitMinRows) {
      b = contiguous_f32(b, k, N, ld_dout);
      ldb = N;
    }
    matmul(at(drhs, e * Kd * N, out_dtype), out_dtype, at(lhs, g.row0 * Kd, in_dtype), in_dtype, b, in_dtype,
           Kd, k, N, true, false, {.ldb = ldb});
  }
}

void grouped_gemm_nn_s8(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, Int8Operands in,
                        GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  MOE_CHECK(out_dtype == Dtype::f32 || out_dtype == Dtype::bf16, "onednn nn_s8: float32 or bfloat16 out");
  MOE_CHECK(!accumulate || out_dtype == Dtype::f32, "onednn nn_s8: accumulates in a float32 out only");
  check_groups(groups, Kd, N);
  Runtime& rt = runtime();
  for (int64_t e = 0; e < groups.experts; ++e) {
    const GroupRows g = group_rows(groups, e);
    if (!accumulate) zero_padding_rows(out, out_dtype, g, N);  // left alone when accumulating
    if (g.live == 0 || N == 0) continue;
    auto* sums = static_cast<int32_t*>(scratch(kScratchC, size_t(g.live * N) * sizeof(int32_t)));
    if (Kd == 0) {
      std::memset(sums, 0, size_t(g.live * N) * sizeof(int32_t));
    } else {
      const S8Plan& p = s8_plan(g.live, Kd, N);
      memory a(p.a, rt.engine, const_cast<int8_t*>(in.lhs + g.row0 * Kd));
      memory b =
          stage_in(p.b_in, memory(p.b, rt.engine, const_cast<int8_t*>(in.rhs + e * Kd * N)), kScratchB);
      memory c(p.c, rt.engine, sums);
      p.matmul.execute(rt.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
      rt.stream.wait();
    }
    dequantize_rows(out, out_dtype, sums, in, e, g, N, accumulate);
  }
}

void dense_gemm(const GemmThresholds& /*k*/, void* out, Dtype out_dtype, const void* a, Dtype a_dtype,
                const void* b, Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b) {
  matmul(out, out_dtype, a, a_dtype, b, b_dtype, R, Kd, N, trans_a, trans_b);
}

std::string gemm_library_version() {
  apply_isa_cap();
  const dnnl_version_t* v = dnnl::version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " " + isa_name(dnnl::get_effective_cpu_isa()) +
         (bf16_matmul_native() ? "" : " (bf16 computed in float32)");
}

std::string unavailable() {
  return "";
}

bool bf16_arithmetic() {
  return bf16_matmul_native();
}

// Where oneDNN has brgemm (AVX-512), the products the block's small and mid-sized groups make are
// brgemm's, whose sums do not depend on the thread count; on AVX2 every float32 product is gemm:jit's,
// whose do (a 131 x 64 x 20 product differs between 1 and 3 threads on a Zen 3).
bool same_sums_on_any_thread_count() {
  return bf16_matmul_native();
}

bool auto_candidate() {
  return true;
}

// oneDNN 2.6's AMX brgemm dies with SIGILL on bf16 products at sizes off its tiles, on a 16-core Emerald
// Rapids Xeon (2026-11-27): m x k x n = 65 x 63 x 17 and 63 x 63 x 17 with B transposed (16 threads; both
// ran at 2), then a dense 65 x 63 x 17 (k = 63, n = 17) at 2 threads too. Its products with k and n
// multiples of 32 (every block shape's: H, M and 2M are) ran at 16 threads. So where oneDNN runs AMX its
// rows take bf16 x bf16 products only when both sizes that are fixed for the call (the reduction and the
// output width of every product but tn's, whose reduction is a group's rows; tn's Kd and N then) are
// whole tiles; the others go to the table's next row (the amx kernel, which ran every test case there).
std::string amx_odd_size_refusal(const GemmCall& call, bool amx) {
  // Where oneDNN runs AMX it multiplies bf16 as bf16 (mixed dtypes it computes in float32).
  if (!amx || call.in_dtype != Dtype::bf16 || call.b_dtype != Dtype::bf16) return "";
  const int64_t per_part = call.form == GemmForm::dense ? call.N : call.N / call.parts;
  constexpr int64_t kTile = 32;  // bf16 elements of a 64-byte tile row
  if (call.Kd % kTile == 0 && per_part % kTile == 0) return "";
  return "oneDNN 2.6's AMX brgemm dies with SIGILL on bf16 products off its tiles (Kd = " +
         std::to_string(call.Kd) + ", N = " + std::to_string(per_part) + "; it takes multiples of 32)";
}

std::string supports(const GemmCall& call, const GemmThresholds& /*k*/) {
  if (call.form != GemmForm::nn_s8 && call.form != GemmForm::nn_s8_swiglu) {
    if (std::string why = gemm_detail::float_operands(call); !why.empty()) return why;
    return amx_odd_size_refusal(call, amx_brgemm());
  }
  if (!s8_matmul_available()) return "oneDNN makes no s8 x s8 -> s32 matmul on this CPU";
  if (!s8_exact())
    return std::string("oneDNN's int8 sums at ") + isa_name(dnnl::get_effective_cpu_isa()) +
           " saturate (vpmaddubsw of src shifted to u8), not exact: it needs VNNI or AMX";
  return "";
}

}  // namespace moe::onednn

#endif  // MOE_HAVE_ONEDNN
