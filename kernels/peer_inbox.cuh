// The pushed peer sum's inbox words (peer_reduce.cu says how the sum uses them; gemv.cu's
// gemv_push fills them from a projection's epilogue): rank r's inbox holds, for each epoch parity
// and source rank, the sum's elements as 8-byte words of two bf16 and the call's epoch, so that a
// word that carries the call's epoch is this call's data, with no flag or fence beside it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace nvllm::kernels {

// The word of `element` (even elements start a word) from `source` for a call of `epoch`.
__device__ __forceinline__ size_t inbox_word(uint32_t epoch, int source, size_t element) {
  return ((epoch & 1u) * kPeerMaxRanks + source) * size_t{kPeerPushElems / 2} + element / 2;
}

__device__ __forceinline__ uint64_t flagged(uint32_t data, uint32_t epoch) {
  return (static_cast<uint64_t>(epoch) << 32) | data;
}

// An 8-byte store lands whole: the reader never sees half a word.
__device__ __forceinline__ void store_word(uint64_t* p, uint64_t a) {
  asm volatile("st.volatile.global.u64 [%0], %1;\n" ::"l"(p), "l"(a) : "memory");
}

__device__ __forceinline__ void store_words(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};\n" ::"l"(p), "l"(a), "l"(b) : "memory");
}

// The GPU's clock, ns (the sums' waits and PeerReduce::trace's stamps).
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// PeerReduce::trace's row for the call of `epoch` (p.trace set).
__device__ __forceinline__ unsigned long long* trace_call(const PeerReduce& p, uint32_t epoch) {
  return p.trace + size_t(epoch % kPeerTraceCalls) * kPeerTraceFields;
}

}  // namespace nvllm::kernels
