// Timing case (skipped unless asked for: nvllm_gpu_tests -ns -tc='bench.launch_chain*'): what a
// kernel launch costs a chain of dependent weight-streaming phases, the shape of a decode step on
// the separate kernels (qkv, norm, attention, o, ... each waiting for the one before). Each phase
// reads its own `bytes` of weights (every phase a fresh region: 40 phases of up to 50 MB, far past
// the 50 MB L2) and needs one value the phase before it wrote. Three ways, each a CUDA graph,
// median of 20 replays (graph_median_us):
//  - chain: one launch a phase, with PDL (launch.cuh): a block issues its weight loads before its
//    griddepcontrol.wait, as the best of the separate kernels do (gemv's L2 prefetch goes further
//    only in that it starts earlier);
//  - persistent: one launch, as many blocks as fit the SMs at once, walking the phases with a
//    grid-wide flag barrier between them; a block issues its next phase's loads before it waits;
//  - walk: one block an SM a phase, with and without a whole SM's shared memory, which keeps the
//    next phase's blocks off the SM until this one leaves (the fused path's streamed kernels);
//    each waiting for the phase before it by griddepcontrol.wait or by polling per-phase done
//    counters (chain_phase_walk's kWait; on the H200 the poll was the slower, bench/NOTES.md
//    fifty-fourth session).
// The difference a phase is the fixed cost the launches add (issue 23's ~31 us a layer, bench/NOTES.md
// twenty-first and twenty-second sessions). Every way is checked against the sum the host expects.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>

#include "kernels/cuda_check.h"
#include "kernels/kernel_test_util.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels::test {
namespace {

constexpr int kThreads = 128;
constexpr int kChunkWords = 4096;  // 16 KB of uint32 words a chunk: 8 16-byte loads a thread
constexpr int kLoads = kChunkWords / 4 / kThreads;

// A chunk's words, this thread's share, loaded (not yet summed).
struct Loaded {
  uint4 v[kLoads];
};
__device__ __forceinline__ void load_chunk(Loaded& l, const uint32_t* w, size_t chunk) {
  const uint4* p = reinterpret_cast<const uint4*>(w + chunk * kChunkWords);
#pragma unroll
  for (int i = 0; i < kLoads; ++i) l.v[i] = __ldcs(p + threadIdx.x + i * kThreads);
}
// The chunk's sum (mod 2^32) over the block, plus the previous phase's value; thread 0 has it.
__device__ __forceinline__ uint32_t sum_chunk(const Loaded& l, uint32_t* scratch) {
  uint32_t s = 0;
#pragma unroll
  for (int i = 0; i < kLoads; ++i) s += l.v[i].x + l.v[i].y + l.v[i].z + l.v[i].w;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __syncthreads();  // scratch may still be read
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = s;
  __syncthreads();
  return threadIdx.x == 0 ? scratch[0] + scratch[1] + scratch[2] + scratch[3] : 0;
}

// Phase p of the chain: out[c] = sum of chunk c of phase p's region + in[0] (phase p - 1's chunk 0).
__global__ void __launch_bounds__(kThreads) chain_phase(const uint32_t* w, const uint32_t* in, uint32_t* out) {
  __shared__ uint32_t scratch[kThreads / 32];
  Loaded l;
  load_chunk(l, w, blockIdx.x);  // weights are constants: before the wait
  pdl_enter();
  const uint32_t s = sum_chunk(l, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = s + (in != nullptr ? __ldcg(in) : 0u);
}

// Phase p as one block an SM walking chunks c = blockIdx.x, + gridDim.x, ... (the first loaded
// before the wait). Launched with a whole SM's shared memory (unused), no block of the next phase
// starts beside it, as with the fused path's streamed kernels (~215 KB a CTA); with none, the
// next phase's blocks start and issue their loads while this one runs. How a block waits for the
// phase before it (kWait):
//  - kEnter: griddepcontrol.wait, then the trigger that lets the next phase launch;
//  - kEarly: the trigger first, then griddepcontrol.wait (the fused kernels' order);
//  - kFlag: the trigger first, then a poll of done[p - 1] until every block of phase p - 1 has
//    counted itself there (release / acquire at gpu scope), no griddepcontrol.wait at all: the
//    wait ends when the last block's results are out, not when its grid has retired.
enum WalkWait { kEnter, kEarly, kFlag };
template <int kWait>
__global__ void __launch_bounds__(kThreads) chain_phase_walk(const uint32_t* w, const uint32_t* in, uint32_t* out,
                                                             int chunks, unsigned* done, int p) {
  __shared__ uint32_t scratch[kThreads / 32];
  Loaded l;
  int c = blockIdx.x;
  if (c < chunks) load_chunk(l, w, c);
  if constexpr (kWait == kEnter) {
    pdl_enter();
  } else {
    pdl_launch_dependents();
    if constexpr (kWait == kEarly) {
      pdl_wait();
    } else if (p > 0) {
      if (threadIdx.x == 0) {
        unsigned n = 0;
        do {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(n) : "l"(done + p - 1) : "memory");
        } while (n < gridDim.x);
      }
      __syncthreads();
    }
  }
  const uint32_t prev = in != nullptr ? __ldcg(in) : 0u;
  for (; c < chunks; c += gridDim.x) {
    if (c != int(blockIdx.x)) load_chunk(l, w, c);
    const uint32_t s = sum_chunk(l, scratch);
    if (threadIdx.x == 0) out[c] = s + prev;
  }
  if constexpr (kWait == kFlag) {
    __syncthreads();  // every thread's stores before the count (thread 0 made them all here)
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(done + p) : "memory");
  }
}

// All phases in one grid. `arrived` counts blocks past each phase (zero before the launch).
__global__ void __launch_bounds__(kThreads) persistent_phases(const uint32_t* w, int phases, int chunks,
                                                               uint32_t* outs, unsigned* arrived) {
  __shared__ uint32_t scratch[kThreads / 32];
  for (int p = 0; p < phases; ++p) {
    const uint32_t* wp = w + size_t(p) * chunks * kChunkWords;
    uint32_t* out = outs + size_t(p) * chunks;
    int c = blockIdx.x;
    Loaded l;
    if (c < chunks) load_chunk(l, wp, c);  // before the barrier: this phase's first chunk
    if (p > 0) {  // wait for every block to be past phase p - 1
      if (threadIdx.x == 0) {
        const unsigned target = unsigned(p) * gridDim.x;
        while (atomicAdd(arrived, 0u) < target) __nanosleep(32);
        __threadfence();
      }
      __syncthreads();
    }
    const uint32_t prev = p > 0 ? __ldcg(outs + size_t(p - 1) * chunks) : 0u;
    for (; c < chunks; c += gridDim.x) {
      if (c != int(blockIdx.x)) load_chunk(l, wp, c);
      const uint32_t s = sum_chunk(l, scratch);
      if (threadIdx.x == 0) out[c] = s + prev;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(arrived, 1u);
    }
  }
}

}  // namespace

TEST_CASE("bench.launch_chain: dependent weight-streaming phases, a launch each vs one persistent grid" *
          doctest::skip()) {
  constexpr int kPhases = 40;
  const size_t max_bytes = size_t{50} << 20;
  DeviceBuffer<uint32_t> w(max_bytes / 4 * kPhases);
  CUDA_CHECK(cudaMemset(w.get(), 1, w.size() * 4));  // every word 0x01010101
  const size_t max_chunks = max_bytes / (kChunkWords * 4);
  DeviceBuffer<uint32_t> outs(max_chunks * kPhases);
  DeviceBuffer<unsigned> arrived(1), done(kPhases);
  int device = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_phases, kThreads, 0));
  const int grid = sms * per_sm;
  // chain_phase_walk alone on its SM: all the dynamic shared memory a block may take.
  int walk_smem = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&walk_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  walk_smem -= int(kThreads / 32 * sizeof(uint32_t));
  // The walk's instantiations, indexed by WalkWait.
  decltype(&chain_phase_walk<kEnter>) const walks[] = {chain_phase_walk<kEnter>, chain_phase_walk<kEarly>,
                                                       chain_phase_walk<kFlag>};
  for (auto* kernel : walks)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, walk_smem));
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("launch_chain: %d phases, %d SMs x %d blocks resident for the persistent grid\n", kPhases, sms, per_sm);
  for (const size_t mb : {2, 4, 8, 12, 25, 50}) {
    const int chunks = int((mb << 20) / (kChunkWords * 4));
    const uint32_t chunk_sum = uint32_t(kChunkWords) * 0x01010101u;
    const uint32_t expect = chunk_sum * kPhases;  // phase p's chunk 0: (p + 1) sums
    outs.poison();
    const double chain_us = graph_median_us(s, [&] {
      for (int p = 0; p < kPhases; ++p)
        launch_pdl(chain_phase, dim3(chunks), dim3(kThreads), 0, s, w.get() + size_t(p) * chunks * kChunkWords,
                   p > 0 ? outs.get() + size_t(p - 1) * chunks : static_cast<const uint32_t*>(nullptr),
                   outs.get() + size_t(p) * chunks);
    });
    const uint32_t chain_last = outs.download()[size_t(kPhases - 1) * chunks];
    outs.poison();
    const double persistent_us = graph_median_us(s, [&] {
      CUDA_CHECK(cudaMemsetAsync(arrived.get(), 0, sizeof(unsigned), s));
      persistent_phases<<<grid, kThreads, 0, s>>>(w.get(), kPhases, chunks, outs.get(), arrived.get());
      CUDA_CHECK(cudaGetLastError());
    });
    const uint32_t persistent_last = outs.download()[size_t(kPhases - 1) * chunks];
    // One block an SM, the next phase's blocks beside it or not (the SM's shared memory taken),
    // and the three ways to wait.
    double walk_us[2][3];
    for (const bool alone : {false, true}) {
      const size_t smem = alone ? size_t(walk_smem) : 0;
      for (const int wait : {kEnter, kEarly, kFlag}) {
        auto* kernel = walks[wait];
        outs.poison();
        walk_us[alone][wait] = graph_median_us(s, [&] {
          CUDA_CHECK(cudaMemsetAsync(done.get(), 0, kPhases * sizeof(unsigned), s));
          for (int p = 0; p < kPhases; ++p)
            launch_pdl(kernel, dim3(sms), dim3(kThreads), smem, s, w.get() + size_t(p) * chunks * kChunkWords,
                       p > 0 ? outs.get() + size_t(p - 1) * chunks : static_cast<const uint32_t*>(nullptr),
                       outs.get() + size_t(p) * chunks, chunks, done.get(), p);
        });
        CHECK(outs.download()[size_t(kPhases - 1) * chunks] == expect);
      }
      std::printf("launch_chain: %3zu MB a phase, one block an SM %s: us a phase waiting by grid (enter %.2f, "
                  "trigger first %.2f), by flags %.2f\n",
                  mb, alone ? "alone on its SM" : "beside the next phase", walk_us[alone][kEnter] / kPhases,
                  walk_us[alone][kEarly] / kPhases, walk_us[alone][kFlag] / kPhases);
    }
    const double bytes_us = double(chunks) * kChunkWords * 4 / 3.03e12 * 1e6;
    std::printf("launch_chain: %3zu MB a phase (%.2f us at 3.03 TB/s): chain %.2f us a phase (%.0f%%), persistent "
                "%.2f us (%.0f%%); %.2f us a phase saved\n",
                mb, bytes_us, chain_us / kPhases, 100 * bytes_us * kPhases / chain_us, persistent_us / kPhases,
                100 * bytes_us * kPhases / persistent_us, (chain_us - persistent_us) / kPhases);
    CHECK(chain_last == expect);
    CHECK(persistent_last == expect);
  }
  CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace nvllm::kernels::test
