// Small-batch linear layer (decode steps of 1..16 sequences): y[b, n] = sum_k x[b, k] w[n, k].
// Bound by the weight stream (N * K * 2 bytes read once; x and y are < 0.1% of that), so the
// design is about every SM keeping enough weight bytes in flight, on every matrix shape:
//
// - A warp owns 32 rows (two 16-row tiles; 16 rows and twice the unroll is the other variant)
//   and one piece of K. Each lane loads 16-byte chunks of 4 rows; per loop step a warp has 4 KB
//   of weights in flight. The products run on the tensor cores (mma.sync m16n8k16, weights as
//   A, x as the columns of B): no bf16 -> fp32 conversion of the weights and 2 instructions per
//   512 bytes, so batch 16 costs the same arithmetic issue as batch 1. A lane of quad position q
//   loads chunks q, q + 4, ... of its rows: the dot product does not care in which order k
//   runs, so the mma's k index is a permutation of the physical one, the same for A and B, and
//   x's fragment is 16 bytes of one sequence's row at the same chunk (lane group g holds
//   sequence g, and g + 8 when the batch is over 8).
// - The row count alone cannot fill the GPU when N is small (o_proj, down: N = hidden), so
//   each row's K is split in `split` pieces: across the 4 warps of a CTA and across the CTAs of
//   a thread-block cluster (up to 8, sm_90), whose partial sums meet in shared memory, read
//   over the cluster (distributed shared memory) and added in a fixed order. No atomics: a row
//   comes out bitwise the same at every batch size (and the plan depends on N and K only), so
//   a CUDA-graph step padded to its captured batch rounds like the eager step.
// - Launched with PDL (launch.cuh): before waiting for the kernel ahead, each warp loads its
//   first step of weights into registers and asks L2 for the next few (weights are constants),
//   so the weight stream starts while the small kernels between projections (norm, rope,
//   attention) still run.
//
// Variants: x computed on load as silu(gate) * up from the fused gate/up output (the down
// projection needs no silu_mul kernel; bitwise what silu_mul then gemv gives), and fp32 output
// (the LM head's logits).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCluster = 8;  // portable cluster size
constexpr int kMaxSplit = kMaxCluster * kWarps;

struct GemvArgs {
  const bf16* x;
  const bf16* w;
  void* y;
  int batch, n, k;
  int ks;        // warps of a CTA on one row tile (the CTA's share of the split); kWarps / ks row tiles
  int cluster;   // CTAs of a cluster (along y): the rest of the split
  int prefetch;  // loop steps past the first asked into L2 before the PDL wait
};

// Weights: read once per step, so neither L1 nor L2 should keep them (evict-first).
__device__ __forceinline__ uint4 load_weights(const bf16* p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

// Chunk c (8 values) of input row b as packed bf16. kSilu: x is [batch, 2k] = [gate | up] and
// the input is silu(gate) * up rounded to bf16, exactly as silu_mul stores it.
template <bool kSilu>
__device__ __forceinline__ uint4 load_x(const bf16* __restrict__ x, int b, int k, int c) {
  if constexpr (kSilu) {
    const bf16* row = x + size_t(b) * 2 * k;
    float g[8], u[8], o[8];
    to_float8(load8(row + size_t(c) * 8), g);
    to_float8(load8(row + k + size_t(c) * 8), u);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = silu_mul_one(g[i], u[i]);
    const Bf16x8 v = from_float8(o);
    return *reinterpret_cast<const uint4*>(&v);
  } else {
    return *reinterpret_cast<const uint4*>(x + size_t(b) * k + size_t(c) * 8);
  }
}

__device__ __forceinline__ void store_out(bf16* y, float v) { *y = __float2bfloat16(v); }
__device__ __forceinline__ void store_out(float* y, float v) { *y = v; }

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The address of `p` (this CTA's shared memory) in CTA `rank` of the cluster, as a generic
// pointer: plain loads through it, which the compiler may issue together (sm_90 clusters).
__device__ __forceinline__ const float* cluster_ptr(const float* p, unsigned rank) {
  uint64_t r = reinterpret_cast<uint64_t>(p);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mapa.u64 %0, %1, %2;\n" : "=l"(r) : "l"(r), "r"(rank));
#endif
  return reinterpret_cast<const float*>(r);
}

// kR 16-row tiles per warp, kU chunks per lane and row per loop step, kNT 8-column tiles of
// the batch (1: batch <= 8, 2: <= 16).
template <int kR, int kU, int kNT, bool kSilu, typename OutT>
__global__ void __launch_bounds__(kThreads, 4) gemv_kernel(GemvArgs a) {
  constexpr int kRows = 16 * kR, kStep = 4 * kU, kCols = 8 * kNT;  // rows per warp; chunks per row and step
  __shared__ alignas(16) float partial[kWarps][kRows][kCols];  // each warp's sums over its piece
  __shared__ float cta_sum[kWarps * kRows][kCols];  // the CTA's: its pieces of each row added
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int tiles = kWarps / a.ks, tile = warp / a.ks;
  const int piece = int(blockIdx.y) * a.ks + warp % a.ks, pieces = a.ks * a.cluster;
  const int cta_row0 = int(blockIdx.x) * tiles * kRows, row0 = cta_row0 + tile * kRows;
  const int chunks = a.k / 8;
  const int c_begin = int(int64_t(piece) * chunks / pieces), c_end = int(int64_t(piece + 1) * chunks / pieces);

  // Lane rows: row0 + 8 r + g, r < 2 kR (tile t uses r = 2t for its rows g and 2t + 1 for g + 8).
  const bf16* wrow[2 * kR];
  bool row_ok[2 * kR];
#pragma unroll
  for (int r = 0; r < 2 * kR; ++r) {
    const int row = row0 + 8 * r + g;
    row_ok[r] = row < a.n;
    wrow[r] = a.w + size_t(row_ok[r] ? row : 0) * a.k;
  }
  const uint64_t policy = l2_evict_first();
  uint4 wv[kU][2 * kR];
  auto load_step = [&](int base) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = base + 4 * u + q;
#pragma unroll
      for (int r = 0; r < 2 * kR; ++r)
        wv[u][r] = c < c_end && row_ok[r] ? load_weights(wrow[r] + size_t(c) * 8, policy) : make_uint4(0, 0, 0, 0);
    }
  };
  // Weights are constants: the first step into registers and the next `prefetch` into L2 before
  // the inputs are ready (one bulk prefetch per row: lanes 0..kRows-1).
  load_step(c_begin);
  if (a.prefetch > 0 && lane < kRows) {
    const int row = row0 + lane, from = c_begin + kStep, to = min(c_end, c_begin + kStep * (1 + a.prefetch));
    if (row < a.n && from < to) prefetch_l2_bytes(a.w + size_t(row) * a.k + size_t(from) * 8, unsigned(to - from) * 16);
  }
  pdl_enter();

  float acc[kR][kNT][4];
#pragma unroll
  for (int t = 0; t < kR; ++t)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][j][i] = 0.f;

  for (int base = c_begin; base < c_end; base += kStep) {
    uint4 xv[kU][kNT];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = base + 4 * u + q;
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const int b = g + 8 * j;
        xv[u][j] = c < c_end && b < a.batch ? load_x<kSilu>(a.x, b, a.k, c) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int h = 0; h < 2; ++h)  // values 4h .. 4h + 3 of the chunk: one k16 product
#pragma unroll
        for (int t = 0; t < kR; ++t) {
          const uint32_t frag[4] = {word(wv[u][2 * t], 2 * h), word(wv[u][2 * t + 1], 2 * h),
                                    word(wv[u][2 * t], 2 * h + 1), word(wv[u][2 * t + 1], 2 * h + 1)};
#pragma unroll
          for (int j = 0; j < kNT; ++j) mma_bf16_16816(acc[t][j], frag, word(xv[u][j], 2 * h), word(xv[u][j], 2 * h + 1));
        }
    if (base + kStep < c_end) load_step(base + kStep);
  }

  // acc[t][j]: rows 16 t + g (0, 1) and 16 t + g + 8 (2, 3) of the warp, columns 8 j + 2 q (+1).
#pragma unroll
  for (int t = 0; t < kR; ++t)
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      *reinterpret_cast<float2*>(&partial[warp][16 * t + g][8 * j + 2 * q]) = make_float2(acc[t][j][0], acc[t][j][1]);
      *reinterpret_cast<float2*>(&partial[warp][16 * t + g + 8][8 * j + 2 * q]) = make_float2(acc[t][j][2], acc[t][j][3]);
    }
  __syncthreads();
  // The CTA's sum of each row: its warps' pieces in order.
  const int cta_rows = tiles * kRows, outputs = cta_rows * a.batch;
  for (int i = threadIdx.x; i < outputs; i += kThreads) {
    const int b = i / cta_rows, rl = i % cta_rows, t = rl / kRows, r = rl % kRows;
    float v = 0.f;
    for (int s = 0; s < a.ks; ++s) v += partial[t * a.ks + s][r][b];
    cta_sum[rl][b] = v;
  }
  const int C = a.cluster;
  if (C == 1) {
    __syncthreads();
    for (int i = threadIdx.x; i < outputs; i += kThreads) {
      const int b = i / cta_rows, rl = i % cta_rows;
      if (cta_row0 + rl < a.n) store_out(static_cast<OutT*>(a.y) + size_t(b) * a.n + cta_row0 + rl, cta_sum[rl][b]);
    }
    return;
  }
  // A cluster: CTA `rank` (blockIdx.y) writes every C-th of the outputs, the sum of the CTAs'
  // sums in rank order, read over distributed shared memory.
  cluster_arrive();
  cluster_wait();
  for (int i = int(blockIdx.y) * kThreads + threadIdx.x; i < outputs; i += C * kThreads) {
    const int b = i / cta_rows, rl = i % cta_rows;
    float part[kMaxCluster];
#pragma unroll
    for (int c = 0; c < kMaxCluster; ++c) part[c] = c < C ? *cluster_ptr(&cta_sum[rl][b], unsigned(c)) : 0.f;
    float v = 0.f;
#pragma unroll
    for (int c = 0; c < kMaxCluster; ++c)
      if (c < C) v += part[c];
    if (cta_row0 + rl < a.n) store_out(static_cast<OutT*>(a.y) + size_t(b) * a.n + cta_row0 + rl, v);
  }
  cluster_arrive();  // no CTA may leave while another still reads its shared memory
  cluster_wait();
}

struct Device {
  int sms = 0;
  bool clusters = false;
};
const Device& device_info() {
  // Per process, as the runner uses one device; asked once.
  static const Device d = [] {
    Device r;
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    r.clusters = major >= 9;
    return r;
  }();
  return d;
}

template <bool kSilu, typename OutT>
void dispatch(const bf16* x, const bf16* w, OutT* y, int batch, int n, int k, cudaStream_t stream,
              const GemvPlan* given) {
  if (batch <= 0 || n <= 0) return;
  NVLLM_CHECK(batch <= kGemvMaxBatch, "gemv: batch ", batch, " is over ", kGemvMaxBatch, "; use the GEMM path");
  NVLLM_CHECK(k % 8 == 0, "gemv: K = ", k, " must be a multiple of 8 (16-byte rows)");
  const GemvPlan p = given ? *given : gemv_plan(n, k);
  NVLLM_CHECK((p.warp_rows == 16 || p.warp_rows == 32) && p.split >= 1 && p.split <= kMaxSplit &&
                  (p.split & (p.split - 1)) == 0 && p.prefetch >= 0,
              "gemv: bad plan (warp_rows ", p.warp_rows, ", split ", p.split, ", prefetch ", p.prefetch, ")");
  GemvArgs a{x, w, y, batch, n, k, 1, 1, p.prefetch};
  a.cluster = std::min(p.split, device_info().clusters ? kMaxCluster : 1);
  a.ks = p.split / a.cluster;
  NVLLM_CHECK(a.ks <= kWarps, "gemv: split ", p.split, " needs clusters (sm_90)");
  const int tiles = kWarps / a.ks;
  const int grid_x = ceil_div(n, tiles * p.warp_rows);
  auto go = [&](auto kernel) {
    cudaLaunchAttribute attrs[2]{};
    unsigned count = 0;
    if (a.cluster > 1) {
      attrs[count].id = cudaLaunchAttributeClusterDimension;
      attrs[count].val.clusterDim.x = 1;
      attrs[count].val.clusterDim.y = unsigned(a.cluster);
      attrs[count].val.clusterDim.z = 1;
      ++count;
    }
    if (pdl_enabled()) {
      attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs[count].val.programmaticStreamSerializationAllowed = 1;
      ++count;
    }
    launch_with({attrs, count}, kernel, dim3(grid_x, a.cluster), dim3(kThreads), 0, stream, a);
  };
  const bool wide = batch > 8;
  if (p.warp_rows == 32) {
    if (wide) go(gemv_kernel<2, 2, 2, kSilu, OutT>);
    else go(gemv_kernel<2, 2, 1, kSilu, OutT>);
  } else {
    if (wide) go(gemv_kernel<1, 4, 2, kSilu, OutT>);
    else go(gemv_kernel<1, 4, 1, kSilu, OutT>);
  }
}

}  // namespace

GemvPlan gemv_plan(int n, int k) {
  const Device& d = device_info();
  GemvPlan p;
  p.warp_rows = 32;
  const int step = 4 * 2;  // chunks per row of one loop step (kU = 2 for 32-row warps)
  const int tiles = ceil_div(std::max(n, 1), p.warp_rows), chunks = k / 8;
  const int max_split = d.clusters ? kMaxSplit : kWarps;
  // Split K until the grid has 16 warps an SM (4 KB of weights in flight each: 64 KB an SM),
  // while a piece keeps at least one loop step. A small matrix then has all of its weights in
  // flight at once.
  const int64_t target = int64_t{16} * d.sms;
  while (p.split < max_split && tiles * int64_t{p.split} < target && chunks / (2 * p.split) >= step) p.split *= 2;
  // Ask L2 for up to 16 MB ahead across the grid (a third of the H100's L2), in loop steps.
  const int64_t warps = int64_t(tiles) * p.split, step_bytes = int64_t(p.warp_rows) * step * 16;
  const int steps = ceil_div(ceil_div(chunks, p.split), step);
  p.prefetch = int(std::clamp<int64_t>((int64_t{16} << 20) / (warps * step_bytes), 0, std::max(steps - 1, 0)));
  return p;
}

void gemv(const bf16* x, const bf16* w, bf16* y, int batch, int n, int k, cudaStream_t stream, const GemvPlan* plan) {
  dispatch<false>(x, w, y, batch, n, k, stream, plan);
}

void gemv_silu(const bf16* gate_up, const bf16* w, bf16* y, int batch, int n, int k, cudaStream_t stream,
               const GemvPlan* plan) {
  dispatch<true>(gate_up, w, y, batch, n, k, stream, plan);
}

void gemv_f32(const bf16* x, const bf16* w, float* y, int batch, int n, int k, cudaStream_t stream,
              const GemvPlan* plan) {
  dispatch<false>(x, w, y, batch, n, k, stream, plan);
}

}  // namespace nvllm::kernels
