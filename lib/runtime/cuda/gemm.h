// Dense projections through cuBLASLt: y[m, n] = x[m, k] · w[n, k]^T with fp32 accumulation; bf16
// inputs with bf16 (activations) or fp32 (LM-head logits) output, or E4M3 inputs with one scale per
// row of each (FP8 weights: per output channel; activations: per token) and bf16 output.
//
// cuBLASLt's heuristic picks a kernel (tile shape, split-K) per shape, and another kernel rounds a
// row differently. We pick one algorithm per bucket of m, with the heuristic at the bucket's top,
// and use it for every m in the bucket: a row then comes out the same whether it is multiplied
// with 100 others or 104 (a CUDA-graph replay pads the batch to its captured size, and every
// captured size pads within its bucket). Buckets are powers of two up to 32 and past 2,048, steps
// of 16 up to 512 (the decode batches of large models, where the heuristic's choice for the
// bucket's top ran far slower at m below it: Qwen3-8B's layer at m = 160: 214 us with m = 256's
// choice, 168 us with its own; bench/NOTES.md, seventeenth session) and steps of 64 up to 2,048.
// Up to 2,048 the product runs at the bucket's top itself where the caller's buffers hold that
// many rows (`rows_cap`): the extra rows of x are whatever the buffer holds, their products are
// written past row m and never read. An algorithm ran slower at m below the m it was chosen for
// than at that m (Llama-3-8B's FP8 layer at m = 224: 125 us with m = 256's choice, 109 us at 256;
// at m = 528 with m = 1,024's: 366 us, 200 with its own; twenty-seventh session), so running at
// the top was never the slower where measured, and every row of a bucket takes the same path. Plans are cached per
// (m, n, k, kind), so graph capture never calls the heuristic.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "runtime/cuda/device_buffer.h"

namespace nvllm {

// The m whose heuristic choice serves a product of m rows (the bucket's top; see above).
int gemm_bucket(int m);
// The rows a product of m rows runs with when its buffers hold rows_cap: the bucket's top where
// that is at most 2,048 and fits, else m.
int gemm_rows(int m, int rows_cap);

class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = size_t{32} << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // x [m, k] bf16 row-major, w [n, k] bf16 row-major (a torch Linear weight), y [m, n] row-major:
  // bf16 when out_f32 is false, else fp32. m == 0 is a no-op. rows_cap: the rows x and y hold (at
  // least m; 0 means m): up to gemm_rows(m, rows_cap) rows of y are written.
  void matmul(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, int m, int n, int k, bool out_f32,
              cudaStream_t stream, int rows_cap = 0);
  // y [m, n] bf16 = (x [m, k] * x_scale[m]) · (w [n, k] * w_scale[n])^T: E4M3 codes, one fp32 scale
  // per row of each; the codes' product on the FP8 tensor cores, rounded to bf16, then scaled
  // (kernels::scale_rows_cols) unless `scale` is false: then y holds the unscaled product and the
  // caller's next kernel applies the scales (kernels::silu_mul_fp8). k % 16 == 0, n % 8 == 0.
  // rows_cap as for matmul (the scales are applied to the m rows only).
  void matmul_fp8(const uint8_t* x, const float* x_scale, const uint8_t* w, const float* w_scale, __nv_bfloat16* y,
                  int m, int n, int k, cudaStream_t stream, bool scale = true, int rows_cap = 0);

 private:
  enum class Kind : uint8_t { kBf16, kBf16OutF32, kFp8 };
  // What a kind multiplies and writes, and its name in errors.
  static cudaDataType_t input_type(Kind kind);
  static cudaDataType_t output_type(Kind kind);
  static const char* kind_name(Kind kind);
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, int, Kind>;
  const Plan& plan(int m, int n, int k, Kind kind);
  cublasLtMatmulAlgo_t bucket_algo(const Plan& p, int m, int n, int k, Kind kind);
  cublasLtMatmulAlgo_t heuristic(const Plan& p, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, int m, int n, int k,
                                 Kind kind);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
  std::map<Key, cublasLtMatmulAlgo_t> bucket_algos_;  // (bucket, n, k, kind)
};

}  // namespace nvllm
