// Causal grouped-query attention for prefill chunks over the paged KV cache, flash-attention
// style: a CTA takes a tile of query rows of one head of one sequence, walks the keys in
// tiles staged through shared memory and keeps an online softmax in fp32, so the score
// matrix never reaches device memory. The keys come from the cache (this chunk's were written
// by qk_norm_rope_cache), so cached prefixes and earlier chunks need nothing special.
//
// FLOPs: 4 * D * num_heads * sum over query rows of the keys it sees (~ q_len * ctx / 2 per
// sequence for a fresh prompt). Bytes: q and out once, K/V once per 16-row query tile.
// Two versions: the tensor-core kernel (mma.sync m16n8k16, bf16 in, fp32 accumulate) that
// attention_prefill uses, and a plain CUDA-core kernel (attention_prefill_simt, bf16 caches) kept
// as a second implementation to test against.
//
// An FP8 cache (the tensor-core kernel's T = fp8_e4m3): the next K (V) tile's codes arrive by
// cp.async in a staging buffer where the bf16 kernel copies its tile, and once this tile's
// products are done each thread converts the pieces it copied to f16 (exact: E4M3 values are f16
// values, one conversion instruction a pair) into the other tile buffer. The products then run in
// f16 (Q is converted once, P packed as f16), the k_scale goes into the score scale and the
// v_scale into the output's normalisation. (A first version held the codes in registers and
// converted them to bf16: 1.68 ms against bf16's 1.27 at 16 x 2,048 on the H100, with spills at
// the two-CTA register cap and 32 instructions to convert 16 codes instead of 8.)
#include <type_traits>

#include "core/kv_layout.h"
#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kTileQ = 16;  // query rows per CTA: 4 warps x 4 rows
constexpr int kTileK = 32;  // keys per tile: one per lane
constexpr float kLog2e = 1.4426950408889634f;

struct PrefillParams {
  const bf16* q;
  int q_stride;
  const void* k_cache;  // bf16, or fp8_e4m3 codes (the tensor-core kernel's T)
  const void* v_cache;
  const float* k_scale;  // [num_kv_heads], FP8 only
  const float* v_scale;
  const int32_t* query_start;
  const int32_t* context_lens;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  bf16* out;  // [num_tokens, H * D]
  int num_heads;
  int num_kv_heads;
  int block_shift;
  float scale_log2;
};

// Grid (query tiles, H, S). Warp w owns rows 4w..4w+3 of the tile; for the scores lane j owns
// key j of the key tile, for the output lane j owns dims j, j + 32, ...
template <int D>
__global__ void __launch_bounds__(kThreads) attention_prefill_kernel(PrefillParams p) {
  constexpr int kRows = kTileQ / (kThreads / 32), kDims = D / 32, kVec = D / 8;
  __shared__ float sq[kTileQ][D];
  __shared__ float sk[kTileK][D + 1];  // +1: lane j reads row j, so pad to spread the banks
  __shared__ float sv[kTileK][D];

  const int s = blockIdx.z, head = blockIdx.y;
  const int kvh = head / (p.num_heads / p.num_kv_heads);
  const int q0 = p.query_start[s], q_len = p.query_start[s + 1] - q0;
  const int r0 = blockIdx.x * kTileQ;
  if (r0 >= q_len) return;
  const int rows = min(kTileQ, q_len - r0);
  const int first_pos = p.context_lens[s] - q_len;  // position of the sequence's query row 0
  const int kv_end = first_pos + r0 + rows;          // keys 0 .. kv_end-1 are seen by some row
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  for (int i = threadIdx.x; i < kTileQ * kVec; i += kThreads) {
    const int r = i / kVec, c = (i % kVec) * 8;
    float f[8] = {};
    if (r < rows) to_float8(load8(p.q + size_t(q0 + r0 + r) * p.q_stride + head * D + c), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) sq[r][c + j] = f[j] * p.scale_log2;
  }

  float m[kRows], l[kRows], acc[kRows][kDims];
  softmax_start(m, l, acc);
  const int32_t* table = p.block_tables + size_t(s) * p.max_blocks_per_seq;
  const int block_mask = (1 << p.block_shift) - 1;
  const size_t row_stride = size_t(p.num_kv_heads) * D;

  for (int kt = 0; kt < kv_end; kt += kTileK) {
    __syncthreads();  // the previous tile's readers are done (and sq is written, first time)
    for (int i = threadIdx.x; i < kTileK * kVec; i += kThreads) {
      const int t = i / kVec, c = (i % kVec) * 8, key = kt + t;
      float kf[8] = {}, vf[8] = {};
      if (key < kv_end) {
        const size_t slot = size_t(table[key >> p.block_shift]) << p.block_shift | (key & block_mask);
        const size_t at = slot * row_stride + size_t(kvh) * D + c;
        to_float8(load8(static_cast<const bf16*>(p.k_cache) + at), kf);
        to_float8(load8(static_cast<const bf16*>(p.v_cache) + at), vf);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        sk[t][c + j] = kf[j];
        sv[t][c + j] = vf[j];
      }
    }
    __syncthreads();

    float sc[kRows] = {};
    for (int d = 0; d < D; ++d) {
      const float kd = sk[lane][d];
#pragma unroll
      for (int r = 0; r < kRows; ++r) sc[r] = fmaf(sq[warp * kRows + r][d], kd, sc[r]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = warp * kRows + r;
      if (row >= rows) continue;  // the same for the whole warp
      const int key = kt + lane;
      if (key > first_pos + r0 + row) sc[r] = -INFINITY;  // causal (also covers key >= kv_end)
      const float m_new = fmaxf(m[r], warp_max(sc[r]));  // finite: key 0 is in every row's view
      const float alpha = exp2f(m[r] - m_new);
      const float pr = exp2f(sc[r] - m_new);
      m[r] = m_new;
      l[r] = l[r] * alpha + warp_sum(pr);
#pragma unroll
      for (int c = 0; c < kDims; ++c) acc[r][c] *= alpha;
      for (int j = 0; j < kTileK; ++j) {
        const float pj = __shfl_sync(0xffffffffu, pr, j);
#pragma unroll
        for (int c = 0; c < kDims; ++c) acc[r][c] = fmaf(pj, sv[j][lane + 32 * c], acc[r][c]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = warp * kRows + r;
    if (row >= rows) continue;
    bf16* o = p.out + size_t(q0 + r0 + row) * p.num_heads * D + head * D;
#pragma unroll
    for (int c = 0; c < kDims; ++c) o[lane + 32 * c] = __float2bfloat16(acc[r][c] / l[r]);
  }
}

// --- tensor-core version ---
constexpr int kTcTileQ = 64;  // 4 warps x 16 rows
constexpr int kTcTileK = 64;

// Grid (query tiles of 64, H / heads_per_cta, S), 128 threads per q head: heads_per_cta (1 or
// 2, dividing the group size) q heads of one kv head share each K/V tile, so the tile is
// loaded once for both. Warp w serves q head w / 4 and query rows 16(w%4)..+15 of the tile;
// its Q fragments stay in registers for the whole key loop. K and V tiles are double-buffered
// in shared memory and arrive by cp.async one tile ahead: tile i+1's K copies while tile i's
// scores are computed, its V while tile i's P V runs. Scores and the online softmax stay in
// the mma accumulator layout (the thread holds rows g and g+8, columns 2t and 2t+1 of each
// 8-key block); P is repacked to bf16 A fragments in registers for O += P V.
// K and V, two buffers each, then one Q tile per q head of the CTA; FP8: then the staging buffer
// of one tile's codes.
constexpr size_t tc_smem_bytes(int head_dim, int heads_per_cta, bool fp8) {
  return size_t(4 + heads_per_cta) * kTcTileK * (head_dim + 8) * sizeof(bf16) +
         (fp8 ? size_t(kTcTileK) * head_dim : 0);
}

template <typename T, int D>
// Two CTAs of 8 warps per SM (the register cap this implies is why Q is re-read from shared
// memory each tile instead of living in registers): 16 warps keep the tensor pipe busier than
// 8 did (ncu: latency-bound at 8 warps, 2 per scheduler).
__global__ void __launch_bounds__(2 * kThreads, 2) attention_prefill_tc_kernel(PrefillParams p) {
  constexpr bool kFp8 = std::is_same_v<T, fp8_e4m3>;
  constexpr int kStride = D + 8;  // 16-byte pad per row: ldmatrix rows land in distinct banks
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  constexpr int kKSteps = D / 16, kNTiles = kTcTileK / 8, kOTiles = D / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* const smem = reinterpret_cast<bf16*>(smem_raw);
  // Layout: K buffer 0, K buffer 1, V buffer 0, V buffer 1, Q of each head. Buffers are found by arithmetic,
  // not through a pointer array (a run-time index would put the array in local memory).
  constexpr int kTile = kTcTileK * kStride;
  auto k_buf = [&](int b) { return smem + b * kTile; };
  auto v_buf = [&](int b) { return smem + (2 + b) * kTile; };

  const int heads_per_cta = blockDim.x / kThreads;
  const int s = blockIdx.z, head0 = blockIdx.y * heads_per_cta;
  const int kvh = head0 / (p.num_heads / p.num_kv_heads);
  const int q0 = p.query_start[s], q_len = p.query_start[s + 1] - q0;
  const int r0 = blockIdx.x * kTcTileQ;
  if (r0 >= q_len) return;
  const int rows = min(kTcTileQ, q_len - r0);
  const int first_pos = p.context_lens[s] - q_len;
  const int kv_end = first_pos + r0 + rows;
  const int num_tiles = ceil_div(kv_end, kTcTileK);
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int head = head0 + (threadIdx.x >> 5) / 4, warp = (threadIdx.x >> 5) % 4;  // warp: row block

  const int32_t* table = p.block_tables + size_t(s) * p.max_blocks_per_seq;
  const int block_mask = (1 << p.block_shift) - 1;
  const size_t row_stride = size_t(p.num_kv_heads) * D;
  // Issues the copies of keys kt..kt+63 of `cache` into `dst` (keys past kv_end zero-filled).
  auto load_tile = [&](bf16* dst, const void* cache, int kt) {
    for (int i = threadIdx.x; i < kTcTileK * kChunks; i += blockDim.x) {
      const int t = i / kChunks, c = (i % kChunks) * 8, key = kt + t;
      const bool valid = key < kv_end;
      const size_t slot = valid ? (size_t(table[key >> p.block_shift]) << p.block_shift | (key & block_mask)) : 0;
      cp_async16(&dst[t * kStride + c], static_cast<const bf16*>(cache) + slot * row_stride + size_t(kvh) * D + c,
                 valid);
    }
  };
  // FP8: the copies of keys kt..kt+63's codes of `cache` into the staging buffer (zeros past
  // kv_end), 16 codes a piece ...
  constexpr int kCodeChunks = D / 16;  // 16-code pieces per row
  unsigned char* const staging = smem_raw + size_t(4 + heads_per_cta) * kTile * sizeof(bf16);
  auto stage_codes = [&](const void* cache, int kt) {
    for (int i = threadIdx.x; i < kTcTileK * kCodeChunks; i += blockDim.x) {
      const int t = i / kCodeChunks, c = (i % kCodeChunks) * 16, key = kt + t;
      const bool valid = key < kv_end;
      const size_t slot = valid ? (size_t(table[key >> p.block_shift]) << p.block_shift | (key & block_mask)) : 0;
      cp_async16(staging + t * D + c, static_cast<const fp8_e4m3*>(cache) + slot * row_stride + size_t(kvh) * D + c,
                 valid);
    }
  };
  // ... and, once they landed, the pieces this thread copied (the same loop: no barrier needed)
  // as f16 into the tile `dst`.
  auto convert_codes = [&](bf16* dst) {
    cp_async_wait<0>();
    for (int i = threadIdx.x; i < kTcTileK * kCodeChunks; i += blockDim.x) {
      const int t = i / kCodeChunks, c = (i % kCodeChunks) * 16;
      const uint4 codes = *reinterpret_cast<const uint4*>(staging + t * D + c);
      const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
      uint32_t h[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        h[2 * j] = e4m3x2_to_f16x2(w[j]);
        h[2 * j + 1] = e4m3x2_to_f16x2(w[j] >> 16);
      }
      *reinterpret_cast<uint4*>(&dst[t * kStride + c]) = make_uint4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<uint4*>(&dst[t * kStride + c + 8]) = make_uint4(h[4], h[5], h[6], h[7]);
    }
  };
  // The products: bf16, or f16 over an FP8 cache's tiles.
  auto mma = [&](float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if constexpr (kFp8)
      mma_f16_16816(c, a, b0, b1);
    else
      mma_bf16_16816(c, a, b0, b1);
  };
  auto pack = [&](float lo, float hi) {
    if constexpr (kFp8)
      return pack_f16(lo, hi);
    else
      return pack_bf16(lo, hi);
  };
  // FP8: scores are q . code * k_scale, the output sum p code * v_scale / sum p.
  float score_scale = p.scale_log2, out_scale = 1.f;
  if constexpr (kFp8) {
    score_scale *= p.k_scale[kvh];
    out_scale = p.v_scale[kvh];
  }

  // Q tiles (rows past the end zero-filled), while tile 0 starts loading.
  for (int i = threadIdx.x; i < heads_per_cta * kTcTileQ * kChunks; i += blockDim.x) {
    const int h = i / (kTcTileQ * kChunks), r = i / kChunks % kTcTileQ, c = (i % kChunks) * 8;
    cp_async16(&smem[(4 + h) * kTile + r * kStride + c],
               p.q + size_t(q0 + r0 + min(r, rows - 1)) * p.q_stride + (head0 + h) * D + c, r < rows);
  }
  cp_async_commit();
  if constexpr (kFp8) {
    // Q to f16 in place (each thread the pieces it copied; a q beyond f16's range, which bf16
    // activations never reach, is clamped), then tile 0's K and V; the loop's first barrier
    // publishes them.
    cp_async_wait<0>();
    for (int i = threadIdx.x; i < heads_per_cta * kTcTileQ * kChunks; i += blockDim.x) {
      const int h = i / (kTcTileQ * kChunks), r = i / kChunks % kTcTileQ, c = (i % kChunks) * 8;
      bf16* piece = &smem[(4 + h) * kTile + r * kStride + c];
      float f[8];
      to_float8(load8(piece), f);
      uint32_t packed[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        packed[j] = pack_f16(fminf(fmaxf(f[2 * j], -65504.f), 65504.f), fminf(fmaxf(f[2 * j + 1], -65504.f), 65504.f));
      *reinterpret_cast<uint4*>(piece) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
    stage_codes(p.k_cache, 0);
    cp_async_commit();
    convert_codes(k_buf(0));
    stage_codes(p.v_cache, 0);
    cp_async_commit();
    convert_codes(v_buf(0));
  } else {
    load_tile(k_buf(0), p.k_cache, 0);
    cp_async_commit();
    load_tile(v_buf(0), p.v_cache, 0);
    cp_async_commit();
  }
  // This warp's 16 rows of Q, as ldmatrix addresses A fragments from.
  const bf16* q_frag = smem + (4 + head - head0) * kTile + (warp * 16 + (lane & 15)) * kStride + (lane >> 4) * 8;

  float o[kOTiles][4];
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row_a = r0 + warp * 16 + g;  // this thread's two rows: row_a and row_a + 8
  const int pos[2] = {first_pos + row_a, first_pos + row_a + 8};

  for (int it = 0; it < num_tiles; ++it) {
    const int kt = it * kTcTileK, buf = it & 1;
    // Commit order is Q, K0, V0, then K(i+1), V(i+1) per iteration: waiting until one group
    // is pending leaves exactly the newest in flight. (FP8: Q is the only group; K(it) was
    // stored by every thread before this barrier.)
    if constexpr (!kFp8) cp_async_wait<1>();  // K(it) has landed
    __syncthreads();     // ... for every thread; and everyone is done reading K buffer buf ^ 1
    if constexpr (kFp8) {
      if (it + 1 < num_tiles) stage_codes(p.k_cache, kt + kTcTileK);
    } else {
      if (it + 1 < num_tiles) load_tile(k_buf(buf ^ 1), p.k_cache, kt + kTcTileK);
    }
    cp_async_commit();
    const bf16* skb = k_buf(buf);
    const bf16* svb = v_buf(buf);

    float sc[kNTiles][4];
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t qa[4];
      ldmatrix_x4(qa, q_frag + kk * 16);
#pragma unroll
      for (int nn = 0; nn < kNTiles / 2; ++nn) {
        uint32_t b[4];
        ldmatrix_x4(b, &skb[(nn * 16 + (lane & 7) + (lane >> 4) * 8) * kStride + kk * 16 + ((lane >> 3) & 1) * 8]);
        mma(sc[2 * nn], qa, b[0], b[1]);
        mma(sc[2 * nn + 1], qa, b[2], b[3]);
      }
    }
    if constexpr (kFp8) {
      if (it + 1 < num_tiles) convert_codes(k_buf(buf ^ 1));  // K(it+1), read after the next barrier
    }

    // Causal mask (only tiles that reach past the tile's first row need it) and online
    // softmax, rows g (e = 0, 1) and g + 8 (e = 2, 3).
    const bool needs_mask = kt + kTcTileK - 1 > first_pos + r0;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kt + n * 8 + 2 * t4 + (e & 1);
        float v = sc[n][e] * score_scale;
        if (needs_mask && (key > pos[e >> 1] || key >= kv_end)) v = -INFINITY;
        sc[n][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);  // finite: key 0 is in every row's view
      alpha[r] = exp2f(m[r] - m_new);
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[n][e] = exp2f(sc[n][e] - m[e >> 1]);
        l[e >> 1] += sc[n][e];  // this thread's part of the row sum; the 4 parts meet at the end
      }
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      o[n][0] *= alpha[0], o[n][1] *= alpha[0];
      o[n][2] *= alpha[1], o[n][3] *= alpha[1];
    }

    if constexpr (!kFp8) cp_async_wait<1>();  // V(it) has landed
    __syncthreads();     // ... for every thread; and everyone is done reading V buffer buf ^ 1
    if constexpr (kFp8) {
      if (it + 1 < num_tiles) stage_codes(p.v_cache, kt + kTcTileK);  // into the staging K(it+1) left
    } else {
      if (it + 1 < num_tiles) load_tile(v_buf(buf ^ 1), p.v_cache, kt + kTcTileK);
    }
    cp_async_commit();
#pragma unroll
    for (int kk = 0; kk < kTcTileK / 16; ++kk) {
      const uint32_t a[4] = {pack(sc[2 * kk][0], sc[2 * kk][1]), pack(sc[2 * kk][2], sc[2 * kk][3]),
                             pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1]), pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int nd = 0; nd < D / 16; ++nd) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, &svb[(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + nd * 16 + (lane >> 4) * 8]);
        mma(o[2 * nd], a, b[0], b[1]);
        mma(o[2 * nd + 1], a, b[2], b[3]);
      }
    }
    if constexpr (kFp8) {
      if (it + 1 < num_tiles) convert_codes(v_buf(buf ^ 1));  // V(it+1)
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_a + 8 * r;
    if (row >= q_len) continue;
    const float inv = out_scale / l[r];
    bf16* out = p.out + size_t(q0 + row) * p.num_heads * D + head * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < kOTiles; ++n)
      *reinterpret_cast<__nv_bfloat162*>(out + n * 8) = __floats2bfloat162_rn(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
  }
}

PrefillParams make_params(const bf16* q, int q_stride, const KvCache& cache, const AttentionBatch& batch, bf16* out,
                          int num_heads, int num_kv_heads, int head_dim, int block_size, float scale) {
  NVLLM_CHECK(head_dim == 64 || head_dim == 128, "attention_prefill: head_dim ", head_dim,
              " is not supported (64 or 128)");
  NVLLM_CHECK(valid_block_size(block_size), "attention_prefill: block_size ", block_size,
              " must be a power of two in 1..", kMaxBlockSize);
  NVLLM_CHECK(num_kv_heads > 0 && num_heads % num_kv_heads == 0, "attention_prefill: num_heads ",
              num_heads, " is not a multiple of num_kv_heads ", num_kv_heads);
  NVLLM_CHECK(batch.num_seqs <= 65535 && num_heads <= 65535, "attention_prefill: ", batch.num_seqs,
              " sequences x ", num_heads, " heads exceed the grid");
  NVLLM_CHECK(cache.dtype == KvDtype::kBf16 || (cache.k_scale != nullptr && cache.v_scale != nullptr),
              "attention_prefill: an FP8 cache needs scales");
  return PrefillParams{q, q_stride, cache.k, cache.v, cache.k_scale, cache.v_scale, batch.query_start,
                       batch.context_lens, batch.block_tables, batch.max_blocks_per_seq, out, num_heads,
                       num_kv_heads, __builtin_ctz(unsigned(block_size)), scale * kLog2e};
}

}  // namespace

void attention_prefill(const bf16* q, int q_stride, const KvCache& cache, const AttentionBatch& batch,
                       bf16* out, int num_heads, int num_kv_heads, int head_dim, int block_size, float scale,
                       cudaStream_t stream) {
  if (batch.num_seqs <= 0 || batch.max_query_len <= 0) return;
  const PrefillParams p =
      make_params(q, q_stride, cache, batch, out, num_heads, num_kv_heads, head_dim, block_size, scale);
  const int heads_per_cta = (num_heads / num_kv_heads) % 2 == 0 ? 2 : 1;
  const dim3 grid(ceil_div(batch.max_query_len, kTcTileQ), num_heads / heads_per_cta, batch.num_seqs);
  const int threads = kThreads * heads_per_cta;
  const bool fp8 = cache.dtype == KvDtype::kFp8E4M3;
  const size_t smem = tc_smem_bytes(head_dim, heads_per_cta, fp8);
  auto kernel = head_dim == 128 ? (fp8 ? attention_prefill_tc_kernel<fp8_e4m3, 128> : attention_prefill_tc_kernel<bf16, 128>)
                                : (fp8 ? attention_prefill_tc_kernel<fp8_e4m3, 64> : attention_prefill_tc_kernel<bf16, 64>);
  // Over the 48 KB default the dynamic limit must be raised, and the carveout set so that two
  // CTAs fit per SM (cheap host-side calls).
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<grid, threads, smem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

void attention_prefill_simt(const bf16* q, int q_stride, const bf16* k_cache, const bf16* v_cache,
                            const AttentionBatch& batch, bf16* out, int num_heads, int num_kv_heads,
                            int head_dim, int block_size, float scale, cudaStream_t stream) {
  if (batch.num_seqs <= 0 || batch.max_query_len <= 0) return;
  const PrefillParams p = make_params(q, q_stride, KvCache{const_cast<bf16*>(k_cache), const_cast<bf16*>(v_cache)},
                                      batch, out, num_heads, num_kv_heads, head_dim, block_size, scale);
  const dim3 grid(ceil_div(batch.max_query_len, kTileQ), num_heads, batch.num_seqs);
  if (head_dim == 128)
    attention_prefill_kernel<128><<<grid, kThreads, 0, stream>>>(p);
  else
    attention_prefill_kernel<64><<<grid, kThreads, 0, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace nvllm::kernels
