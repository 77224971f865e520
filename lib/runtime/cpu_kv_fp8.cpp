#include "runtime/cpu_kv_fp8.h"

#include "core/dtype.h"

namespace nvllm {

void fp8_round_kv(float* x, int num_tokens, int64_t stride, int kv_heads, int head_dim, const float* scales) {
  for (int t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < kv_heads; ++h) {
      float* v = x + t * stride + static_cast<int64_t>(h) * head_dim;
      const float s = scales[h];
      for (int i = 0; i < head_dim; ++i) v[i] = f8e4m3_to_f32(f32_to_f8e4m3(v[i] / s)) * s;
    }
  }
}

}  // namespace nvllm
