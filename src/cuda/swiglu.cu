#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/swiglu.h"
#include "cuda/values.cuh"

namespace moe::cuda {
namespace {

__device__ __forceinline__ bool live(const int32_t* row_assignment, int64_t r) {
  return !row_assignment || row_assignment[r] >= 0;
}
__device__ __forceinline__ float weight(const float* row_weight, int64_t r) {
  return row_weight ? row_weight[r] : 1.0f;
}

// Rows walk the grid, V elements of a row per thread per step (one aligned access each).
template <int V, typename G, typename H>
__global__ void swiglu_forward_kernel(G* __restrict__ g, const H* __restrict__ h, int64_t M, RowsOf rows) {
  for (int64_t r = blockIdx.x; r < rows.rows; r += gridDim.x) {
    const bool is_live = live(rows.row_assignment, r);
    const float w = weight(rows.row_weight, r);
    for (int64_t m = int64_t(threadIdx.x) * V; m < M; m += int64_t(blockDim.x) * V) {
      float a[V] = {}, b[V] = {}, out[V];
      if (is_live) {
        load<V>(a, h + r * 2 * M + m);
        load<V>(b, h + r * 2 * M + M + m);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) out[i] = is_live ? a[i] * sigmoid(a[i]) * b[i] * w : 0.0f;
      store<V>(g + r * M + m, out);
    }
  }
}

template <int V, typename D, typename G, typename H>
__global__ void swiglu_backward_kernel(D* __restrict__ dh, const G* __restrict__ dg, const H* __restrict__ h,
                                       int64_t M, RowsOf rows) {
  for (int64_t r = blockIdx.x; r < rows.rows; r += gridDim.x) {
    const bool is_live = live(rows.row_assignment, r);
    const float w = weight(rows.row_weight, r);
    for (int64_t m = int64_t(threadIdx.x) * V; m < M; m += int64_t(blockDim.x) * V) {
      float a[V] = {}, b[V] = {}, d[V] = {}, da[V], db[V];
      if (is_live) {
        load<V>(a, h + r * 2 * M + m);
        load<V>(b, h + r * 2 * M + M + m);
        load<V>(d, dg + r * M + m);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float s = is_live ? sigmoid(a[i]) : 0.0f, di = is_live ? d[i] * w : 0.0f;
        da[i] = is_live ? di * b[i] * s * (1.0f + a[i] * (1.0f - s)) : 0.0f;
        db[i] = is_live ? di * a[i] * s : 0.0f;
      }
      store<V>(dh + r * 2 * M + m, da);
      store<V>(dh + r * 2 * M + M + m, db);
    }
  }
}

unsigned row_blocks(int64_t rows) {
  return unsigned(rows < 16384 ? rows : 16384);
}

}  // namespace

void swiglu_forward(Tensor& g, const Tensor& h, int64_t M, const RowsOf& rows) {
  if (rows.rows * M == 0) return;
  visit_float(g.dtype(), "swiglu_forward", [&](auto g_tag) {
    visit_float(h.dtype(), "swiglu_forward", [&](auto h_tag) {
      using G = decltype(g_tag);
      using H = decltype(h_tag);
      visit_width(M, {g.raw(), h.raw()}, [&](auto v) {
        swiglu_forward_kernel<v.value, G, H>
            <<<row_blocks(rows.rows), threads_for_row(M, v.value), 0, device().stream>>>(
                static_cast<G*>(g.raw()), static_cast<const H*>(h.raw()), M, rows);
      });
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(Tensor& dh, const Tensor& dg, const Tensor& h, int64_t M, const RowsOf& rows) {
  if (rows.rows * M == 0) return;
  visit_float(dh.dtype(), "swiglu_backward", [&](auto d_tag) {
    visit_float(dg.dtype(), "swiglu_backward", [&](auto g_tag) {
      visit_float(h.dtype(), "swiglu_backward", [&](auto h_tag) {
        using D = decltype(d_tag);
        using G = decltype(g_tag);
        using H = decltype(h_tag);
        visit_width(M, {dh.raw(), dg.raw(), h.raw()}, [&](auto v) {
          swiglu_backward_kernel<v.value, D, G, H>
              <<<row_blocks(rows.rows), threads_for_row(M, v.value), 0, device().stream>>>(
                  static_cast<D*>(dh.raw()), static_cast<const G*>(dg.raw()), static_cast<const H*>(h.raw()),
                  M, rows);
        });
      });
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
