// The random numbers behind seeded sampling, shared by the CPU and CUDA samplers so that both
// draw the same numbers: one uniform per (sequence seed, output step, vocabulary index),
// computed by hashing, so a sequence's draws never depend on what else is in the batch.
//
// Sampling picks argmax_i p_i / E_i over the tokens that survive top-k/top-p/min-p, where
// E_i = -log(u_i) is exponential: this is an exact draw from the renormalised distribution
// (the exponential race), needs no sort, and is the same on every device.
#pragma once

#include <cstdint>

#include "core/host_device.h"

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

// The midpoint of bin `k` of 2^23 equal bins of (0, 1): (k + 0.5) / 2^23, exact in float (24
// significant bits), from 2^-24 to 1 - 2^-24. Never 0 and never 1: at u = 1, -log u = 0 would
// give its token an infinite score in the race whatever its probability.
NVLLM_HOST_DEVICE float uniform_from_bits(uint32_t k23) {
  return (static_cast<float>(k23 & 0x7fffffu) + 0.5f) * (1.0f / 8388608.0f);
}

// Uniform in (0, 1) for token `token` at output step `step` of a sequence seeded `seed`.
NVLLM_HOST_DEVICE float sample_uniform(uint64_t seed, uint32_t step, uint32_t token) {
  const uint64_t h = splitmix64(seed ^ splitmix64((static_cast<uint64_t>(step) << 32) | token));
  return uniform_from_bits(static_cast<uint32_t>(h >> 41));
}

}  // namespace nvllm
