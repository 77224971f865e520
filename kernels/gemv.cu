// Small-batch linear layer (GEMV-like) for decode steps of 1..8 sequences: weight-streaming
// bound, so the whole design is about keeping every SM's loads in flight.
// Bytes: N * K * 2 (weights, read once) + batch * (K + N) * 2; FLOPs: 2 * batch * N * K.
//
// A block of 128 threads owns kRows consecutive output rows and splits K among its threads
// (thread t reads the 16-byte chunks t, t + 128, ... of each row: one load instruction of a warp
// covers 512 contiguous bytes of a row), so even N = 1024 gives hundreds of blocks. Each chunk
// of x is loaded once per thread and used for all kRows rows, keeping L1 traffic for x at
// batch / kRows of the weight traffic. Partial sums meet through warp shuffles and a small
// shared-memory table. A row's sum runs in the same order at every batch size.
//
// Launched with PDL (launch.cuh): before waiting for the previous kernel, each block asks L2
// for its own weight rows, so the weight stream starts while the small kernels between two
// projections (norm, rope, attention) still run. Variant: fp32 output (the LM head's logits).
//
// Measured against a tensor-core design (bench/NOTES.md, twelfth session): warps of 16-32 rows
// whose lanes hold mma fragments read 64 bytes of 8 rows per load instruction, and streamed at
// 70-75% where this layout's long contiguous runs reach 95-103% of 3.03 TB/s on large matrices.
// What this kernel does poorly: K much larger than N at few blocks, and batches over 2 (FMA
// issue: batch x 8 FMAs and conversions per 16 loaded bytes); cuBLASLt takes those (the runner).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 128;

// Chunk c (8 values) of input row b.
__device__ __forceinline__ void load_x8(const bf16* __restrict__ x, int b, int k, int c, float xf[8]) {
  to_float8(load8(x + size_t(b) * k + c * 8), xf);
}

__device__ __forceinline__ void store_out(bf16* y, float v) { *y = __float2bfloat16(v); }
__device__ __forceinline__ void store_out(float* y, float v) { *y = v; }

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// kUnroll: chunks per row whose loads are issued together (fewer for big batches: registers).
template <int kBatch, int kRows, typename OutT, int kUnroll = (kBatch >= 4 ? 2 : 4)>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                        OutT* __restrict__ y, int batch, int n, int k) {
  __shared__ float partial[kThreads / 32][kRows][kBatch];
  const int row0 = blockIdx.x * kRows;
  const int chunks = k / 8;
  // Weights are constants: fetch this block's rows into L2 before the inputs are ready.
  for (int c = threadIdx.x * 8; c < chunks; c += kThreads * 8)  // one prefetch per 128-byte line
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (row0 + r < n) prefetch_l2(w + size_t(row0 + r) * k + c * 8);
  pdl_enter();
  float acc[kRows][kBatch];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int b = 0; b < kBatch; ++b) acc[r][b] = 0.f;

  for (int c0 = threadIdx.x; c0 < chunks; c0 += kThreads * kUnroll) {
    Bf16x8 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every weight load of this step before any use
      const int c = c0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (c < chunks && row0 + r < n) wv[u][r] = load8(w + size_t(row0 + r) * k + c * 8);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) continue;
      float wf[kRows][8];  // each weight chunk converted once, used for every sequence
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (row0 + r < n) {
          to_float8(wv[u][r], wf[r]);
        } else {
#pragma unroll
          for (int i = 0; i < 8; ++i) wf[r][i] = 0.f;
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (b >= batch) continue;
        float xf[8];
        load_x8(x, b, k, c, xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[r][b] = fmaf(xf[i], wf[r][i], acc[r][b]);
      }
    }
  }

  gemv_block_sums<kThreads>(acc, partial, batch, n - row0,
                            [&](int r, int b, float v) { store_out(y + size_t(b) * n + row0 + r, v); });
}

template <int kBatch, int kRows, typename OutT>
void launch(const bf16* x, const bf16* w, OutT* y, int batch, int n, int k, cudaStream_t stream) {
  launch_pdl(gemv_kernel<kBatch, kRows, OutT>, dim3(ceil_div(n, kRows)), dim3(kThreads), 0, stream, x, w, y,
             batch, n, k);
}

template <typename OutT>
void dispatch(const bf16* x, const bf16* w, OutT* y, int batch, int n, int k, cudaStream_t stream) {
  if (batch <= 0 || n <= 0) return;
  NVLLM_CHECK(batch <= kGemvMaxBatch, "gemv: batch ", batch, " is over ", kGemvMaxBatch,
              "; use the GEMM path");
  NVLLM_CHECK(k % 8 == 0, "gemv: K = ", k, " must be a multiple of 8 (16-byte rows)");
  // Rows per block, as measured on the H100 (bench.gemv): two for batch 1-2 (more blocks and
  // fewer registers: 590 us per 0.6B decode step vs 638 with four rows), four for batch 3-8
  // (x reused across four rows: 902 / 1303 us at batch 4 / 8 vs 986 / 1491 with two).
  if (batch == 1)
    launch<1, 2>(x, w, y, batch, n, k, stream);
  else if (batch == 2)
    launch<2, 2>(x, w, y, batch, n, k, stream);
  else if (batch <= 4)
    launch<4, 4>(x, w, y, batch, n, k, stream);
  else
    launch<8, 4>(x, w, y, batch, n, k, stream);
}

}  // namespace

void gemv(const bf16* x, const bf16* w, bf16* y, int batch, int n, int k, cudaStream_t stream) {
  dispatch(x, w, y, batch, n, k, stream);
}

void gemv_f32(const bf16* x, const bf16* w, float* y, int batch, int n, int k, cudaStream_t stream) {
  dispatch(x, w, y, batch, n, k, stream);
}

}  // namespace nvllm::kernels
