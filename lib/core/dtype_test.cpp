#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"

namespace nvllm {

TEST_CASE("bf16 round trip is exact for bf16 values and rounds to nearest even") {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  for (int i = 0; i < 10000; ++i) {
    const uint16_t h = static_cast<uint16_t>(bits(rng));
    const float f = bf16_to_f32(h);
    if (std::isnan(f)) continue;
    CHECK(f32_to_bf16(f) == h);
  }
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == f32_to_bf16(1.0f));
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == f32_to_bf16(1.0f + std::ldexp(1.0f, -6)));
}

TEST_CASE("f16 conversion agrees with the IEEE definition on every finite half") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 31) continue;
    const double expected = (h & 0x8000 ? -1.0 : 1.0) *
                            (exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, static_cast<int>(exp) - 25));
    CHECK(f16_to_f32(static_cast<uint16_t>(h)) == static_cast<float>(expected));
    CHECK(f32_to_f16(static_cast<float>(expected)) == (expected == 0 ? (h & 0x8000) : h));
  }
}

TEST_CASE("f8 e4m3 decodes its extremes") {
  CHECK(f8e4m3_to_f32(0x7e) == 448.0f);
  CHECK(f8e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(std::isnan(f8e4m3_to_f32(0x7f)));
}

}  // namespace nvllm
