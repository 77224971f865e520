// The step between the QKV projection and attention, fused: per-head RMSNorm of q and k
// (Qwen3), neox rotary embedding of q and k, and the write of k and v into the paged cache.
// A group of D/16 lanes takes one head of one token, a lane the two 8-value pieces (8p..8p+7 and
// D/2+8p..) whose pairs it rotates, with 16-byte loads and stores; a block's threads compute the
// token's D/2 rotation angles' cosines and sines once for the block's heads. Bytes a
// token: the qkv row read and q/k written back (~4 * (H + 2 * KVH) * D) plus k and v written to
// the cache (4 * KVH * D, half that in FP8): 25 KB on Llama-3-8B, 69 us for an 8,192-token
// chunk at 2.9 TB/s; measured 75 us (a warp a head with 2-byte accesses and the angles computed
// per head took 164 us; H100, bench/NOTES.md, twenty-sixth session).
// An FP8 cache gets the codes of the bf16 values divided by the head's scale: the quantisation
// is part of this write, not a pass of its own. After an FP8 GEMM the product's row and column
// scales are applied here too (as scale_rows_cols, whose pass this saves), and the projection's
// bias (Qwen2) is added here (a launch of its own a layer before, ~2-3 us of a decode step's chain).
#include <algorithm>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 128;  // a block: 16 heads of 128 (32 of 64) of one token

// Eight values to the cache: bf16 as they are, FP8 as their codes at `scale`.
template <typename T>
__device__ __forceinline__ void store_cache8(T* dst, const float* v, float scale) {
  if constexpr (std::is_same_v<T, fp8_e4m3>) {
    uint32_t word[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) word[j / 4] |= uint32_t(e4m3_of(v[j], scale).__x) << (8 * (j % 4));
    *reinterpret_cast<uint2*>(dst) = make_uint2(word[0], word[1]);
  } else {
    store8(dst, from_float8(v));
  }
}

// qkv [num_tokens, (H + 2 * KVH) * D], in place; positions, slot_mapping [num_tokens];
// q_norm, k_norm [D] or null; inv_freq [D / 2] fp32; caches [blocks, block_size, KVH, D] of T
// (bf16, or fp8_e4m3 with k_scale / v_scale [KVH]); row_scales [num_tokens] and col_scales
// [(H + 2 * KVH) * D] (an FP8 product's) or null; bias [(H + 2 * KVH) * D] or null.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    qk_norm_rope_cache_kernel(bf16* __restrict__ qkv, const int32_t* __restrict__ positions,
                              const int32_t* __restrict__ slot_mapping, const bf16* __restrict__ q_norm,
                              const bf16* __restrict__ k_norm, float eps, const float* __restrict__ inv_freq,
                              T* __restrict__ k_cache, T* __restrict__ v_cache, const float* __restrict__ k_scale,
                              const float* __restrict__ v_scale, int num_heads, int num_kv_heads,
                              const float* __restrict__ row_scales, const float* __restrict__ col_scales,
                              const bf16* __restrict__ bias, int num_tokens, L2Ahead ahead) {
  constexpr int kHalf = D / 2, kLanes = D / 16;  // a head's lanes: two 8-value pieces each
  __shared__ float cos_s[kHalf], sin_s[kHalf];
  if (int(blockIdx.x) >= num_tokens)
    return l2_ahead_block(ahead, (int(blockIdx.x) - num_tokens) * int(gridDim.y) + int(blockIdx.y),
                          (int(gridDim.x) - num_tokens) * int(gridDim.y));
  const int t = blockIdx.x, heads = num_heads + 2 * num_kv_heads;
  const int head = (blockIdx.y * blockDim.x + threadIdx.x) / kLanes;
  const int part = threadIdx.x % kLanes, c0 = 8 * part, c1 = kHalf + 8 * part;
  // Lanes past the last head carry zeros through the head's sum (a shuffle among its lanes) and
  // store nothing. The bias (a constant) is read before the wait, the qkv row right after it,
  // both before the angles are computed.
  const bool live = head < heads;
  float bias_a[8] = {}, bias_b[8] = {};
  if (live && bias != nullptr) {
    to_float8(load8(bias + size_t(head) * D + c0), bias_a);
    to_float8(load8(bias + size_t(head) * D + c1), bias_b);
  }
  pdl_enter();
  bf16* x = qkv + (size_t(t) * heads + min(head, heads - 1)) * D;
  float a[8] = {}, b[8] = {};
  if (live) {
    to_float8(load8(x + c0), a);
    to_float8(load8(x + c1), b);
  }
  const float pos = float(positions[t]);
  for (int i = threadIdx.x; i < kHalf; i += blockDim.x) sincosf(pos * inv_freq[i], &sin_s[i], &cos_s[i]);
  __syncthreads();

  const int slot = slot_mapping[t];
  if (live && col_scales != nullptr) {  // as scale_rows_cols stores them (bf16)
    const float rs = row_scales[t];
    float ca[8], cb[8];
    load_scales8(col_scales + size_t(head) * D + c0, ca);
    load_scales8(col_scales + size_t(head) * D + c1, cb);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      a[j] = round_bf16(scaled(a[j], rs, ca[j]));
      b[j] = round_bf16(scaled(b[j], rs, cb[j]));
    }
  }
  if (live && bias != nullptr) {  // as the product plus its bias is stored (bf16)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      a[j] = round_bf16(a[j] + bias_a[j]);
      b[j] = round_bf16(b[j] + bias_b[j]);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += a[j] * a[j];
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += b[j] * b[j];
  ss = warp_sum<kLanes>(ss);
  if (!live) return;

  if (head >= num_heads + num_kv_heads) {  // v: to the cache as it is (after the scales and bias, written back)
    if (col_scales != nullptr || bias != nullptr) {
      store8(x + c0, from_float8(a));
      store8(x + c1, from_float8(b));
    }
    if (slot < 0) return;
    const int kvh = head - num_heads - num_kv_heads;
    T* cache = v_cache + (size_t(slot) * num_kv_heads + kvh) * D;
    const float scale = std::is_same_v<T, fp8_e4m3> ? v_scale[kvh] : 1.f;
    store_cache8(cache + c0, a, scale);
    store_cache8(cache + c1, b, scale);
    return;
  }
  const bool is_q = head < num_heads;
  const bf16* norm_w = is_q ? q_norm : k_norm;
  if (norm_w != nullptr) {
    const float rstd = rsqrtf(ss / D + eps);
    float wa[8], wb[8];
    to_float8(load8(norm_w + c0), wa);
    to_float8(load8(norm_w + c1), wb);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      a[j] = norm_one(a[j], rstd, wa[j]);
      b[j] = norm_one(b[j], rstd, wb[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 r = rope_rotate(a[j], b[j], cos_s[8 * part + j], sin_s[8 * part + j]);
    a[j] = r.x;
    b[j] = r.y;
  }
  store8(x + c0, from_float8(a));
  store8(x + c1, from_float8(b));
  if (is_q || slot < 0) return;
  const int kvh = head - num_heads;
  T* cache = k_cache + (size_t(slot) * num_kv_heads + kvh) * D;
  const float scale = std::is_same_v<T, fp8_e4m3> ? k_scale[kvh] : 1.f;
  store_cache8(cache + c0, a, scale);  // a and b are bf16-exact: the codes of the values just stored
  store_cache8(cache + c1, b, scale);
}

template <int D>
void launch(bf16* qkv, const int32_t* positions, const int32_t* slot_mapping, const bf16* q_norm, const bf16* k_norm,
            float eps, const float* inv_freq, const KvCache& cache, int num_tokens, int num_heads, int num_kv_heads,
            cudaStream_t stream, const float* row_scales, const float* col_scales, const bf16* bias, L2Ahead ahead) {
  const int lanes = (num_heads + 2 * num_kv_heads) * (D / 16);
  const int threads = std::min(kThreads, (lanes + 31) / 32 * 32);
  const int y = ceil_div(lanes, threads);
  const dim3 grid(num_tokens + ceil_div(l2_ahead_blocks(ahead), y), y), block(threads);
  if (cache.dtype == KvDtype::kFp8E4M3) {
    NVLLM_CHECK(cache.k_scale != nullptr && cache.v_scale != nullptr, "qk_norm_rope_cache: an FP8 cache needs scales");
    launch_pdl(qk_norm_rope_cache_kernel<fp8_e4m3, D>, grid, block, 0, stream, qkv, positions, slot_mapping, q_norm,
               k_norm, eps, inv_freq, static_cast<fp8_e4m3*>(cache.k), static_cast<fp8_e4m3*>(cache.v),
               cache.k_scale, cache.v_scale, num_heads, num_kv_heads, row_scales, col_scales, bias, num_tokens, ahead);
  } else {
    launch_pdl(qk_norm_rope_cache_kernel<bf16, D>, grid, block, 0, stream, qkv, positions, slot_mapping, q_norm,
               k_norm, eps, inv_freq, static_cast<bf16*>(cache.k), static_cast<bf16*>(cache.v), cache.k_scale,
               cache.v_scale, num_heads, num_kv_heads, row_scales, col_scales, bias, num_tokens, ahead);
  }
}

}  // namespace

void qk_norm_rope_cache(bf16* qkv, const int32_t* positions, const int32_t* slot_mapping,
                        const bf16* q_norm, const bf16* k_norm, float eps, const float* inv_freq,
                        const KvCache& cache, int num_tokens, int num_heads, int num_kv_heads,
                        int head_dim, int block_size, cudaStream_t stream, const float* row_scales,
                        const float* col_scales, const bf16* bias, L2Ahead ahead) {
  if (num_tokens <= 0) return;
  NVLLM_CHECK((row_scales == nullptr) == (col_scales == nullptr),
              "qk_norm_rope_cache: an FP8 product's row and column scales come together");
  NVLLM_CHECK(head_dim == 64 || head_dim == 128, "qk_norm_rope_cache: head_dim ", head_dim,
              " is not supported (64 or 128)");
  // block_size is not needed: slot s = block * block_size + offset is row s of the cache
  // viewed as [num_blocks * block_size, KVH, D].
  if (head_dim == 128)
    launch<128>(qkv, positions, slot_mapping, q_norm, k_norm, eps, inv_freq, cache, num_tokens, num_heads,
                num_kv_heads, stream, row_scales, col_scales, bias, ahead);
  else
    launch<64>(qkv, positions, slot_mapping, q_norm, k_norm, eps, inv_freq, cache, num_tokens, num_heads,
               num_kv_heads, stream, row_scales, col_scales, bias, ahead);
}

}  // namespace nvllm::kernels
