// The weight stream shared by the small-batch projections (gemv.cu: bf16 weights; gemv_fp8.cu:
// E4M3 codes): how a block's weights reach it, how its sums leave, and how many blocks run. The
// kernels supply only what one 16-byte chunk of a row means (8 bf16 or 16 codes) and the math.
//
// Layout: a block of kThreads threads owns row groups of kRows output rows (consecutive ones, or a
// gate_up projection's gates and the ups of the same index: GemvRows, GemvPairedRows) and splits
// K among its threads. Step s of a group brings chunk s * kThreads + t of each of the group's rows
// to thread t (one warp load covers 512 contiguous bytes of a row), through a ring of kStages
// slots in shared memory filled by cp.async kGemvAhead steps ahead of the math (kGemvRing: the
// slots, that many or one more). A thread reads back only the slots it filled, so its own
// cp.async.wait_group orders them: the loop has no block barrier. The first kGemvAhead steps are
// issued before the PDL wait (weights are constants): a block made resident while the kernel
// before it runs has its stream going when that kernel ends.
//
// Grid: one block a row group for bf16 weights, every block that fits walking the groups for FP8.
// The ring is what pays: the earlier design loaded a step's chunks into registers, then did its
// math, so a block's memory latency and its math ran in series (the narrow projections streamed
// at 66-75% of the copy rate); with the ring a K of 4,096 is whole in flight before the wait and a
// longer K streams behind the math. A cap on the blocks an SM (set_gemv_blocks_per_sm) turns the
// grid into blocks that each walk an equal share of the groups (blockIdx.x, + gridDim.x, ...), the
// ring running on across a group's end. For the bf16 gemv that is slower in a decode step, as its
// blocks hold every SM slot to the end and the next kernel's blocks cannot arrive early and start
// their own streams (bench/NOTES.md, twenty-third and forty-fourth sessions); the FP8 gemv, whose
// group is half the bytes and whose ring is exactly its look-ahead (9 blocks an SM), gains
// 1.3-2.7% a step from it (forty-fourth session).
//
// A row's sum runs in the same order whatever the batch and the grid: chunk t, t + kThreads, ...
// in each thread, then gemv_block_sums' fixed order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/peer_inbox.cuh"

namespace nvllm::kernels {

// The threads of every gemv_stream kernel's block (gemv.cu, gemv_fp8.cu); the group-end structs
// below give each of them at most one output.
constexpr int kGemvThreads = 128;

// The end of a row group: each thread's partial sums acc[r][b] of the group's kRows rows and
// kBatch sequences, summed over the block (warp sums through `partial`, then in warp order, so a
// row's result does not depend on the batch), and finish(r, b, sum) for every sequence b < batch
// and every row r of the group (the caller skips rows past the matrix).
template <int kThreads, int kRows, int kBatch, typename Finish>
__device__ __forceinline__ void gemv_block_sums(const float (&acc)[kRows][kBatch],
                                                float (&partial)[kThreads / 32][kRows][kBatch], int batch,
                                                Finish finish) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const float v = warp_sum(acc[r][b]);
      if (lane == 0) partial[warp][r][b] = v;
    }
  __syncthreads();
  if (threadIdx.x < kRows * kBatch) {
    const int r = threadIdx.x / kBatch, b = threadIdx.x % kBatch;
    if (b < batch) {
      float v = 0.f;
#pragma unroll
      for (int j = 0; j < kThreads / 32; ++j) v += partial[j][r][b];
      finish(r, b, v);
    }
  }
}

// Which weight rows row group g reads: kRows consecutive ones from g * kRows, of n.
struct GemvRows {
  int n;
  __host__ __device__ int groups(int k_rows) const { return (n + k_rows - 1) / k_rows; }
  // The weight row of the group's row r; -1 past the matrix.
  __device__ __forceinline__ int row(int g, int r, int k_rows) const {
    const int i = g * k_rows + r;
    return i < n ? i : -1;
  }
};
// A gate_up projection's pairs: rows [0, half) are the gates, [half, 2 half) the ups of the same
// index. Group g's first kRows / 2 rows are the gates j = g * kRows / 2 ..., its last kRows / 2
// the ups of the same j, so that the group's end holds both halves of its outputs.
struct GemvPairedRows {
  int half;
  __host__ __device__ int groups(int k_rows) const { return (half + k_rows / 2 - 1) / (k_rows / 2); }
  __device__ __forceinline__ int row(int g, int r, int k_rows) const {
    const int h = k_rows / 2, j = g * h + r % h;
    return j < half ? (r < h ? j : half + j) : -1;
  }
};
// The weight rows of one group (a step's view of the walk).
template <typename Rows, int kRows>
struct GemvGroup {
  Rows rows;
  int g;
  __device__ __forceinline__ int operator()(int r) const { return rows.row(g, r, kRows); }
};

// A paired walk's outputs (GemvPairedRows): finish() keeps the group's products rounded to bf16
// in `out`, and end() writes act[b][j] = silu(gate) * up for the group's pairs with silu_mul's
// arithmetic, so the pair gives the bits of the projection's outputs then silu_mul.
template <int kRows, int kBatch>
struct GemvSiluOut {
  __nv_bfloat16 (&out)[kBatch][kRows];
  __nv_bfloat16* act;
  int half, batch;
  __device__ __forceinline__ void finish(int row, int b, float v) const {
    const int h = kRows / 2;
    out[b][row < half ? row % h : h + (row - half) % h] = __float2bfloat16(v);
  }
  __device__ __forceinline__ void end(int g) const {
    constexpr int h = kRows / 2;
    static_assert(kBatch * h <= kGemvThreads);
    const int b = threadIdx.x / h, i = threadIdx.x % h, j = g * h + i;
    if (b < batch && j < half)
      act[size_t(b) * half + j] =  // the products are stored rounded: silu_mul_one on them as they are
          __float2bfloat16(silu_mul_one(__bfloat162float(out[b][i]), __bfloat162float(out[b][h + i])));
  }
};

// A row-parallel projection's outputs for the pushed sum (gemv_push, gemv_fp8_push; a GemvRows
// walk, kRows even): finish() keeps the group's outputs rounded to bf16 in `out`, and end() sends
// them as words of two rows (the inbox's element pairs) to every rank, this one's too.
template <int kRows, int kBatch>
struct GemvPushOut {
  static_assert(kRows % 2 == 0 && kBatch * kRows / 2 <= kGemvThreads);
  __nv_bfloat162 (&out)[kBatch][kRows / 2];
  const PeerReduce& p;
  int n, batch;
  __device__ __forceinline__ void finish(int row, int b, float v) const {
    __nv_bfloat16* pair = reinterpret_cast<__nv_bfloat16*>(&out[b][(row % kRows) / 2]);
    pair[row % 2] = __float2bfloat16(v);
  }
  __device__ __forceinline__ void end(int g) const {  // after the group's finish calls: this thread's word
    const int b = threadIdx.x / (kRows / 2), j = threadIdx.x % (kRows / 2);
    const int row = g * kRows + 2 * j;
    if (b >= batch || row >= n) return;
    // The sum's call counter: written by the sum before, which ended before this kernel's wait.
    const uint32_t epoch = p.push_epochs[b % kPeerBlocks] + 1;
    const uint64_t word = flagged(reinterpret_cast<const uint32_t&>(out[b][j]), epoch);
    const size_t at = inbox_word(epoch, p.rank, size_t(b) * n + row);
    for (int q = 0; q < p.ranks; ++q) store_word(p.inbox[q] + at, word);
    if (p.trace != nullptr && threadIdx.x == 0)  // a timing tool (PeerReduce::trace)
      atomicMax(trace_call(p, epoch) + kPeerTraceGemvLast, static_cast<unsigned long long>(global_ns()));
  }
};

// Slots of the ring: 16 bytes of each of kRows rows for each thread, kStages deep. The depth in
// flight: 8 row-steps ahead of the math (4 steps of 2 rows, 2 of 4), 16 KB at 128 threads, which
// holds a 16 KB row group (K = 4,096 of bf16 at 2 rows, or of E4M3 codes at 4) whole before the
// wait. The slots: that many, a step's slot refilled once its math has read it; or one more, a
// step's slot refilled before its math (with the step kGemvAhead later, into the slot the step
// before read). The one more is 4 KB of shared memory a block, which is what sets the blocks an
// SM where registers allow more (bench/NOTES.md, fortieth and forty-third sessions):
//   - the FP8 kernels (56 registers at batch 1) take the exact ring: 9 blocks an SM against 8,
//     FP8 Llama-3-8B single stream -2.2%;
//   - the bf16 kernels (28-48 registers) keep the spare slot: 10 blocks an SM; at 13, with the
//     exact ring, the bf16 8B single stream ran 1.1% slower.
// At 16 row-steps (32 KB) shared memory allowed 6 blocks, 24 warps, and ncu found the
// projections' warps waiting on their loads with ~1 eligible a scheduler.
template <int kStages, int kRows, int kThreads>
using GemvSlots = uint4[kStages][kRows][kThreads];
template <int kRows>
constexpr int kGemvAhead = 8 / kRows;
template <int kRows, bool kSpareSlot>
constexpr int kGemvRing = kGemvAhead<kRows> + (kSpareSlot ? 1 : 0);

// A thread's chunk of each row of a step, in its ring slot: chunks[r] is row r's 16 bytes (zeros
// for rows past the matrix's end).
template <int kThreads>
struct GemvChunks {
  const uint4* p;
  __device__ __forceinline__ const uint4& operator[](int r) const { return p[r * kThreads]; }
};

// What a walk does after a group's outputs by default: nothing.
struct GemvNoGroupEnd {
  __device__ void operator()(int) const {}
};

// The walk above for the weight rows `rows` names (GemvRows, GemvPairedRows) of row_bytes each
// (a multiple of 16): step(acc, group, c, ready) for each of this thread's chunks c of a group
// (group(r): the weight row of its row r, -1 past the matrix), where ready() waits for the step's
// weights and returns their GemvChunks (call it after issuing the step's other loads, so that
// their latency runs beside the wait); then finish(row, b, sum) for each output of the group (row:
// the weight row), and group_end(g) in every thread once all of group g's finish calls are done (a
// barrier between; the next group's finish calls come after another). acc is
// float[kRows][kBatch], zeroed per group.
template <int kThreads, int kRows, int kBatch, int kStages, typename Rows, typename Step, typename Finish,
          typename GroupEnd = GemvNoGroupEnd>
__device__ __forceinline__ void gemv_stream(GemvSlots<kStages, kRows, kThreads>& slots,
                                            float (&partial)[kThreads / 32][kRows][kBatch], const void* weights,
                                            Rows rows, int row_bytes, int batch, Step step, Finish finish,
                                            GroupEnd group_end = {}) {
  constexpr int kAhead = kGemvAhead<kRows>;
  static_assert(kStages == kAhead || kStages == kAhead + 1, "a ring of kGemvRing slots");
  constexpr bool kRefillFirst = kStages > kAhead;  // the spare slot: refill before the step's math
  const uint8_t* w = static_cast<const uint8_t*>(weights);
  const int chunks = row_bytes / 16;
  const int steps = (chunks + kThreads - 1) / kThreads;
  const int groups = rows.groups(kRows);
  const int mine = int(blockIdx.x) < groups ? (groups - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x) : 0;
  const int items = mine * steps;  // (group, step) pairs of this block, in walk order

  int issued = 0, issue_group = blockIdx.x, issue_step = 0;
  auto issue_next = [&] {  // one commit group an item, empty past the last: wait counts stay uniform
    if (issued < items) {
      const int c = issue_step * kThreads + threadIdx.x;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {  // rows past the matrix: zeros, nothing read
        const int row = rows.row(issue_group, r, kRows);
        if (c < chunks)
          cp_async16(&slots[issued % kStages][r][threadIdx.x], w + size_t(max(row, 0)) * row_bytes + size_t(c) * 16,
                     row >= 0);
      }
      if (++issue_step == steps) issue_step = 0, issue_group += gridDim.x;
    }
    ++issued;
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kAhead; ++i) issue_next();
  pdl_enter();

  int item = 0;
  for (int g = blockIdx.x; g < groups; g += gridDim.x) {
    const GemvGroup<Rows, kRows> group{rows, g};
    float acc[kRows][kBatch];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int b = 0; b < kBatch; ++b) acc[r][b] = 0.f;
    for (int s = 0; s < steps; ++s, ++item) {
      if constexpr (kRefillFirst) issue_next();  // into the slot the step before this one read
      const int c = s * kThreads + threadIdx.x;
      if (c < chunks) {
        const int slot = item % kStages;
        step(acc, group, c, [&] {
          // This item's group has landed; the ones issued after it (kAhead with the refill first,
          // else kAhead - 1) may still be in flight.
          cp_async_wait<kRefillFirst ? kAhead : kAhead - 1>();
          return GemvChunks<kThreads>{&slots[slot][0][threadIdx.x]};
        });
      }
      if constexpr (!kRefillFirst) issue_next();  // into the slot this step read
    }
    gemv_block_sums<kThreads>(acc, partial, batch, [&](int r, int b, float v) {
      if (const int row = group(r); row >= 0) finish(row, b, v);
    });
    __syncthreads();  // the next group's sums rewrite partial
    group_end(g);
  }
}

int gemv_blocks_per_sm(bool fp8);  // the grid's cap (kernels.h: set_gemv_blocks_per_sm; launch.cu)

// What every gemv_stream projection takes (gemv, gemv_silu, gemv_push and their FP8 forms): at
// most kGemvMaxBatch sequences, rows of whole 16-byte chunks of `per_chunk` weights each (8 bf16
// values, 16 E4M3 codes).
inline void gemv_check_args(const char* what, int batch, int k, int per_chunk) {
  NVLLM_CHECK(batch <= kGemvMaxBatch, what, ": batch ", batch, " is over ", kGemvMaxBatch, "; use the GEMM path");
  NVLLM_CHECK(k % per_chunk == 0, what, ": K = ", k, " must be a multiple of ", per_chunk,
              " (rows of whole 16-byte chunks)");
}

// The device's SMs and how many blocks of `kernel` fit on one at once (threads a block, static
// shared memory only). Ask once per kernel (a static at the call site).
struct GemvFit {
  int sms = 1, per_sm = 1;
};
template <typename Kernel>
GemvFit gemv_fit(Kernel kernel, int threads) {
  GemvFit f;
  f.sms = device_attribute(cudaDevAttrMultiProcessorCount);
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f.per_sm, kernel, threads, 0));
  f.per_sm = std::max(1, f.per_sm);
  return f;
}

// The grid for `groups` row groups of bf16 or FP8 weights: at most gemv_blocks_per_sm(fp8) blocks
// an SM, as many as fit, each the same number of groups (the fewest blocks that give that number);
// one block a group when the cap is 0.
inline int gemv_grid(int groups, GemvFit fit, bool fp8) {
  const int cap = gemv_blocks_per_sm(fp8);
  if (cap <= 0) return groups;
  const int most = fit.sms * std::min(cap, fit.per_sm);
  return ceil_div(groups, ceil_div(groups, most));
}

// Launches kKernel (a gemv_stream kernel of kThreads threads, kFp8: of E4M3 weights) over `groups`
// row groups (its rows' groups(kRows): GemvRows, GemvPairedRows) with PDL, on gemv_grid's grid;
// the fit is asked once per kernel.
template <auto kKernel, int kThreads, bool kFp8, typename... Args>
void launch_gemv(int groups, cudaStream_t stream, Args&&... args) {
  static const GemvFit fit = gemv_fit(kKernel, kThreads);
  launch_pdl(kKernel, dim3(gemv_grid(groups, fit, kFp8)), dim3(kThreads), 0, stream,
             std::forward<Args>(args)...);
}

}  // namespace nvllm::kernels
