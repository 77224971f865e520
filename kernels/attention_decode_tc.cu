// Decode attention over an FP8 cache on the tensor cores: one query per sequence, the q heads
// of one kv head (up to 8) as the N side of mma.sync m16n8k16 (f16 in, fp32 accumulate), 16
// tokens as its M side, the codes converted to f16 (exactly) in registers.
//
// Why: the CUDA-core kernel (attention_decode.cu) spends ~55 warp instructions a token and kv
// head on an FP8 cache (two 16-code conversions, 128 FMAs and 12 shuffles a lane of its 8-lane
// row, then 64 FMAs for V at 4 q heads): twice bf16's per byte, so it is issue-bound at 71-82%
// of the copy rate. Here a warp takes 16 tokens at a time: S^T = K Q^T is D/16 mma, O^T += V^T P^T
// another D/16, the conversions one instruction per two codes.
//
// Layouts (lane = 4 g + c; fragments as the PTX ISA gives them for m16n8k16 and movmatrix):
//  - S^T = K Q^T: A[m = token][k = dim], lane (g, c) holds tokens g and g + 8. The dot product
//    does not care in which order the dims are summed, so each lane loads D/4 consecutive codes
//    of its tokens (c * D/4 ..): k-step j's logical columns 2c, 2c + 1 / 2c + 8, 2c + 9 are the
//    real dims c * D/4 + 4j + 0, 1 / 2, 3, one 32-bit word of codes. Q^T's B fragments (column
//    n = head g, zero past the group) are loaded in the same order.
//  - O^T += V^T P^T: A[m = dim][k = token] wants two tokens' codes of one dim a lane: lane (g, c)
//    loads D/8 consecutive codes (g * D/8 ..) of tokens 2c, 2c + 1, 2c + 8, 2c + 9 and pairs the
//    tokens' bytes (byte_perm); m-tile jm's rows g / g + 8 are the real dims g * D/8 + 2 jm + 0 / 1.
//    P^T's B fragments (tokens 2c, 2c + 1 / 2c + 8, 2c + 9 of head g) are S^T's C fragments
//    (token g / g + 8 at heads 2c, 2c + 1) transposed by movmatrix, two 8 x 8 halves.
//  - Each warp loads its next tile while it computes this one (registers, double-buffered).
// Bytes and FLOPs as attention_decode.cu (one byte a K or V element); the FLOPs are 8 / group
// times what the heads need (the padded mma columns), still far under the tensor cores' rate.
#include <cstdint>

#include "kernels/attention_decode.cuh"
#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::decode_detail {
namespace {

constexpr int kTcThreads = 128;  // four warps, each over its own 16-token tiles of the split
constexpr int kTcWarps = kTcThreads / 32;
constexpr int kTile = 16;

template <int kBytes>
__device__ __forceinline__ void load_codes(uint32_t (&w)[kBytes / 4], const uint8_t* src) {
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

// A 16 x 16 block of f16 pairs, transposed: movmatrix on each 8 x 8 half.
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// One tile's codes: K of tokens g, g + 8 (a lane's quarter of each row), V of tokens 2c, 2c + 1,
// 2c + 8, 2c + 9 (a lane's eighth); zero past the split's end.
template <int D>
struct TileCodes {
  uint32_t k[2][D / 16];
  uint32_t v[4][D / 32];
};

template <int D, typename SlotOf>
__device__ __forceinline__ void load_tile(TileCodes<D>& tc, int t0, int end, int g, int c, const uint8_t* k_head,
                                          const uint8_t* v_head, const SlotOf& slot_of) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int t = t0 + 8 * half + g;
    if (t < end) {
      load_codes<D / 4>(tc.k[half], k_head + slot_of(t) + c * (D / 4));
    } else {
#pragma unroll
      for (int j = 0; j < D / 16; ++j) tc.k[half][j] = 0u;
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = t0 + 2 * c + (i & 1) + 8 * (i >> 1);
    if (t < end) {
      load_codes<D / 8>(tc.v[i], v_head + slot_of(t) + g * (D / 8));
    } else {
#pragma unroll
      for (int j = 0; j < D / 32; ++j) tc.v[i][j] = 0u;
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kTcThreads) attention_decode_fp8_tc_kernel(DecodeParams p) {
  constexpr int kKSteps = D / 16;  // k-steps of S^T, = 32-bit words of K codes a lane holds a token
  constexpr int kKCodes = D / 4;   // a lane's codes of each of its two tokens' K rows
  constexpr int kVCodes = D / 8;   // a lane's codes of each of its four tokens' V rows
  constexpr int kOTiles = D / 16;  // m-tiles of O^T
  constexpr int kOStride = D + 4;  // padded rows of the combine buffer
  __shared__ float sm_o[kTcWarps][kTcMaxGroup][kOStride];
  __shared__ float sm_m[kTcWarps][kTcMaxGroup], sm_l[kTcWarps][kTcMaxGroup];

  const int group = p.num_heads / p.num_kv_heads;
  const int kvh = blockIdx.x, s = blockIdx.y, split = blockIdx.z;
  const int head0 = kvh * group;
  const int ctx = p.context_lens[s];
  constexpr SplitPolicy kSplit = kFp8Splits;  // (p.split, as a constant)
  const int partition = partition_for(ctx, kSplit), used = splits_for(ctx, kSplit);
  if (split >= used) return;  // the reduce reads only the sequence's own splits
  const int start = split * partition, end = min(ctx, start + partition);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;

  // Q^T's B fragments, k-step j: head g's dims 4j + 0, 1 and 4j + 2, 3 of this lane's quarter
  // (c * kKCodes ..), f16; heads past the group are zero.
  uint32_t qb[kKSteps][2];
  {
    const bf16* q0 = p.q + size_t(s) * p.q_stride + size_t(head0 + g) * D + c * kKCodes;
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
      float f[4] = {0.f, 0.f, 0.f, 0.f};
      if (g < group) {
        const uint2 raw = *reinterpret_cast<const uint2*>(q0 + 4 * j);
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
        f[0] = lo.x, f[1] = lo.y, f[2] = hi.x, f[3] = hi.y;
      }
      qb[j][0] = pack_f16(f[0], f[1]);
      qb[j][1] = pack_f16(f[2], f[3]);
    }
  }
  // Scores are (q . codes) * k_scale * softmax scale, in log2 units.
  const float score_scale = p.scale_log2 * p.k_scale[kvh];

  const int32_t* table = p.block_tables + size_t(s) * p.max_blocks_per_seq;
  const int block_mask = (1 << p.block_shift) - 1;
  const size_t row_stride = size_t(p.num_kv_heads) * D;  // bytes between consecutive cache slots
  const uint8_t* k_head = static_cast<const uint8_t*>(p.k_cache) + size_t(kvh) * D;
  const uint8_t* v_head = static_cast<const uint8_t*>(p.v_cache) + size_t(kvh) * D;
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
  TileCodes<D> cur;
  if (t0 < end) load_tile<D>(cur, t0, end, g, c, k_head, v_head, slot_of);
  for (; t0 < end; t0 += kStride) {
    TileCodes<D> next;  // the warp's next tile, in flight while this one is computed
    if (t0 + kStride < end) load_tile<D>(next, t0 + kStride, end, g, c, k_head, v_head, slot_of);

    // S^T: st[0], st[1] token g at heads 2c, 2c + 1; st[2], st[3] token g + 8.
    float st[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
      const uint32_t a[4] = {e4m3x2_to_f16x2(cur.k[0][j]), e4m3x2_to_f16x2(cur.k[1][j]),
                             e4m3x2_to_f16x2(cur.k[0][j] >> 16), e4m3x2_to_f16x2(cur.k[1][j] >> 16)};
      mma_f16_16816(st, a, qb[j][0], qb[j][1]);
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
      for (int e = h; e < 4; e += 2) {
        st[e] = m_new == -INFINITY ? 0.f : exp2f(st[e] - m_new);
        l[h] += st[e];
      }
    }
    // P^T's B fragments: tokens 2c, 2c + 1 (b0) and 2c + 8, 2c + 9 (b1) of head g.
    const uint32_t b0 = transpose_8x8(pack_f16(st[0], st[1])), b1 = transpose_8x8(pack_f16(st[2], st[3]));
    // V^T's A fragments, m-tile jm: rows g, g + 8 = bytes 2 jm, 2 jm + 1 of this lane's eighth,
    // tokens (2c, 2c + 1) and (2c + 8, 2c + 9), paired by byte_perm.
#pragma unroll
    for (int q = 0; q < kVCodes / 4; ++q) {
      const uint32_t lo01 = __byte_perm(cur.v[0][q], cur.v[1][q], 0x5140);
      const uint32_t hi01 = __byte_perm(cur.v[0][q], cur.v[1][q], 0x7362);
      const uint32_t lo89 = __byte_perm(cur.v[2][q], cur.v[3][q], 0x5140);
      const uint32_t hi89 = __byte_perm(cur.v[2][q], cur.v[3][q], 0x7362);
      const uint32_t a_lo[4] = {e4m3x2_to_f16x2(lo01), e4m3x2_to_f16x2(lo01 >> 16), e4m3x2_to_f16x2(lo89),
                                e4m3x2_to_f16x2(lo89 >> 16)};
      const uint32_t a_hi[4] = {e4m3x2_to_f16x2(hi01), e4m3x2_to_f16x2(hi01 >> 16), e4m3x2_to_f16x2(hi89),
                                e4m3x2_to_f16x2(hi89 >> 16)};
      mma_f16_16816(o[2 * q], a_lo, b0, b1);
      mma_f16_16816(o[2 * q + 1], a_hi, b0, b1);
    }
    cur = next;
  }

  // Each warp's heads into shared memory, the dims back in place: o[jm][h] and o[jm][2 + h] hold
  // head 2c + h at the real dims g * kVCodes + 2 jm and + 1.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 4);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 8);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 16);
    const int head = 2 * c + h;
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      sm_o[warp][head][g * kVCodes + 2 * n] = o[n][h];
      sm_o[warp][head][g * kVCodes + 2 * n + 1] = o[n][2 + h];
    }
    if (g == 0) {
      sm_m[warp][head] = m[h];
      sm_l[warp][head] = l[h];
    }
  }
  __syncthreads();
  const float v_scale = p.v_scale[kvh];  // the output is sum p code * v_scale / sum p
  for (int i = threadIdx.x; i < group * D; i += kTcThreads) {
    const int h = i / D, d = i % D;
    const SoftmaxPart r = merge_softmax(  // a warp that saw no token has max -inf
        kTcWarps, [&](int j) { return sm_m[j][h]; }, [&](int j) { return sm_l[j][h]; },
        [&](int j) { return sm_o[j][h][d]; });
    store_head_output(p, s, head0 + h, split, used, D, d, r.acc * v_scale, r.m, r.l);
  }
}

}  // namespace

void launch_decode_fp8_tc(const DecodeParams& p, int head_dim, int num_seqs, cudaStream_t stream) {
  const dim3 grid(p.num_kv_heads, num_seqs, p.num_splits);
  if (head_dim == 128)
    attention_decode_fp8_tc_kernel<128><<<grid, kTcThreads, 0, stream>>>(p);
  else
    attention_decode_fp8_tc_kernel<64><<<grid, kTcThreads, 0, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace nvllm::kernels::decode_detail
