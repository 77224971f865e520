#include "runtime/cuda/gemm.h"

#include "core/error.h"
#include "kernels/kernels.h"

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

cudaDataType_t Gemm::input_type(Kind kind) { return kind == Kind::kFp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF; }

cudaDataType_t Gemm::output_type(Kind kind) { return kind == Kind::kBf16OutF32 ? CUDA_R_32F : CUDA_R_16BF; }

const char* Gemm::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kBf16: return "bf16 GEMM";
    case Kind::kBf16OutF32: return "bf16 GEMM (fp32 output)";
    case Kind::kFp8: return "E4M3 GEMM with per-row scales (bf16 output)";
  }
  return "GEMM";
}

namespace {
constexpr int kFineFrom = 32, kFineTo = 512, kFineStep = 16;  // steps of 16 in (32, 512]
constexpr int kWideTo = 2048, kWideStep = 64;                 // steps of 64 in (512, 2048]
}  // namespace

// Powers of two up to 32 and past 2,048, steps of 16 to 512 and of 64 to 2,048. Every CUDA-graph
// size (1, 2, 4, 8, 16, 24, 32, then multiples of 16) pads a batch within its bucket.
int gemm_bucket(int m) {
  if (m > kFineFrom && m <= kFineTo) return (m + kFineStep - 1) / kFineStep * kFineStep;
  if (m > kFineTo && m <= kWideTo) return (m + kWideStep - 1) / kWideStep * kWideStep;
  int b = 1;
  while (b < m) b <<= 1;
  return b;
}

int gemm_rows(int m, int rows_cap) {
  const int top = gemm_bucket(m);
  return top <= kWideTo && top <= rows_cap ? top : m;
}

// cuBLASLt is column-major. A row-major [rows, cols] matrix is a column-major [cols, rows] one, so
// y^T [n, m] = w [n, k] · x^T [k, m]: A = w seen as column-major [k, n] and transposed, B = x seen
// as column-major [k, m], C = y seen as column-major [n, m]: the "TN" form the FP8 tensor-core
// kernels require.
const Gemm::Plan& Gemm::plan(int m, int n, int k, Kind kind) {
  const Key key{m, n, k, kind};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;

  Plan p;
  CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.a, input_type(kind), k, n, k));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.b, input_type(kind), k, m, k));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.c, output_type(kind), n, m, n));

  p.algo = bucket_algo(p, m, n, k, kind);
  return plans_.emplace(key, p).first->second;
}

cublasLtMatmulAlgo_t Gemm::heuristic(const Plan& p, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, int m, int n,
                                     int k, Kind kind) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = workspace_.bytes();
  CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, b, c, c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    fail("cuBLASLt found no algorithm for a ", m, "x", n, "x", k, " ", kind_name(kind),
         "; this GPU or cuBLAS version does not support the model's shapes", kind == Kind::kFp8 ? " in FP8" : "");
  }
  return result.algo;
}

cublasLtMatmulAlgo_t Gemm::bucket_algo(const Plan& p, int m, int n, int k, Kind kind) {
  const int bucket = gemm_bucket(m);
  const Key key{bucket, n, k, kind};
  auto it = bucket_algos_.find(key);
  if (it == bucket_algos_.end()) {
    cublasLtMatrixLayout_t b = nullptr, c = nullptr;
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&b, input_type(kind), k, bucket, k));
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&c, output_type(kind), n, bucket, n));
    const cublasLtMatmulAlgo_t algo = heuristic(p, b, c, bucket, n, k, kind);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    it = bucket_algos_.emplace(key, algo).first;
  }
  // The bucket's algorithm nearly always runs every m of the bucket; where it does not, this shape
  // gets its own (and loses batch invariance, which only costs bit-exactness).
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle_, p.op, p.a, p.b, p.c, p.c, &it->second, &check) == CUBLAS_STATUS_SUCCESS) {
    return it->second;
  }
  return heuristic(p, p.b, p.c, m, n, k, kind);
}

void Gemm::matmul(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, int m, int n, int k, bool out_f32,
                  cudaStream_t stream, int rows_cap) {
  if (m <= 0) return;
  const Plan& p = plan(gemm_rows(m, rows_cap), n, k, out_f32 ? Kind::kBf16OutF32 : Kind::kBf16);
  const float alpha = 1.0f, beta = 0.0f;
  CUBLASLT_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo, workspace_.get(),
                                workspace_.bytes(), stream));
}

void Gemm::matmul_fp8(const uint8_t* x, const float* x_scale, const uint8_t* w, const float* w_scale, __nv_bfloat16* y,
                      int m, int n, int k, cudaStream_t stream, bool scale, int rows_cap) {
  if (m <= 0) return;
  NVLLM_CHECK(k % 16 == 0, "matmul_fp8: K = ", k, " must be a multiple of 16");
  const Plan& p = plan(gemm_rows(m, rows_cap), n, k, Kind::kFp8);
  // cuBLASLt 13.1 on sm_90 offers FP8 kernels for scalar scales only (no outer-vector, 128-block or
  // alpha-vector modes: measured on the H100, bench/NOTES.md): the product of the codes in bf16,
  // then the scales of its rows and columns in one pass.
  const float alpha = 1.0f, beta = 0.0f;
  CUBLASLT_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo, workspace_.get(),
                                workspace_.bytes(), stream));
  if (scale) kernels::scale_rows_cols(y, x_scale, w_scale, m, n, stream);
}

}  // namespace nvllm
