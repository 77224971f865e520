#include "runtime/cuda/gemm.h"

#include "core/error.h"

#define CUBLASLT_CHECK(call) CUBLAS_CHECK(call)

namespace nvllm {

Gemm::Gemm(size_t workspace_bytes) : workspace_(workspace_bytes) { CUBLASLT_CHECK(cublasLtCreate(&handle_)); }

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (handle_) cublasLtDestroy(handle_);
}

// cuBLASLt is column-major. A row-major [rows, cols] matrix is a column-major [cols, rows] one,
// so y^T [n, m] = w [n, k] · x^T [k, m]: A = w seen as column-major [k, n] and transposed,
// B = x seen as column-major [k, m], C = y seen as column-major [n, m].
const Gemm::Plan& Gemm::plan(int m, int n, int k, bool out_f32) {
  const auto key = std::make_tuple(m, n, k, out_f32);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;

  Plan p;
  CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, k));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_f32 ? CUDA_R_32F : CUDA_R_16BF, n, m, n));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = workspace_.bytes();
  CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                      sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    fail("cuBLASLt found no algorithm for a ", m, "x", n, "x", k, " bf16 GEMM (",
         out_f32 ? "fp32" : "bf16", " output); this GPU or cuBLAS version does not support the model's shapes");
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::matmul(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, int m, int n, int k, bool out_f32,
                  cudaStream_t stream) {
  if (m <= 0) return;
  const Plan& p = plan(m, n, k, out_f32);
  const float alpha = 1.0f, beta = 0.0f;
  CUBLASLT_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                                workspace_.get(), workspace_.bytes(), stream));
}

}  // namespace nvllm
