// Batch-1 decode's last kernel: the final RMSNorm, the LM head and the greedy token in one pass
// over the LM head's weights.
//   x = rmsnorm(h) * norm_w, rounded to bf16 as the rmsnorm kernel rounds it;
//   logits = x W^T in fp32;
//   token = argmax(logits): the lowest id among equal maxima, NaN never chosen (as argmax_rows).
// Bytes: vocab * hidden * 2 (311 MB for Qwen3-0.6B, a quarter of a decode step's bytes) + vocab * 4
// of logits; 2 FLOPs a weight. The kernel is a weight stream and nothing else matters.
//
// Two CTAs of 256 threads per SM (one for hidden sizes over 1,024). A warp owns kRows consecutive
// rows at a time and lane l reads the 16-byte chunks l, l + 32, ... of each row, so one load
// instruction of a warp covers 512 contiguous bytes; where the hidden size is not a multiple of
// 256 (Qwen2.5-0.5B's 896), the last such instruction has fewer lanes. The first rows' loads are
// issued before the PDL wait (the weights are constants): the stream starts while the last layer
// still runs, and the loads of the next rows are in flight while a warp reduces the current ones.
// Every warp computes the norm of h itself: its lanes' chunks of h cover the whole vector, so the
// sum of squares needs no block barrier.
// This replaces three kernels (rmsnorm, the LM head gemv, argmax_rows) and their boundaries.
//
// The argmax: per warp in registers (its rows in increasing order), per CTA in shared memory, then
// one 64-bit atomicMax per CTA of (order-preserving key of the logit, ~id); the last CTA to
// finish (a counter) writes the token and zeroes both words for the next step. For chained steps
// it also advances the step's inputs in the device staging to the sequence's next decode step and
// leaves the token in mapped host memory, so that step needs neither an H2D nor a D2H copy.
//
// The weights are loaded evict-first: they are read once a step and should not push the layers'
// activations, K/V and code out of L2. (Keeping up to 31 MB of the matrix in an L2 set-aside for
// persisting lines between steps, loaded evict-last, made the step 4 us slower, not faster:
// bench/NOTES.md.) CudaTuning::fused_head off (timing): the three separate kernels instead.
#include <climits>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/decode_head.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ void bf16x8_to_float(const uint4& u, float f[8]) {
  to_float8(*reinterpret_cast<const Bf16x8*>(&u), f);
}

// (key of the logit, ~id): a larger value is a larger logit, then a smaller id. 0 when the warp
// or CTA saw only NaN.
__device__ __forceinline__ unsigned long long pack_best(float v, int id) {
  if (id == INT_MAX) return 0ull;
  const uint32_t u = __float_as_uint(v);
  const uint32_t key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(key) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

// kC: the most 16-byte chunks of a row a lane holds (hidden <= 256 * kC); kRows: rows per warp step;
// kCtas: CTAs per SM (the register budget: 2 x 256 threads x 128 registers fill an SM).
template <int kC, int kRows, int kCtas>
__global__ void __launch_bounds__(kThreads, kCtas) decode_head_kernel(DecodeHeadArgs a) {
  __shared__ unsigned long long best_s[kWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int step = gridDim.x * kWarps * kRows;
  const uint64_t policy = l2_evict_first();

  uint4 wv[kRows][kC];
  auto load_rows = [&](int r0) { load_warp_rows(wv, a.w, r0, a.vocab, a.hidden, lane, policy); };
  int r0 = (blockIdx.x * kWarps + warp) * kRows;
  load_rows(r0);
  pdl_wait();
  pdl_launch_dependents();

  // This lane's chunks of x = rmsnorm(h) * norm_w, kept as bf16.
  uint4 xv[kC];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kC; ++j) {
    if (!lane_has_chunk(j, lane, a.hidden)) continue;
    xv[j] = __ldcg(reinterpret_cast<const uint4*>(a.h + (j * 32 + lane) * 8));
    float v[8];
    bf16x8_to_float(xv[j], v);
#pragma unroll
    for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
  }
  const float rstd = rsqrtf(warp_sum(ss) / a.hidden + a.eps);
#pragma unroll
  for (int j = 0; j < kC; ++j) {
    if (!lane_has_chunk(j, lane, a.hidden)) continue;
    float v[8], nw[8];
    bf16x8_to_float(xv[j], v);
    bf16x8_to_float(*reinterpret_cast<const uint4*>(a.norm_w + (j * 32 + lane) * 8), nw);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = nw[i] * round_bf16(v[i] * rstd);  // HF: weight * x.to(bf16)
    const Bf16x8 r = from_float8(v);
    xv[j] = *reinterpret_cast<const uint4*>(&r);
  }

  float best = -INFINITY;
  int best_id = INT_MAX;
  for (; r0 < a.vocab; r0 += step) {
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      acc[r] = 0.f;
#pragma unroll
      for (int j = 0; j < kC; ++j) {
        if (!lane_has_chunk(j, lane, a.hidden)) continue;
        float wf[8], xf[8];
        bf16x8_to_float(wv[r][j], wf);
        bf16x8_to_float(xv[j], xf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r] = fmaf(wf[i], xf[i], acc[r]);
      }
    }
    load_rows(r0 + step);  // in flight during the reductions below
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float v = warp_sum(acc[r]);
      const int row = r0 + r;
      if (row >= a.vocab) continue;
      if (lane == r) a.logits[row] = v;
      if (v > best || (v == best && row < best_id)) {  // NaN never wins
        best = v;
        best_id = row;
      }
    }
  }

  if (a.l2_next != nullptr && threadIdx.x == 0) {  // this CTA's share of what the next step reads first
    const size_t share = (a.l2_next_bytes + gridDim.x - 1) / gridDim.x / 16 * 16 + 16, from = share * blockIdx.x;
    if (from < a.l2_next_bytes)
      prefetch_l2_bytes(static_cast<const char*>(a.l2_next) + from, unsigned(min(share, a.l2_next_bytes - from)));
  }
  if (lane == 0) best_s[warp] = pack_best(best, best_id);
  __syncthreads();
  if (threadIdx.x != 0) return;
  unsigned long long b = 0;
  for (int i = 0; i < kWarps; ++i) b = max(b, best_s[i]);
  atomicMax(a.scratch, b);
  __threadfence();  // the max before the count
  if (atomicAdd(a.scratch + 1, 1ull) == gridDim.x - 1) {
    __threadfence();
    const unsigned long long k = atomicExch(a.scratch, 0ull);
    const int token = k == 0 ? 0 : int(0xFFFFFFFFu - static_cast<uint32_t>(k));  // all NaN: 0, as argmax_rows
    *a.token = token;
    if (a.advance.on()) advance_row(a.advance, 0, token);
    atomicExch(a.scratch + 1, 0ull);
  }
}

}  // namespace

bool decode_head_supported(int hidden) { return hidden > 0 && hidden % 8 == 0 && hidden <= 8 * 256; }

void decode_head(const DecodeHeadArgs& a, int sms, cudaStream_t stream) {
  NVLLM_CHECK(decode_head_supported(a.hidden), "internal: decode_head with hidden size ", a.hidden);
  // 8 KB of weights in flight per warp either way.
  if (a.hidden <= 4 * 256)
    launch_pdl(decode_head_kernel<4, 4, 2>, dim3(2 * sms), dim3(kThreads), 0, stream, a);
  else
    launch_pdl(decode_head_kernel<8, 2, 1>, dim3(sms), dim3(kThreads), 0, stream, a);
}

}  // namespace nvllm::kernels
