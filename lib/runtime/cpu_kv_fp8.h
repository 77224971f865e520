// The CPU runner's FP8 KV cache: each K/V head vector is quantised to E4M3 with its layer and
// head's scale as it is written. The CPU cache keeps the dequantised values (e4m3 * scale,
// exact in float32), which is what an attention kernel reading E4M3 and converting in registers
// computes with: same numerics, one code path for attention.
#pragma once

#include <cstdint>

namespace nvllm {

// x holds num_tokens rows at stride `stride`, each [kv_heads, head_dim]; head h of every row
// becomes e4m3(x / scales[h]) * scales[h] (round to nearest even, saturating at +-448 * scale).
void fp8_round_kv(float* x, int num_tokens, int64_t stride, int kv_heads, int head_dim, const float* scales);

}  // namespace nvllm
