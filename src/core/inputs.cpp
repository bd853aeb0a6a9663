#include "moe/inputs.h"

#include <cstring>

#include "moe/rng.h"

namespace moe {
namespace {

// Below this many elements a parallel region costs more than the work it shares.
constexpr int64_t kParallelMin = int64_t(1) << 15;

// Elements [0, n) of p are N(0, 1) values offset + i of stream `key`, each narrowed by `to`.
template <class T, class Narrow>
void fill_normal_as(T* p, int64_t n, uint64_t key, int64_t offset, Narrow to) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] = to(float(random_normal(key, uint64_t(offset + i))));
}

// Element i of `t` is N(0, 1) value offset + i of stream `key`: counter-based, so neither the schedule
// nor which rank draws a slice can change it.
void fill_normal(Tensor& t, uint64_t key, int64_t offset) {
  const int64_t n = t.numel();
  if (t.dtype() == Dtype::f32)
    return fill_normal_as(t.data<float>(), n, key, offset, [](float v) { return v; });
  if (t.dtype() == Dtype::bf16) return fill_normal_as(t.data<bf16_t>(), n, key, offset, f32_to_bf16);
  if (t.dtype() == Dtype::f16) return fill_normal_as(t.data<f16_t>(), n, key, offset, f32_to_f16);
  MOE_CHECK(false, std::string("inputs are float32, bfloat16 or float16, not ") + dtype_name(t.dtype()));
}

// Rows [row_begin, row_begin + shape[0]) of the stream's tensor whose rows hold numel/shape[0] elements.
Tensor normal_tensor(const MoeConfig& cfg, RngStream stream, std::vector<int64_t> shape,
                     int64_t row_begin = 0) {
  Tensor t(cfg.dtype, std::move(shape));
  const int64_t row = t.dim(0) == 0 ? 0 : t.numel() / t.dim(0);
  fill_normal(t, derive_key(cfg.seed, stream), row_begin * row);
  return t;
}

// Copies n elements, converting when the dtypes differ (narrowing rounds to nearest even).
void copy_elements(Tensor& dst, int64_t dst_off, const Tensor& src, int64_t src_off, int64_t n) {
  if (dst.dtype() == src.dtype()) {
    const size_t es = dtype_size(src.dtype());
    std::memcpy(static_cast<char*>(dst.raw()) + size_t(dst_off) * es,
                static_cast<const char*>(src.raw()) + size_t(src_off) * es, size_t(n) * es);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst.set(dst_off + i, src.get(src_off + i));
}

// An output that already has the right shape is written in place (in its own dtype) so callers can
// reuse buffers; anything else is reallocated in the source dtype.
void ensure_shape(Tensor& t, Dtype dtype, const std::vector<int64_t>& shape) {
  if (t.shape() != shape) t = Tensor(dtype, shape);
}

std::vector<int64_t> with_last_dim(std::vector<int64_t> shape, int64_t last) {
  shape.back() = last;
  return shape;
}

}  // namespace

MoeInputs make_inputs(const MoeConfig& cfg) {
  return make_inputs_slice(cfg, 0, cfg.tokens, 0, cfg.experts);
}

MoeInputs make_inputs_slice(const MoeConfig& cfg, int64_t token_begin, int64_t tokens, int64_t expert_begin,
                            int64_t experts) {
  MOE_CHECK(token_begin >= 0 && tokens >= 0 && token_begin + tokens <= cfg.tokens,
            "token slice out of range");
  MOE_CHECK(expert_begin >= 0 && experts >= 0 && expert_begin + experts <= cfg.experts,
            "expert slice out of range");
  const int64_t T = tokens, H = cfg.hidden, M = cfg.mlp_dim, E = experts, S = cfg.shared_expert_dim;
  MoeInputs in;
  in.x = normal_tensor(cfg, kStreamX, {T, H}, token_begin);
  in.w1 = normal_tensor(cfg, kStreamW1, {E, H, M}, expert_begin);
  in.w3 = normal_tensor(cfg, kStreamW3, {E, H, M}, expert_begin);
  in.w2 = normal_tensor(cfg, kStreamW2, {E, M, H}, expert_begin);
  concat_last_dim(in.w13, in.w1, in.w3);
  // S == 0 still gives well-formed (H, 0) / (0, H) tensors, so shape code needs no special case.
  in.sw1 = normal_tensor(cfg, kStreamSharedW1, {H, S});
  in.sw3 = normal_tensor(cfg, kStreamSharedW3, {H, S});
  in.sw2 = normal_tensor(cfg, kStreamSharedW2, {S, H});
  concat_last_dim(in.sw13, in.sw1, in.sw3);
  // Both forms of the first projection: inputs are shared by every impl of a run (fused ones read q13).
  if (cfg.quant_mode == QuantMode::int8_routed_prequant) {
    in.q13 = quantize_weight(in.w13.raw(), cfg.dtype, E, H, 2 * M);
    in.q1 = quantize_weight(in.w1.raw(), cfg.dtype, E, H, M);
    in.q3 = quantize_weight(in.w3.raw(), cfg.dtype, E, H, M);
    in.q2 = quantize_weight(in.w2.raw(), cfg.dtype, E, M, H);
  }
  return in;
}

QuantizedWeight quantize_weight(ExpertWeights w, Dtype dt, int64_t E, int64_t Kd, int64_t N) {
  QuantizedWeight qw{Tensor(Dtype::s8, {E, Kd, N}), Tensor(Dtype::s8, {E, N, Kd}), Tensor(Dtype::f32, {E})};
  cpu::quantize_experts(qw.q.data<int8_t>(), qw.scale.data<float>(), w, dt, E, Kd, N);
  cpu::quantize_experts(qw.qt.data<int8_t>(), qw.scale.data<float>(), w, dt, E, Kd, N, /*transposed=*/true);
  return qw;
}

void concat_last_dim(Tensor& w13, const Tensor& w1, const Tensor& w3) {
  MOE_CHECK(!w1.shape().empty() && w1.shape() == w3.shape(), "concat_last_dim: w1 and w3 shapes differ");
  MOE_CHECK(w1.dtype() == w3.dtype(), "concat_last_dim: w1 and w3 dtypes differ");
  const int64_t N = w1.shape().back();
  ensure_shape(w13, w1.dtype(), with_last_dim(w1.shape(), 2 * N));
  const int64_t rows = N == 0 ? 0 : w1.numel() / N;
#pragma omp parallel for schedule(static) if (rows * N >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    copy_elements(w13, r * 2 * N, w1, r * N, N);
    copy_elements(w13, r * 2 * N + N, w3, r * N, N);
  }
}

void split_last_dim(Tensor& d1, Tensor& d3, const Tensor& d13) {
  MOE_CHECK(!d13.shape().empty() && d13.shape().back() % 2 == 0, "split_last_dim: last dim must be even");
  const int64_t N = d13.shape().back() / 2;
  const std::vector<int64_t> half = with_last_dim(d13.shape(), N);
  ensure_shape(d1, d13.dtype(), half);
  ensure_shape(d3, d13.dtype(), half);
  const int64_t rows = N == 0 ? 0 : d13.numel() / (2 * N);
#pragma omp parallel for schedule(static) if (rows * N >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    copy_elements(d1, r * N, d13, r * 2 * N, N);
    copy_elements(d3, r * N, d13, r * 2 * N + N, N);
  }
}

MoeInputs to_memory(const MoeInputs& in, MemorySpace& memory) {
  auto quantized = [&](const QuantizedWeight& q) {
    return QuantizedWeight{q.q.to_memory(memory), q.qt.to_memory(memory), q.scale.to_memory(memory)};
  };
  return MoeInputs{in.x.to_memory(memory),   in.w1.to_memory(memory),  in.w3.to_memory(memory),
                   in.w2.to_memory(memory),  in.w13.to_memory(memory), in.sw1.to_memory(memory),
                   in.sw3.to_memory(memory), in.sw2.to_memory(memory), in.sw13.to_memory(memory),
                   quantized(in.q13),        quantized(in.q1),         quantized(in.q3),
                   quantized(in.q2)};
}

MoeGrads make_grads(const MoeConfig& cfg, MemorySpace& memory) {
  const int64_t T = cfg.tokens, H = cfg.hidden, M = cfg.mlp_dim, E = cfg.experts, S = cfg.shared_expert_dim;
  const Dtype dt = cfg.dtype;
  return MoeGrads{
      .dx = Tensor(dt, {T, H}, memory),
      .dw1 = Tensor(dt, {E, H, M}, memory),
      .dw3 = Tensor(dt, {E, H, M}, memory),
      .dw2 = Tensor(dt, {E, M, H}, memory),
      .dsw1 = Tensor(dt, {H, S}, memory),
      .dsw3 = Tensor(dt, {H, S}, memory),
      .dsw2 = Tensor(dt, {S, H}, memory),
  };
}

MoeGrads to_host(const MoeGrads& g) {
  return MoeGrads{g.dx.to_host(),   g.dw1.to_host(),  g.dw3.to_host(), g.dw2.to_host(),
                  g.dsw1.to_host(), g.dsw3.to_host(), g.dsw2.to_host()};
}

}  // namespace moe
