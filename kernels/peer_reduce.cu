// The tensor-parallel sum over peer memory: every rank's GPU reads the others' staging buffers
// directly (NVLink peer access inside one process), in one kernel that can also do the residual
// step that follows it (add_rmsnorm). A decode token's all-reduce moves kilobytes: its time is
// latency (NCCL ~6.4 us for 8 KB on 2 GPUs, bench/NOTES.md), and the add + RMSNorm after it is a
// second launch. Here: copy in, one flag round trip over NVLink, read the peers' rows, sum, norm.
//
// Synchronisation (kernels.h, PeerReduce): block b of every rank stages the same rows (the grid
// is always kPeerBlocks and the rows are split alike), then stores its epoch in block b's slot of
// every rank's signals (release, system scope) and waits until every rank's epoch has reached
// its own (acquire), so the rows it then reads are written. The staging alternates between two
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

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
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

// Rows r = blockIdx.x, + gridDim.x, ... of x [tokens, hidden] (hidden % 8 == 0).
template <bool kNorm>
__global__ void peer_reduce_kernel(PeerReduce p, bf16* x, bf16* __restrict__ residual, const bf16* __restrict__ weight,
                                   int tokens, int hidden, float eps) {
  pdl_wait();
  __shared__ float scratch[32];
  __shared__ uint32_t epoch_shared;
  if (threadIdx.x == 0) epoch_shared = p.epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_shared;
  const size_t half = (epoch & 1u) * p.capacity;
  bf16* mine = p.buffers[p.rank] + half;
  for (int row = blockIdx.x; row < tokens; row += gridDim.x) {
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
  for (int row = blockIdx.x; row < tokens; row += gridDim.x) {
    const size_t base = static_cast<size_t>(row) * hidden;
    float sum_sq = 0.f;
    for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) {
      // The same order of ranks on every rank, so all ranks hold the same sum, bit for bit.
      float acc[8] = {};
      for (int r = 0; r < p.ranks; ++r) {
        const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(p.buffers[r] + half + base + i));
        float v[8];
        to_float8(*reinterpret_cast<const Bf16x8*>(&raw), v);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += v[j];
      }
      if constexpr (kNorm) {  // as all-reduce then add_rmsnorm: residual = bf16(bf16(sum) + residual)
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

}  // namespace

bool peer_reduce_fits(const PeerReduce& p, int tokens, int hidden) {
  return p.ranks >= 2 && p.ranks <= kPeerMaxRanks && hidden % 8 == 0 && tokens >= 0 &&
         static_cast<size_t>(tokens) * hidden <= p.capacity;
}

void peer_all_reduce(const PeerReduce& p, bf16* x, bf16* residual, const bf16* weight, int tokens, int hidden,
                     float eps, cudaStream_t stream) {
  NVLLM_CHECK(peer_reduce_fits(p, tokens, hidden), "peer_all_reduce: ", tokens, " x ", hidden,
                     " does not fit the staging of ", p.capacity, " elements on ", p.ranks, " ranks");
  // Every call launches all kPeerBlocks blocks, even for fewer rows: each block's epoch must
  // advance with every call for the barrier's arithmetic (above).
  const int threads = std::clamp((hidden / 8 + 31) / 32 * 32, 32, 512);
  if (weight != nullptr)
    launch_pdl(peer_reduce_kernel<true>, dim3(kPeerBlocks), dim3(threads), 0, stream, p, x, residual, weight, tokens,
               hidden, eps);
  else
    launch_pdl(peer_reduce_kernel<false>, dim3(kPeerBlocks), dim3(threads), 0, stream, p, x, residual, weight,
               tokens, hidden, eps);
}

}  // namespace nvllm::kernels
