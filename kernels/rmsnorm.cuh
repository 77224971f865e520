// One row of RMSNorm (optionally after the residual add) as a block's two passes, shared by
// rmsnorm.cu (rmsnorm, add_rmsnorm) and fp8_quant.cu (add_rmsnorm_fp8), so that the fused FP8
// variant rounds and sums exactly as the plain kernels do: the same threads own the same
// kWidth-element groups in both passes, so the second pass reads back only values the thread
// wrote itself and needs no barrier beyond the reduction's.
#pragma once

#include "kernels/common.cuh"

namespace nvllm::kernels {

// kWidth values of a row as one access: a 16-byte vector for 8, a single element for 1.
template <int kWidth>
__device__ __forceinline__ void load_vals(const bf16* p, float v[kWidth]) {
  if constexpr (kWidth == 8)
    to_float8(load8(p), v);
  else
    v[0] = __bfloat162float(*p);
}
template <int kWidth>
__device__ __forceinline__ void store_vals(bf16* p, const float v[kWidth]) {
  if constexpr (kWidth == 8)
    store8(p, from_float8(v));
  else
    *p = __float2bfloat16(v[0]);
}

// The row x_in [hidden] normalised: kAdd: residual = round_bf16(input(x_in) + residual) first
// (the residual is kept in bf16) and the norm is of that; else of input(x_in). `input(i, v)`
// may change the kWidth values of x_in at column i as loaded (the FP8 path scales them);
// `output(i, v)` receives the normalised, weighted values of column i (HF: weight *
// x.to(bf16)) to store. hidden % kWidth == 0; scratch: 32 floats of shared memory.
template <int kWidth, bool kAdd, typename Input, typename Output>
__device__ __forceinline__ void rmsnorm_row(const bf16* x_in, bf16* residual, const bf16* weight, int hidden,
                                            float eps, float* scratch, Input input, Output output) {
  float sum_sq = 0.f;
  for (int i = threadIdx.x * kWidth; i < hidden; i += blockDim.x * kWidth) {
    float v[kWidth];
    load_vals<kWidth>(x_in + i, v);
    input(i, v);
    if constexpr (kAdd) {
      float r[kWidth];
      load_vals<kWidth>(residual + i, r);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) v[j] = round_bf16(v[j] + r[j]);
      store_vals<kWidth>(residual + i, v);
    }
#pragma unroll
    for (int j = 0; j < kWidth; ++j) sum_sq += v[j] * v[j];
  }
  const float rstd = rsqrtf(block_sum(sum_sq, scratch) / hidden + eps);
  const bf16* src = kAdd ? residual : x_in;
  for (int i = threadIdx.x * kWidth; i < hidden; i += blockDim.x * kWidth) {
    float v[kWidth], w[kWidth];
    load_vals<kWidth>(src + i, v);
    load_vals<kWidth>(weight + i, w);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) v[j] = w[j] * round_bf16(v[j] * rstd);
    output(i, v);
  }
}

}  // namespace nvllm::kernels
