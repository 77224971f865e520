// The top-p filter's arithmetic, shared by the CPU and CUDA samplers (docs/sampling.md, step 5):
// each kept token's mass exp(x - m) as an integer of kMassBits fractional bits, and the integer
// the running sum of masses must reach. Integer sums are exact, so the kept set does not depend on
// the order the masses are added in: not on the GPU's thread schedule, nor on how many CTAs a
// row is split over (which follows the number of rows in the step), nor on CPU or GPU walking
// the vocabulary differently. With float sums a seeded top_p < 1 draw could change at a knife
// edge from run to run or with the batch around it.
#pragma once

#include <cstdint>

#include "core/host_device.h"

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

namespace nvllm {

// A mass is exp(x - m) <= 1 in units of 2^-44 (masses under 2^-44 of the most likely token's
// count as 0). A vocabulary of up to kMaxMassVocab (2^20 - 1) tokens sums below 2^64.
inline constexpr int kMassBits = 44;
inline constexpr int64_t kMaxMassVocab = (int64_t(1) << 20) - 1;

// exp(x - m) in [0, 1] as a mass: truncated toward zero, the same on host and device.
NVLLM_HOST_DEVICE uint64_t fixed_mass(float e) { return static_cast<uint64_t>(e * 0x1p44f); }

// A float's bits, on host and device.
NVLLM_HOST_DEVICE uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}

// Order-preserving map of a float to an unsigned key (a larger float, a larger key; -0 below +0).
NVLLM_HOST_DEVICE uint32_t order_key(float x) {
  const uint32_t u = float_bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The least integer S with S >= top_p * total, at least 1 (so a top_p of 0 keeps the most likely
// token), for top_p in [0, 1): exact, as top_p = mant * 2^-shift with mant < 2^24 and the
// product held in 128 bits.
NVLLM_HOST_DEVICE uint64_t top_p_target(float top_p, uint64_t total) {
  __extension__ typedef unsigned __int128 u128;
  const uint32_t bits = float_bits(top_p);
  const uint32_t exponent = (bits >> 23) & 0xffu;
  if ((bits & 0x80000000u) != 0 || (bits & 0x7fffffffu) == 0) return 1;  // <= 0
  const uint64_t mant = (bits & 0x7fffffu) | (exponent != 0 ? 0x800000u : 0u);
  const int shift = exponent != 0 ? 150 - static_cast<int>(exponent) : 149;  // >= 24 below 1
  const u128 product = static_cast<u128>(mant) * total;
  if (shift >= 128) return 1;  // top_p < 2^-104: product < 2^shift
  const u128 whole = product >> shift;
  const uint64_t s = static_cast<uint64_t>(whole) + ((whole << shift) != product ? 1u : 0u);
  return s < 1 ? 1 : s;
}

}  // namespace nvllm
