#include "cpu/ops/combine.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/ops/vec_math.h"

namespace moe::cpu {

CombineKind combine_kind(const MoeConfig& cfg) {
  return cfg.uses_scatter_combine() ? CombineKind::scatter : CombineKind::unsort;
}

void add_rows_to_tokens(const TokenSums& sums, const void* rows_in, Dtype dt, const HostPlan& plan, int64_t H,
                        const float* row_weight) {
  const size_t elem = dtype_size(dt);
  auto* rows = static_cast<const char*>(rows_in);
  float* acc = sums.acc.data<float>();  // (T, H)
  const bool separate_out = !sums.out.same_storage(sums.acc);
  const Dtype out_dt = sums.out.dtype();
  const size_t out_elem = dtype_size(out_dt);
  auto* out = static_cast<char*>(sums.out.raw());  // (T, H)
  // A token's first row (in buffer order) starts its sum instead of adding to a zeroed accumulator, and
  // its last row stores the finished sum in the output's dtype: no pass to zero the accumulator and
  // none to convert it (the same sums in the same order as zeroing, adding and converting).
  enum : uint8_t { kFirst = 1, kLast = 2 };
  std::vector<uint8_t> touch(size_t(plan.rows), 0);
  std::vector<uint8_t> has_rows(size_t(plan.tokens), 0);
  for (int64_t r = 0; r < plan.rows; ++r) {
    const int32_t t = plan.row_token(r);
    if (t < 0) continue;
    if (!has_rows[size_t(t)]) touch[size_t(r)] |= kFirst;
    has_rows[size_t(t)] = 1;
  }
  std::fill(has_rows.begin(), has_rows.end(), 0);
  for (int64_t r = plan.rows - 1; r >= 0; --r) {
    const int32_t t = plan.row_token(r);
    if (t < 0) continue;
    if (!has_rows[size_t(t)]) touch[size_t(r)] |= kLast;
    has_rows[size_t(t)] = 1;
  }
#pragma omp parallel
  {
    // Column slices are multiples of 16 floats so threads never share a cache line of `acc`.
    const int n_threads = omp_get_num_threads();
    const int64_t slice = (H / n_threads + 15) / 16 * 16;
    const int64_t c0 = std::min<int64_t>(H, slice * omp_get_thread_num());
    const int64_t c1 = omp_get_thread_num() == n_threads - 1 ? H : std::min<int64_t>(H, c0 + slice);
    const int64_t width = c1 - c0;
    std::vector<float> scratch(static_cast<size_t>(std::max<int64_t>(width, 1))),
        sum(static_cast<size_t>(std::max<int64_t>(width, 1)));
    bool streamed = false;
    for (int64_t r = 0; r < plan.rows && width > 0; ++r) {
      const int32_t t = plan.row_token(r);
      if (t < 0) continue;
      const float w = row_weight ? row_weight[r] : 1.0f;
      const float* src =
          load_row_f32(scratch.data(), rows + (size_t(r) * size_t(H) + size_t(c0)) * elem, dt, width);
      float* dst = acc + int64_t(t) * H + c0;
      const bool starts = (touch[size_t(r)] & kFirst) && !sums.acc_holds_start;
      if (separate_out && (touch[size_t(r)] & kLast)) {
        float* s = sum.data();
#pragma omp simd
        for (int64_t h = 0; h < width; ++h) s[h] = (starts ? 0.0f : dst[h]) + w * src[h];
        char* o = out + (size_t(t) * size_t(H) + size_t(c0)) * out_elem;
        // Nothing reads the output in this pass: whole lines leave unfetched.
        if (streams_bf16_rows(out_dt, width, o)) {
          stream_row_bf16(reinterpret_cast<bf16_t*>(o), s, width);
          streamed = true;
        } else {
          store_row(o, out_dt, s, width);
        }
      } else if (starts) {
#pragma omp simd
        for (int64_t h = 0; h < width; ++h) dst[h] = 0.0f + w * src[h];
      } else {
#pragma omp simd
        for (int64_t h = 0; h < width; ++h) dst[h] += w * src[h];
      }
    }
    // Tokens no row reached: their start (or zero).
    for (int64_t t = 0; t < plan.tokens && width > 0; ++t) {
      if (has_rows[size_t(t)]) continue;
      float* dst = acc + t * H + c0;
      if (!sums.acc_holds_start) std::fill(dst, dst + width, 0.0f);
      if (separate_out) store_row(out + (size_t(t) * size_t(H) + size_t(c0)) * out_elem, out_dt, dst, width);
    }
    if (streamed) end_streams();
  }
}

#if defined(__AVX512BF16__)
// GCC 12's AVX-512 intrinsics pass a self-initialised "undefined" vector as the unused merge operand,
// which -Wmaybe-uninitialized reports wherever they inline.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace {

// One token of gather_rows_to_tokens for bf16 rows and a streamed bf16 output: out (H) = start (or 0)
// + the sum over k of weight[k] * rows[row_of[k]], the same sums in the same order as the general path,
// in one pass that keeps each 32 columns' sum in registers (the general path converts each row to a
// float scratch and adds it to a float sum, three passes over them in L1).
void sum_bf16_rows_streamed(bf16_t* out, const float* start, const char* rows, const int32_t* row_of,
                            const float* weight, int64_t K, int64_t H) {
  for (int64_t h = 0; h < H; h += 32) {
    __m512 lo = start ? _mm512_loadu_ps(start + h) : _mm512_setzero_ps();
    __m512 hi = start ? _mm512_loadu_ps(start + h + 16) : _mm512_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
      if (row_of[k] < 0) continue;
      const __m512 w = _mm512_set1_ps(weight ? weight[k] : 1.0f);
      const __m512i v =
          _mm512_loadu_si512(rows + (size_t(row_of[k]) * size_t(H) + size_t(h)) * sizeof(bf16_t));
      lo = _mm512_add_ps(lo, _mm512_mul_ps(w, bf16_to_f32(_mm512_castsi512_si256(v))));
      hi = _mm512_add_ps(hi, _mm512_mul_ps(w, bf16_to_f32(_mm512_extracti64x4_epi64(v, 1))));
    }
    const __m512bh both = _mm512_cvtne2ps_pbh(hi, lo);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out + h), reinterpret_cast<const __m512i&>(both));
  }
}

}  // namespace
#pragma GCC diagnostic pop
#endif

void gather_rows_to_tokens(const TokenSums& sums, const void* rows_in, Dtype dt, const HostPlan& plan,
                           int64_t H, const float* weight) {
  const int64_t K = plan.topk;
  const size_t elem = dtype_size(dt), out_elem = dtype_size(sums.out.dtype());
  auto* rows = static_cast<const char*>(rows_in);
  auto* out = static_cast<char*>(sums.out.raw());                                // (T, H)
  const float* start = sums.acc_holds_start ? sums.acc.data<float>() : nullptr;  // (T, H) or none
  // No line of the output is read before it is overwritten.
  const bool stream = streams_bf16_rows(sums.out.dtype(), H, out);
  [[maybe_unused]] const bool one_pass = stream && dt == Dtype::bf16;  // sum_bf16_rows_streamed
#pragma omp parallel
  {
    std::vector<float> scratch(static_cast<size_t>(H)), sum(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < plan.tokens; ++t) {
      // A token's rows lie anywhere in the buffer: fetch those of a token kRowsAhead on now.
      for (int64_t k = 0; t + kRowsAhead < plan.tokens && k < K; ++k) {
        const int32_t r = plan.assignment_row[(t + kRowsAhead) * K + k];
        if (r >= 0) prefetch_bytes(rows + size_t(r) * size_t(H) * elem, size_t(H) * elem);
      }
#if defined(__AVX512BF16__)
      if (one_pass) {
        sum_bf16_rows_streamed(reinterpret_cast<bf16_t*>(out + size_t(t) * size_t(H) * out_elem),
                               start ? start + t * H : nullptr, rows, plan.assignment_row + t * K,
                               weight ? weight + t * K : nullptr, K, H);
        continue;
      }
#endif
      if (start)
        std::memcpy(sum.data(), start + t * H, size_t(H) * sizeof(float));
      else
        std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        int32_t r = plan.assignment_row[t * K + k];
        if (r < 0) continue;
        const float w = weight ? weight[t * K + k] : 1.0f;
        const float* src = load_row_f32(scratch.data(), rows + size_t(r) * size_t(H) * elem, dt, H);
#pragma omp simd
        for (int64_t h = 0; h < H; ++h) sum[size_t(h)] += w * src[h];
      }
      char* dst = out + size_t(t) * size_t(H) * out_elem;
      if (stream)
        stream_row_bf16(reinterpret_cast<bf16_t*>(dst), sum.data(), H);
      else
        store_row(dst, sums.out.dtype(), sum.data(), H);
    }
    if (stream) end_streams();
  }
}

void combine_backward(void* dy_rows, Dtype dt, const float* dy, const HostPlan& plan,
                      const RoutingView& routing, int64_t H, CombineKind kind, bool preweighted) {
  const size_t elem = dtype_size(dt);
  auto* dst_rows = static_cast<char*>(dy_rows);
  const bool stream = streams_bf16_rows(dt, H, dst_rows);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < plan.rows; ++r) {
      // Rows read tokens anywhere in dy: fetch the one kRowsAhead rows on now.
      if (r + kRowsAhead < plan.rows && plan.row_assignment[r + kRowsAhead] >= 0)
        prefetch_bytes(dy + int64_t(plan.row_assignment[r + kRowsAhead] / plan.topk) * H,
                       size_t(H) * sizeof(float));
      char* dst = dst_rows + size_t(r) * size_t(H) * elem;
      const int32_t a = plan.row_assignment[r];
      if (a < 0) {
        std::memset(dst, 0, size_t(H) * elem);
        continue;
      }
      float w = 1.0f;
      if (!preweighted) w = kind == CombineKind::scatter ? plan.row_weight[r] : routing.weights[a];
      const float* src = dy + int64_t(a / plan.topk) * H;
      if (stream) {
        stream_scaled_row_bf16(reinterpret_cast<bf16_t*>(dst), src, w, H);
        continue;
      }
#pragma omp simd
      for (int64_t h = 0; h < H; ++h) row[size_t(h)] = w * src[h];
      store_row(dst, dt, row.data(), H);
    }
    if (stream) end_streams();
  }
}

namespace {

class CpuCombine final : public CombineOp {
 public:
  explicit CpuCombine(const OpContext& ctx)
      : kind_(combine_kind(ctx.cfg)), preweighted_(impl_traits(ctx.cfg.impl).preweight) {}

  void forward(const TokenSums& out, const Tensor& y_rows, const DispatchPlan& plan,
               const RoutingTensors& routing) override {
    const HostPlan p = host_view(plan);
    const int64_t H = out.out.dim(1);
    switch (kind_) {
      case CombineKind::scatter:
        add_rows_to_tokens(out, y_rows.raw(), y_rows.dtype(), p, H, preweighted_ ? nullptr : p.row_weight);
        return;
      case CombineKind::unsort:
        gather_rows_to_tokens(out, y_rows.raw(), y_rows.dtype(), p, H,
                              preweighted_ ? nullptr : routing.weights.data<float>());
        return;
    }
  }

  void backward(Tensor& dy_rows, const Tensor& dy, const DispatchPlan& plan,
                const RoutingTensors& routing) override {
    combine_backward(dy_rows.raw(), dy_rows.dtype(), dy.data<float>(), host_view(plan), host_view(routing),
                     dy.dim(1), kind_, preweighted_);
  }

 private:
  CombineKind kind_;
  bool preweighted_;
};

}  // namespace

std::unique_ptr<CombineOp> make_combine_op(const OpContext& ctx) {
  return std::make_unique<CpuCombine>(ctx);
}

}  // namespace moe::cpu
