#include "core/dtype.h"

#include <cmath>

namespace nvllm {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  static constexpr struct { std::string_view name; DType type; } kTable[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16},   {"BF16", DType::kBF16},
      {"F8_E4M3", DType::kF8E4M3}, {"I32", DType::kI32}, {"I64", DType::kI64},
  };
  for (const auto& e : kTable) {
    if (e.name == name) {
      *out = e.type;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < 6.103515625e-05f) {                // subnormal half: round a / 2^-24 to nearest even
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t bits = std::bit_cast<uint32_t>(a);
  bits += 0xfffu + ((bits >> 13) & 1u);  // round to nearest even at bit 13
  const uint32_t exp = (bits >> 23) - 112;
  return sign | static_cast<uint16_t>((exp << 10) | ((bits >> 13) & 0x3ffu));
}

float f8e4m3_to_f32(uint8_t v) {
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  float r;
  if (exp == 0xf && man == 0x7) {
    r = NAN;
  } else if (exp == 0) {
    r = std::ldexp(static_cast<float>(man), -9);
  } else {
    r = std::ldexp(1.0f + man / 8.0f, exp - 7);
  }
  return neg ? -r : r;
}

uint8_t f32_to_f8e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7f;
  const float a = std::fabs(f);
  if (a >= kF8E4M3Max) return sign | 0x7e;
  // Below 2^-6 the grid is m * 2^-9 (m = 8 rounds up into the smallest normal, code 0x08).
  if (a < 0.015625f) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): unbiased exponent e - 1, in [-6, 8]
  int exp = e - 1;
  // (a / 2^exp - 1) * 8 is exact in float; nearbyint rounds half to even.
  int man = static_cast<int>(std::nearbyint((std::ldexp(a, -exp) - 1.0f) * 8.0f));
  if (man == 8) {
    man = 0;
    ++exp;
  }
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | man);
}

}  // namespace nvllm
