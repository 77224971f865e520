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

TEST_CASE("f8 e4m3 decodes every code as sign * 2^(e-7) * (1 + m/8), subnormals m * 2^-9") {
  for (int v = 0; v < 256; ++v) {
    const int e = (v >> 3) & 0xf, m = v & 7;
    const float f = f8e4m3_to_f32(static_cast<uint8_t>(v));
    if (e == 15 && m == 7) {
      CHECK(std::isnan(f));
      continue;
    }
    const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
    CHECK(f == static_cast<float>(v & 0x80 ? -mag : mag));
    // Every finite code round-trips (-0 keeps its sign).
    CHECK(f32_to_f8e4m3(f) == v);
  }
  CHECK(f8e4m3_to_f32(0xfe) == -448.0f);
  CHECK(std::isnan(f8e4m3_to_f32(0xff)));
}

TEST_CASE("f8 e4m3 quantisation rounds to nearest even and saturates at 448") {
  // Halfway between 1 (0x38) and 1.125 (0x39): to the even code 0x38; between 1.125 and 1.25: up.
  CHECK(f32_to_f8e4m3(1.0625f) == 0x38);
  CHECK(f32_to_f8e4m3(1.1875f) == 0x3a);
  CHECK(f32_to_f8e4m3(std::nextafter(1.0625f, 2.0f)) == 0x39);
  // Subnormals: half the smallest (2^-10) ties to 0; 3 * 2^-10 ties to 2 * 2^-9 (even).
  CHECK(f32_to_f8e4m3(std::ldexp(1.0f, -10)) == 0x00);
  CHECK(f32_to_f8e4m3(std::ldexp(3.0f, -10)) == 0x02);
  CHECK(f32_to_f8e4m3(-std::ldexp(5.0f, -10)) == 0x82);  // 2.5 * 2^-9 -> 2 (even)
  // Largest subnormal 7 * 2^-9 and the smallest normal 2^-6 = 8 * 2^-9: 7.5 ties up to 0x08.
  CHECK(f32_to_f8e4m3(std::ldexp(15.0f, -10)) == 0x08);
  // Between 256 and 448 the grid is 32 apart: 384 (0x7c), 416 (0x7d), 448 (0x7e).
  CHECK(f32_to_f8e4m3(432.0f) == 0x7e);  // between 416 (0x7d) and 448: tie to even 0x7e
  CHECK(f32_to_f8e4m3(400.0f) == 0x7c);  // between 384 and 416: tie to even 0x7c
  CHECK(f32_to_f8e4m3(448.0f) == 0x7e);
  CHECK(f32_to_f8e4m3(464.0f) == 0x7e);  // would round to 480 (the NaN code): saturates
  CHECK(f32_to_f8e4m3(1e9f) == 0x7e);
  CHECK(f32_to_f8e4m3(-INFINITY) == 0xfe);
  CHECK(f32_to_f8e4m3(NAN) == 0x7f);
}

}  // namespace nvllm

