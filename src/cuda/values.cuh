// Device-side helpers shared by the cuda kernels: float32, bfloat16 and float16 loaded and stored
// through float (narrowing rounds to nearest even), SiLU, and the host's dtype -> element type dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "moe/dtype.h"
#include "moe/status.h"
#include "moe/tensor.h"

namespace moe::cuda {

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ void store(float* dst, float v) {
  *dst = v;
}
__device__ __forceinline__ void store(__nv_bfloat16* dst, float v) {
  *dst = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void store(__half* dst, float v) {
  *dst = __float2half_rn(v);
}

// V consecutive elements through float, in one aligned access (REQUIRES p aligned to V elements).
template <int V, typename T>
struct alignas(V * sizeof(T)) Chunk {
  T v[V];
};
template <int V, typename T>
__device__ __forceinline__ void load(float (&out)[V], const T* p) {
  const Chunk<V, T> c = *reinterpret_cast<const Chunk<V, T>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_float(c.v[i]);
}
template <int V, typename T>
__device__ __forceinline__ void store(T* p, const float (&in)[V]) {
  Chunk<V, T> c;
#pragma unroll
  for (int i = 0; i < V; ++i) store(&c.v[i], in[i]);
  *reinterpret_cast<Chunk<V, T>*>(p) = c;
}

__device__ __forceinline__ float sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

// fn(T{}) with T the element type of a float32, bfloat16 or float16 dtype; `what` names the caller for the
// invariant failure on any other dtype (supports() refuses those before an op is made).
template <class Fn>
void visit_float(Dtype dt, const char* what, Fn&& fn) {
  switch (dt) {
    case Dtype::f32:
      return fn(float{});
    case Dtype::bf16:
      return fn(__nv_bfloat16{});
    case Dtype::f16:
      return fn(__half{});
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string(what) + ": float32, bfloat16 or float16 only, not " + dtype_name(dt));
}

// The address of element `elements` of a tensor (a group's first row, a column half of [gate | up]).
inline const char* at(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.raw()) + size_t(elements) * dtype_size(t.dtype());
}
inline char* at(Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + size_t(elements) * dtype_size(t.dtype());
}

// The widest vector (8, 4 or 1 elements) that divides `width` and keeps every row of every pointer
// aligned for float32 elements, and fn(std::integral_constant<int, V>{}).
template <class Fn>
void visit_width(int64_t width, std::initializer_list<const void*> pointers, Fn&& fn) {
  auto aligned = [&](int v) {
    if (width % v != 0) return false;
    for (const void* p : pointers)
      if (reinterpret_cast<uintptr_t>(p) % (uintptr_t(v) * 4) != 0) return false;
    return true;
  };
  if (aligned(8)) return fn(std::integral_constant<int, 8>{});
  if (aligned(4)) return fn(std::integral_constant<int, 4>{});
  return fn(std::integral_constant<int, 1>{});
}

// Threads for a block that walks one row of `width` elements V at a time.
inline int threads_for_row(int64_t width, int v) {
  const int64_t lanes = (width / v + 31) / 32 * 32;
  return int(lanes < 32 ? 32 : (lanes > 256 ? 256 : lanes));
}

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 1 ? 1 : (blocks > 8192 ? 8192 : blocks));
}

}  // namespace moe::cuda
