// RMSNorm, and the fused residual add + RMSNorm between sublayers. One block per row.
// Bytes per row: rmsnorm reads x and writes out (4 * hidden); add_rmsnorm reads x and residual
// and writes both (8 * hidden); the weight stays in L2. ~4 FLOPs per element.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

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

// Each thread owns the same kWidth-element groups in both passes, so the second pass reads
// back only values it wrote itself and needs no barrier beyond the reduction's.
// x [rows, hidden] (updated in place when kAdd: x = norm(residual + x) * w, residual += x);
// out [rows, hidden] when !kAdd. hidden % kWidth == 0. x_in and out alias in add_rmsnorm,
// hence no __restrict__ on them.
template <int kWidth, bool kAdd>
__global__ void rmsnorm_kernel(const bf16* x_in, bf16* __restrict__ residual, const bf16* __restrict__ weight,
                               bf16* out, int hidden, float eps) {
  pdl_enter();
  __shared__ float scratch[32];
  const size_t row = size_t(blockIdx.x) * hidden;
  float sum_sq = 0.f;
  for (int i = threadIdx.x * kWidth; i < hidden; i += blockDim.x * kWidth) {
    float v[kWidth];
    load_vals<kWidth>(x_in + row + i, v);
    if constexpr (kAdd) {
      float r[kWidth];
      load_vals<kWidth>(residual + row + i, r);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) v[j] = round_bf16(v[j] + r[j]);  // residual is kept in bf16
      store_vals<kWidth>(residual + row + i, v);
    }
#pragma unroll
    for (int j = 0; j < kWidth; ++j) sum_sq += v[j] * v[j];
  }
  const float rstd = rsqrtf(block_sum(sum_sq, scratch) / hidden + eps);
  const bf16* src = kAdd ? residual : x_in;
  for (int i = threadIdx.x * kWidth; i < hidden; i += blockDim.x * kWidth) {
    float v[kWidth], w[kWidth];
    load_vals<kWidth>(src + row + i, v);
    load_vals<kWidth>(weight + i, w);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) v[j] = w[j] * round_bf16(v[j] * rstd);  // HF: weight * x.to(bf16)
    store_vals<kWidth>(out + row + i, v);
  }
}

template <bool kAdd>
void launch(const bf16* x, bf16* residual, const bf16* weight, bf16* out, int num_tokens, int hidden,
            float eps, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  const bool vec = hidden % 8 == 0;
  const int per_thread = vec ? 8 : 1;
  // One thread per 8-element group, whole warps, at most 1024 threads (larger rows loop).
  const int threads = std::clamp((hidden / per_thread + 31) / 32 * 32, 32, 1024);
  launch_pdl(vec ? rmsnorm_kernel<8, kAdd> : rmsnorm_kernel<1, kAdd>, dim3(num_tokens), dim3(threads), 0, stream,
             x, residual, weight, out, hidden, eps);
}

}  // namespace

void rmsnorm(const bf16* x, const bf16* weight, bf16* out, int num_tokens, int hidden, float eps,
             cudaStream_t stream) {
  launch<false>(x, nullptr, weight, out, num_tokens, hidden, eps, stream);
}

void add_rmsnorm(bf16* x, bf16* residual, const bf16* weight, int num_tokens, int hidden, float eps,
                 cudaStream_t stream) {
  launch<true>(x, residual, weight, x, num_tokens, hidden, eps, stream);
}

}  // namespace nvllm::kernels
