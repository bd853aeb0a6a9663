#include <cublas_v2.h>

#include <string>

#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/device.h"

namespace moe::cuda {
namespace {

#define CUBLAS_CHECK(expr)                                                            \
  do {                                                                                \
    const cublasStatus_t moe_cublas_status_ = (expr);                                 \
    MOE_CHECK(moe_cublas_status_ == CUBLAS_STATUS_SUCCESS,                            \
              std::string(#expr) + ": " + cublasGetStatusString(moe_cublas_status_)); \
  } while (0)

cudaDataType_t cuda_type(Dtype dt) {
  switch (dt) {
    case Dtype::f32:
      return CUDA_R_32F;
    case Dtype::bf16:
      return CUDA_R_16BF;
    case Dtype::f16:
      return CUDA_R_16F;
    case Dtype::f64:
    case Dtype::s8:
    case Dtype::s32:
    case Dtype::s64:
      break;
  }
  MOE_CHECK(false, std::string("cuda GEMMs multiply float32, bfloat16 or float16, not ") + dtype_name(dt));
}

}  // namespace

// The handle lives as long as the process-wide backend that owns it; by the time static destructors
// run, the CUDA runtime has torn itself down, so the handle is left to process exit.
Blas::~Blas() = default;

void Blas::ensure_ready(int lanes) {
  MOE_CHECK(device().available, "cuBLAS asked for without a CUDA device");
  auto make_handle = [](cudaStream_t stream) {
    cublasContext* handle = nullptr;
    CUBLAS_CHECK(cublasCreate(&handle));
    CUBLAS_CHECK(cublasSetStream(handle, stream));
    // Float32 runs multiply in float32: no TF32 shortcut.
    CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    return handle;
  };
  if (!handle_) {
    handle_ = make_handle(device().stream);
    CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
  }
  while (int(lanes_.size()) < lanes) {
    Lane lane;
    CUDA_CHECK(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&lane.done, cudaEventDisableTiming));
    lane.handle = make_handle(lane.stream);
    lanes_.push_back(lane);
  }
}

void Blas::gemm(void* c, Dtype c_dtype, int64_t ldc, const Operand& a, const Operand& b, int64_t m, int64_t n,
                int64_t k, float beta) {
  ensure_ready();
  gemm_with(handle_, c, c_dtype, ldc, a, b, m, n, k, beta);
}

void Blas::fork(int lanes) {
  MOE_CHECK(active_lanes_ == 0 && lanes >= 1, "Blas::fork: one fork at a time, at least one lane");
  ensure_ready(lanes);
  active_lanes_ = lanes;
  CUDA_CHECK(cudaEventRecord(forked_, device().stream));
  for (int i = 0; i < lanes; ++i) CUDA_CHECK(cudaStreamWaitEvent(lanes_[size_t(i)].stream, forked_, 0));
}

void Blas::gemm_on(int64_t lane, void* c, Dtype c_dtype, int64_t ldc, const Operand& a, const Operand& b,
                   int64_t m, int64_t n, int64_t k, float beta) {
  MOE_CHECK(active_lanes_ > 0, "Blas::gemm_on outside fork/join");
  gemm_with(lanes_[size_t(lane % active_lanes_)].handle, c, c_dtype, ldc, a, b, m, n, k, beta);
}

void Blas::join() {
  MOE_CHECK(active_lanes_ > 0, "Blas::join without fork");
  for (int i = 0; i < active_lanes_; ++i) {
    CUDA_CHECK(cudaEventRecord(lanes_[size_t(i)].done, lanes_[size_t(i)].stream));
    CUDA_CHECK(cudaStreamWaitEvent(device().stream, lanes_[size_t(i)].done, 0));
  }
  active_lanes_ = 0;
}

void Blas::gemm_with(cublasContext* handle, void* c, Dtype c_dtype, int64_t ldc, const Operand& a,
                     const Operand& b, int64_t m, int64_t n, int64_t k, float beta) {
  if (m == 0 || n == 0) return;
  MOE_CHECK(k > 0, "cuda gemm: an empty sum (k = 0) is the caller's to zero");
  MOE_CHECK(a.dtype == b.dtype, "cuda gemm: both operands in one dtype");
  const float alpha = 1.0f;
  // Column-major: C^T (n, m) = op(B)^T (n, k) @ op(A)^T (k, m). A row-major stored matrix read
  // column-major is its transpose, so each operand keeps its own transpose flag.
  CUBLAS_CHECK(cublasGemmEx(handle, b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, a.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                            int(n), int(m), int(k), &alpha, b.p, cuda_type(b.dtype), int(b.ld), a.p,
                            cuda_type(a.dtype), int(a.ld), &beta, c, cuda_type(c_dtype), int(ldc),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace moe::cuda
