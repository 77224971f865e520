// Small-batch linear layer with E4M3 weights (FP8 checkpoints, --quantization fp8) for decode
// steps of 1..8 sequences: gemv.cu's design (the weight stream of gemv_stream.cuh) with half the
// weight bytes. A 16-byte load brings 16 codes (one row, 16 consecutive K), converted to float in
// registers (two f16x2 conversions per four codes), scaled per tensor, per output row, or per
// 128 x 128 block (Fp8Scaling).
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
#include "kernels/gemv_stream.cuh"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = kGemvThreads;
constexpr int kChunk = 16;  // codes per 16-byte load

// A thread's step of the walk (gemv_stream): its chunk c (16 codes) of each of the group's rows
// against the same 16 inputs of every sequence; block scales applied per chunk.
template <int kBatch, int kRows, Fp8Scaling kScaling>
struct Fp8Step {
  const bf16* x;
  const float* scale;
  int batch, k;
  template <typename Group, typename Ready>
  __device__ __forceinline__ void operator()(float (&acc)[kRows][kBatch], Group group, int c, Ready ready) const {
    // The inputs' and block scales' loads first: their latency runs beside the weights' wait.
    Bf16x8 xv[kBatch][2];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (b < batch) {
        const bf16* xb = x + size_t(b) * k + size_t(c) * kChunk;
        xv[b][0] = load8(xb);
        xv[b][1] = load8(xb + 8);
      }
    [[maybe_unused]] float block_scale[kRows];
    if constexpr (kScaling == Fp8Scaling::kBlock128) {
      const int k_blocks = (k + 127) / 128;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        block_scale[r] = group(r) >= 0 ? scale[size_t(group(r) / 128) * k_blocks + (c * kChunk) / 128] : 0.f;
    }
    const auto codes = ready();
    float wf[kRows][kChunk];  // each chunk converted once, used for every sequence
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      e4m3x16_to_float(codes[r], wf[r]);
      if constexpr (kScaling == Fp8Scaling::kBlock128)
#pragma unroll
        for (int i = 0; i < kChunk; ++i) wf[r][i] *= block_scale[r];
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (b >= batch) continue;
      float xf[kChunk];
      to_float8(xv[b][0], xf);
      to_float8(xv[b][1], xf + 8);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int i = 0; i < kChunk; ++i) acc[r][b] = fmaf(xf[i], wf[r][i], acc[r][b]);
    }
  }
};

// A row's sum times its row (or the tensor's) scale; block scales were applied per chunk. The
// scales of the block's first group (blockIdx.x) are read by the threads that finish its rows
// before the stream starts: they are constants, so the load runs before the PDL wait, and that
// group's end waits on no load. At the end it was a dependent L2 round trip at every block's tail
// (FP8 Llama-3-8B batch 1: 1% of the step, bench/NOTES.md, forty-second session). With the walking
// grid (the FP8 default, kernels.h) a block's later groups still read theirs at their end.
template <int kBatch, int kRows, Fp8Scaling kScaling>
struct Fp8Scale {
  const float* scale;
  int first_row = -1;
  float first_scale = 0.f;
  template <typename Rows>
  __device__ __forceinline__ Fp8Scale(const float* s, Rows rows) : scale(s) {
    if constexpr (kScaling != Fp8Scaling::kBlock128)
      if (threadIdx.x < kRows * kBatch) {  // gemv_block_sums' finishing thread of row r
        first_row = rows.row(blockIdx.x, threadIdx.x / kBatch, kRows);
        if (first_row >= 0) first_scale = scale[kScaling == Fp8Scaling::kRow ? first_row : 0];
      }
  }
  __device__ __forceinline__ float operator()(int row, float v) const {
    if constexpr (kScaling == Fp8Scaling::kBlock128) return v;
    return v * (row == first_row ? first_scale : scale[kScaling == Fp8Scaling::kRow ? row : 0]);
  }
};

// y [batch, n] = x w^T; with kSilu, w is a gate_up projection [2 n, k] and y [batch, n] its
// activation silu(gate) * up (GemvPairedRows, GemvSiluOut): the bits of the plain kernel's two
// halves then silu_mul.
template <int kBatch, int kRows, Fp8Scaling kScaling, bool kSilu = false>
__global__ void __launch_bounds__(kThreads)
    gemv_fp8_kernel(const bf16* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ scale,
                    bf16* __restrict__ y, int batch, int n, int k) {
  __shared__ GemvSlots<kGemvRing<kRows, false>, kRows, kThreads> slots;
  __shared__ float partial[kThreads / 32][kRows][kBatch];
  __shared__ bf16 out[kSilu ? kBatch : 1][kSilu ? kRows : 1];
  const Fp8Step<kBatch, kRows, kScaling> step{x, scale, batch, k};
  if constexpr (kSilu) {
    const GemvPairedRows rows{n};
    const Fp8Scale<kBatch, kRows, kScaling> scaled(scale, rows);
    const GemvSiluOut<kRows, kBatch> o{out, y, n, batch};
    gemv_stream<kThreads>(
        slots, partial, w, rows, k, batch, step, [&](int row, int b, float v) { o.finish(row, b, scaled(row, v)); },
        [&](int g) { o.end(g); });
  } else {
    const GemvRows rows{n};
    const Fp8Scale<kBatch, kRows, kScaling> scaled(scale, rows);
    gemv_stream<kThreads>(slots, partial, w, rows, k, batch, step, [&](int row, int b, float v) {
      y[size_t(b) * n + row] = __float2bfloat16(scaled(row, v));
    });
  }
}

// gemv_fp8_push: gemv_fp8_kernel's outputs (row scales), rounded as it stores them, sent to every
// rank's inbox at each group's end (GemvPushOut), as gemv.cu's gemv_push does for bf16 weights.
template <int kBatch, int kRows>
__global__ void __launch_bounds__(kThreads)
    gemv_fp8_push_kernel(const bf16* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ scale,
                         PeerReduce p, int batch, int n, int k) {
  __shared__ GemvSlots<kGemvRing<kRows, false>, kRows, kThreads> slots;
  __shared__ float partial[kThreads / 32][kRows][kBatch];
  __shared__ __nv_bfloat162 out[kBatch][kRows / 2];
  const GemvRows rows{n};
  const Fp8Scale<kBatch, kRows, Fp8Scaling::kRow> scaled(scale, rows);
  const GemvPushOut<kRows, kBatch> o{out, p, n, batch};
  gemv_stream<kThreads>(
      slots, partial, w, rows, k, batch, Fp8Step<kBatch, kRows, Fp8Scaling::kRow>{x, scale, batch, k},
      [&](int row, int b, float v) { o.finish(row, b, scaled(row, v)); }, [&](int g) { o.end(g); });
}

template <int kBatch, int kRows, Fp8Scaling kScaling, bool kSilu>
void launch(const bf16* x, const uint8_t* w, const float* scale, bf16* y, int batch, int n, int k,
            cudaStream_t stream) {
  const int groups = kSilu ? GemvPairedRows{n}.groups(kRows) : GemvRows{n}.groups(kRows);
  launch_gemv<gemv_fp8_kernel<kBatch, kRows, kScaling, kSilu>, kThreads, true>(groups, stream, x, w, scale, y,
                                                                                batch, n, k);
}

// launch.template operator()<kBatch>() for the kernels' batch bucket of `batch` (1, 2, 4, 8).
template <typename Launch>
void by_batch(int batch, Launch launch) {
  if (batch == 1)
    launch.template operator()<1>();
  else if (batch == 2)
    launch.template operator()<2>();
  else if (batch <= 4)
    launch.template operator()<4>();
  else
    launch.template operator()<8>();
}

template <int kRows, Fp8Scaling kScaling, bool kSilu = false>
void dispatch_batch(const bf16* x, const uint8_t* w, const float* scale, bf16* y, int batch, int n, int k,
                    cudaStream_t stream) {
  by_batch(batch, [&]<int kBatch>() { launch<kBatch, kRows, kScaling, kSilu>(x, w, scale, y, batch, n, k, stream); });
}

void check_args(const char* what, int batch, int k) { gemv_check_args(what, batch, k, kChunk); }

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
  check_args("gemv_fp8", batch, k);
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

void gemv_fp8_push(const bf16* x, const uint8_t* w, const float* scale, const PeerReduce& p, int batch, int n, int k,
                   cudaStream_t stream) {
  if (batch <= 0 || n <= 0) return;
  check_args("gemv_fp8_push", batch, k);
  NVLLM_CHECK(n % 8 == 0 && peer_push_fits(p, batch, n), "gemv_fp8_push: ", batch, " x ", n,
              " is not a pushed sum's projection");
  constexpr int kRows = 4;  // gemv_fp8's rows a block
  by_batch(batch, [&]<int kBatch>() {
    launch_gemv<gemv_fp8_push_kernel<kBatch, kRows>, kThreads, true>(GemvRows{n}.groups(kRows), stream, x, w,
                                                                       scale, p, batch, n, k);
  });
}

void gemv_fp8_silu(const bf16* x, const uint8_t* gate_up, const float* scale, Fp8Scaling scaling, bf16* act,
                   int batch, int half, int k, cudaStream_t stream) {
  if (batch <= 0 || half <= 0) return;
  check_args("gemv_fp8_silu", batch, k);
  // Row scales only: the runner's FP8 weights (every checkpoint scheme is loaded as row scales).
  NVLLM_CHECK(scaling == Fp8Scaling::kRow, "gemv_fp8_silu: row scales only");
  dispatch_batch<4, Fp8Scaling::kRow, true>(x, gate_up, scale, act, batch, half, k, stream);  // gemv_fp8's 4 rows
}

}  // namespace nvllm::kernels
