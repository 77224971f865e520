// The fused attention's token loop (attention_kernel, decode_fused.cu): one CTA's split of one
// sequence's context for one kv head. Its G q heads meet each token's cached K and V in an online
// softmax per head (base-2 exponents: q comes scaled by log2 e), and each warp leaves its (max,
// sum) and accumulators of every head in shared memory for the kernel's merge:
//   acc[(warp * G + h) * D + d], ml[(warp * G + h) * 2 + {0: max, 1: sum}]
// (a warp that saw no token: max -inf, sum 0, accumulators 0).
//
// Two loops, chosen by GM, the group size rounded up to 1, 2, 4 or 8:
// - CudaCoreTokens (GM <= 4): D / 8 lanes hold a token's dims, 8 each; the heads' dot products
//   are reduced by shuffles. Its cost a token grows with the group.
// - TensorTokens (GM = 8): a warp takes 16 tokens at a time on the tensor cores (mma m16n8k16):
//   scores S = K q for the 8 heads, then O += V^T P. The mma's 8 columns are the heads: full at
//   groups of 5-8, where the CUDA-core loop took 4 dims a lane and ~165 registers. For every
//   group it made Qwen3-0.6B's step (group 2, head_dim 128) 27% slower: 164 registers where the
//   CUDA-core loop needs 118 left one CTA an SM (bench/NOTES.md, fiftieth session).
// Both load their first tokens into registers before the kernel waits for its inputs (the cached
// K/V are constants by then), and take the new token (ctx - 1) from shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/decode_fused_blocks.cuh"

namespace nvllm::kernels {
namespace {

// One CTA's tokens of one sequence and kv head, and where their K/V rows lie in the paged cache.
template <typename T>
struct TokenSplit {
  const T* k_cache;
  const T* v_cache;
  const int32_t* table;  // the sequence's block table
  int bs_log;            // log2 of the block size (a power of two: the plan checks)
  size_t row_stride;     // elements a cache slot: [slot][kv head][D]
  size_t head_offset;    // the kv head's first element in a slot
  int start, end, ctx;   // tokens [start, end) of ctx; token ctx - 1 is the new one
  // Element offset of token t's row (K or V) of this kv head.
  __device__ __forceinline__ size_t row(int t) const {
    return ((size_t(table[t >> bs_log]) << bs_log) + (t & ((1 << bs_log) - 1))) * row_stride + head_offset;
  }
  // The split's tokens in the cache: all but the new one, which comes from shared memory.
  __device__ __forceinline__ int cached_end() const { return min(end, ctx - 1); }
};

template <int D, int GM, typename T>
struct CudaCoreTokens {
  static constexpr bool kFp8 = std::is_same_v<T, fp8_e4m3>;
  static constexpr int kDims = 8;                    // dims of a token a lane holds
  static constexpr int kLanes = D / kDims;           // lanes that hold one token's D dims
  static constexpr int kGroups = kThreads / kLanes;  // token groups of the CTA
  static constexpr int kU = 3;                       // tokens per group and iteration
  static constexpr int kFirst = kGroups * kU;        // tokens the loads before the wait cover
  using Raw = std::conditional_t<kFp8, uint2, uint4>;  // a lane's dims of a cached token

  TokenSplit<T> s;
  int warp, lane, grp, sub;      // lane `sub` of group `grp` holds dims sub*8 .. sub*8+7
  Raw kv[kU] = {}, vv[kU] = {};  // a slot past the split keeps what it held (its products are left out)

  __device__ __forceinline__ CudaCoreTokens(const TokenSplit<T>& split, int tid)
      : s(split), warp(tid >> 5), lane(tid & 31), grp(tid / kLanes), sub(tid % kLanes) {}

  // Where dim i of a q head lies in shared memory: lane `sub` reads its 8 dims as two float4
  // pieces (2 sub, 2 sub + 1) that lie D/2 floats apart, so that the 8 lanes of a 128-bit read
  // phase take 8 consecutive pieces (no bank conflicts; side by side the pieces of lanes 4 apart
  // would share banks).
  static __device__ __forceinline__ int q_index(int i) {
    const int p = i / 4;
    return ((p & 1) * (D / 8) + p / 2) * 4 + i % 4;
  }

  __device__ __forceinline__ void load(int t0) {
    const int cached_end = s.cached_end();
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = t0 + u * kGroups;
      if (t < cached_end) {
        kv[u] = __ldcg(reinterpret_cast<const Raw*>(s.k_cache + s.row(t) + sub * kDims));
        vv[u] = __ldcg(reinterpret_cast<const Raw*>(s.v_cache + s.row(t) + sub * kDims));
      }
    }
  }
  __device__ __forceinline__ void load_first() { load(s.start + grp); }

  // q [G][D] in q_index order; k_new, v_new [D] in plain order.
  __device__ __forceinline__ void run(const float* q, const float* k_new, const float* v_new, int G, float* acc,
                                      float* ml) {
    // An iteration takes up to kU tokens per group: their dot products first (independent chains,
    // so their shuffles overlap), then one softmax update per head with the largest of them. The
    // same trip count for the whole block (the kLanes-lane shuffles need every group of a warp);
    // a slot u that no group has a token for is skipped by all (t0 - grp is the same for every
    // thread), and a group's products in a slot past its tokens are left out of its softmax.
    // Heads past G read whatever lies in shared memory after q (finite) and are never stored.
    float m[GM], l[GM], o[GM][kDims];
    softmax_start(m, l, o);
    auto cached_dims = [&](const Raw& cached, float (&f)[kDims]) {  // a cached token's dims of this lane
      if constexpr (kFp8) {
        e4m3x8_to_float(cached, f);
      } else {
        const uint32_t pairs[4] = {cached.x, cached.y, cached.z, cached.w};
#pragma unroll
        for (int i = 0; i < kDims / 2; ++i) {
          const float2 v = bf16x2_to_float2(pairs[i]);
          f[2 * i] = v.x;
          f[2 * i + 1] = v.y;
        }
      }
    };
    auto head_dots = [&](const float (&kf)[kDims], float (&d)[GM]) {  // q . k of every head, over the kLanes lanes
#pragma unroll
      for (int h = 0; h < GM; ++h) {
        const float* qh = q + h * D;
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < kDims / 4; ++i) {
          const float4 qv = *reinterpret_cast<const float4*>(qh + q_index(sub * kDims + 4 * i));
          dot = fmaf(qv.x, kf[4 * i], dot);
          dot = fmaf(qv.y, kf[4 * i + 1], dot);
          dot = fmaf(qv.z, kf[4 * i + 2], dot);
          dot = fmaf(qv.w, kf[4 * i + 3], dot);
        }
        d[h] = warp_sum<kLanes>(dot);
      }
    };
    const int cached_end = s.cached_end();
    for (int t0 = s.start + grp; t0 - grp < cached_end; t0 += kGroups * kU) {
      if (t0 != s.start + grp) load(t0);
      const int slots = min(kU, ceil_div(cached_end - (t0 - grp), kGroups));  // slots some group has a token in
      float d[kU][GM];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (u >= slots) break;
        float kf[kDims];
        cached_dims(kv[u], kf);
        head_dots(kf, d[u]);
      }
      const int mine = min(slots, ceil_div(cached_end - t0, kGroups));  // this group's tokens: slots 0 .. mine-1
      if (mine <= 0) continue;
      softmax_rescale(m, l, o, d, mine);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (u >= mine) break;
        float vf[kDims];
        cached_dims(vv[u], vf);
        softmax_add(m, l, o, d[u], vf);
      }
    }
    if (s.start <= s.ctx - 1 && s.ctx - 1 < s.end) {  // the new token is the split's last: group 0 takes it
      float kf[kDims], vf[kDims], d[1][GM];
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        kf[i] = k_new[sub * kDims + i];
        vf[i] = v_new[sub * kDims + i];
      }
      head_dots(kf, d[0]);
      if (grp == 0) {
        softmax_rescale(m, l, o, d, 1);
        softmax_add(m, l, o, d[0], vf);
      }
    }
    // Merge the token groups of a warp (lanes kLanes apart) into lanes 0 .. kLanes-1.
#pragma unroll
    for (int h = 0; h < GM; ++h) {
#pragma unroll
      for (int off = kLanes; off < 32; off *= 2) {
        const float mo = __shfl_xor_sync(0xffffffffu, m[h], off), lo = __shfl_xor_sync(0xffffffffu, l[h], off);
        const float mx = fmaxf(m[h], mo);
        const float a = mx == -INFINITY ? 0.f : exp2f(m[h] - mx), b = mx == -INFINITY ? 0.f : exp2f(mo - mx);
#pragma unroll
        for (int i = 0; i < kDims; ++i) o[h][i] = o[h][i] * a + __shfl_xor_sync(0xffffffffu, o[h][i], off) * b;
        m[h] = mx;
        l[h] = l[h] * a + lo * b;
      }
      if (h < G && lane < kLanes) {
#pragma unroll
        for (int i = 0; i < kDims; ++i) acc[(warp * G + h) * D + sub * kDims + i] = o[h][i];
        if (lane == 0) {
          ml[(warp * G + h) * 2] = m[h];
          ml[(warp * G + h) * 2 + 1] = l[h];
        }
      }
    }
  }
};

template <int D, typename T>
struct TensorTokens {
  static constexpr bool kFp8 = std::is_same_v<T, fp8_e4m3>;
  static constexpr int kPieces = D / 32;       // 8-dim pieces of a row a lane holds
  static constexpr int kSteps = D / 16;        // mma k steps of q . k, and mma tiles of O^T's dims
  static constexpr int kFirst = 16 * kWarps;   // tokens the loads before the wait cover
  using Piece = std::conditional_t<kFp8, uint2, uint4>;  // 8 dims of a cached row, as loaded

  TokenSplit<T> s;
  int warp, g8, t4;  // lane (g8, t4) holds tokens g8 and g8 + 8 of a tile, pieces t4, t4 + 4, ...
  Piece ka[kPieces], va[kPieces], kb[kPieces], vb[kPieces];  // tokens g8 and g8 + 8 of the tile

  __device__ __forceinline__ TensorTokens(const TokenSplit<T>& split, int tid)
      : s(split), warp(tid >> 5), g8((tid & 31) >> 2), t4(tid & 3) {}

  static __device__ __forceinline__ int q_index(int i) { return i; }

  __device__ __forceinline__ void load_row(int t, Piece (&k)[kPieces], Piece (&v)[kPieces]) {
    const bool cached = t < s.cached_end();  // zeros past the cached tokens
    const size_t row = cached ? s.row(t) : 0;
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      k[j] = cached ? __ldcg(reinterpret_cast<const Piece*>(s.k_cache + row) + t4 + 4 * j) : Piece{};
      v[j] = cached ? __ldcg(reinterpret_cast<const Piece*>(s.v_cache + row) + t4 + 4 * j) : Piece{};
    }
  }
  __device__ __forceinline__ void load_tile(int tb) {
    load_row(tb + g8, ka, va);
    load_row(tb + g8 + 8, kb, vb);
  }
  __device__ __forceinline__ void load_first() { load_tile(s.start + 16 * warp); }

  // Inputs of the mma: bf16, or f16 for an FP8 cache's codes (f16 values exactly).
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    return kFp8 ? pack_f16(lo, hi) : pack_bf16(lo, hi);
  }
  // The two values of a packed pair, back as floats.
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    if constexpr (kFp8)
      return make_float2(__half2float(__ushort_as_half(uint16_t(x))),
                         __half2float(__ushort_as_half(uint16_t(x >> 16))));
    else
      return bf16x2_to_float2(x);
  }
  // A pair (a, b) as the packed pair `hi` nearest it and the packed rest `lo`: hi + lo carries
  // 16 (bf16) or 22 (f16) bits of each, close to the CUDA-core loop's float weights.
  static __device__ __forceinline__ void split(float a, float b, uint32_t& hi, uint32_t& lo) {
    hi = pack(a, b);
    const float2 h = unpack(hi);
    lo = pack(a - h.x, b - h.y);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (kFp8)
      mma_f16_16816(c, a, b0, b1);
    else
      mma_bf16_16816(c, a, b0, b1);
  }
  // Dims 2r, 2r + 1 of a piece, as an mma pair.
  static __device__ __forceinline__ uint32_t pair_of(const Piece& p, int r) {
    if constexpr (kFp8)
      return e4m3x2_to_f16x2(r < 2 ? p.x >> (16 * r) : p.y >> (16 * (r - 2)));
    else
      return r == 0 ? p.x : r == 1 ? p.y : r == 2 ? p.z : p.w;
  }
  // The dim of O^T tile n's row g (half 0) or g + 8 (half 1).
  static __device__ __forceinline__ int out_dim(int n, int g, int half) {
    return 32 * (n / 2) + 8 * (g >> 1) + 2 * (2 * (n % 2) + half) + (g & 1);
  }
  // The new token's row (ctx - 1) as a cached one would hold it (an FP8 cache's values are codes).
  __device__ __forceinline__ void new_row(const float* k_new, const float* v_new, Piece (&k)[kPieces],
                                          Piece (&v)[kPieces]) {
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      const float* kn = k_new + 8 * (t4 + 4 * j);
      const float* vn = v_new + 8 * (t4 + 4 * j);
      if constexpr (kFp8) {
        k[j] = make_uint2(e4m3x4_of(kn), e4m3x4_of(kn + 4));
        v[j] = make_uint2(e4m3x4_of(vn), e4m3x4_of(vn + 4));
      } else {
        k[j] = make_uint4(pack_bf16(kn[0], kn[1]), pack_bf16(kn[2], kn[3]), pack_bf16(kn[4], kn[5]),
                          pack_bf16(kn[6], kn[7]));
        v[j] = make_uint4(pack_bf16(vn[0], vn[1]), pack_bf16(vn[2], vn[3]), pack_bf16(vn[4], vn[5]),
                          pack_bf16(vn[6], vn[7]));
      }
    }
  }

  // q [G][D] in plain order (G <= 8); k_new, v_new [D].
  //  - S (16 tokens x 8 heads) = K (A: the tile's rows) . q (B). The products do not care in which
  //    order k runs as long as A and B agree, so a lane's A pairs are its pieces as loaded, and
  //    q's B fragments take the same dims (once), q rounded to bf16 (f16 with an FP8 cache) as
  //    transformers' attention takes it. Heads past G are zeros, never stored.
  //  - Per head the tile's max over its tokens (3 shuffles across g8), the running max, sum and
  //    accumulators rescaled (a lane's sum covers its two tokens; added up across g8 at the end).
  //  - O^T (D dims x 8 heads) += V^T (A) . P^T (B), P as hi + lo: V's rows and P (S's fragments,
  //    packed) turned into those fragments by 8x8 transposes (movmatrix). Tile n's rows g8 and
  //    g8 + 8 are dims out_dim(n, g8, 0) and out_dim(n, g8, 1), its columns heads 2 t4, 2 t4 + 1.
  __device__ __forceinline__ void run(const float* q, const float* k_new, const float* v_new, int G, float* acc,
                                      float* ml) {
    uint32_t qf[kSteps][2];
#pragma unroll
    for (int n = 0; n < kSteps; ++n) {
      const int d0 = 8 * (t4 + 4 * (n / 2)) + 4 * (n % 2);
      const float* qh = q + g8 * D + d0;
      const bool head = g8 < G;
      qf[n][0] = pack(head ? qh[0] : 0.f, head ? qh[1] : 0.f);
      qf[n][1] = pack(head ? qh[2] : 0.f, head ? qh[3] : 0.f);
    }
    float m2[2] = {-INFINITY, -INFINITY}, l2[2] = {0.f, 0.f};  // heads 2 t4 and 2 t4 + 1
    float o[kSteps][4] = {};
    const int first_tile = s.start + 16 * warp;
    for (int tb = first_tile; tb < s.end; tb += 16 * kWarps) {
      if (tb != first_tile) load_tile(tb);
      if (tb + g8 == s.ctx - 1) new_row(k_new, v_new, ka, va);
      if (tb + g8 + 8 == s.ctx - 1) new_row(k_new, v_new, kb, vb);
      float s2[2][4] = {};  // two chains of k steps, added at the end (half the dependent mma latency)
#pragma unroll
      for (int n = 0; n < kSteps; ++n) {
        const int j = n / 2, r = 2 * (n % 2);
        const uint32_t a[4] = {pair_of(ka[j], r), pair_of(kb[j], r), pair_of(ka[j], r + 1), pair_of(kb[j], r + 1)};
        mma(s2[n % 2], a, qf[n][0], qf[n][1]);
      }
      float sc[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[i] = s2[0][i] + s2[1][i];
      if (tb + g8 >= s.end) sc[0] = sc[1] = -INFINITY;
      if (tb + g8 + 8 >= s.end) sc[2] = sc[3] = -INFINITY;
      float p[4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // token tb (lane g8 = 0's first) is in the split: the max is finite
        float mt = fmaxf(sc[i], sc[2 + i]);
#pragma unroll
        for (int off = 4; off < 32; off *= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
        const float mx = fmaxf(m2[i], mt), alpha = exp2f(m2[i] - mx);
        m2[i] = mx;
        p[i] = exp2f(sc[i] - mx);
        p[2 + i] = exp2f(sc[2 + i] - mx);
        l2[i] = l2[i] * alpha + (p[i] + p[2 + i]);
#pragma unroll
        for (int n = 0; n < kSteps; ++n) {
          o[n][i] *= alpha;
          o[n][2 + i] *= alpha;
        }
      }
      uint32_t p_hi[2], p_lo[2];
      split(p[0], p[1], p_hi[0], p_lo[0]);
      split(p[2], p[3], p_hi[1], p_lo[1]);
      const uint32_t b_hi0 = transpose8x8(p_hi[0]), b_hi1 = transpose8x8(p_hi[1]);
      const uint32_t b_lo0 = transpose8x8(p_lo[0]), b_lo1 = transpose8x8(p_lo[1]);
#pragma unroll
      for (int n = 0; n < kSteps; ++n) {
        const int j = n / 2, r = 2 * (n % 2);
        const uint32_t a[4] = {transpose8x8(pair_of(va[j], r)), transpose8x8(pair_of(va[j], r + 1)),
                               transpose8x8(pair_of(vb[j], r)), transpose8x8(pair_of(vb[j], r + 1))};
        mma(o[n], a, b_hi0, b_hi1);
        mma(o[n], a, b_lo0, b_lo1);
      }
    }
    // The warp's sums over its lanes' tokens; then its (max, sum) and accumulators of each head.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int off = 4; off < 32; off *= 2) l2[i] += __shfl_xor_sync(0xffffffffu, l2[i], off);
      const int h = 2 * t4 + i;
      if (h < G) {
#pragma unroll
        for (int n = 0; n < kSteps; ++n) {
          acc[(warp * G + h) * D + out_dim(n, g8, 0)] = o[n][i];
          acc[(warp * G + h) * D + out_dim(n, g8, 1)] = o[n][2 + i];
        }
        if (g8 == 0) {
          ml[(warp * G + h) * 2] = m2[i];
          ml[(warp * G + h) * 2 + 1] = l2[i];
        }
      }
    }
  }
};

}  // namespace
}  // namespace nvllm::kernels
