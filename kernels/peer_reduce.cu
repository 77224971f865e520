// The tensor-parallel sum over peer memory (NVLink peer access inside one process), in one kernel
// that can also do the residual step that follows it (add_rmsnorm). A decode token's all-reduce
// moves kilobytes: its time is latency (NCCL ~6.4 us for 8 KB on 2 GPUs, bench/NOTES.md), and the
// add + RMSNorm after it is a second launch. Two kernels, the same sums bit for bit:
//  - pushed (sums of at most kPeerPushElems elements, peer_reduce_push_kernel): each rank stores
//    its rows into every peer's inbox as words that carry their own flag, then polls its own
//    inbox: one one-way trip. 1 x 4,096 on 2 H200s: 3.8 us against the barrier's 5.8. Where the
//    projection before it pushed its rows itself (gemv.cu's gemv_push), peer_reduce_pushed_kernel
//    only polls.
//  - the barrier (larger sums, or no inboxes): copy in, one flag round trip over NVLink, read the
//    peers' rows: a one-way trip and a read round trip, but the data's bytes only once.
//
// The barrier's synchronisation (kernels.h, PeerReduce): block b of every rank stages the same
// rows (every call's sum blocks are kPeerBlocks, the rows split alike; blocks past them only ask
// L2 for the next projection's weights, kernels::L2Ahead), then stores its epoch in
// block b's slot of every rank's signals (release, system scope) and waits until every rank's
// epoch has reached its own (acquire), so the rows it then reads are written. The staging alternates between two
// halves by epoch parity: a rank can write half p again (epoch e + 2) only after passing epoch
// e + 1's barrier, which every peer reaches only after its epoch-e kernel (and its reads) ended:
// kernels of one stream run in order, and under PDL each waits for the one before it first
// (launch.cuh). So no second barrier is needed at the end.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"
#include "kernels/peer_inbox.cuh"

namespace nvllm::kernels {
namespace {

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The trace's row for a pushed call (PeerReduce::trace), or null: stamps by block 0's thread 0.
__device__ __forceinline__ unsigned long long* trace_row(const PeerReduce& p, uint32_t epoch) {
  return p.trace != nullptr && blockIdx.x == 0 && threadIdx.x == 0 ? trace_call(p, epoch) : nullptr;
}

// Waits until the slot holds `epoch` or a later one (wrap-safe), or the host sets `abort`
// (a rank failed and will never arrive; the results are then discarded with the run). The
// abort flag lives in host memory: read only once a wait has lasted 50 us.
__device__ __forceinline__ void wait_epoch(const uint32_t* slot, uint32_t epoch, const volatile uint32_t* abort) {
  const uint64_t start = global_ns();
  while (static_cast<int32_t>(load_acquire_sys(slot) - epoch) < 0) {
    if (global_ns() - start > 50000 && *abort != 0) return;
  }
}

// Adds eight bf16 (a 16-byte chunk) to acc.
__device__ __forceinline__ void add8(float (&acc)[8], uint4 raw) {
  float v[8];
  to_float8(*reinterpret_cast<const Bf16x8*>(&raw), v);
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] += v[j];
}

// The block's rows r = blockIdx.x, + kPeerBlocks, ... of x [tokens, hidden] once every rank's part
// can be read: chunk(r, e) gives rank r's 16 bytes at element e. Summed in rank order on every
// rank (identical results everywhere), then as all-reduce and add_rmsnorm compute it, or the sum
// alone (no norm).
template <bool kNorm, typename Chunk>
__device__ __forceinline__ void finish_rows(bf16* x, bf16* __restrict__ residual, const bf16* __restrict__ weight,
                                            int tokens, int hidden, float eps, int ranks, float* scratch, Chunk chunk) {
  for (int row = blockIdx.x; row < tokens; row += kPeerBlocks) {
    const size_t base = static_cast<size_t>(row) * hidden;
    float sum_sq = 0.f;
    for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
      float acc[8] = {};
      for (int r = 0; r < ranks; ++r) add8(acc, chunk(r, base + i));
      if constexpr (kNorm) {  // residual = bf16(bf16(sum) + residual)
        float res[8];
        to_float8(load8(residual + base + i), res);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          acc[j] = round_bf16(round_bf16(acc[j]) + res[j]);
          sum_sq += acc[j] * acc[j];
        }
        store8(residual + base + i, from_float8(acc));
      } else {
        store8(x + base + i, from_float8(acc));
      }
    }
    if constexpr (kNorm) {
      // Each thread reads back only the residual groups it wrote itself (rmsnorm.cu's pattern).
      const float rstd = rsqrtf(block_sum(sum_sq, scratch) / hidden + eps);
      for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
        float v[8], w[8];
        to_float8(load8(residual + base + i), v);
        to_float8(load8(weight + i), w);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = w[j] * round_bf16(v[j] * rstd);
        store8(x + base + i, from_float8(v));
      }
    }
  }
}

// The barrier sum. Rows r = blockIdx.x, + kPeerBlocks, ... of x [tokens, hidden] (hidden % 8 == 0).
template <bool kNorm>
__global__ void peer_reduce_kernel(PeerReduce p, bf16* x, bf16* __restrict__ residual, const bf16* __restrict__ weight,
                                   int tokens, int hidden, float eps, L2Ahead ahead) {
  if (int(blockIdx.x) >= kPeerBlocks)  // a block that only asks L2
    return l2_ahead_block(ahead, int(blockIdx.x) - kPeerBlocks, int(gridDim.x) - kPeerBlocks);
  pdl_wait();
  __shared__ float scratch[32];
  __shared__ uint32_t epoch_shared;
  if (threadIdx.x == 0) epoch_shared = p.epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_shared;
  const size_t half = (epoch & 1u) * p.capacity;
  bf16* mine = p.buffers[p.rank] + half;
  for (int row = blockIdx.x; row < tokens; row += kPeerBlocks) {
    const size_t base = static_cast<size_t>(row) * hidden;
    for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) store8(mine + base + i, load8(x + base + i));
  }
  pdl_launch_dependents();
  __syncthreads();  // the block's rows are staged before any thread signals
  if (threadIdx.x < p.ranks) {
    const size_t slot = static_cast<size_t>(blockIdx.x) * kPeerMaxRanks;
    store_release_sys(p.signals[threadIdx.x] + slot + p.rank, epoch);
    wait_epoch(p.signals[p.rank] + slot + threadIdx.x, epoch, p.abort);
  }
  if (threadIdx.x == 0) p.epochs[blockIdx.x] = epoch;
  __syncthreads();
  finish_rows<kNorm>(x, residual, weight, tokens, hidden, eps, p.ranks, scratch, [&](int r, size_t e) {
    return __ldcg(reinterpret_cast<const uint4*>(p.buffers[r] + half + e));
  });
}

// The pushed sum (sums of at most kPeerPushElems elements). A decode step's sum is latency: the
// barrier above costs a one-way trip for the flags and then a read round trip for the rows. Here
// each rank writes its rows straight into every peer's inbox as 8-byte words of two bf16 and the
// call's epoch (an 8-byte store lands whole), and each rank polls its own inbox until every word
// it needs carries this call's epoch: one one-way trip, no flag, no barrier. Twice the bytes of
// the data, which is why large sums take the barrier.
//
// Reuse: the inbox alternates halves by epoch parity, and a word of a stale half holds an older
// epoch, so it never passes for this call's. A rank writes half h again (epoch e + 2) only after
// receiving every peer's epoch e + 1 words, which a peer sends only from its next call's kernel,
// after its epoch-e kernel (and its reads of half h) ended: kernels of one stream run in order,
// and under PDL each waits for the one before it first (launch.cuh). Block b of every rank takes
// the same rows and counts its calls in push_epochs[b], so the epochs agree.
__device__ __forceinline__ void load_words(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];\n" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

// The 16 data bytes of the four words at p once all carry `epoch` (zeros if the host aborts the
// run while this waits: a rank failed and will never send).
__device__ __forceinline__ uint4 receive16(const uint64_t* p, uint32_t epoch, const volatile uint32_t* abort) {
  uint64_t a, b, c, d;
  uint64_t start = 0;
  for (uint32_t spins = 0;; ++spins) {
    load_words(p, a, b);
    load_words(p + 2, c, d);
    if (static_cast<uint32_t>(a >> 32) == epoch && static_cast<uint32_t>(b >> 32) == epoch &&
        static_cast<uint32_t>(c >> 32) == epoch && static_cast<uint32_t>(d >> 32) == epoch)
      break;
    if (spins == 64) start = global_ns();
    if (spins > 64) {
      __nanosleep(32);
      if ((spins & 255) == 0 && global_ns() - start > 50000 && *abort != 0) return make_uint4(0, 0, 0, 0);
    }
  }
  return make_uint4(static_cast<uint32_t>(a), static_cast<uint32_t>(b), static_cast<uint32_t>(c),
                    static_cast<uint32_t>(d));
}

// Its dependents may launch at once, before this kernel's own wait: its kPeerBlocks blocks are all
// resident from the start, so the next projection's blocks take the free SM slots and issue their
// first weight loads while the projection before this one ends and while this one waits for its
// peers (a decode sum costs ~4-6 us, all of it on the step's path otherwise). Their own pdl_wait
// still waits for this kernel to end (launch.cuh).
template <bool kNorm>
__global__ void peer_reduce_push_kernel(PeerReduce p, bf16* x, bf16* __restrict__ residual,
                                        const bf16* __restrict__ weight, int tokens, int hidden, float eps, L2Ahead ahead) {
  if (int(blockIdx.x) >= kPeerBlocks)  // a block that only asks L2
    return l2_ahead_block(ahead, int(blockIdx.x) - kPeerBlocks, int(gridDim.x) - kPeerBlocks);
  const uint64_t entered = global_ns();
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float scratch[32];
  const uint32_t epoch = p.push_epochs[blockIdx.x] + 1;  // the same value in every thread
  unsigned long long* trace = trace_row(p, epoch);
  if (trace) {
    trace[kPeerTraceKind] = 1;
    trace[kPeerTraceEntry] = entered;
    trace[kPeerTraceWaited] = global_ns();
    trace[kPeerTraceTokens] = tokens;
  }
  for (int row = blockIdx.x; row < tokens; row += kPeerBlocks)
    for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
      const size_t e = static_cast<size_t>(row) * hidden + i;
      const uint4 v = *reinterpret_cast<const uint4*>(x + e);
      const uint64_t w0 = flagged(v.x, epoch), w1 = flagged(v.y, epoch), w2 = flagged(v.z, epoch),
                     w3 = flagged(v.w, epoch);
      for (int q = 0; q < p.ranks; ++q) {
        if (q == p.rank) continue;
        uint64_t* dst = p.inbox[q] + inbox_word(epoch, p.rank, e);
        store_words(dst, w0, w1);
        store_words(dst + 2, w2, w3);
      }
    }
  finish_rows<kNorm>(x, residual, weight, tokens, hidden, eps, p.ranks, scratch, [&](int r, size_t e) {
    const uint4 v = r == p.rank ? *reinterpret_cast<const uint4*>(x + e)
                                : receive16(p.inbox[p.rank] + inbox_word(epoch, r, e), epoch, p.abort);
    if (trace && e == 0 && r == p.ranks - 1) trace[kPeerTraceReady] = global_ns();
    return v;
  });
  if (trace) trace[kPeerTraceEnd] = global_ns();
  __syncthreads();  // every thread has read the epoch
  if (threadIdx.x == 0) p.push_epochs[blockIdx.x] = epoch;
}

// The pushed sum whose partials the projection before it delivered (gemv_push: every rank's
// rows, this rank's own too, are in this rank's inbox as flagged words), so no pushes here and no
// wait for the projection to end before polling: the rows count from the moment the projection's
// last block wrote them, not from its grid's end. Everything else this kernel touches (the
// residual, its epochs) was written by kernels that ended before the projection passed its own
// wait. Its wait comes last, so that it ends only after the projection has (the kernels after it
// rely on each kernel's end implying its predecessors').
template <bool kNorm>
__global__ void peer_reduce_pushed_kernel(PeerReduce p, bf16* x, bf16* __restrict__ residual,
                                          const bf16* __restrict__ weight, int tokens, int hidden, float eps, L2Ahead ahead) {
  if (int(blockIdx.x) >= kPeerBlocks)  // a block that only asks L2
    return l2_ahead_block(ahead, int(blockIdx.x) - kPeerBlocks, int(gridDim.x) - kPeerBlocks);
  const uint64_t entered = global_ns();
  pdl_launch_dependents();
  __shared__ float scratch[32];
  const uint32_t epoch = p.push_epochs[blockIdx.x] + 1;
  unsigned long long* trace = trace_row(p, epoch);
  if (trace) {
    trace[kPeerTraceKind] = 2;
    trace[kPeerTraceEntry] = entered;
    trace[kPeerTraceWaited] = 0;
    trace[kPeerTraceTokens] = tokens;
  }
  finish_rows<kNorm>(x, residual, weight, tokens, hidden, eps, p.ranks, scratch, [&](int r, size_t e) {
    const uint4 v = receive16(p.inbox[p.rank] + inbox_word(epoch, r, e), epoch, p.abort);
    if (trace && e == 0 && r == p.ranks - 1) trace[kPeerTraceReady] = global_ns();
    return v;
  });
  if (trace) trace[kPeerTraceEnd] = global_ns();
  __syncthreads();
  if (threadIdx.x == 0) p.push_epochs[blockIdx.x] = epoch;
  pdl_wait();
}

// A sum kernel's instance with the norm (weight given) or without, on every call's kPeerBlocks
// blocks (each block's epoch must advance with every call, even for fewer rows, for each kernel's
// arithmetic above), a thread per 8 elements up to 512.
using SumKernel = void (*)(PeerReduce, bf16*, bf16*, const bf16*, int, int, float, L2Ahead);
void launch_sum(SumKernel with_norm, SumKernel sum_only, const PeerReduce& p, bf16* x, bf16* residual,
                const bf16* weight, int tokens, int hidden, float eps, cudaStream_t stream, L2Ahead ahead) {
  const int threads = std::clamp((hidden / 8 + 31) / 32 * 32, 32, 512);
  launch_pdl(weight != nullptr ? with_norm : sum_only, dim3(kPeerBlocks + l2_ahead_blocks(ahead)), dim3(threads), 0,
             stream, p, x, residual, weight, tokens, hidden, eps, ahead);
}

}  // namespace

bool peer_reduce_fits(const PeerReduce& p, int tokens, int hidden) {
  return p.ranks >= 2 && p.ranks <= kPeerMaxRanks && hidden % 8 == 0 && tokens >= 0 &&
         static_cast<size_t>(tokens) * hidden <= p.capacity;
}

bool peer_push_fits(const PeerReduce& p, int tokens, int hidden) {
  return peer_reduce_fits(p, tokens, hidden) && p.inbox[p.rank] != nullptr &&
         static_cast<size_t>(tokens) * hidden <= kPeerPushElems;
}

void peer_all_reduce(const PeerReduce& p, bf16* x, bf16* residual, const bf16* weight, int tokens, int hidden,
                     float eps, cudaStream_t stream, L2Ahead ahead) {
  NVLLM_CHECK(peer_reduce_fits(p, tokens, hidden), "peer_all_reduce: ", tokens, " x ", hidden,
                     " does not fit the staging of ", p.capacity, " elements on ", p.ranks, " ranks");
  if (peer_push_fits(p, tokens, hidden))
    launch_sum(peer_reduce_push_kernel<true>, peer_reduce_push_kernel<false>, p, x, residual, weight, tokens, hidden,
               eps, stream, ahead);
  else
    launch_sum(peer_reduce_kernel<true>, peer_reduce_kernel<false>, p, x, residual, weight, tokens, hidden, eps,
               stream, ahead);
}

void peer_reduce_pushed(const PeerReduce& p, bf16* x, bf16* residual, const bf16* weight, int tokens, int hidden,
                        float eps, cudaStream_t stream, L2Ahead ahead) {
  NVLLM_CHECK(peer_push_fits(p, tokens, hidden), "peer_reduce_pushed: ", tokens, " x ", hidden,
              " is not a pushed sum on ", p.ranks, " ranks");
  launch_sum(peer_reduce_pushed_kernel<true>, peer_reduce_pushed_kernel<false>, p, x, residual, weight, tokens,
             hidden, eps, stream, ahead);
}

}  // namespace nvllm::kernels
