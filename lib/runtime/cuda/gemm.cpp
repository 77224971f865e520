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

  p.algo = bucket_algo(p, m, n, k, out_f32);
  return plans_.emplace(key, p).first->second;
}

namespace {

int pow2_bucket(int m) {
  int b = 1;
  while (b < m) b <<= 1;
  return b;
}

}  // namespace

cublasLtMatmulAlgo_t Gemm::heuristic(const Plan& p, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, int m, int n,
                                     int k, bool out_f32) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = workspace_.bytes();
  CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, b, c, c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    fail("cuBLASLt found no algorithm for a ", m, "x", n, "x", k, " bf16 GEMM (", out_f32 ? "fp32" : "bf16",
         " output); this GPU or cuBLAS version does not support the model's shapes");
  }
  return result.algo;
}

cublasLtMatmulAlgo_t Gemm::bucket_algo(const Plan& p, int m, int n, int k, bool out_f32) {
  const int bucket = pow2_bucket(m);
  const auto key = std::make_tuple(bucket, n, k, out_f32);
  auto it = bucket_algos_.find(key);
  if (it == bucket_algos_.end()) {
    cublasLtMatrixLayout_t b = nullptr, c = nullptr;
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, bucket, k));
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&c, out_f32 ? CUDA_R_32F : CUDA_R_16BF, n, bucket, n));
    const cublasLtMatmulAlgo_t algo = heuristic(p, b, c, bucket, n, k, out_f32);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    it = bucket_algos_.emplace(key, algo).first;
  }
  // The bucket's algorithm nearly always runs every m of the bucket; where it does not, this
  // shape gets its own (and loses batch invariance, which only costs bit-exactness).
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle_, p.op, p.a, p.b, p.c, p.c, &it->second, &check) == CUBLAS_STATUS_SUCCESS) {
    return it->second;
  }
  return heuristic(p, p.b, p.c, m, n, k, out_f32);
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
