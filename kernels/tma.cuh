// Hopper (sm_90) bulk asynchronous copies: the TMA engine moves a contiguous run of global
// memory into shared memory and counts the bytes on an mbarrier, so one thread starts a copy of
// a whole weight slice and the block waits for it later; bulk L2 prefetches; and the pieces of
// thread-block clusters (barriers, addresses and pushes into another CTA's shared memory). Every
// function compiles to nothing before sm_90 (the kernels that use them are only launched on
// sm_90+; prefetch_l2_bytes falls back to per-line prefetches).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"

namespace nvllm::kernels {

[[maybe_unused]] __device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// An mbarrier expecting `arrivals` arrivals a phase (by default one: the thread that posts the
// byte count).
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned arrivals = 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival on the barrier's current phase (no bytes).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#endif
}

// One thread: the barrier's current phase completes once `bytes` have landed.
__device__ __forceinline__ void mbar_expect(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}

// One thread: [src, src + bytes) to shared dst, in 32 KB pieces, counted on bar. Both 16-byte
// aligned, bytes a multiple of 16. kStream: data read once per step (weights), marked
// evict-first in L2 so that it does not push out what is reused (code, activations, K/V).
template <bool kStream = false>
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr unsigned kPiece = 32768;
  uint64_t policy = 0;
  if constexpr (kStream) policy = l2_evict_first();
  for (unsigned o = 0; o < bytes; o += kPiece) {
    if constexpr (kStream) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
              smem_addr(dst) + o),
          "l"(static_cast<const char*>(src) + o), "r"(min(kPiece, bytes - o)), "r"(smem_addr(bar)), "l"(policy)
          : "memory");
    } else {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                       smem_addr(dst) + o),
                   "l"(static_cast<const char*>(src) + o), "r"(min(kPiece, bytes - o)), "r"(smem_addr(bar))
                   : "memory");
    }
  }
#endif
}

// Every thread that reads the copied data: until the phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// Asks L2 for the 128-byte line holding p: one thread's instruction, where a bulk prefetch from
// each lane of a warp goes out one lane at a time (the bulk prefetch takes a uniform register).
__device__ __forceinline__ void prefetch_l2_line(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Asks L2 for [p, p + bytes): p 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void prefetch_l2_bytes(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#else
  for (unsigned o = 0; o < bytes; o += 128) prefetch_l2_line(static_cast<const char*>(p) + o);
#endif
}

// kernels::L2Ahead's request, spread in pieces of 16 KB over `count` blocks (this one is
// `index` of them): piece i goes to block i % count, so that every SM asks for a share (an SM
// issues bulk prefetches at a limited rate: the whole request from one block made each small
// kernel last ~20 us per 8 MB).
template <typename Ahead>
__device__ __forceinline__ void l2_ahead(const Ahead& a, int index, int count) {
  constexpr size_t kPiece = 16384;
  const size_t pieces = (a.bytes + kPiece - 1) / kPiece;
  for (size_t i = size_t(index) + size_t(count) * threadIdx.x; i < pieces; i += size_t(count) * blockDim.x)
    prefetch_l2_bytes(static_cast<const char*>(a.p) + i * kPiece, unsigned(min(kPiece, a.bytes - i * kPiece)));
}

// The body of a block that a small kernel adds past its own work only to ask L2 for the next
// projection's weights (kernels::L2Ahead, l2_ahead above): it lets the next kernel launch
// first (an asking block must not hold it back), asks, and waits like every block.
template <typename Ahead>
__device__ __forceinline__ void l2_ahead_block(const Ahead& a, int index, int count) {
  pdl_launch_dependents();
  l2_ahead(a, index, count);
  pdl_wait();
}

// --- Pushes into another CTA's shared memory within a cluster, counted on its mbarrier ---

// Cluster barrier halves (sm_90): arrive (release: this CTA's shared-memory writes, remote ones
// included, become visible to the others) and wait (acquire).
[[maybe_unused]] __device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
[[maybe_unused]] __device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// The address of `p` (this CTA's shared memory) in CTA `rank` of the cluster.
__device__ __forceinline__ unsigned cluster_addr(const void* p, unsigned rank) {
  unsigned r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
#endif
  return r;
}

// The value at this CTA's shared-memory address `p` as CTA `rank` of the cluster holds it: a T of
// 4 or 8 bytes (float, int, unsigned, uint64_t), its bits as stored.
template <typename T>
__device__ __forceinline__ T load_remote(const T* p, int rank) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "load_remote: a 4- or 8-byte word");
  using Word = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  Word v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned addr = cluster_addr(p, static_cast<unsigned>(rank));
  if constexpr (sizeof(T) == 4)
    asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  else
    asm volatile("ld.shared::cluster.u64 %0, [%1];\n" : "=l"(v) : "r"(addr) : "memory");
#endif
  T t;
  memcpy(&t, &v, sizeof(T));
  return t;
}

// Every thread of every CTA of the cluster has arrived: its shared-memory writes are visible.
[[maybe_unused]] __device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// Stores 16 (8, 4) bytes at `dst` in another CTA's shared memory (cluster_addr) and counts them
// on that CTA's mbarrier `bar` (also a cluster_addr): the receiver waits for its expected bytes
// with mbar_wait and then reads them, with no cluster barrier. dst 16- (8-, 4-) byte aligned.
__device__ __forceinline__ void st_async16(unsigned dst, float4 v, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n"
               ::"r"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
               : "memory");
#endif
}
__device__ __forceinline__ void st_async4(unsigned dst, float v, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];\n" ::"r"(dst), "f"(v),
               "r"(bar)
               : "memory");
#endif
}
__device__ __forceinline__ void st_async8(unsigned dst, float2 v, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(dst),
               "f"(v.x), "f"(v.y), "r"(bar)
               : "memory");
#endif
}

}  // namespace nvllm::kernels
