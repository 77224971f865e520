// The whole decode step of one sequence in one persistent kernel: the batch-1 latency path.
//
// At batch 1 a decode step reads every weight once (1.19 GB for Qwen3-0.6B) and does almost no
// arithmetic, so the floor is the weight stream: 0.39 ms at 3.03 TB/s. As a chain of ~200
// kernels the step took 1.11 ms: each kernel boundary drains the SMs and the stream stops. Here
// one block per SM runs every phase of every layer, with grid-wide barriers between phases. Each
// block copies its slice of each projection's weights (a run of whole rows) into shared memory
// with TMA bulk copies issued two phases ahead, so HBM keeps streaming through the barriers, the
// norms and attention, and after a barrier a block computes from shared memory alone.
//
// Phases of a layer (| = grid barrier), h the residual stream (bf16, in place):
//   qkv   x = rmsnorm(h), each block for itself; qkv = x W_qkv^T (+ bias)               |
//   attn  per (kv head, 128-token context split): q/k norm + RoPE, the new k/v into the
//         cache, an online softmax over the split into a partial                        |
//   o     x = the partials merged; h += x W_o^T                                         |
//   mlp1  x = rmsnorm(h); act = silu(x W_gate^T) * (x W_up^T)                           |
//   mlp2  h += act W_down^T                                                             |
// and at the end the final norm and the LM head (fp32 logits). Every value that the unfused
// kernels (and Hugging Face) keep in bf16 is rounded to bf16 here at the same point.
//
// Status (H100, Qwen3-0.6B shape, bench latency batch 1): correct (the gpu.cuda_runner batch-1
// test), but 1.30-1.36 ms a step against 1.14 for the separate kernels, so it is off by default
// (NVLLM_PERSISTENT=1 turns it on). Leaving parts out (NVLLM_PERSISTENT_SKIP, timing only) says
// the 140 grid barriers cost ~0.45 ms and the chain of dependent L2 round trips between them
// (norms, merge, epilogues) most of the rest; bench/NOTES.md has the numbers and what to try.
//
// Values written by one block and read by another within the launch (h, qkv, attn, act, the
// attention partials) are read with ld.global.cg, which skips the SM's L1: a line cached there
// before a barrier could be stale after it.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kD = 128;                // head_dim
constexpr int kGroups = kThreads / 16;  // attention: 16 lanes hold one token's 128-dim row
constexpr int kSplitTokens = 128;      // attention: tokens per context split
constexpr float kLog2e = 1.4426950408889634f;

// --- memory helpers ---

__device__ __forceinline__ Bf16x8 load8_cg(const bf16* p) {
  const uint4 v = __ldcg(reinterpret_cast<const uint4*>(p));
  return *reinterpret_cast<const Bf16x8*>(&v);
}
__device__ __forceinline__ float load_cg(const bf16* p) { return __bfloat162float(__ldcg(p)); }

// Asks L2 for [p, p + bytes): p 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#else
  for (unsigned o = 0; o < bytes; o += 128) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(static_cast<const char*>(p) + o));
#endif
}

// --- weight staging: TMA bulk copies global -> shared, completing on an mbarrier ---

[[maybe_unused]] __device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One thread: the barrier's phase completes once `bytes` have landed.
__device__ __forceinline__ void mbar_expect(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}

// One thread: [src, src + bytes) to shared dst, in 32 KB pieces, counted on bar. 16-byte
// aligned, bytes a multiple of 16.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr unsigned kPiece = 32768;
  for (unsigned o = 0; o < bytes; o += kPiece) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_addr(dst) + o),
                 "l"(static_cast<const char*>(src) + o), "r"(min(kPiece, bytes - o)), "r"(smem_addr(bar))
                 : "memory");
  }
#endif
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// --- grid barrier (all blocks are resident: cooperative launch) ---
//
// A 64-bit arrival counter that only grows: barrier n of a launch is passed once it reaches
// base + n * blocks. Every launch starts with it at a multiple of `blocks` (all blocks of the
// previous launch arrived at every barrier) and no block can be a whole barrier ahead of one
// that has not read it yet, so rounding the value a block first sees down to a multiple of
// `blocks` gives every block the same base. Arrival is a release reduction after the block's
// barrier, the wait an acquire poll before the next one (CUTLASS's generic barrier does the
// same): what any block wrote before barrier n is visible to every block after it.

__device__ __forceinline__ unsigned long long ld_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

struct GridBarrier {
  unsigned long long* count;
  unsigned long long target;  // thread 0's: where the counter stands after the next barrier

  __device__ void init(unsigned long long* c) {
    count = c;
    if (threadIdx.x == 0) target = ld_acquire(c) / gridDim.x * gridDim.x;
  }
  __device__ void sync() {
    __syncthreads();
    if (threadIdx.x == 0) {
      target += gridDim.x;
      asm volatile("red.release.gpu.global.add.u64 [%0], %1;\n" ::"l"(count), "l"(1ull) : "memory");
      while (ld_relaxed(count) < target) {
      }
      asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    }
    __syncthreads();
  }
};

// --- shared memory ---

// Byte offsets in the dynamic shared memory; the same on host (launch size) and device.
struct SmemLayout {
  size_t x, red, q, acc, ml, bars, slot0, slot1, slot0_bytes, slot1_bytes, total;
};

__host__ __device__ inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Slot 0 holds a block's rows of qkv or gate_up (the weight phases that start a sublayer),
// slot 1 its rows of o_proj or down; a block has at most ceil(n / grid) rows of an n-row matrix.
__host__ __device__ inline SmemLayout smem_layout(int hidden, int intermediate, int num_heads, int num_kv_heads,
                                                  int grid) {
  auto rows = [&](int n) { return size_t((n + grid - 1) / grid); };
  const size_t qkv_n = size_t(num_heads + 2 * num_kv_heads) * kD, q_size = size_t(num_heads) * kD;
  const size_t max_k = hidden > int(q_size) ? (hidden > intermediate ? hidden : intermediate)
                                            : (int(q_size) > intermediate ? q_size : intermediate);
  SmemLayout L;
  L.x = 0;
  L.red = align_up(L.x + max_k * 2, 16);
  L.q = L.red + (2 * kWarps + 32) * 4;
  L.acc = L.q + kPersistentMaxGroup * kD * 4;
  L.ml = L.acc + kWarps * kPersistentMaxGroup * kD * 4;
  L.bars = align_up(L.ml + kWarps * kPersistentMaxGroup * 2 * 4, 8);
  L.slot0 = align_up(L.bars + 16, 128);
  const size_t s0 = 2 * (rows(int(qkv_n)) * hidden > 2 * rows(intermediate) * hidden ? rows(int(qkv_n)) * hidden
                                                                                       : 2 * rows(intermediate) * hidden);
  const size_t s1 = 2 * (q_size > size_t(intermediate) ? q_size : size_t(intermediate)) * rows(hidden);
  L.slot0_bytes = align_up(s0, 128);
  L.slot1_bytes = align_up(s1, 128);
  L.slot1 = L.slot0 + L.slot0_bytes;
  L.total = L.slot1 + L.slot1_bytes;
  return L;
}

struct Smem {
  bf16* x;         // [max K]: the input vector of the current projection
  float* red;      // [2 * kWarps + 32]: partial sums of rows shared by several warps; block_sum
  float* q;        // [kMaxGroup][kD]: roped queries of the current kv head, scaled
  float* acc;      // [kWarps][kMaxGroup][kD]: attention, per-warp results
  float* ml;       // [kWarps][kMaxGroup][2]
  uint64_t* bars;  // [2]: one mbarrier per weight slot
  bf16* slot[2];   // this block's rows of the current / next projection
};

__device__ Smem carve(char* base, const SmemLayout& L) {
  Smem s;
  s.x = reinterpret_cast<bf16*>(base + L.x);
  s.red = reinterpret_cast<float*>(base + L.red);
  s.q = reinterpret_cast<float*>(base + L.q);
  s.acc = reinterpret_cast<float*>(base + L.acc);
  s.ml = reinterpret_cast<float*>(base + L.ml);
  s.bars = reinterpret_cast<uint64_t*>(base + L.bars);
  s.slot[0] = reinterpret_cast<bf16*>(base + L.slot0);
  s.slot[1] = reinterpret_cast<bf16*>(base + L.slot1);
  return s;
}

// --- projections ---

// x = rmsnorm(src) * w, rounded exactly as the rmsnorm kernel rounds it.
__device__ void norm_into(const bf16* src, const bf16* w, int n, float eps, const Smem& sm) {
  float ss = 0.f;
  for (int i = threadIdx.x * 8; i < n; i += kThreads * 8) {
    const Bf16x8 v8 = load8_cg(src + i);
    store8(sm.x + i, v8);
    float v[8];
    to_float8(v8, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
  }
  const float rstd = rsqrtf(block_sum(ss, sm.red + 2 * kWarps) / n + eps);
  for (int i = threadIdx.x * 8; i < n; i += kThreads * 8) {  // the same elements as above
    float wf[8], v[8];
    to_float8(load8(w + i), wf);
    to_float8(load8(sm.x + i), v);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = wf[j] * round_bf16(v[j] * rstd);
    store8(sm.x + i, from_float8(v));
  }
  __syncthreads();
}

// x = src[0, n).
__device__ void copy_into(const bf16* src, int n, const Smem& sm) {
  for (int i = threadIdx.x * 8; i < n; i += kThreads * 8) store8(sm.x + i, load8_cg(src + i));
  __syncthreads();
}

// Dot products of weight rows a and b (b may be null) with x over the 16-byte chunks
// [c0, c1), lane-strided, every weight load of an iteration issued before the first use;
// the warp's sums.
__device__ __forceinline__ float2 dot2(const bf16* a, const bf16* b, const bf16* x, int c0, int c1, int lane) {
  constexpr int kU = 4;
  float sa = 0.f, sb = 0.f;
  for (int c = c0 + lane; c < c1; c += 32 * kU) {
    Bf16x8 wa[kU], wb[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int cc = c + 32 * u;
      if (cc < c1) {
        wa[u] = load8(a + size_t(cc) * 8);
        if (b != nullptr) wb[u] = load8(b + size_t(cc) * 8);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int cc = c + 32 * u;
      if (cc >= c1) continue;
      float xf[8], f[8];
      to_float8(load8(x + cc * 8), xf);
      to_float8(wa[u], f);
#pragma unroll
      for (int i = 0; i < 8; ++i) sa = fmaf(xf[i], f[i], sa);
      if (b != nullptr) {
        to_float8(wb[u], f);
#pragma unroll
        for (int i = 0; i < 8; ++i) sb = fmaf(xf[i], f[i], sb);
      }
    }
  }
  return make_float2(warp_sum(sa), warp_sum(sb));
}

// Rows [r0, r1) of a matrix with k columns times x (in shared memory); row r is at
// w + (r - r0) * k (a staged slice in shared memory, or the matrix itself offset by r0). kPair:
// row r pairs with the row pair_stride elements after it (gate with up) and out(r, s_r, s_pair);
// else out(r, s_r). With fewer rows than warps, warps share a row by K slices and meet in
// shared memory.
template <bool kPair, typename Out>
__device__ void block_rows(const bf16* w, int k, int r0, int r1, size_t pair_stride, const Smem& sm, Out out,
                           bool skip_dots) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows = r1 - r0, chunks = k / 8;
  if (rows <= 0 || skip_dots) return;
  auto row = [&](int r) { return w + size_t(r - r0) * k; };
  if (rows >= kWarps) {
    const int step = kPair ? kWarps : 2 * kWarps;
    for (int r = r0 + warp; r < r1; r += step) {
      const int r2 = r + kWarps;
      const bool has2 = kPair || r2 < r1;
      const bf16* second = kPair ? row(r) + pair_stride : has2 ? row(r2) : nullptr;
      const float2 s = dot2(row(r), second, sm.x, 0, chunks, lane);
      if (lane == 0) {
        if constexpr (kPair) {
          out(r, s.x, s.y);
        } else {
          out(r, s.x);
          if (has2) out(r2, s.y);
        }
      }
    }
    return;
  }
  const int slices = kWarps / rows, per = ceil_div(chunks, slices);
  float2 s = make_float2(0.f, 0.f);
  if (warp < rows * slices) {
    const int r = r0 + warp / slices, sl = warp % slices;
    s = dot2(row(r), kPair ? row(r) + pair_stride : nullptr, sm.x, sl * per, min(chunks, (sl + 1) * per), lane);
  }
  if (lane == 0) {
    sm.red[2 * warp] = s.x;
    sm.red[2 * warp + 1] = s.y;
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    float a = 0.f, b = 0.f;
    for (int j = 0; j < slices; ++j) {
      a += sm.red[2 * (threadIdx.x * slices + j)];
      b += sm.red[2 * (threadIdx.x * slices + j) + 1];
    }
    if constexpr (kPair)
      out(r0 + int(threadIdx.x), a, b);
    else
      out(r0 + int(threadIdx.x), a);
  }
  __syncthreads();
}

// This block's rows of an n-row projection.
__device__ __forceinline__ void my_rows(int n, int* r0, int* r1) {
  *r0 = int(int64_t(n) * blockIdx.x / gridDim.x);
  *r1 = int(int64_t(n) * (blockIdx.x + 1) / gridDim.x);
}

// --- attention ---

// One warp: per-head RMSNorm (when norm_w) and neox RoPE of the 128 values at x, rounded to
// bf16 as qk_norm_rope_cache stores them. Lane l owns the pairs (l, l + 64) and (l + 32, l + 96).
__device__ __forceinline__ void rope_head(const bf16* x, const bf16* norm_w, float eps, const float* inv_freq,
                                          float pos, int lane, float out[4]) {
  float a0 = load_cg(x + lane), a1 = load_cg(x + lane + 32), b0 = load_cg(x + lane + 64), b1 = load_cg(x + lane + 96);
  if (norm_w != nullptr) {
    const float rstd = rsqrtf(warp_sum(a0 * a0 + a1 * a1 + b0 * b0 + b1 * b1) / kD + eps);
    a0 = round_bf16(__bfloat162float(norm_w[lane]) * round_bf16(a0 * rstd));
    a1 = round_bf16(__bfloat162float(norm_w[lane + 32]) * round_bf16(a1 * rstd));
    b0 = round_bf16(__bfloat162float(norm_w[lane + 64]) * round_bf16(b0 * rstd));
    b1 = round_bf16(__bfloat162float(norm_w[lane + 96]) * round_bf16(b1 * rstd));
  }
  float s0, c0, s1, c1;
  sincosf(pos * inv_freq[lane], &s0, &c0);
  sincosf(pos * inv_freq[lane + 32], &s1, &c1);
  out[0] = round_bf16(a0 * c0 - b0 * s0);  // element lane
  out[1] = round_bf16(a1 * c1 - b1 * s1);  // lane + 32
  out[2] = round_bf16(b0 * c0 + a0 * s0);  // lane + 64
  out[3] = round_bf16(b1 * c1 + a1 * s1);  // lane + 96
}

// Context splits of the attention phase: 128-token pieces, at most one unit per block.
__device__ __forceinline__ int attention_splits(int ctx, int num_kv_heads) {
  return max(1, min(ceil_div(ctx, kSplitTokens), int(gridDim.x) / num_kv_heads));
}

struct StepIn {
  int token, pos, slot, ctx;
  const int32_t* table;
};

__device__ void attention_phase(const PersistentDecode& p, const PersistentLayer& w, const StepIn& in,
                                const Smem& sm, float* part) {
  const int G = p.num_heads / p.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ctx = in.ctx;
  const int splits = attention_splits(ctx, p.num_kv_heads);
  const int part_len = ceil_div(ctx, splits);
  const float scale_log2 = p.scale * kLog2e;
  const size_t row_stride = size_t(p.num_kv_heads) * kD;
  const int block_shift = __ffs(p.block_size) - 1, block_mask = p.block_size - 1;
  const bf16* k_new = p.qkv + size_t(p.num_heads) * kD;
  const bf16* v_new = k_new + size_t(p.num_kv_heads) * kD;

  for (int u = blockIdx.x; u < p.num_kv_heads * splits; u += gridDim.x) {
    const int g = u % p.num_kv_heads, z = u / p.num_kv_heads;
    const int start = z * part_len, end = min(ctx, start + part_len);
    const bool holds_new = end == ctx && in.slot >= 0;
    // Warps 0..G-1: the kv head's queries; G, G+1: the new token's k and v into the cache
    // (by the split that reads it, so it is there before this block reads it back).
    if (warp < G) {
      float r[4];
      rope_head(p.qkv + size_t(g * G + warp) * kD, w.q_norm, p.eps, p.inv_freq, float(in.pos), lane, r);
      float* q = sm.q + warp * kD;
      q[lane] = r[0] * scale_log2;
      q[lane + 32] = r[1] * scale_log2;
      q[lane + 64] = r[2] * scale_log2;
      q[lane + 96] = r[3] * scale_log2;
    } else if (warp == G && holds_new) {
      float r[4];
      rope_head(k_new + size_t(g) * kD, w.k_norm, p.eps, p.inv_freq, float(in.pos), lane, r);
      bf16* dst = w.k_cache + size_t(in.slot) * row_stride + size_t(g) * kD;
      dst[lane] = __float2bfloat16(r[0]);
      dst[lane + 32] = __float2bfloat16(r[1]);
      dst[lane + 64] = __float2bfloat16(r[2]);
      dst[lane + 96] = __float2bfloat16(r[3]);
    } else if (warp == G + 1 && holds_new) {
      bf16* dst = w.v_cache + size_t(in.slot) * row_stride + size_t(g) * kD;
      for (int i = lane; i < kD; i += 32) dst[i] = __ldcg(v_new + size_t(g) * kD + i);
    }
    __syncthreads();

    // 32 groups of 16 lanes walk the split's tokens; lane `sub` holds dims sub*8 .. sub*8+7.
    const int grp = threadIdx.x >> 4, sub = threadIdx.x & 15;
    float m[kPersistentMaxGroup], l[kPersistentMaxGroup], acc[kPersistentMaxGroup][8];
#pragma unroll
    for (int h = 0; h < kPersistentMaxGroup; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] = 0.f;
    }
    const size_t head_off = size_t(g) * kD + sub * 8;
    constexpr int kU = 2;
    // Same trip count for both half-warps (the shuffles need whole warps); extra tokens masked.
    for (int t0 = start + grp; t0 - grp < end; t0 += kGroups * kU) {
      Bf16x8 kv[kU], vv[kU];
#pragma unroll
      for (int uu = 0; uu < kU; ++uu) {
        const int t = t0 + uu * kGroups;
        if (t < end) {
          const size_t slot = size_t(in.table[t >> block_shift]) << block_shift | (t & block_mask);
          kv[uu] = load8_cg(w.k_cache + slot * row_stride + head_off);
          vv[uu] = load8_cg(w.v_cache + slot * row_stride + head_off);
        } else {
          kv[uu] = Bf16x8{};
          vv[uu] = Bf16x8{};
        }
      }
#pragma unroll
      for (int uu = 0; uu < kU; ++uu) {
        const bool valid = t0 + uu * kGroups < end;
        float kf[8], vf[8];
        to_float8(kv[uu], kf);
        to_float8(vv[uu], vf);
#pragma unroll
        for (int h = 0; h < kPersistentMaxGroup; ++h) {
          if (h >= G) continue;
          const float4 q0 = reinterpret_cast<const float4*>(sm.q + h * kD + sub * 8)[0];
          const float4 q1 = reinterpret_cast<const float4*>(sm.q + h * kD + sub * 8)[1];
          const float qf[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
          float d = 0.f;
#pragma unroll
          for (int i = 0; i < 8; ++i) d = fmaf(qf[i], kf[i], d);
          d = warp_sum<16>(d);
          if (!valid) continue;
          const float m_new = fmaxf(m[h], d);
          const float alpha = exp2f(m[h] - m_new);  // 0 while m[h] is -inf
          const float pr = exp2f(d - m_new);
          m[h] = m_new;
          l[h] = l[h] * alpha + pr;
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[h][i] = fmaf(pr, vf[i], acc[h][i] * alpha);
        }
      }
    }
    // Merge the two half-warps, then the warps through shared memory.
#pragma unroll
    for (int h = 0; h < kPersistentMaxGroup; ++h) {
      if (h >= G) continue;
      const float mo = __shfl_xor_sync(0xffffffffu, m[h], 16);
      const float lo = __shfl_xor_sync(0xffffffffu, l[h], 16);
      const float mx = fmaxf(m[h], mo);
      const float a = mx == -INFINITY ? 0.f : exp2f(m[h] - mx), b = mx == -INFINITY ? 0.f : exp2f(mo - mx);
      l[h] = l[h] * a + lo * b;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] = acc[h][i] * a + __shfl_xor_sync(0xffffffffu, acc[h][i], 16) * b;
      m[h] = mx;
      if (lane < 16) {
#pragma unroll
        for (int i = 0; i < 8; ++i) sm.acc[(warp * kPersistentMaxGroup + h) * kD + sub * 8 + i] = acc[h][i];
        if (lane == 0) {
          sm.ml[(warp * kPersistentMaxGroup + h) * 2] = m[h];
          sm.ml[(warp * kPersistentMaxGroup + h) * 2 + 1] = l[h];
        }
      }
    }
    __syncthreads();
    const int t = threadIdx.x, h = t / kD, d = t % kD;
    float M = -INFINITY, L = 0.f, A = 0.f;
    if (t < G * kD) {
      for (int j = 0; j < kWarps; ++j) M = fmaxf(M, sm.ml[(j * kPersistentMaxGroup + h) * 2]);
      for (int j = 0; j < kWarps; ++j) {
        const float mj = sm.ml[(j * kPersistentMaxGroup + h) * 2];
        if (mj == -INFINITY) continue;  // a warp that saw no token
        const float s = exp2f(mj - M);
        L += sm.ml[(j * kPersistentMaxGroup + h) * 2 + 1] * s;
        A += sm.acc[(j * kPersistentMaxGroup + h) * kD + d] * s;
      }
    }
    bf16* out = p.attn + size_t(g * G + h) * kD + d;
    if (splits == 1) {
      if (t < G * kD) *out = __float2bfloat16(L > 0.f ? A / L : 0.f);
      __syncthreads();
      continue;
    }
    // Partials [kv head][split][head in group]: acc[kD], then (m, l); merge_into() combines them.
    float* mine = part + (size_t(g * splits + z) * G + h) * (kD + 2);
    if (t < G * kD) {
      mine[d] = A;
      if (d == 0) {
        mine[kD] = M;
        mine[kD + 1] = L;
      }
    }
    __syncthreads();
  }
}

// x = the attention output: the splits of every head merged (sum_z acc_z 2^(m_z - M) over
// sum_z l_z 2^(m_z - M), as the separate reduce kernel computes it), or the output itself when
// the context was not split.
__device__ void merge_into(const PersistentDecode& p, int ctx, const float* part, const Smem& sm) {
  const int splits = attention_splits(ctx, p.num_kv_heads), n = p.num_heads * kD;
  if (splits == 1) return copy_into(p.attn, n, sm);
  const int G = p.num_heads / p.num_kv_heads, pairs = p.num_heads * splits;
  auto at = [&](int head, int z) { return part + (size_t((head / G) * splits + z) * G + head % G) * (kD + 2); };
  // scale[head][z] = 2^(m_z - M), then inv_l[head] = 1 / sum_z l_z scale_z; in the attention
  // scratch, free between the phases.
  float* scale = sm.acc;
  float* inv_l = scale + pairs;
  for (int i = threadIdx.x; i < pairs; i += kThreads) scale[i] = __ldcg(at(i / splits, i % splits) + kD);
  __syncthreads();
  for (int head = threadIdx.x; head < p.num_heads; head += kThreads) {
    float M = -INFINITY, L = 0.f;
    for (int z = 0; z < splits; ++z) M = fmaxf(M, scale[head * splits + z]);
    for (int z = 0; z < splits; ++z) {
      const float mz = scale[head * splits + z];
      const float s = mz == -INFINITY ? 0.f : exp2f(mz - M);
      L += __ldcg(at(head, z) + kD + 1) * s;
      scale[head * splits + z] = s;
    }
    inv_l[head] = L > 0.f ? 1.f / L : 0.f;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int head = i / kD, d = i % kD;
    float A = 0.f;
    for (int z = 0; z < splits; ++z) A += __ldcg(at(head, z) + d) * scale[head * splits + z];
    sm.x[i] = __float2bfloat16(A * inv_l[head]);
  }
  __syncthreads();
}

// --- the kernel ---

__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(PersistentDecode p) {
  extern __shared__ float4 smem_raw[];
  const SmemLayout layout = smem_layout(p.hidden, p.intermediate, p.num_heads, p.num_kv_heads, gridDim.x);
  const Smem sm = carve(reinterpret_cast<char*>(smem_raw), layout);
  GridBarrier grid;
  grid.init(static_cast<unsigned long long*>(p.workspace));
  float* part = reinterpret_cast<float*>(static_cast<char*>(p.workspace) + kPersistentSyncBytes);
  if (threadIdx.x == 0) {
    mbar_init(sm.bars);
    mbar_init(sm.bars + 1);
  }
  __syncthreads();

  const StepIn in{p.token_id[0], p.position[0], p.slot[0], p.context_len[0], p.block_table};
  const int H = p.hidden, I = p.intermediate;
  const int qkv_n = (p.num_heads + 2 * p.num_kv_heads) * kD, q_size = p.num_heads * kD;
  const bool skip_dots = p.skip & kPersistentSkipDots;
  auto barrier = [&] {
    if (p.skip & kPersistentSkipGridBarrier)
      __syncthreads();
    else
      grid.sync();
  };

  // Weight phases in order: per layer qkv (slot 0), o (slot 1), gate_up (slot 0), down (slot 1).
  // Thread 0 issues phase q's copy of this block's rows once phase q - 2 is done with the slot.
  auto issue = [&](int q) {
    const int l = q / 4;
    if (threadIdx.x != 0 || l >= p.num_layers) return;
    const PersistentLayer& w = p.layers[l];
    uint64_t* bar = sm.bars + (q & 1);
    bf16* dst = sm.slot[q & 1];
    int r0, r1;
    switch (q % 4) {
      case 0: {
        my_rows(qkv_n, &r0, &r1);
        const unsigned bytes = unsigned(size_t(r1 - r0) * H * 2);
        mbar_expect(bar, bytes);
        bulk_copy(dst, w.qkv + size_t(r0) * H, bytes, bar);
        break;
      }
      case 1: {
        my_rows(H, &r0, &r1);
        const unsigned bytes = unsigned(size_t(r1 - r0) * q_size * 2);
        mbar_expect(bar, bytes);
        bulk_copy(dst, w.o_proj + size_t(r0) * q_size, bytes, bar);
        break;
      }
      case 2: {  // gate rows, then the matching up rows
        my_rows(I, &r0, &r1);
        const unsigned bytes = unsigned(size_t(r1 - r0) * H * 2);
        mbar_expect(bar, 2 * bytes);
        bulk_copy(dst, w.gate_up + size_t(r0) * H, bytes, bar);
        bulk_copy(dst + size_t(r1 - r0) * H, w.gate_up + size_t(I + r0) * H, bytes, bar);
        break;
      }
      default: {
        my_rows(H, &r0, &r1);
        const unsigned bytes = unsigned(size_t(r1 - r0) * I * 2);
        mbar_expect(bar, bytes);
        bulk_copy(dst, w.down + size_t(r0) * I, bytes, bar);
        break;
      }
    }
  };
  unsigned parity[2] = {0u, 0u};
  auto wait = [&](int slot) {
    mbar_wait(sm.bars + slot, parity[slot]);
    parity[slot] ^= 1u;
  };
  // After a phase's dot products: once every thread is past its reads, the slot takes the
  // weight phase after next.
  auto release = [&](int next_q) {
    __syncthreads();
    issue(next_q);
  };
  issue(0);
  issue(1);

  int r0, r1;
  for (int l = 0; l < p.num_layers; ++l) {
    const PersistentLayer& w = p.layers[l];
    {  // This layer's cached K/V (all but the new token) into L2, for the attention phase.
      const size_t block_bytes = size_t(p.block_size) * p.num_kv_heads * kD * sizeof(bf16);
      const int used_blocks = ceil_div(max(in.ctx - 1, 0), p.block_size);
      for (int j = blockIdx.x * kThreads + threadIdx.x; j < 2 * used_blocks; j += gridDim.x * kThreads) {
        const bf16* cache = (j & 1) ? w.v_cache : w.k_cache;
        prefetch_l2(cache + size_t(in.table[j >> 1]) * (block_bytes / sizeof(bf16)), unsigned(block_bytes));
      }
    }
    // qkv. Layer 0 starts from the embedding row (block 0 also writes it into h).
    const bf16* src = l == 0 ? p.embed + size_t(in.token) * H : p.h;
    if (l == 0 && blockIdx.x == 0)
      for (int i = threadIdx.x * 8; i < H; i += kThreads * 8) store8(p.h + i, load8(src + i));
    norm_into(src, w.input_norm, H, p.eps, sm);
    my_rows(qkv_n, &r0, &r1);
    wait(0);
    block_rows<false>(sm.slot[0], H, r0, r1, 0, sm, [&](int r, float s) {
      float v = round_bf16(s);
      if (w.qkv_bias != nullptr) v += __bfloat162float(w.qkv_bias[r]);
      p.qkv[r] = __float2bfloat16(v);
    }, skip_dots);
    release(4 * l + 2);
    barrier();

    if (!(p.skip & kPersistentSkipAttention)) attention_phase(p, w, in, sm, part);
    barrier();

    merge_into(p, in.ctx, part, sm);
    my_rows(H, &r0, &r1);
    wait(1);
    block_rows<false>(sm.slot[1], q_size, r0, r1, 0, sm, [&](int r, float s) {
      p.h[r] = __float2bfloat16(load_cg(p.h + r) + round_bf16(s));
    }, skip_dots);
    release(4 * l + 3);
    barrier();

    norm_into(p.h, w.post_norm, H, p.eps, sm);
    my_rows(I, &r0, &r1);
    wait(0);
    block_rows<true>(sm.slot[0], H, r0, r1, size_t(r1 - r0) * H, sm, [&](int r, float g, float u) {
      p.act[r] = __float2bfloat16(silu_mul_one(round_bf16(g), round_bf16(u)));
    }, skip_dots);
    release(4 * l + 4);
    barrier();

    copy_into(p.act, I, sm);
    my_rows(H, &r0, &r1);
    wait(1);
    block_rows<false>(sm.slot[1], I, r0, r1, 0, sm, [&](int r, float s) {
      p.h[r] = __float2bfloat16(load_cg(p.h + r) + round_bf16(s));
    }, skip_dots);
    release(4 * l + 5);
    barrier();
  }

  if (p.skip & kPersistentSkipLmHead) return;
  norm_into(p.h, p.final_norm, H, p.eps, sm);
  my_rows(p.vocab, &r0, &r1);
  block_rows<false>(p.lm_head + size_t(r0) * H, H, r0, r1, 0, sm, [&](int r, float s) { p.logits[r] = s; },
                    skip_dots);
}

}  // namespace

const char* persistent_decode_setup(int hidden, int intermediate, int num_heads, int num_kv_heads, int head_dim,
                                    int block_size) {
  if (head_dim != kD) return "head_dim is not 128";
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || num_heads / num_kv_heads > kPersistentMaxGroup)
    return "more than 4 query heads per kv head";
  if (hidden % 8 != 0 || intermediate % 8 != 0) return "hidden or intermediate size not a multiple of 8";
  if (block_size < 1 || (block_size & (block_size - 1)) != 0) return "block size not a power of two";
  int device = 0, major = 0, coop = 0, max_smem = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (major < 9) return "needs sm_90 or newer";
  if (!coop) return "the device has no cooperative launch";
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t smem = smem_layout(hidden, intermediate, num_heads, num_kv_heads, sms).total;
  if (smem > size_t(max_smem)) return "a block's share of the largest projections does not fit in shared memory";
  CUDA_CHECK(cudaFuncSetAttribute(persistent_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_decode_kernel, kThreads, smem));
  if (per_sm < 1) return "one block per SM does not fit";
  return nullptr;
}

size_t persistent_decode_workspace_bytes(int num_sms) {
  // At most num_sms units (kv head x split), each with G heads of kD + 2 floats.
  return kPersistentSyncBytes + size_t(num_sms) * kPersistentMaxGroup * (kD + 2) * sizeof(float);
}

void persistent_decode(const PersistentDecode& p, int num_sms, cudaStream_t stream) {
  const size_t smem = smem_layout(p.hidden, p.intermediate, p.num_heads, p.num_kv_heads, num_sms).total;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;  // every block resident: the grid barriers rely on it
  attr.val.cooperative = 1;
  launch_with({&attr, 1}, persistent_decode_kernel, dim3(num_sms), dim3(kThreads), smem, stream, p);
}

}  // namespace nvllm::kernels
