// The building blocks of the fused batch-1 kernels (decode_fused.cu, the only file that includes
// this one): shared-memory layouts computed the same way on host and device; a CTA's weight rows
// into shared memory, whole (copy_rows) or streamed through a ring of stages (Ring, ring_dots),
// as bf16 rows or E4M3 codes; their products with the input vector on the tensor cores
// (block_dots, block_dots_fp8, chunk_mma); the input vector read and normalised (load_normed*);
// the PDL handshake; the per-CTA timing trace.
#pragma once

#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/decode_fused.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 32;  // block_dots: k values per lane step (two m16n8k16 products)
constexpr int kScratchFloats = 32;            // block_sum
constexpr int kFlagEarly = 1, kFlagEvict = 2;  // kernel `flags`: PDL trigger before the wait; weights evict-first

__host__ __device__ inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// --- shared memory (byte offsets, computed the same way on host and device) ---

// Weight rows in shared memory: k values padded to a row stride of 64 bytes past a multiple of
// 128, so that the 8 lanes of a quarter warp reading 16 bytes each from two rows hit distinct banks.
__host__ __device__ inline int row_stride(int k) { return int(align_up(size_t(k), 64)) + 32; }
// The same in bytes for bf16 rows, or E4M3 codes (one byte a value): 64 bytes past a multiple of
// 128 either way.
__host__ __device__ inline int row_bytes(int k, bool fp8) {
  return fp8 ? int(align_up(size_t(k), 128)) + 64 : 2 * row_stride(k);
}
// block_dots' per-warp partial sums: kWarps x batch rows of dots_stride floats, each the rows
// rounded up to whole 16-row tiles; with several sequences 4 more, so that the quarter warp's
// lanes storing 4 sequences' sums of one row (2t x stride apart, t = 0..3) start 8 banks apart
// (at a multiple of 16 they all met in one bank: 4-way conflicts).
__host__ __device__ inline int dots_stride(int rows, int batch) {
  return int(align_up(size_t(rows), 16)) + (batch > 1 ? 4 : 0);
}
__host__ __device__ inline size_t dots_bytes(int rows, int batch = 1) {
  return size_t(kWarps) * batch * dots_stride(rows, batch) * 4;
}
// The input vectors of a step of `batch` sequences in shared memory: k values each, one after
// the other for one sequence; for several, rows at row_stride(k) apart, so that the lanes of a
// quarter warp that read different sequences' values at the same k hit distinct banks.
__host__ __device__ inline int x_stride(int k, int batch) { return batch == 1 ? k : row_stride(k); }

// A CTA's weight share larger than shared memory is streamed (ring_dots): tiles of kTileRows rows
// by k / parts values, through `stages` shared-memory stages.
constexpr int kTileRows = 16;  // one m16 block of rows
constexpr int kMaxStages = 8;

// The fewest parts of at most tile_k values, each whole 64-byte chunks, that k splits into.
int stream_parts(int k, int tile_k, bool fp8) {
  const int chunks = k / (fp8 ? 64 : kChunk);
  int parts = std::max(1, (k + tile_k - 1) / tile_k);
  while (chunks % parts != 0) ++parts;
  return parts;
}

// A projection kernel: its weight rows (the whole share, or `stages` streamed tiles), the input
// vector, the norm weights of the input (gate_up), the residual rows it updates, the partial dot
// products, scratch, the mbarriers: of the copy, or of each stage full then each stage empty.
struct ProjLayout {
  size_t w, x, norm, res, dots, red, bar, total;
};

// stages > 0: streamed in `parts` k parts. fp8: the weights are E4M3 codes. batch: the sequences
// of the step (an input vector, residual rows and partial sums each).
__host__ __device__ inline ProjLayout proj_layout(int rows, int k, int res_rows, bool normed, int stages, int parts,
                                                  bool fp8, int batch = 1) {
  ProjLayout L;
  L.w = 0;
  const size_t w_bytes = stages > 0 ? size_t(stages) * kTileRows * row_bytes(k / parts, fp8)
                                    : size_t(rows) * row_bytes(k, fp8);
  L.x = align_up(w_bytes, 128);
  L.norm = align_up(L.x + size_t(batch) * x_stride(k, batch) * 2, 16);
  L.res = align_up(L.norm + (normed ? size_t(k) * 2 : 0), 16);
  L.dots = align_up(L.res + size_t(batch) * res_rows * 4, 16);
  L.red = L.dots + dots_bytes(rows, batch);
  L.bar = L.red + kScratchFloats * 4;
  L.total = L.bar + 8 * size_t(stages > 0 ? 2 * stages : 1);
  return L;
}

// The sequences of a step rounded up to a power of two: the attention kernel's cluster splits
// into that many groups of CTAs, one a sequence.
__host__ __device__ inline int batch_p2(int batch) { return batch <= 1 ? 1 : batch <= 2 ? 2 : batch <= 4 ? 4 : 8; }

// The attention kernel: its rows of the kv head's q/k/v weights, the normed input (of each
// sequence of the step), the constants it stages before its inputs are ready (input norm weights
// [hidden], q and k norm weights [D] each, RoPE frequencies [D / 2] floats), its rows' outputs
// (each sequence's), its sequence's q (roped, scaled) / new k / new v of the group (filled by the
// sequence's CTAs), per-warp attention partials with (max, sum) per head, the inbox where each
// split's CTA leaves its partial of the outputs this CTA finishes ([Cs][outs] values, then
// [Cs][G] (max, sum): every head's, as a CTA's outputs may span two), scratch, and three
// mbarriers: the weight copy, the q/k/v exchange, the inbox. Cs: the CTAs of one sequence.
// The kernel for several sequences (`multi`, whatever the B of its cluster's share, one included)
// lays the buffers used only after this CTA's products (acc, ml, the inbox) over its weight rows:
// every push into the inbox comes from a CTA that has received this CTA's q/k/v rows, so these
// products are done (the q/k/v rows themselves may arrive earlier).
// Every step pads q so that the heads a kernel holds past the group (up to the next power of two:
// 8 for a group of 5) read rows of their own: unpadded, a batch-1 CTA's scratch heads read acc,
// which other warps were writing (a benign race, their results are never stored, but one
// compute-sanitizer racecheck reports: bench/NOTES.md, forty-seventh session).
struct AttnLayout {
  int rows;  // rows of the group's (G + 2) * D per CTA
  int outs;  // outputs of the group (G * D) this CTA finishes for its sequence
  size_t w, x, norm, qk_norm, freq, dots, qkv, acc, ml, inbox, inbox_ml, red, bar, total;
};

__host__ __device__ inline AttnLayout attn_layout(int hidden, int group, int cluster, int head_dim, bool fp8,
                                                  int batch = 1, bool multi = false) {
  const int D = head_dim, seq_ctas = cluster / batch_p2(batch);
  AttnLayout L;
  L.rows = (group + 2) * D / cluster;
  L.outs = group * D / seq_ctas;
  L.w = 0;
  const size_t w_end = size_t(L.rows) * row_bytes(hidden, fp8);
  auto place_late = [&](size_t at) {
    L.acc = at;
    L.ml = L.acc + size_t(kWarps) * group * D * 4;
    L.inbox = align_up(L.ml + size_t(kWarps) * group * 2 * 4, 16);
    L.inbox_ml = L.inbox + size_t(seq_ctas) * L.outs * 4;
    return L.inbox_ml + size_t(seq_ctas) * group * 2 * 4;
  };
  const size_t late_end = multi ? place_late(0) : 0;
  L.x = align_up(w_end > late_end ? w_end : late_end, 128);
  L.norm = align_up(L.x + size_t(batch) * x_stride(hidden, batch) * 2, 16);
  L.qk_norm = L.norm + size_t(hidden) * 2;
  L.freq = L.qk_norm + size_t(2 * D) * 2;
  L.dots = align_up(L.freq + size_t(D / 2) * 4, 16);
  L.qkv = align_up(L.dots + dots_bytes(L.rows, batch), 16);
  const int held = batch_p2(group), pad = held > group + 2 ? held - group - 2 : 0;
  const size_t qkv_end = L.qkv + size_t(group + 2 + pad) * D * 4;
  L.red = align_up(multi ? qkv_end : place_late(qkv_end), 16);
  L.bar = L.red + kScratchFloats * 4;
  L.total = L.bar + 3 * 8;
  return L;
}

// --- building blocks ---

__device__ __forceinline__ Bf16x8 load8_cg(const bf16* p) {
  const uint4 v = __ldcg(reinterpret_cast<const uint4*>(p));
  return *reinterpret_cast<const Bf16x8*>(&v);
}

// This CTA's rows of an n-row matrix split evenly over the grid (n * grid < 2^32).
__device__ __forceinline__ void my_rows(int n, int* r0, int* r1) {
  *r0 = int(unsigned(n) * blockIdx.x / gridDim.x);
  *r1 = int(unsigned(n) * (blockIdx.x + 1) / gridDim.x);
}

// Timing (FusedDecodeStep::trace): thread 0 of each CTA stamps the moments of its life.
struct Tracer {
  unsigned long long* p;  // this kernel's records, or null
  __device__ Tracer(unsigned long long* base, int kernel)
      : p(base != nullptr && blockIdx.x < kFusedTraceCtas
              ? base + (size_t(kernel) * kFusedTraceCtas + blockIdx.x) * kFusedTraceFields
              : nullptr) {
    mark(kTraceStart);
  }
  __device__ void mark(int what) const {
    if (p == nullptr || threadIdx.x != 0) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    p[what] = t;
    if (what == kTraceStart) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      p[kTraceSm] = sm;
      p[kTraceClockStart] = clock64();
    }
    if (what == kTraceEnd) p[kTraceClockEnd] = clock64();
  }
  __device__ void end() const {
    if (p == nullptr) return;
    __syncthreads();
    mark(kTraceEnd);
  }
};

// Weight copies: evict-first in L2 (kFlagEvict; every launch sets it, bench/NOTES.md has the A/B).
__device__ __forceinline__ void bulk_copy_w(void* dst, const void* src, unsigned bytes, uint64_t* bar, int evict) {
  if (evict)
    bulk_copy<true>(dst, src, bytes, bar);
  else
    bulk_copy<false>(dst, src, bytes, bar);
}

// This thread's place when a few items go out from the whole block warp-major: item i from warp
// i % kWarps, so that the first items land on different warps. Bulk copies want this: a warp
// issues its lanes' copies one lane at a time (the instruction takes its addresses in uniform
// registers), ~80 cycles each, so 32 rows from one warp took 1.4 us (bench/NOTES.md,
// forty-fifth session).
__device__ __forceinline__ int warp_major_index() { return (threadIdx.x >> 5) + kWarps * (threadIdx.x & 31); }

// Every thread: TMA copies of `rows` weight rows of k values (bf16, or E4M3 codes: fp8), row i
// from src(i), into shared dst at row_bytes(k, fp8) apart, all counted on bar; the copies go out
// from every warp (warp_major_index). Thread 0 sets the bytes after the block barrier that
// publishes the init, as ring_start does (a copy landing before that only takes the count below
// zero; the phase cannot end before thread 0's arrival): with init and expect in one thread's
// straight line, compute-sanitizer's racecheck reported a hazard between them on every block.
template <typename Src>
__device__ void copy_rows(char* dst, int k, bool fp8, int rows, Src src, uint64_t* bar, int flags) {
  const unsigned bytes = unsigned(k) * (fp8 ? 1 : 2);
  if (threadIdx.x == 0) mbar_init(bar);
  __syncthreads();
  if (threadIdx.x == 0) mbar_expect(bar, unsigned(rows) * bytes);
  const int stride = row_bytes(k, fp8);
  for (int i = warp_major_index(); i < rows; i += kThreads)
    bulk_copy_w(dst + size_t(i) * stride, src(i), bytes, bar, flags & kFlagEvict);
}

// Row `row` of a projection's weights of k values a row (bf16, or E4M3 codes: kFp8W), in global
// memory.
template <bool kFp8W>
__device__ __forceinline__ const char* weight_row(const FusedWeight& w, size_t row, int k) {
  return static_cast<const char*>(w.w) + row * size_t(k) * (kFp8W ? 1 : 2);
}

// FP8 weights: the scale of row `row`, read before the kernel waits for its inputs (a constant)
// by the thread that will use it, so that no global load sits between the products and the
// outputs. 1 for bf16 weights or no row.
template <bool kFp8W>
__device__ __forceinline__ float early_scale(const FusedWeight& w, bool has_row, size_t row) {
  if constexpr (kFp8W) return has_row ? __ldg(w.scale + row) : 1.f;
  return 1.f;
}

// A bias value of the row this thread finishes (bias null or no row: 0), read before the PDL wait
// as early_scale: after it, its round trip was on the step's critical path.
__device__ __forceinline__ float early_bias(const bf16* bias, bool has_row, size_t row) {
  return bias != nullptr && has_row ? __bfloat162float(__ldg(bias + row)) : 0.f;
}

// A q/k/v output as the separate kernels round it: the row's dot (times its FP8 scale) rounded to
// bf16, plus its bias (if any) rounded again. `first`: the thread's first item, whose scale and
// bias were read before the wait (scale0, bias0); a later item reads row `row`'s after it.
template <bool kFp8W>
__device__ __forceinline__ float qkv_output(float dot, bool first, float scale0, float bias0, const FusedWeight& w,
                                            const bf16* bias, size_t row) {
  if constexpr (kFp8W) dot *= first ? scale0 : __ldg(w.scale + row);
  dot = round_bf16(dot);
  if (bias != nullptr) dot = round_bf16(dot + (first ? bias0 : __bfloat162float(bias[row])));
  return dot;
}

// The PDL handshake. kFlagEarly: let the next kernel launch (and start its weight copy) before
// waiting for this kernel's inputs, rather than after. (At the kernel's very top, before the
// weight copy and staging are issued, it was 3% slower a step on the H100.)
__device__ __forceinline__ void wait_inputs(int flags) {
  if (flags & kFlagEarly) pdl_launch_dependents();
  pdl_wait();
  if (!(flags & kFlagEarly)) pdl_launch_dependents();
}

// Every thread: its 16-byte pieces of [src, src + bytes) (constants) into shared dst by cp.async,
// which needs no registers: the thread goes on to the PDL trigger and wait at once. Before use:
// cp_async_wait<0>() and a block barrier.
__device__ __forceinline__ void stage(void* dst, const void* src, int bytes) {
  for (int o = threadIdx.x * 16; o < bytes; o += kThreads * 16)
    cp_async16(static_cast<char*>(dst) + o, static_cast<const char*>(src) + o, true);
}

// x = src [n] (written by the previous kernel).
__device__ void load_vector(const bf16* src, int n, bf16* x) {
  for (int i = threadIdx.x * 8; i < n; i += kThreads * 8) store8(x + i, load8_cg(src + i));
  __syncthreads();
}

// x[0..8) = w[0..8) * round_bf16(v * rstd), rounded as the rmsnorm kernel rounds it (HF: weight * x.to(bf16)).
__device__ __forceinline__ void store_normed8(const Bf16x8& v8, const bf16* w, float rstd, bf16* x) {
  float wf[8], v[8];
  to_float8(load8(w), wf);
  to_float8(v8, v);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = wf[j] * round_bf16(v[j] * rstd);
  store8(x, from_float8(v));
}

// x = rmsnorm(h) * w [n], rounded as the rmsnorm kernel rounds it. w: staged in shared memory
// (this thread's pieces waited for here; block_sum's barrier publishes everyone's).
__device__ void load_normed(const bf16* h, const bf16* w, int n, float eps, bf16* x, float* scratch) {
  float ss = 0.f;
  for (int i = threadIdx.x * 8; i < n; i += kThreads * 8) {
    const Bf16x8 v8 = load8_cg(h + i);
    store8(x + i, v8);
    float v[8];
    to_float8(v8, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
  }
  cp_async_wait<0>();
  const float rstd = rsqrtf(block_sum(ss, scratch) / n + eps);
  for (int i = threadIdx.x * 8; i < n; i += kThreads * 8)  // the elements this thread stored
    store_normed8(load8(x + i), w + i, rstd, x + i);
  __syncthreads();
}

// The same x with the sum of squares of h published by the kernel that wrote h, as `parts`
// partial sums (one per CTA): warp 0 adds them up (all its loads in flight at once) and leaves
// rstd in scratch, and each thread normalises the 8 elements it read; no block reduction. Only
// warp 0 reads the sums: every CTA of the grid reads the same few lines of them, and eight warps
// a CTA made those lines the hottest in L2. n <= 8 * kThreads (kMaxPublishedHidden).
constexpr int kMaxPublishedHidden = 8 * kThreads;
__device__ void load_normed_published(const bf16* h, const float* ss, int parts, const bf16* w, int n, float eps,
                                      bf16* x, float* scratch) {
  const int lane = threadIdx.x & 31, i = threadIdx.x * 8;
  const Bf16x8 v8 = i < n ? load8_cg(h + i) : Bf16x8{};  // in flight with the partial sums
  if (threadIdx.x < 32) {
    float part[kFusedSsParts / 32];
#pragma unroll
    for (int k = 0; k < kFusedSsParts / 32; ++k) part[k] = lane + 32 * k < parts ? __ldcg(ss + lane + 32 * k) : 0.f;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kFusedSsParts / 32; ++k) s += part[k];
    s = warp_sum(s);
    if (lane == 0) scratch[0] = rsqrtf(s / n + eps);
  }
  cp_async_wait<0>();  // this thread's pieces of w: the elements it normalises
  __syncthreads();
  const float rstd = scratch[0];
  if (i < n) store_normed8(v8, w + i, rstd, x + i);
  __syncthreads();
}

// x = rmsnorm(h) * w either way: from the published sums when ss is not null.
__device__ __forceinline__ void load_normed_any(const bf16* h, const float* ss, int parts, const bf16* w, int n,
                                               float eps, bf16* x, float* scratch) {
  if (ss != nullptr)
    load_normed_published(h, ss, parts, w, n, eps, x, scratch);
  else
    load_normed(h, w, n, eps, x, scratch);
}

// A step of several sequences (batch > 1): x[b] = src [b * n ..) for b < batch, the rows
// x_stride(n, batch) apart in shared memory. (Eight loads a thread in flight at once, unrolled,
// made a batch-8 step slower on the H100: bench/NOTES.md.)
__device__ void load_vectors(const bf16* src, int n, int batch, bf16* x) {
  const int per_row = n / 8, xs = x_stride(n, batch);
  for (int i = threadIdx.x; i < batch * per_row; i += kThreads) {
    const int b = i / per_row, j = i % per_row * 8;
    store8(x + size_t(b) * xs + j, load8_cg(src + size_t(b) * n + j));
  }
  __syncthreads();
}

// The same for rmsnorm(h[b]) * w: row b of h at row(b) (n values). ss (not null): the published
// sums of squares, `parts` of them for row b at ss + b * kFusedSsParts, which warp b adds up;
// else warp b sums row b itself. Rounded as load_normed rounds.
template <typename Row>
__device__ void load_normed_rows(Row row, const float* ss, int parts, const bf16* w, int n, int batch, float eps,
                                 bf16* x, float* scratch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, per_row = n / 8, xs = x_stride(n, batch);
  if (ss != nullptr) {
    if (warp < batch) {
      float s = 0.f;
      for (int k = lane; k < parts; k += 32) s += __ldcg(ss + warp * kFusedSsParts + k);
      s = warp_sum(s);
      if (lane == 0) scratch[warp] = rsqrtf(s / n + eps);
    }
    for (int i = threadIdx.x; i < batch * per_row; i += kThreads) {
      const int b = i / per_row, j = i % per_row * 8;
      store8(x + size_t(b) * xs + j, load8_cg(row(b) + j));
    }
  } else {
    for (int b = warp; b < batch; b += kWarps) {
      float s = 0.f;
      for (int j = lane * 8; j < n; j += 32 * 8) {
        const Bf16x8 v8 = load8_cg(row(b) + j);
        store8(x + size_t(b) * xs + j, v8);
        float v[8];
        to_float8(v8, v);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += v[e] * v[e];
      }
      s = warp_sum(s);
      if (lane == 0) scratch[b] = rsqrtf(s / n + eps);
    }
  }
  cp_async_wait<0>();  // this thread's pieces of w
  __syncthreads();
  for (int i = threadIdx.x; i < batch * per_row; i += kThreads) {
    const int b = i / per_row, j = i % per_row * 8;
    bf16* xb = x + size_t(b) * xs + j;
    store_normed8(load8(xb), w + j, scratch[b], xb);
  }
  __syncthreads();
}

__device__ __forceinline__ uint4 lds16(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }

// A step of several sequences: lane (g, t) holds column g of B, sequence g's values (the last
// sequence's in columns past the batch), and its products' columns 2t and 2t + 1 are sequences
// 2t and 2t + 1; its rows g and g + 8 of a 16-row group go to dots [warp][sequence][row].
__device__ __forceinline__ const bf16* lane_x(const bf16* x, int k, int batch, int g) {
  return batch == 1 ? x : x + size_t(min(g, batch - 1)) * x_stride(k, batch);
}
__device__ __forceinline__ void store_batch_dots(float* dots, int padded, int batch, int warp, int r0, int g, int t,
                                                 const float (&c0)[4], const float (&c1)[4]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (2 * t + j >= batch) break;
    float* d = dots + size_t(warp * batch + 2 * t + j) * padded + r0;
    d[g] = c0[j] + c1[j];
    d[g + 8] = c0[2 + j] + c1[2 + j];
  }
}

// Dot products of `rows` weight rows in shared memory (row r at w + r * row_stride(k)) with x
// (shared, k values, k a multiple of 32), on the tensor cores; on return (after a block barrier)
// dots holds each warp's partial sum of every row, which row_dot adds up. mma.sync m16n8k16 takes
// 16 rows as A and x as B. Lane (g, t) = (lane / 4, lane % 4) reads 16 bytes of rows g and g + 8
// at k = 32 c + 8 t, which are its A fragments of two products: the order of k inside a product
// is free as long as B follows it, and the lane's B is the same 16 bytes of x. Every column of B
// holds x; column 0 is read back. A tile
// of at most 8 rows (o_proj and down: 1,024 rows on 132 CTAs) would leave rows 8..15 of A idle:
// there they hold the same rows at chunk c + kWarps and column 1 of B holds x there, so a
// product does 16 rows' worth of work either way; the row's sum is then column 0 of rows 0..7
// plus column 1 of rows 8..15. The warps split the chunks of k; a row's partial sums are added
// by the thread that uses the row (no second barrier), in a fixed order.
// batch > 1: x holds the batch's vectors (x_stride apart), column g of B sequence g's
// (store_batch_dots), and the pairing is off.
__device__ void block_dots(const bf16* w, const bf16* x, int rows, int k, float* dots, int batch = 1) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int stride = row_stride(k), chunks = k / kChunk, padded = dots_stride(rows, batch);
  const bf16* xg = lane_x(x, k, batch, g) + 8 * t;  // batch 1: x itself, in every column
  for (int r0 = 0; r0 < rows; r0 += 16) {
    const bf16* lo = w + size_t(min(r0 + g, rows - 1)) * stride + 8 * t;
    const bf16* hi = w + size_t(min(r0 + 8 + g, rows - 1)) * stride + 8 * t;
    float c0[4] = {}, c1[4] = {};
    if (batch == 1 && r0 + 8 >= rows) {  // paired: chunk c in rows 0..7 of A and column 0 of B, chunk c2 in rows 8..15 and column 1
      for (int c = warp; c < chunks; c += 2 * kWarps) {
        const int c2 = c + kWarps < chunks ? c + kWarps : -1;
        const uint4 a = lds16(lo + c * kChunk), b = c2 >= 0 ? lds16(lo + c2 * kChunk) : make_uint4(0, 0, 0, 0);
        const uint4 xv = lds16(x + (g == 1 && c2 >= 0 ? c2 : c) * kChunk + 8 * t);  // column g of B
        const uint32_t first[4] = {a.x, b.x, a.y, b.y}, second[4] = {a.z, b.z, a.w, b.w};
        mma_bf16_16816(c0, first, xv.x, xv.y);
        mma_bf16_16816(c1, second, xv.z, xv.w);
      }
      if (t == 0) dots[warp * padded + r0 + g] = (c0[0] + c1[0]) + (c0[3] + c1[3]);
      continue;
    }
    for (int c = warp; c < chunks; c += kWarps) {
      const uint4 a = lds16(lo + c * kChunk), b = lds16(hi + c * kChunk), xv = lds16(xg + c * kChunk);
      const uint32_t first[4] = {a.x, b.x, a.y, b.y}, second[4] = {a.z, b.z, a.w, b.w};
      mma_bf16_16816(c0, first, xv.x, xv.y);
      mma_bf16_16816(c1, second, xv.z, xv.w);
    }
    if (batch > 1) {
      store_batch_dots(dots, padded, batch, warp, r0, g, t, c0, c1);
    } else if (t == 0) {
      dots[warp * padded + r0 + g] = c0[0] + c1[0];
      dots[warp * padded + r0 + 8 + g] = c0[2] + c1[2];
    }
  }
  __syncthreads();
}

// Row r of the `rows` block_dots multiplied (with sequence b's vector of a batch): its warps'
// partial sums, added in order.
__device__ __forceinline__ float row_dot(const float* dots, int rows, int r, int b = 0, int batch = 1) {
  const int padded = dots_stride(rows, batch);
  float sum = dots[b * padded + r];
  for (int j = 1; j < kWarps; ++j) sum += dots[(j * batch + b) * padded + r];
  return sum;
}

// Sixteen E4M3 codes (one 16-byte load) as eight bf16 pairs, exactly (every E4M3 value is a bf16
// value), low code in the low half.
__device__ __forceinline__ void e4m3x16_to_bf16x2(const uint4& v, uint32_t out[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i / 2] >> (16 * (i % 2))),
                                                     __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    out[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
}

// One 64-byte chunk of two weight rows (this lane's 16 bytes of rows g and g + 8 at lo and hi)
// against x (this lane's values of it at xq) into the accumulators of block_dots' products: 8
// bf16 values a row and two m16n8k16 products, or 16 E4M3 codes converted to bf16 in registers
// and four products (kFp8W). As in block_dots, the order of k inside a product is free as long
// as B follows A.
template <bool kFp8W>
__device__ __forceinline__ void chunk_mma(float (&c0)[4], float (&c1)[4], const char* lo, const char* hi,
                                          const bf16* xq) {
  const uint4 a = *reinterpret_cast<const uint4*>(lo), b = *reinterpret_cast<const uint4*>(hi);
  if constexpr (kFp8W) {
    uint32_t al[8], bl[8];
    e4m3x16_to_bf16x2(a, al);
    e4m3x16_to_bf16x2(b, bl);
    const uint4 x0 = lds16(xq), x1 = lds16(xq + 8);
    const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t frag[4] = {al[2 * j], bl[2 * j], al[2 * j + 1], bl[2 * j + 1]};
      mma_bf16_16816(j % 2 ? c1 : c0, frag, xw[2 * j], xw[2 * j + 1]);
    }
  } else {
    const uint4 xv = lds16(xq);
    const uint32_t first[4] = {a.x, b.x, a.y, b.y}, second[4] = {a.z, b.z, a.w, b.w};
    mma_bf16_16816(c0, first, xv.x, xv.y);
    mma_bf16_16816(c1, second, xv.z, xv.w);
  }
}
// k values of x a chunk covers, and a lane's offset in them.
template <bool kFp8W>
constexpr int kChunkValues = kFp8W ? 64 : kChunk;

// block_dots over rows of E4M3 codes (row r at w + r * row_bytes(k, true)), k a multiple of 64:
// each warp takes chunks c = warp, warp + kWarps, ... of every 16-row group; a group of at most 8
// rows leaves half of A on repeated rows. The same result layout as block_dots.
__device__ void block_dots_fp8(const char* w, const bf16* x, int rows, int k, float* dots, int batch = 1) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int stride = row_bytes(k, true), chunks = k / 64, padded = dots_stride(rows, batch);
  const bf16* xg = lane_x(x, k, batch, g) + 16 * t4;
  for (int r0 = 0; r0 < rows; r0 += 16) {
    const char* lo = w + size_t(min(r0 + g, rows - 1)) * stride + 16 * t4;
    const char* hi = w + size_t(min(r0 + 8 + g, rows - 1)) * stride + 16 * t4;
    float c0[4] = {}, c1[4] = {};
    for (int c = warp; c < chunks; c += kWarps) chunk_mma<true>(c0, c1, lo + c * 64, hi + c * 64, xg + c * 64);
    if (batch > 1) {
      store_batch_dots(dots, padded, batch, warp, r0, g, t4, c0, c1);
    } else if (t4 == 0) {
      if (r0 + g < rows) dots[warp * padded + r0 + g] = c0[0] + c1[0];
      if (r0 + 8 + g < rows) dots[warp * padded + r0 + 8 + g] = c0[2] + c1[2];
    }
  }
  __syncthreads();
}

// Warps that issue one refill of the ring, a different team each tile. One warp issued a tile's
// 16 copies a lane at a time and waited for the slowest warp at every tile; two took 0.6% off
// TinyLlama's batch-1 step on the H200 and four no more (bench/NOTES.md, forty-seventh session).
constexpr int kRefillWarps = 2;

// A CTA's weight rows streamed through a ring of shared-memory stages (the share does not fit):
// tile t is row group t / parts (kTileRows rows) and k part t % parts, in stage t % stages.
// full[s] counts a tile's bytes; empty[s] the warps done with it. The first `stages` tiles go out
// from every warp before the kernel waits for its inputs (as copy_rows does a whole share), and
// a team of kRefillWarps warps refills a stage with the tile `stages` ahead once every warp has
// left it.
struct Ring {
  char* w;
  uint64_t *full, *empty;
  int stages, parts, kt, rows;
  int esize, stride;  // bytes a weight value (2 bf16, 1 E4M3) and a tile row in shared memory
  __device__ int tiles() const { return ceil_div(rows, kTileRows) * parts; }
  __device__ char* stage(int s) const { return w + size_t(s) * kTileRows * stride; }
};

__device__ inline Ring make_ring(char* smem, const ProjLayout& L, int stages, int parts, int k, int rows, bool fp8) {
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L.bar);
  return {smem + L.w,    bars, bars + stages, stages, parts, k / parts, rows, fp8 ? 1 : 2,
          row_bytes(k / parts, fp8)};
}

// Tile t's rows (row i from src(i), k values from its part) into its stage: row j of the tile
// from member j of a team of `size` threads (a warp's lanes, or every thread of the block by
// warp_major_index, as in copy_rows); member 0 sets the bytes the stage expects (a copy that
// lands before that only takes the barrier's count below zero).
template <typename Src>
__device__ void ring_issue(const Ring& r, Src src, int t, int flags, int member, int size) {
  const int r0 = t / r.parts * kTileRows, part = t % r.parts, s = t % r.stages;
  const int n = min(kTileRows, r.rows - r0);
  const unsigned bytes = unsigned(r.kt) * r.esize;
  if (member == 0) mbar_expect(r.full + s, unsigned(n) * bytes);
  for (int j = member; j < n; j += size)
    bulk_copy_w(r.stage(s) + size_t(j) * r.stride, src(r0 + j) + size_t(part) * bytes, bytes, r.full + s,
                flags & kFlagEvict);
}

// Every thread: the stages' barriers, then the first tiles in order, each from every warp.
template <typename Src>
__device__ void ring_start(const Ring& r, Src src, int flags) {
  if (threadIdx.x < r.stages) {
    mbar_init(r.full + threadIdx.x);
    mbar_init(r.empty + threadIdx.x, kWarps);
  }
  __syncthreads();
  const int member = warp_major_index();
  for (int t = 0; t < min(r.stages, r.tiles()); ++t) ring_issue(r, src, t, flags, member, kThreads);
}

// block_dots over the streamed tiles: a row group's products accumulate in registers across its
// k parts (each warp takes the chunks c = warp, warp + kWarps, ... of a tile); a group of at most
// 8 rows leaves half of A on repeated rows. On return (after a block barrier) dots holds each
// warp's partial sum of every row, as block_dots leaves them. kFp8W: the rows are E4M3 codes.
// batch > 1: x holds the batch's vectors of k = parts * kt values (store_batch_dots).
template <bool kFp8W, typename Src>
__device__ void ring_dots(const Ring& r, Src src, const bf16* x, float* dots, int flags, int batch = 1) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  constexpr int kValues = kChunkValues<kFp8W>;  // a 64-byte chunk's k values
  const int chunks = r.kt / kValues, padded = dots_stride(r.rows, batch);
  const int tiles = r.tiles();
  const bf16* xg = lane_x(x, r.kt * r.parts, batch, g);
  for (int r0 = 0, t = 0; r0 < r.rows; r0 += kTileRows) {
    const int n = min(kTileRows, r.rows - r0);
    float c0[4] = {}, c1[4] = {};
    for (int part = 0; part < r.parts; ++part, ++t) {
      const int s = t % r.stages;
      const unsigned phase = unsigned(t / r.stages) & 1;
      mbar_wait(r.full + s, phase);
      const char* lo = r.stage(s) + size_t(min(g, n - 1)) * r.stride + 16 * t4;
      const char* hi = r.stage(s) + size_t(min(8 + g, n - 1)) * r.stride + 16 * t4;
      const bf16* xs = xg + size_t(part) * r.kt + kValues / 4 * t4;
      for (int c = warp; c < chunks; c += kWarps) chunk_mma<kFp8W>(c0, c1, lo + c * 64, hi + c * 64, xs + c * kValues);
      __syncwarp();
      if (lane == 0) mbar_arrive(r.empty + s);
      // The stage's refill, from this tile's team (member 0 of it sets the bytes).
      const int seat = (warp - t * kRefillWarps % kWarps + kWarps) % kWarps;  // in the team if < kRefillWarps
      if (seat < kRefillWarps && t + r.stages < tiles) {
        mbar_wait(r.empty + s, phase);
        ring_issue(r, src, t + r.stages, flags, seat + kRefillWarps * lane, 32 * kRefillWarps);
      }
    }
    if (batch > 1) {
      store_batch_dots(dots, padded, batch, warp, r0, g, t4, c0, c1);
    } else if (t4 == 0) {
      if (g < n) dots[warp * padded + r0 + g] = c0[0] + c1[0];
      if (8 + g < n) dots[warp * padded + r0 + 8 + g] = c0[2] + c1[2];
    }
  }
  __syncthreads();
}

// block_dots over a whole share in shared memory: bf16 rows, or E4M3 codes (kFp8W).
template <bool kFp8W>
__device__ __forceinline__ void whole_dots(const char* ws, const bf16* x, int rows, int k, float* dots,
                                           int batch = 1) {
  if constexpr (kFp8W)
    block_dots_fp8(ws, x, rows, k, dots, batch);
  else
    block_dots(reinterpret_cast<const bf16*>(ws), x, rows, k, dots, batch);
}

// A projection kernel's weight share (layout L, rows from src): streamed through `stages` stages
// (kStream; the ring it returns) or copied whole, started before the PDL wait ...
template <bool kStream, bool kFp8W, typename Src>
__device__ __forceinline__ Ring share_start(char* smem, const ProjLayout& L, int stages, int parts, int k, int rows,
                                            Src src, int flags) {
  if constexpr (kStream) {
    const Ring ring = make_ring(smem, L, stages, parts, k, rows, kFp8W);
    ring_start(ring, src, flags);
    return ring;
  }
  copy_rows(smem + L.w, k, kFp8W, rows, src, reinterpret_cast<uint64_t*>(smem + L.bar), flags);
  return Ring{};
}

// ... and multiplied with x once it is there: dots as block_dots leaves them.
template <bool kStream, bool kFp8W, typename Src>
__device__ __forceinline__ void share_dots(const Ring& ring, Src src, char* smem, const ProjLayout& L, const bf16* x,
                                           int rows, int k, float* dots, int flags, const Tracer& trace,
                                           int batch = 1) {
  if constexpr (kStream) {
    ring_dots<kFp8W>(ring, src, x, dots, flags, batch);
  } else {
    mbar_wait(reinterpret_cast<uint64_t*>(smem + L.bar), 0);
    trace.mark(kTraceWeights);
    whole_dots<kFp8W>(smem + L.w, x, rows, k, dots, batch);
  }
}

}  // namespace
}  // namespace nvllm::kernels
