// Element types of tensors on disk and in memory, and scalar conversions between them.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace nvllm {

enum class DType { kF32, kF16, kBF16, kF8E4M3, kI32, kI64 };

// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

// The safetensors spelling: "F32", "F16", "BF16", "F8_E4M3", "I32", "I64".
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string; returns false for one we do not know.
bool parse_dtype(std::string_view name, DType* out);

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, as torch and the CUDA intrinsics do; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// E4M3 "fn" (finite, no infinities): bias 7, largest 448 (0x7e), NaN 0x7f / 0xff, smallest
// subnormal 2^-9. The conversion to float is exact.
float f8e4m3_to_f32(uint8_t v);
// Round to nearest even; magnitudes beyond 448 (infinities included) saturate to +-448, as
// quantisers clamp before casting; NaN stays NaN (0x7f with the sign).
uint8_t f32_to_f8e4m3(float f);
constexpr float kF8E4M3Max = 448.0f;

}  // namespace nvllm
