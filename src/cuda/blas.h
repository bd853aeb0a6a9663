// cuBLAS for the cuda backend's GEMMs: one handle on the backend's stream, owned by the backend and
// made on first use (the backend is registered on machines without a GPU, where nothing may touch
// the runtime). Matrices are row-major as everywhere in moe-bench; the column-major call is derived
// here once: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
//
// Lanes: a grouped GEMM issues one GEMM per expert, each too small to fill a Hopper GPU alone at a few
// hundred rows; between fork() and join() gemm_on(lane, ...) spreads them over side streams (each with
// its own handle, so no two concurrent GEMMs share a workspace) that start after the main stream's
// work so far and that the main stream waits for at join().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "moe/dtype.h"

struct cublasContext;

namespace moe::cuda {

// A row-major operand: element (i, j) of the stored matrix is p[i * ld + j]; trans multiplies its
// transpose.
struct Operand {
  const void* p;
  Dtype dtype;
  int64_t ld;
  bool trans = false;
};

class Blas {
 public:
  Blas() = default;
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas();

  // Makes the handles and `lanes` side streams now (ops call it when they are made, so no timed call
  // pays for it). Lanes only grow.
  void ensure_ready(int lanes = 0);

  // c (m, n) row-major with leading dimension ldc, of c_dtype = op(a) (m, k) @ op(b) (k, n) + beta c,
  // float32 accumulation (never TF32: float32 runs multiply in float32). a and b share a dtype;
  // c is that dtype or float32. REQUIRES k > 0 where m, n > 0 (an empty sum is the caller's zero).
  void gemm(void* c, Dtype c_dtype, int64_t ldc, const Operand& a, const Operand& b, int64_t m, int64_t n,
            int64_t k, float beta = 0.0f);

  // Between fork(n) and join(): gemm_on(i, ...) runs on lane i % n, in issue order within a lane.
  void fork(int lanes);
  void gemm_on(int64_t lane, void* c, Dtype c_dtype, int64_t ldc, const Operand& a, const Operand& b,
               int64_t m, int64_t n, int64_t k, float beta = 0.0f);
  void join();

 private:
  struct Lane {
    cublasContext* handle = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
  };
  void gemm_with(cublasContext* handle, void* c, Dtype c_dtype, int64_t ldc, const Operand& a,
                 const Operand& b, int64_t m, int64_t n, int64_t k, float beta);

  cublasContext* handle_ = nullptr;
  std::vector<Lane> lanes_;
  cudaEvent_t forked_ = nullptr;
  int active_lanes_ = 0;  // lanes in use since fork(); 0 outside fork/join
};

}  // namespace moe::cuda
