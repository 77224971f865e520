// The random numbers behind seeded sampling, shared by the CPU and CUDA samplers so that both
// draw the same numbers: one uniform per (sequence seed, output step, vocabulary index),
// computed by hashing, so a sequence's draws never depend on what else is in the batch.
//
// Sampling picks argmax_i p_i / E_i over the tokens that survive top-k/top-p/min-p, where
// E_i = -log(u_i) is exponential: this is an exact draw from the renormalised distribution
// (the exponential race), needs no sort, and is the same on every device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NVLLM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define NVLLM_HOST_DEVICE inline
#endif

namespace nvllm {

NVLLM_HOST_DEVICE uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The seed of completion `index` (0..n-1) of a request with seed `request_seed`.
NVLLM_HOST_DEVICE uint64_t sequence_seed(uint64_t request_seed, uint32_t index) {
  return splitmix64(request_seed ^ (0x632be59bd9b4e019ull * (index + 1ull)));
}

// Uniform in (0, 1] for token `token` at output step `step` of a sequence seeded `seed`.
NVLLM_HOST_DEVICE float sample_uniform(uint64_t seed, uint32_t step, uint32_t token) {
  const uint64_t h = splitmix64(seed ^ splitmix64((static_cast<uint64_t>(step) << 32) | token));
  return (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777216.0f);  // 24 bits, never 0
}

}  // namespace nvllm
