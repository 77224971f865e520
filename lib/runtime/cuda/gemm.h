// Dense projections through cuBLASLt: y[m, n] = x[m, k] · w[n, k]^T with bf16 inputs, fp32
// accumulation, and bf16 (activations) or fp32 (LM-head logits) output. The algorithm chosen by
// cuBLASLt's heuristic is cached per (m, n, k, output type), so a step pays the heuristic only
// the first time a shape appears, and graph capture never calls it.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "runtime/cuda/device_buffer.h"

namespace nvllm {

class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = size_t{32} << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // x [m, k] bf16 row-major, w [n, k] bf16 row-major (a torch Linear weight), y [m, n] row-major:
  // bf16 when out_f32 is false, else fp32. m == 0 is a no-op.
  void matmul(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, int m, int n, int k, bool out_f32,
              cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(int m, int n, int k, bool out_f32);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::tuple<int, int, int, bool>, Plan> plans_;
};

}  // namespace nvllm
