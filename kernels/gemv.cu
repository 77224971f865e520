// Small-batch linear layer (GEMV-like) for decode steps of 1..8 sequences: weight-streaming
// bound, so the whole design is about keeping every SM's loads in flight.
// Bytes: N * K * 2 (weights, read once) + batch * (K + N) * 2; FLOPs: 2 * batch * N * K.
//
// Many rows of at most 1,024 values: a warp a group of rows, no block barrier (gemv_rows_kernel
// below; gemv_short_rows says where). Otherwise the weight stream (gemv_stream.cuh): blocks of 128
// threads, each walking row groups of kRows rows with K split among its threads (16-byte chunks t,
// t + 128, ... of each row), the weights coming through a shared-memory ring kept full by cp.async
// ahead of the math, the first steps issued before the PDL wait. Each chunk of x is loaded once
// per thread and used for all kRows rows, keeping L1 traffic for x at batch / kRows of the weight
// traffic. A row's sum runs in the same order at every batch size. Variants: fp32 output (the
// LM head's logits); gemv_silu, a gate_up projection walked in gate/up pairs whose blocks write
// silu(gate) * up (one kernel and one round trip of the products less: Llama-3-8B batch 1-2 1.5%
// faster a step on the H200, FP8 even; bench/NOTES.md, forty-first session); gemv_push, whose
// outputs go as flagged words into every tensor-parallel rank's inbox (peer_inbox.cuh) for the sum
// after a row-parallel projection.
//
// Measured against a tensor-core design (bench/NOTES.md, twelfth session): warps of 16-32 rows
// whose lanes hold mma fragments read 64 bytes of 8 rows per load instruction, and streamed at
// 70-75% where this layout's long contiguous runs reach 95-103% of 3.03 TB/s on large matrices.
// What this kernel does poorly: batches over 2; cuBLASLt takes those (the runner). Not for its
// FMAs: the same sums on the tensor cores (mma.sync, bench/NOTES.md fortieth session) left batch 8
// where it was; ncu found its blocks held to 4 an SM by registers (124 at batch 5-8).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemv_stream.cuh"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = kGemvThreads;

__device__ __forceinline__ void store_out(bf16* y, float v) { *y = __float2bfloat16(v); }
__device__ __forceinline__ void store_out(float* y, float v) { *y = v; }

// A thread's step of the walk (gemv_stream): its chunk c of each of the group's rows against the
// same chunk of every sequence's input.
template <int kBatch, int kRows>
struct Bf16Step {
  const bf16* x;
  int batch, k;
  template <typename Group, typename Ready>
  __device__ __forceinline__ void operator()(float (&acc)[kRows][kBatch], Group, int c, Ready ready) const {
    Bf16x8 xv[kBatch];  // the inputs' loads first: their latency runs beside the weights' wait
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (b < batch) xv[b] = load8(x + size_t(b) * k + size_t(c) * 8);
    const auto chunks = ready();
    float wf[kRows][8];  // each weight chunk converted once, used for every sequence
#pragma unroll
    for (int r = 0; r < kRows; ++r) to_float8(reinterpret_cast<const Bf16x8&>(chunks[r]), wf[r]);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (b >= batch) continue;
      float xf[8];
      to_float8(xv[b], xf);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r][b] = fmaf(xf[i], wf[r][i], acc[r][b]);
    }
  }
};

template <int kBatch, int kRows, typename OutT>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                        OutT* __restrict__ y, int batch, int n, int k) {
  __shared__ GemvSlots<kGemvRing<kRows, true>, kRows, kThreads> slots;
  __shared__ float partial[kThreads / 32][kRows][kBatch];
  gemv_stream<kThreads>(slots, partial, w, GemvRows{n}, k * 2, batch, Bf16Step<kBatch, kRows>{x, batch, k},
                        [&](int row, int b, float v) { store_out(y + size_t(b) * n + row, v); });
}

// gemv_silu: gate_up [2 * half, k] walked in gate/up pairs (GemvPairedRows), act = silu(gate) *
// up written at each group's end: the bits of gemv_kernel's outputs then silu_mul.
template <int kBatch, int kRows>
__global__ void __launch_bounds__(kThreads) gemv_silu_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                             bf16* __restrict__ act, int batch, int half, int k) {
  __shared__ GemvSlots<kGemvRing<kRows, true>, kRows, kThreads> slots;
  __shared__ float partial[kThreads / 32][kRows][kBatch];
  __shared__ bf16 out[kBatch][kRows];
  const GemvSiluOut<kRows, kBatch> o{out, act, half, batch};
  gemv_stream<kThreads>(
      slots, partial, w, GemvPairedRows{half}, k * 2, batch, Bf16Step<kBatch, kRows>{x, batch, k},
      [&](int row, int b, float v) { o.finish(row, b, v); }, [&](int g) { o.end(g); });
}

// gemv_push: gemv_kernel's outputs, rounded as it stores them, sent to every rank's inbox at each
// group's end (GemvPushOut).
template <int kBatch, int kRows>
__global__ void __launch_bounds__(kThreads) gemv_push_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                             PeerReduce p, int batch, int n, int k) {
  __shared__ GemvSlots<kGemvRing<kRows, true>, kRows, kThreads> slots;
  __shared__ float partial[kThreads / 32][kRows][kBatch];
  __shared__ __nv_bfloat162 out[kBatch][kRows / 2];
  const GemvPushOut<kRows, kBatch> o{out, p, n, batch};
  gemv_stream<kThreads>(
      slots, partial, w, GemvRows{n}, k * 2, batch, Bf16Step<kBatch, kRows>{x, batch, k},
      [&](int row, int b, float v) { o.finish(row, b, v); }, [&](int g) { o.end(g); });
}

// Rows of at most 1,024 values (kC <= 4 16-byte chunks a lane). There a row group of the ring's
// walk is one step of a block, and each group's block-wide sum (a barrier and a pass
// through shared memory) costs more than its bytes: the LM head of a 1,024-wide model streamed at
// 45% of the copy rate (bench/NOTES.md, thirty-ninth session). So, decode_head's loop: a warp owns
// kRows consecutive rows at a time and lane l reads the chunks l, l + 32, ... of each (one load
// instruction of a warp covers 512 contiguous bytes), with the next rows' loads in flight while
// the warp reduces these; the inputs are staged once in shared memory; no barrier in the loop. A
// row's sum runs in the same order at every batch size and template (each lane's chunks in order,
// then the warp's shuffle tree), which is not the ring's order (longer rows give other bits).
constexpr int kRowsThreads = 256, kRowsCtas = 2;  // two CTAs an SM
// kSilu: w is a gate_up projection [2 n, k] and y [batch, n] its activation: a warp's kRows rows
// are kRows / 2 gates and the ups of the same index, and y = silu(gate) * up with silu_mul's
// arithmetic on the rounded products (the bits of the plain kernel then silu_mul).
template <int kC, int kRows, int kBatch, typename OutT, bool kSilu = false>
__global__ void __launch_bounds__(kRowsThreads, kRowsCtas) gemv_rows_kernel(const bf16* __restrict__ x,
                                                                       const bf16* __restrict__ w,
                                                                       OutT* __restrict__ y, int batch, int n, int k) {
  constexpr int kWarps = kRowsThreads / 32;
  constexpr int kStride = kSilu ? kRows / 2 : kRows;  // output rows a warp's turn
  __shared__ uint4 xs[kBatch][kC][32];  // sequence b's chunk j * 32 + lane
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int step = gridDim.x * kWarps * kStride;
  const uint64_t policy = l2_evict_first();
  uint4 wv[kRows][kC];
  auto load_rows = [&](int r0) {
    if constexpr (kSilu) {
      using Half = uint4[kRows / 2][kC];
      load_warp_rows(reinterpret_cast<Half&>(wv[0]), w, r0, n, k, lane, policy);
      load_warp_rows(reinterpret_cast<Half&>(wv[kRows / 2]), w + size_t(n) * k, r0, n, k, lane, policy);
    } else {
      load_warp_rows(wv, w, r0, n, k, lane, policy);
    }
  };
  int r0 = (blockIdx.x * kWarps + warp) * kStride;
  load_rows(r0);  // weights are constants: before the wait
  pdl_enter();
  for (int i = threadIdx.x; i < batch * kC * 32; i += kRowsThreads) {
    const int b = i / (kC * 32), c = i % (kC * 32);
    if (c * 8 < k) xs[b][c / 32][c % 32] = __ldcg(reinterpret_cast<const uint4*>(x + size_t(b) * k + c * 8));
  }
  __syncthreads();
  for (; r0 < n; r0 += step) {
    float acc[kRows][kBatch];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int b = 0; b < kBatch; ++b) acc[r][b] = 0.f;
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      if (!lane_has_chunk(j, lane, k)) continue;
      float wf[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) to_float8(reinterpret_cast<const Bf16x8&>(wv[r][j]), wf[r]);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (b >= batch) continue;
        float xf[8];
        to_float8(reinterpret_cast<const Bf16x8&>(xs[b][j][lane]), xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[r][b] = fmaf(wf[r][i], xf[i], acc[r][b]);
      }
    }
    load_rows(r0 + step);  // in flight during the reductions below
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (b >= batch) continue;
        acc[r][b] = warp_sum(acc[r][b]);  // every lane holds the row's sum
        if constexpr (!kSilu)
          if (lane == r * kBatch + b && r0 + r < n) store_out(y + size_t(b) * n + r0 + r, acc[r][b]);
      }
    if constexpr (kSilu)
#pragma unroll
      for (int r = 0; r < kRows / 2; ++r)
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
          if (b < batch && lane == r * kBatch + b && r0 + r < n)
            y[size_t(b) * n + r0 + r] = silu_mul_products(acc[r][b], acc[kRows / 2 + r][b]);
  }
}

// Rows of at most kGemvRowsMaxK values: 8 KB of weights in flight a warp (four rows of four chunks
// a lane), two rows a warp past two sequences; kRowsCtas CTAs an SM, all resident at once.
constexpr int kGemvRowsMaxK = 1024, kGemvRowsGroup = 4;
int rows_grid() {
  static const int sms = device_attribute(cudaDevAttrMultiProcessorCount);
  return kRowsCtas * sms;
}
template <typename OutT, bool kSilu = false>
void launch_rows(const bf16* x, const bf16* w, OutT* y, int batch, int n, int k, cudaStream_t stream) {
  const dim3 grid(rows_grid()), block(kRowsThreads);
  if (batch <= 2)
    launch_pdl(gemv_rows_kernel<4, kGemvRowsGroup, 2, OutT, kSilu>, grid, block, 0, stream, x, w, y, batch, n, k);
  else
    launch_pdl(gemv_rows_kernel<4, 2, 8, OutT, kSilu>, grid, block, 0, stream, x, w, y, batch, n, k);
}

// Rows per block by batch, as measured on the H100 (bench.gemv): two for batch 1-2 (more blocks
// and fewer registers: 590 us per 0.6B decode step vs 638 with four rows), four for batch 3-8
// (x reused across four rows: 902 / 1303 us at batch 4 / 8 vs 986 / 1491 with two). Calls
// launch.operator()<kBatch, kRows>() for the batch.
template <typename Launch>
void by_batch(int batch, Launch launch) {
  if (batch == 1)
    launch.template operator()<1, 2>();
  else if (batch == 2)
    launch.template operator()<2, 2>();
  else if (batch <= 4)
    launch.template operator()<4, 4>();
  else
    launch.template operator()<8, 4>();
}

void check_args(const char* what, int batch, int k) { gemv_check_args(what, batch, k, 8); }

template <typename OutT>
void dispatch(const bf16* x, const bf16* w, OutT* y, int batch, int n, int k, cudaStream_t stream) {
  if (batch <= 0 || n <= 0) return;
  check_args("gemv", batch, k);
  if (gemv_short_rows(n, k)) return launch_rows(x, w, y, batch, n, k, stream);
  by_batch(batch, [&]<int kBatch, int kRows>() {
    launch_gemv<gemv_kernel<kBatch, kRows, OutT>, kThreads, false>(GemvRows{n}.groups(kRows), stream, x, w, y,
                                                                     batch, n, k);
  });
}

}  // namespace

// The warp's rows where they pay: rows of at most 1,024 values, and enough of them that every warp
// the grid holds at once (two CTAs of 8 warps an SM) gets a group of 4 rows. Measured on the H200
// (bench.gemv, bench/NOTES.md thirty-ninth session): the LM heads and gate_up projections of the
// small shapes (9,728-151,936 rows) 1.2-1.9x faster than the ring, but qkv and o (1,024-4,096
// rows, under a group a warp) 1.2-1.9x slower, their warps too few to keep the card's loads in
// flight; rows of 1,025-2,048 values (eight chunks a lane) gained on the same kinds in bench.gemv
// but not end to end (Llama-3.2-1B batch 2 1-3% slower), so they stay on the ring. A shape's rows
// take one kernel at every batch size.
bool gemv_short_rows(int n, int k) {
  const int warps = rows_grid() * (kRowsThreads / 32);
  return k <= kGemvRowsMaxK && int64_t{n} >= int64_t{kGemvRowsGroup} * warps;
}

void gemv_push(const bf16* x, const bf16* w, const PeerReduce& p, int batch, int n, int k, cudaStream_t stream) {
  if (batch <= 0 || n <= 0) return;
  check_args("gemv_push", batch, k);
  NVLLM_CHECK(n % 8 == 0 && peer_push_fits(p, batch, n), "gemv_push: ", batch, " x ", n,
              " is not a pushed sum's projection");
  by_batch(batch, [&]<int kBatch, int kRows>() {
    launch_gemv<gemv_push_kernel<kBatch, kRows>, kThreads, false>(GemvRows{n}.groups(kRows), stream, x, w, p, batch,
                                                                    n, k);
  });
}

void gemv(const bf16* x, const bf16* w, bf16* y, int batch, int n, int k, cudaStream_t stream) {
  dispatch(x, w, y, batch, n, k, stream);
}

void gemv_f32(const bf16* x, const bf16* w, float* y, int batch, int n, int k, cudaStream_t stream) {
  dispatch(x, w, y, batch, n, k, stream);
}

void gemv_silu(const bf16* x, const bf16* gate_up, bf16* act, int batch, int half, int k, cudaStream_t stream) {
  if (batch <= 0 || half <= 0) return;
  check_args("gemv_silu", batch, k);
  // The same kernel as gemv for the whole projection (gemv_short_rows of its 2 x half rows).
  if (gemv_short_rows(2 * half, k)) return launch_rows<bf16, true>(x, gate_up, act, batch, half, k, stream);
  by_batch(batch, [&]<int kBatch, int kRows>() {
    launch_gemv<gemv_silu_kernel<kBatch, kRows>, kThreads, false>(GemvPairedRows{half}.groups(kRows), stream, x,
                                                                    gate_up, act, batch, half, k);
  });
}

}  // namespace nvllm::kernels
