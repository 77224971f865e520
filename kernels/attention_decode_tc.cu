// Decode attention on the tensor cores: one query per sequence, the q heads of one kv head (up
// to 8) as the N side of mma.sync m16n8k16 (fp32 accumulate), 16 tokens as its M side. An FP8
// cache's codes are converted to f16 (exactly) in registers and multiplied as f16; a bf16 cache's
// values go to a bf16 mma as loaded.
//
// Why: the CUDA-core kernel (attention_decode.cu) spends its instructions per token and q head:
// on an FP8 cache ~55 warp instructions a token and kv head at 4 q heads (two 16-code conversions,
// 128 FMAs and 12 shuffles a lane of its 8-lane row, then 64 FMAs for V), issue-bound at 71-82% of
// the copy rate; on a bf16 cache at 4 q heads (Qwen3-8B, Llama-3-8B) 75-80% of 3.03 TB/s against
// 91% at 2. Here a warp takes 16 tokens at a time: S^T = K Q^T is D/16 mma, O^T += V^T P^T
// another D/16, whatever the group.
//
// Layouts (lane = 4 g + c; fragments as the PTX ISA gives them for m16n8k16 and movmatrix):
//  - S^T = K Q^T: A[m = token][k = dim], lane (g, c) holds tokens g and g + 8. The dot product
//    does not care in which order the dims are summed, so each lane loads D/4 consecutive values
//    of its tokens (c * D/4 ..): k-step j's logical columns 2c, 2c + 1 / 2c + 8, 2c + 9 are the
//    real dims c * D/4 + 4j + 0, 1 / 2, 3. Q^T's B fragments (column n = head g, zero past the
//    group) are loaded in the same order.
//  - O^T += V^T P^T: A[m = dim][k = token] wants two tokens' values of one dim a lane: lane (g, c)
//    loads D/8 consecutive values (g * D/8 ..) of tokens 2c, 2c + 1, 2c + 8, 2c + 9 and pairs the
//    tokens' elements (byte_perm); m-tile jm's rows g / g + 8 are the real dims g * D/8 + 2 jm + 0
//    / 1. P^T's B fragments (tokens 2c, 2c + 1 / 2c + 8, 2c + 9 of head g) are S^T's C fragments
//    (token g / g + 8 at heads 2c, 2c + 1) transposed by movmatrix, two 8 x 8 halves. P is
//    rounded to the mma's type: f16 (11 bits) once; bf16 (8 bits) as two parts, hi and the
//    remainder lo, each multiplied (D/16 more mma, far under the tensor cores' rate): with P in
//    one bf16, the separate kernels of two GPU-test models (groups 7 and 8) left the fused
//    path's 1% agreement. The softmax sums the values the mma used, so the output is a weighted mean of V.
//  - A warp's tile is loaded, then computed; the other warps of the SM hide the wait. Loading
//    the next tile while computing this one (double-buffered registers) held 206 registers a
//    thread (bf16, D 128: two CTAs an SM) against 146 (three) and was slower at every shape
//    measured: Qwen3-8B heads at 256 x 1,024 82% of 3.03 TB/s against 88% (FP8 79% against 87%).
// Bytes and FLOPs as attention_decode.cu; the FLOPs are 8 / group times what the heads need (the
// padded mma columns), still far under the tensor cores' rate.
//
// A context split into parts leaves each part's (max, sum, acc) for the reduce kernel
// (attention_decode.cu), or, in steps of one sequence with set_decode_cluster_merge, the parts of
// a (sequence, kv head) are one thread-block cluster that combines them itself through
// distributed shared memory in the reduce kernel's order (merge_cluster_parts: the same bits, one
// kernel fewer a layer).
#include <atomic>
#include <cstdint>
#include <span>
#include <type_traits>

#include "kernels/attention_decode.cuh"
#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels::decode_detail {
namespace {

constexpr int kTcThreads = 128;  // four warps, each over its own 16-token tiles of the split
constexpr int kTcWarps = kTcThreads / 32;
constexpr int kTile = 16;

template <int kBytes>
__device__ __forceinline__ void load_words(uint32_t (&w)[kBytes / 4], const uint8_t* src) {
  if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    w[0] = v.x;
    w[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 v = *reinterpret_cast<const uint4*>(src + 16 * i);
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  }
}

// A 16 x 16 block of 16-bit pairs, transposed: movmatrix on each 8 x 8 half.
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The cache element's side of the kernel: how many 32-bit words a lane holds of a tile, how they
// become A fragments, and the mma they go to.
template <typename T, int D>
struct TcCache;

// FP8: codes converted to f16 pairs (exact), f16 mma; scales folded in outside the loop.
template <int D>
struct TcCache<fp8_e4m3, D> {
  static constexpr int kKWords = D / 16;  // a token's quarter row: D/4 codes
  static constexpr int kVWords = D / 32;  // a token's eighth row: D/8 codes
  static constexpr int kPParts = 1;  // P as f16: 11 bits
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return pack_f16(lo, hi); }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __half22float2(*reinterpret_cast<const __half2*>(&x));
  }
  static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    mma_f16_16816(c, a, b0, b1);
  }
  // K's A fragment of k-step j: dims 4j + 0, 1 (low pair of word j) and 4j + 2, 3 (high pair).
  static __device__ __forceinline__ void k_frag(uint32_t (&a)[4], const uint32_t (&k)[2][kKWords], int j) {
    a[0] = e4m3x2_to_f16x2(k[0][j]);
    a[1] = e4m3x2_to_f16x2(k[1][j]);
    a[2] = e4m3x2_to_f16x2(k[0][j] >> 16);
    a[3] = e4m3x2_to_f16x2(k[1][j] >> 16);
  }
  // V^T's A fragment of m-tile n: its rows g / g + 8 (dims 2n, 2n + 1) are bytes 2 (n % 2) and
  // 2 (n % 2) + 1 of word n / 2, paired across tokens.
  static __device__ __forceinline__ void v_frag(uint32_t (&a)[4], const uint32_t (&v)[4][kVWords], int n) {
    const int q = n >> 1;
    const uint32_t sel = n & 1 ? 0x7362u : 0x5140u;
    const uint32_t p01 = __byte_perm(v[0][q], v[1][q], sel), p89 = __byte_perm(v[2][q], v[3][q], sel);
    a[0] = e4m3x2_to_f16x2(p01);
    a[1] = e4m3x2_to_f16x2(p01 >> 16);
    a[2] = e4m3x2_to_f16x2(p89);
    a[3] = e4m3x2_to_f16x2(p89 >> 16);
  }
};

// bf16: values as loaded, bf16 mma (the query is bf16 already, so S^T is exact products).
template <int D>
struct TcCache<bf16, D> {
  static constexpr int kKWords = D / 8;   // a token's quarter row: D/4 values
  static constexpr int kVWords = D / 16;  // a token's eighth row: D/8 values
  static constexpr int kPParts = 2;  // P as bf16 hi + lo: 16 bits, as the CUDA-core kernel's fp32 to ~1e-5
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return pack_bf16(lo, hi); }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
  }
  static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    mma_bf16_16816(c, a, b0, b1);
  }
  static __device__ __forceinline__ void k_frag(uint32_t (&a)[4], const uint32_t (&k)[2][kKWords], int j) {
    a[0] = k[0][2 * j];
    a[1] = k[1][2 * j];
    a[2] = k[0][2 * j + 1];
    a[3] = k[1][2 * j + 1];
  }
  // Word n of a token holds dims 2n (low half, row g) and 2n + 1 (high half, row g + 8).
  static __device__ __forceinline__ void v_frag(uint32_t (&a)[4], const uint32_t (&v)[4][kVWords], int n) {
    a[0] = __byte_perm(v[0][n], v[1][n], 0x5410);
    a[1] = __byte_perm(v[0][n], v[1][n], 0x7632);
    a[2] = __byte_perm(v[2][n], v[3][n], 0x5410);
    a[3] = __byte_perm(v[2][n], v[3][n], 0x7632);
  }
};

// One tile of a lane: K of tokens g, g + 8 (a quarter of each row), V of tokens 2c, 2c + 1,
// 2c + 8, 2c + 9 (an eighth); zero past the split's end.
template <typename T, int D>
struct Tile {
  using C = TcCache<T, D>;
  uint32_t k[2][C::kKWords];
  uint32_t v[4][C::kVWords];
};

template <typename T, int D, typename SlotOf>
__device__ __forceinline__ void load_tile(Tile<T, D>& tc, int t0, int end, int g, int c, const uint8_t* k_head,
                                          const uint8_t* v_head, const SlotOf& slot_of) {
  using C = TcCache<T, D>;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int t = t0 + 8 * half + g;
    if (t < end) {
      load_words<4 * C::kKWords>(tc.k[half], k_head + slot_of(t) + c * 4 * C::kKWords);
    } else {
#pragma unroll
      for (int j = 0; j < C::kKWords; ++j) tc.k[half][j] = 0u;
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = t0 + 2 * c + (i & 1) + 8 * (i >> 1);
    if (t < end) {
      load_words<4 * C::kVWords>(tc.v[i], v_head + slot_of(t) + g * 4 * C::kVWords);
    } else {
#pragma unroll
      for (int j = 0; j < C::kVWords; ++j) tc.v[i][j] = 0u;
    }
  }
}

// A CTA's combined result in shared memory for the others of its cluster (kClusterMerge): what
// store_head_output would write to the workspace, for each head of the group.
template <int D>
struct ClusterPart {
  float acc[kTcMaxGroup][D];
  float m[kTcMaxGroup], l[kTcMaxGroup];
};
struct NoClusterPart {};

// The reduce kernel's combine (attention_decode.cu, attention_decode_reduce_kernel), of the
// cluster's `used` parts read from their CTAs' shared memory: lane z of a warp takes part z's
// max and sum (a warp's 32 outputs are one head's), the same warp_max, exp2f and warp_sum, then
// each output adds the parts' acc in part order. So the same bits as that kernel's. The outputs
// are dealt over the CTAs of the parts; every CTA of the cluster calls it (two cluster barriers:
// the parts are written before any is read, and read before any CTA leaves).
template <int D>
__device__ __forceinline__ void merge_cluster_parts(const DecodeParams& p, const ClusterPart<D>& part, int s,
                                                    int head0, int group, int split, int used) {
  cluster_sync();
  if (split < used) {
    const int lane = threadIdx.x & 31;
    for (int i = split * kTcThreads + threadIdx.x; i < group * D; i += used * kTcThreads) {
      const int h = i / D, d = i % D;
      const float m = lane < used ? load_remote(&part.m[h], lane) : -INFINITY;
      const float l = lane < used ? load_remote(&part.l[h], lane) : 0.f;
      const float mx = warp_max(m);
      const float w = m == -INFINITY ? 0.f : exp2f(m - mx);
      const float total = warp_sum(l * w);
      float a = 0.f;
      for (int z = 0; z < used; ++z)
        a += load_remote(&part.acc[h][d], z) * __shfl_sync(0xffffffffu, w, z);
      p.out[size_t(s) * p.num_heads * D + (head0 + h) * D + d] = __float2bfloat16(total > 0.f ? a / total : 0.f);
    }
  }
  cluster_sync();
}

// kChained: launched with PDL (attention_decode's `chained`): waits for the kernel before it at
// the top, and lets the next one launch once its tiles are done. kClusterMerge: the grid's z
// (the parts of a sequence) is one cluster, which combines the parts itself (merge_cluster_parts).
template <typename T, int D, bool kChained, bool kClusterMerge>
__global__ void __launch_bounds__(kTcThreads) attention_decode_tc_kernel(DecodeParams p) {
  if constexpr (kChained) pdl_wait();
  using C = TcCache<T, D>;
  constexpr bool kFp8 = std::is_same_v<T, fp8_e4m3>;
  constexpr int kKSteps = D / 16;  // k-steps of S^T
  constexpr int kOTiles = D / 16;  // m-tiles of O^T
  constexpr int kQuarter = D / 4;  // a lane's dims of a K row
  constexpr int kEighth = D / 8;   // a lane's dims of a V row
  constexpr int kOStride = D + 4;  // padded rows of the combine buffer
  __shared__ float sm_o[kTcWarps][kTcMaxGroup][kOStride];
  __shared__ float sm_m[kTcWarps][kTcMaxGroup], sm_l[kTcWarps][kTcMaxGroup];
  __shared__ std::conditional_t<kClusterMerge, ClusterPart<D>, NoClusterPart> cluster_part;

  const int group = p.num_heads / p.num_kv_heads;
  const int kvh = blockIdx.x, s = sequence_of(p, blockIdx.y), split = blockIdx.z;
  const int head0 = kvh * group;
  const int ctx = p.context_lens[s];
  const int partition = partition_for(ctx, p.split), used = splits_for(ctx, p.split);
  // The reduce reads only the sequence's own splits; in a cluster that combines its parts every
  // CTA takes part in its barriers (an idle one's part, of no tokens, is not read).
  const bool merge_here = kClusterMerge && used > 1;  // the same in every CTA of the cluster
  if (split >= used && !merge_here) return;
  const int start = split * partition, end = min(ctx, start + partition);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;

  // Q^T's B fragments, k-step j: head g's dims 4j + 0, 1 and 4j + 2, 3 of this lane's quarter
  // (c * kQuarter ..), in the mma's type; heads past the group are zero.
  uint32_t qb[kKSteps][2];
  {
    const bf16* q0 = p.q + size_t(s) * p.q_stride + size_t(head0 + g) * D + c * kQuarter;
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
      uint2 raw = make_uint2(0u, 0u);
      if (g < group) raw = *reinterpret_cast<const uint2*>(q0 + 4 * j);
      if constexpr (kFp8) {
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
        qb[j][0] = pack_f16(lo.x, lo.y);
        qb[j][1] = pack_f16(hi.x, hi.y);
      } else {
        qb[j][0] = raw.x;
        qb[j][1] = raw.y;
      }
    }
  }
  // Scores are (q . k) * softmax scale (FP8: times k_scale), in log2 units.
  float score_scale = p.scale_log2;
  if constexpr (kFp8) score_scale *= p.k_scale[kvh];

  const int32_t* table = p.block_tables + size_t(s) * p.max_blocks_per_seq;
  const int block_mask = (1 << p.block_shift) - 1;
  const size_t row_stride = size_t(p.num_kv_heads) * D * sizeof(T);  // bytes between cache slots
  const uint8_t* k_head = static_cast<const uint8_t*>(p.k_cache) + size_t(kvh) * D * sizeof(T);
  const uint8_t* v_head = static_cast<const uint8_t*>(p.v_cache) + size_t(kvh) * D * sizeof(T);
  // Tiles start at multiples of 16 tokens (partitions are), so with blocks of 16 or more tokens a
  // tile's tokens sit in one block: a lane's six rows of a tile then need one table read, not six
  // (at small batches each warp's tiles are one dependent chain after another: bench/NOTES.md).
  const bool one_block_a_tile = p.block_shift >= 4;
  const unsigned tile_row_stride = static_cast<unsigned>(row_stride);
  auto slot_of = [&](int t) {
    return (size_t(table[t >> p.block_shift]) << p.block_shift | size_t(t & block_mask)) * row_stride;
  };

  // O^T: m-tile jm holds rows (dims) g, g + 8 at columns (heads) 2c, 2c + 1.
  float o[kOTiles][4];
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // heads 2c, 2c + 1; l: this lane's tokens

  constexpr int kStride = kTcWarps * kTile;
  int t0 = start + warp * kTile;
  for (; t0 < end; t0 += kStride) {
    Tile<T, D> tile;
    if (one_block_a_tile) {  // one table read for the tile; its tokens' rows follow each other
      const size_t first = slot_of(t0);
      load_tile<T, D>(tile, t0, end, g, c, k_head + first, v_head + first,
                      [&](int t) { return static_cast<unsigned>((t - t0) * tile_row_stride); });
    } else {
      load_tile<T, D>(tile, t0, end, g, c, k_head, v_head, slot_of);
    }

    // S^T: st[0], st[1] token g at heads 2c, 2c + 1; st[2], st[3] token g + 8.
    float st[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
      uint32_t a[4];
      C::k_frag(a, tile.k, j);
      C::mma(st, a, qb[j][0], qb[j][1]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) st[e] = t0 + g + 8 * (e >> 1) < end ? st[e] * score_scale : -INFINITY;
    // Online softmax per head over the tile's 16 tokens (a head's values sit in the 8 lanes of
    // one c, two tokens each).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(st[h], st[2 + h]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m[h], mx);
      const float alpha = m_new == -INFINITY ? 1.f : exp2f(m[h] - m_new);
      m[h] = m_new;
      l[h] *= alpha;
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        o[n][h] *= alpha;
        o[n][2 + h] *= alpha;
      }
#pragma unroll
      for (int e = h; e < 4; e += 2) st[e] = m_new == -INFINITY ? 0.f : exp2f(st[e] - m_new);
    }
    // P^T's B fragments, each part: tokens 2c, 2c + 1 (b[part][0]) and 2c + 8, 2c + 9 (b[part][1])
    // of head g, from S^T's rows g and g + 8. P goes to the mma in its type, as C::kPParts parts
    // whose sum is P to 16 bits (bf16: hi + lo) or one (f16, 11 bits); l sums what the mma uses.
    uint32_t b[C::kPParts][2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float rest[2] = {st[2 * r], st[2 * r + 1]};
#pragma unroll
      for (int part = 0; part < C::kPParts; ++part) {
        const uint32_t packed = C::pack(rest[0], rest[1]);
        const float2 used_p = C::unpack(packed);
        l[0] += used_p.x;
        l[1] += used_p.y;
        rest[0] -= used_p.x;
        rest[1] -= used_p.y;
        b[part][r] = transpose_8x8(packed);
      }
    }
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      uint32_t a[4];
      C::v_frag(a, tile.v, n);
#pragma unroll
      for (int part = 0; part < C::kPParts; ++part) C::mma(o[n], a, b[part][0], b[part][1]);
    }
  }

  if constexpr (kChained) pdl_launch_dependents();
  // Each warp's heads into shared memory, the dims back in place: o[jm][h] and o[jm][2 + h] hold
  // head 2c + h at the real dims g * kEighth + 2 jm and + 1.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 4);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 8);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 16);
    const int head = 2 * c + h;
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      sm_o[warp][head][g * kEighth + 2 * n] = o[n][h];
      sm_o[warp][head][g * kEighth + 2 * n + 1] = o[n][2 + h];
    }
    if (g == 0) {
      sm_m[warp][head] = m[h];
      sm_l[warp][head] = l[h];
    }
  }
  __syncthreads();
  float out_scale = 1.f;  // FP8: the output is sum p code * v_scale / sum p
  if constexpr (kFp8) out_scale = p.v_scale[kvh];
  for (int i = threadIdx.x; i < group * D; i += kTcThreads) {
    const int h = i / D, d = i % D;
    const SoftmaxPart r = merge_softmax(  // a warp that saw no token has max -inf
        kTcWarps, [&](int j) { return sm_m[j][h]; }, [&](int j) { return sm_l[j][h]; },
        [&](int j) { return sm_o[j][h][d]; });
    if constexpr (kClusterMerge) {
      if (merge_here) {
        cluster_part.acc[h][d] = r.acc * out_scale;
        if (d == 0) {
          cluster_part.m[h] = r.m;
          cluster_part.l[h] = r.l;
        }
        continue;
      }
    }
    store_head_output(p, s, head0 + h, split, used, D, d, r.acc * out_scale, r.m, r.l);
  }
  if constexpr (kClusterMerge)
    if (merge_here) merge_cluster_parts<D>(p, cluster_part, s, head0, group, split, used);
}

template <typename T, int D>
void launch_chained(const DecodeParams& p, int num_seqs, bool chained, bool cluster_merge, cudaStream_t stream) {
  const dim3 grid(p.num_kv_heads, num_seqs, p.num_splits);
  const bool pdl = chained && pdl_enabled();
  if (cluster_merge) {
    NVLLM_CHECK(p.num_splits <= tc_cluster_merge_splits(), "internal: ", p.num_splits,
                " parts of a decode attention cluster; at most ", tc_cluster_merge_splits());
    const cudaLaunchAttribute attrs[2] = {cluster_attr(dim3(1, 1, unsigned(p.num_splits))), pdl_attr()};
    const std::span<const cudaLaunchAttribute> with(attrs, pdl ? 2 : 1);
    if (pdl)
      launch_with(with, attention_decode_tc_kernel<T, D, true, true>, grid, dim3(kTcThreads), 0, stream, p);
    else
      launch_with(with, attention_decode_tc_kernel<T, D, false, true>, grid, dim3(kTcThreads), 0, stream, p);
  } else if (pdl) {
    launch_pdl(attention_decode_tc_kernel<T, D, true, false>, grid, dim3(kTcThreads), 0, stream, p);
  } else {
    attention_decode_tc_kernel<T, D, false, false><<<grid, kTcThreads, 0, stream>>>(p);
    CUDA_CHECK(cudaGetLastError());
  }
}

template <typename T>
void launch_dims(const DecodeParams& p, int head_dim, int num_seqs, bool chained, bool cluster_merge,
                 cudaStream_t stream) {
  if (head_dim == 128)
    launch_chained<T, 128>(p, num_seqs, chained, cluster_merge, stream);
  else
    launch_chained<T, 64>(p, num_seqs, chained, cluster_merge, stream);
}

// Lets the cluster kernels of one cache type and head_dim run clusters of 16 (a non-portable
// size); false where the device refuses.
template <typename T, int D>
bool allow_16() {
  bool ok = true;
  for (auto kernel : {attention_decode_tc_kernel<T, D, true, true>, attention_decode_tc_kernel<T, D, false, true>})
    ok = ok && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
  return ok;
}

// Whether clusters of `size` CTAs of the bf16, head_dim 128 cluster kernel can be resident (the
// four cluster kernels have the same threads and near the same shared memory).
bool cluster_fits(int size) {
  const dim3 cluster(1, 1, unsigned(size));
  return max_active_clusters(reinterpret_cast<const void*>(attention_decode_tc_kernel<bf16, 128, false, true>), cluster,
                             cluster, dim3(kTcThreads)) > 0;
}

}  // namespace

int tc_cluster_merge_splits() {
  // A function attribute belongs to one device's copy of the kernel: asked and set once on each
  // device (tensor- and data-parallel ranks run on several), on the first call with it current.
  constexpr int kDevices = 64;
  static std::atomic<int> most[kDevices];  // 0: not asked yet, else the answer + 1
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  auto ask = [] {
    if (device_attribute(cudaDevAttrComputeCapabilityMajor) < 9) return 0;
    if (allow_16<bf16, 128>() && allow_16<bf16, 64>() && allow_16<fp8_e4m3, 128>() && allow_16<fp8_e4m3, 64>() &&
        cluster_fits(16))
      return 16;
    (void)cudaGetLastError();
    return cluster_fits(8) ? 8 : 0;
  };
  if (device >= kDevices) return ask();
  int known = most[device].load(std::memory_order_acquire);
  if (known == 0) {  // two threads may both ask: the same answer, the same attributes
    known = ask() + 1;
    most[device].store(known, std::memory_order_release);
  }
  return known - 1;
}

void launch_decode_tc(const DecodeParams& p, bool fp8, int head_dim, int num_seqs, bool chained, bool cluster_merge,
                      cudaStream_t stream) {
  if (fp8)
    launch_dims<fp8_e4m3>(p, head_dim, num_seqs, chained, cluster_merge, stream);
  else
    launch_dims<bf16>(p, head_dim, num_seqs, chained, cluster_merge, stream);
}

}  // namespace nvllm::kernels::decode_detail
