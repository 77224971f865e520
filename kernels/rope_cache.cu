// The step between the QKV projection and attention, fused: per-head RMSNorm of q and k
// (Qwen3), neox rotary embedding of q and k, and the write of k and v into the paged cache.
// One warp per head of one token. Bytes per token: the qkv row read and q/k written back
// (~4 * (H + 2 * KVH) * D) plus k and v written to the cache (4 * KVH * D, half that in FP8).
// An FP8 cache gets the codes of the bf16 values divided by the head's scale: the quantisation
// is part of this write, not a pass of its own. After an FP8 GEMM the product's row and column
// scales are applied here too (as scale_rows_cols, whose pass this saves: 5 us a layer at 230
// tokens on Llama-3-8B, H100).
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

// qkv [num_tokens, (H + 2 * KVH) * D], in place; positions, slot_mapping [num_tokens];
// q_norm, k_norm [D] or null; inv_freq [D / 2] fp32; caches [blocks, block_size, KVH, D] of T
// (bf16, or fp8_e4m3 with k_scale / v_scale [KVH]).
// Lane l handles the rotation pairs (i, i + D/2) for i = l, l + 32, ...: coalesced 2-byte
// accesses, which is plenty for a kernel this small.
template <typename T>
__global__ void qk_norm_rope_cache_kernel(bf16* __restrict__ qkv, const int32_t* __restrict__ positions,
                                          const int32_t* __restrict__ slot_mapping,
                                          const bf16* __restrict__ q_norm, const bf16* __restrict__ k_norm,
                                          float eps, const float* __restrict__ inv_freq,
                                          T* __restrict__ k_cache, T* __restrict__ v_cache,
                                          const float* __restrict__ k_scale, const float* __restrict__ v_scale,
                                          int num_heads, int num_kv_heads, int head_dim,
                                          const float* __restrict__ row_scales, const float* __restrict__ col_scales) {
  constexpr bool kFp8 = std::is_same_v<T, fp8_e4m3>;
  pdl_enter();
  const int lane = threadIdx.x & 31;
  const int head = blockIdx.y * kWarpsPerBlock + (threadIdx.x >> 5);
  const int t = blockIdx.x;
  if (head >= num_heads + 2 * num_kv_heads) return;  // whole warps leave together
  const int half = head_dim / 2;
  bf16* x = qkv + (size_t(t) * (num_heads + 2 * num_kv_heads) + head) * head_dim;
  const int slot = slot_mapping[t];
  const size_t cache_row = (size_t(slot) * num_kv_heads) * head_dim;  // slot s is row s of [*, KVH, D]
  // Element i of the head, scaled as scale_rows_cols stores it (bf16) where the product's scales
  // are given.
  const float* head_cols = col_scales != nullptr ? col_scales + size_t(head) * head_dim : nullptr;
  const float rs = row_scales != nullptr ? row_scales[t] : 1.f;
  auto value = [&](int i) {
    const float v = __bfloat162float(x[i]);
    return head_cols != nullptr ? round_bf16(scaled(v, rs, head_cols[i])) : v;
  };

  if (head >= num_heads + num_kv_heads) {  // v: copied to the cache unchanged
    if (head_cols != nullptr)
      for (int i = lane; i < head_dim; i += 32) x[i] = __float2bfloat16(value(i));
    if (slot < 0) return;
    const int kvh = head - num_heads - num_kv_heads;
    T* cache = v_cache + cache_row + kvh * head_dim;
    if constexpr (kFp8) {
      const float scale = v_scale[kvh];
      for (int i = lane; i < head_dim; i += 32) cache[i] = e4m3_of(__bfloat162float(x[i]), scale);
    } else {
      for (int i = lane; i < head_dim; i += 32) cache[i] = x[i];
    }
    return;
  }
  const bool is_q = head < num_heads;
  const bf16* norm_w = is_q ? q_norm : k_norm;
  float rstd = 1.f;
  if (norm_w != nullptr) {
    float sum_sq = 0.f;
    for (int i = lane; i < head_dim; i += 32) {
      const float v = value(i);
      sum_sq += v * v;
    }
    rstd = rsqrtf(warp_sum(sum_sq) / head_dim + eps);
  }
  const float pos = float(positions[t]);
  T* cache = (!is_q && slot >= 0) ? k_cache + cache_row + (head - num_heads) * head_dim : nullptr;
  float scale = 1.f;
  if constexpr (kFp8) {
    if (cache != nullptr) scale = k_scale[head - num_heads];
  }
  for (int i = lane; i < half; i += 32) {
    const float2 r = norm_rope_pair(value(i), value(i + half), rstd, norm_w, i, half, pos, inv_freq[i]);
    const bf16 ra = __float2bfloat16(r.x), rb = __float2bfloat16(r.y);
    x[i] = ra;
    x[i + half] = rb;
    if (cache != nullptr) {
      if constexpr (kFp8) {  // r is already bf16-exact: the codes of the values just stored in qkv
        cache[i] = e4m3_of(r.x, scale);
        cache[i + half] = e4m3_of(r.y, scale);
      } else {
        cache[i] = ra;
        cache[i + half] = rb;
      }
    }
  }
}

}  // namespace

void qk_norm_rope_cache(bf16* qkv, const int32_t* positions, const int32_t* slot_mapping,
                        const bf16* q_norm, const bf16* k_norm, float eps, const float* inv_freq,
                        const KvCache& cache, int num_tokens, int num_heads, int num_kv_heads,
                        int head_dim, int block_size, cudaStream_t stream, const float* row_scales,
                        const float* col_scales) {
  if (num_tokens <= 0) return;
  NVLLM_CHECK((row_scales == nullptr) == (col_scales == nullptr),
              "qk_norm_rope_cache: an FP8 product's row and column scales come together");
  NVLLM_CHECK(head_dim % 2 == 0, "qk_norm_rope_cache: head_dim ", head_dim, " must be even");
  // block_size is not needed: slot s = block * block_size + offset is row s of the cache
  // viewed as [num_blocks * block_size, KVH, D].
  // Tokens on x: gridDim.y stops at 65535, a long prefill chunk can exceed that.
  const dim3 grid(num_tokens, ceil_div(num_heads + 2 * num_kv_heads, kWarpsPerBlock));
  const dim3 block(kWarpsPerBlock * 32);
  if (cache.dtype == KvDtype::kFp8E4M3) {
    NVLLM_CHECK(cache.k_scale != nullptr && cache.v_scale != nullptr, "qk_norm_rope_cache: an FP8 cache needs scales");
    launch_pdl(qk_norm_rope_cache_kernel<fp8_e4m3>, grid, block, 0, stream, qkv, positions, slot_mapping, q_norm,
               k_norm, eps, inv_freq, static_cast<fp8_e4m3*>(cache.k), static_cast<fp8_e4m3*>(cache.v),
               cache.k_scale, cache.v_scale, num_heads, num_kv_heads, head_dim, row_scales, col_scales);
  } else {
    launch_pdl(qk_norm_rope_cache_kernel<bf16>, grid, block, 0, stream, qkv, positions, slot_mapping, q_norm, k_norm,
               eps, inv_freq, static_cast<bf16*>(cache.k), static_cast<bf16*>(cache.v), cache.k_scale,
               cache.v_scale, num_heads, num_kv_heads, head_dim, row_scales, col_scales);
  }
}

}  // namespace nvllm::kernels
