// Small-batch linear layer with E4M3 weights (FP8 checkpoints, --quantization fp8) for decode
// steps of 1..8 sequences: gemv.cu's design with half the weight bytes. A 16-byte load brings 16
// codes (one row, 16 consecutive K), converted to float in registers (two f16x2 conversions per
// four codes), scaled per tensor, per output row, or per 128 x 128 block (Fp8Scaling).
// Bytes: N * K (weights, read once) + the scales + batch * (K + N) * 2; FLOPs: 2 * batch * N * K.
// Expected: at batch 1 the weight stream bounds it, so an [N, K] layer takes N * K / 3.03 TB/s on
// the H100: half the bf16 gemv's time where that one streams at 95%+ (gemv.cu).
//
// Block scaling: a chunk's 16 K lie inside one 128-wide block (16 divides 128), so each chunk
// multiplies its converted codes by its block's scale before the FMAs; per-row and per-tensor
// scales multiply the row's sum once at the end.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 16;  // codes per 16-byte load

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// kUnroll chunks of each row in flight per thread; fewer when the block holds more rows or
// sequences (the registers of wv, wf and acc grow with both).
template <int kBatch, int kRows, Fp8Scaling kScaling, int kUnroll = (kBatch >= 4 || kRows >= 4 ? 2 : 4)>
__global__ void __launch_bounds__(kThreads)
    gemv_fp8_kernel(const bf16* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ scale,
                    bf16* __restrict__ y, int batch, int n, int k) {
  __shared__ float partial[kThreads / 32][kRows][kBatch];
  const int row0 = blockIdx.x * kRows;
  const int chunks = k / kChunk;
  const int k_blocks = (k + 127) / 128;
  // Weights and scales are constants: ask L2 for this block's rows before the inputs are ready
  // (one prefetch per 128-byte line: 8 chunks).
  for (int c = threadIdx.x * 8; c < chunks; c += kThreads * 8)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (row0 + r < n) prefetch_l2(w + size_t(row0 + r) * k + size_t(c) * kChunk);
  pdl_enter();
  float acc[kRows][kBatch];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int b = 0; b < kBatch; ++b) acc[r][b] = 0.f;

  for (int c0 = threadIdx.x; c0 < chunks; c0 += kThreads * kUnroll) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every weight load of this step before any use
      const int c = c0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (c < chunks && row0 + r < n)
          wv[u][r] = *reinterpret_cast<const uint4*>(w + size_t(row0 + r) * k + size_t(c) * kChunk);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) continue;
      float wf[kRows][kChunk];  // each chunk converted once, used for every sequence
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (row0 + r < n) {
          e4m3x16_to_float(wv[u][r], wf[r]);
          if constexpr (kScaling == Fp8Scaling::kBlock128) {
            const float s = scale[size_t((row0 + r) / 128) * k_blocks + (c * kChunk) / 128];
#pragma unroll
            for (int i = 0; i < kChunk; ++i) wf[r][i] *= s;
          }
        } else {
#pragma unroll
          for (int i = 0; i < kChunk; ++i) wf[r][i] = 0.f;
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (b >= batch) continue;
        float xf[kChunk];
        const bf16* xb = x + size_t(b) * k + size_t(c) * kChunk;
        to_float8(load8(xb), xf);
        to_float8(load8(xb + 8), xf + 8);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int i = 0; i < kChunk; ++i) acc[r][b] = fmaf(xf[i], wf[r][i], acc[r][b]);
      }
    }
  }

  gemv_block_sums<kThreads>(acc, partial, batch, n - row0, [&](int r, int b, float v) {
    if constexpr (kScaling == Fp8Scaling::kRow) v *= scale[row0 + r];
    if constexpr (kScaling == Fp8Scaling::kTensor) v *= scale[0];
    y[size_t(b) * n + row0 + r] = __float2bfloat16(v);
  });
}

template <int kBatch, int kRows, Fp8Scaling kScaling>
void launch(const bf16* x, const uint8_t* w, const float* scale, bf16* y, int batch, int n, int k,
            cudaStream_t stream) {
  launch_pdl(gemv_fp8_kernel<kBatch, kRows, kScaling>, dim3(ceil_div(n, kRows)), dim3(kThreads), 0, stream, x, w,
             scale, y, batch, n, k);
}

template <int kRows, Fp8Scaling kScaling>
void dispatch_batch(const bf16* x, const uint8_t* w, const float* scale, bf16* y, int batch, int n, int k,
                    cudaStream_t stream) {
  if (batch == 1)
    launch<1, kRows, kScaling>(x, w, scale, y, batch, n, k, stream);
  else if (batch == 2)
    launch<2, kRows, kScaling>(x, w, scale, y, batch, n, k, stream);
  else if (batch <= 4)
    launch<4, kRows, kScaling>(x, w, scale, y, batch, n, k, stream);
  else
    launch<8, kRows, kScaling>(x, w, scale, y, batch, n, k, stream);
}

template <Fp8Scaling kScaling>
void dispatch(const bf16* x, const uint8_t* w, const float* scale, bf16* y, int batch, int n, int k, int rows,
              cudaStream_t stream) {
  if (rows == 2)
    dispatch_batch<2, kScaling>(x, w, scale, y, batch, n, k, stream);
  else
    dispatch_batch<4, kScaling>(x, w, scale, y, batch, n, k, stream);
}

}  // namespace

void gemv_fp8(const bf16* x, const uint8_t* w, const float* scale, Fp8Scaling scaling, bf16* y, int batch, int n,
              int k, cudaStream_t stream, int rows_per_block) {
  if (batch <= 0 || n <= 0) return;
  NVLLM_CHECK(batch <= kGemvMaxBatch, "gemv_fp8: batch ", batch, " is over ", kGemvMaxBatch, "; use the GEMM path");
  NVLLM_CHECK(k % kChunk == 0, "gemv_fp8: K = ", k, " must be a multiple of 16 (16-byte rows of codes)");
  NVLLM_CHECK(rows_per_block == 0 || rows_per_block == 2 || rows_per_block == 4, "gemv_fp8: ", rows_per_block,
              " rows a block; 2 or 4 (0: the default)");
  // Four rows a block at every batch: a block then streams as many bytes as the bf16 gemv's two
  // rows at batch 1-2 (measured: bench/NOTES.md, fifteenth session).
  const int rows = rows_per_block == 0 ? 4 : rows_per_block;
  switch (scaling) {
    case Fp8Scaling::kTensor: dispatch<Fp8Scaling::kTensor>(x, w, scale, y, batch, n, k, rows, stream); break;
    case Fp8Scaling::kRow: dispatch<Fp8Scaling::kRow>(x, w, scale, y, batch, n, k, rows, stream); break;
    case Fp8Scaling::kBlock128: dispatch<Fp8Scaling::kBlock128>(x, w, scale, y, batch, n, k, rows, stream); break;
  }
}

}  // namespace nvllm::kernels
