#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>

#include "core/sampling_mass.h"

namespace nvllm {

TEST_CASE("sampling_mass: a mass is exp(x - m) in units of 2^-44, truncated") {
  CHECK(fixed_mass(1.0f) == uint64_t(1) << 44);
  CHECK(fixed_mass(0.5f) == uint64_t(1) << 43);
  CHECK(fixed_mass(0.0f) == 0);
  CHECK(fixed_mass(0x1p-44f) == 1);
  CHECK(fixed_mass(0x1.fffffep-45f) == 0);  // just under one unit
  CHECK(fixed_mass(0x1.8p-44f) == 1);       // 1.5 units: truncated, not rounded
  // The largest vocabulary of masses of 1 still sums below 2^64.
  CHECK(double(kMaxMassVocab) * double(fixed_mass(1.0f)) < 0x1p64);
}

TEST_CASE("sampling_mass: order_key keeps the floats' order") {
  const float values[] = {-std::numeric_limits<float>::infinity(), -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 2.0f,
                          std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i + 1 < std::size(values); ++i) {
    CAPTURE(values[i]);
    CHECK(order_key(values[i]) < order_key(values[i + 1]));
  }
}

TEST_CASE("sampling_mass: top_p_target is the least integer at or above top_p * total") {
  CHECK(top_p_target(0.5f, 4) == 2);           // exactly 2
  CHECK(top_p_target(0.5f, 3) == 2);           // 1.5 rounds up
  CHECK(top_p_target(0.25f, 8) == 2);
  CHECK(top_p_target(0.25f, 9) == 3);          // 2.25
  CHECK(top_p_target(0.75f, uint64_t(1) << 46) == uint64_t(3) << 44);
  // One ulp above 0.5 of 2^46: 2^45 + 2^22, exact.
  CHECK(top_p_target(std::nextafter(0.5f, 1.0f), uint64_t(1) << 46) == (uint64_t(1) << 45) + (uint64_t(1) << 22));
  // A product past 64 bits before the shift: (1 - 2^-24) * (2^64 - 1).
  const uint64_t all = ~uint64_t(0);
  CHECK(top_p_target(std::nextafter(1.0f, 0.0f), all) == all - (all >> 24));
  // At least 1: top_p 0 (or below, or a tiny one) keeps the most likely token.
  CHECK(top_p_target(0.0f, 1000) == 1);
  CHECK(top_p_target(-0.0f, 1000) == 1);
  CHECK(top_p_target(-0.5f, 1000) == 1);
  CHECK(top_p_target(std::numeric_limits<float>::denorm_min(), uint64_t(1) << 60) == 1);
  CHECK(top_p_target(0x1p-60f, uint64_t(3) << 60) == 3);
  CHECK(top_p_target(0.5f, 0) == 1);
}

}  // namespace nvllm
