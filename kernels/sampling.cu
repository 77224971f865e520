// Sampling kernels; see sampling.h and docs/sampling.md. One block per sampled row
// walks the row's vocabulary in passes; every pass recomputes the processed logit of a token
// (penalties, eos suppression, temperature) from the raw logits instead of storing a copy, so
// that the raw logits stay available for logprobs and no [rows, vocab] scratch is needed.
#include "kernels/sampling.h"

#include <climits>
#include <cmath>

#include "core/sampling_rng.h"
#include "kernels/cuda_check.h"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 1024;

struct ArgMax {
  float v;
  int i;
};

// Higher value wins, then the lower id (the spec's tie rule); NaN never wins.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__device__ __forceinline__ ArgMax warp_argmax(ArgMax a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, a.v, o);
    const int i = __shfl_xor_sync(0xffffffffu, a.i, o);
    if (better(v, i, a.v, a.i)) a = {v, i};
  }
  return a;
}

// Block-wide argmax, returned to every thread. `scratch` holds 32 entries.
__device__ ArgMax block_argmax(ArgMax a, ArgMax* scratch) {
  a = warp_argmax(a);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // the previous reduction's readers are done with scratch
  if (lane == 0) scratch[warp] = a;
  __syncthreads();
  a = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : ArgMax{-INFINITY, INT_MAX};
  return warp_argmax(a);
}

__device__ float block_sum(float x, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ float block_max(float x, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : -INFINITY;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Order-preserving map of a float to an unsigned key (larger float, larger key).
__device__ __forceinline__ uint32_t float_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Steps 2, 3 and the temperature of step 5 of the spec, for one token.
struct RowLogits {
  const float* raw;
  const int32_t* counts;  // this row's [vocab] slice, or null
  const int32_t* suppress;
  int num_suppress;
  float rep, freq, pres, temperature;
  bool greedy;

  __device__ __forceinline__ float operator()(int i) const {
    float l = raw[i];
    if (counts) {
      const int32_t c = counts[i];
      const int32_t in_output = c & (kPromptBit - 1);
      if (rep != 1.0f && c != 0) l = l > 0.0f ? l / rep : l * rep;
      l -= freq * static_cast<float>(in_output);
      l -= pres * (in_output > 0 ? 1.0f : 0.0f);
    }
    for (int j = 0; j < num_suppress; ++j)
      if (suppress[j] == i) l = -INFINITY;
    if (!greedy) l = l / temperature;
    return l;
  }
};

struct Shared {
  ArgMax arg[32];
  float f[32];
  unsigned hist[256];
  float mass[256];
  int sel_bin;
  float sel_rest;
  int sel_rest_count;
};

// The key K of the k-th largest processed logit: count(key > K) < k <= count(key >= K).
// Radix select, most significant byte first: 4 passes.
__device__ uint32_t select_top_k(const RowLogits& x, int vocab, int k, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint32_t key = float_key(x(i));
      if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, b = 255;
      for (; b > 0; --b) {
        if (above + static_cast<int>(sh.hist[b]) >= remaining) break;
        above += sh.hist[b];
      }
      sh.sel_bin = b;
      sh.sel_rest_count = remaining - above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.sel_bin) << shift;
    mask |= 255u << shift;
    remaining = sh.sel_rest_count;
  }
  return prefix;
}

// The key K of the top-p boundary token: the largest K with mass(key >= K) >= target, where
// mass sums exp(x - m) over the tokens kept so far (key >= min_key). Where rounding leaves the
// target above the total, the lowest key with mass is taken (everything is kept).
__device__ uint32_t select_top_p(const RowLogits& x, int vocab, float m, uint32_t min_key, float target,
                                 Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  float remaining = target;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.mass[b] = 0.0f;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x(i);
      const uint32_t key = float_key(v);
      if (key >= min_key && (key & mask) == prefix) {
        const float e = expf(v - m);
        if (e > 0.0f) atomicAdd(&sh.mass[(key >> shift) & 255u], e);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float above = 0.0f;
      int b = 255, lowest = -1;
      for (; b >= 0; --b) {
        if (sh.mass[b] > 0.0f) lowest = b;
        if (above + sh.mass[b] >= remaining) break;
        above += sh.mass[b];
      }
      if (b < 0) {  // rounding: the target exceeds the bins' total
        b = lowest < 0 ? 0 : lowest;
        above -= sh.mass[b];
      }
      sh.sel_bin = b;
      sh.sel_rest = remaining - above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.sel_bin) << shift;
    mask |= 255u << shift;
    remaining = sh.sel_rest;
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int vocab,
                                                          const SampleRow* __restrict__ rows,
                                                          const int32_t* __restrict__ counts,
                                                          const int32_t* __restrict__ suppress_ids, int max_top,
                                                          int32_t* out_ids, float* out_logprobs, int32_t* out_top_ids,
                                                          float* out_top_logprobs) {
  __shared__ Shared sh;
  const SampleRow p = rows[blockIdx.x];
  const float* raw = logits + static_cast<size_t>(p.logits_row) * vocab;
  RowLogits x{raw,
              p.counts_row >= 0 && counts ? counts + static_cast<size_t>(p.counts_row) * vocab : nullptr,
              suppress_ids + p.suppress_begin,
              p.suppress_end - p.suppress_begin,
              p.repetition_penalty,
              p.frequency_penalty,
              p.presence_penalty,
              p.temperature,
              p.temperature <= 0.0f};

  int chosen;
  if (x.greedy) {
    ArgMax a{-INFINITY, INT_MAX};
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x(i);
      if (better(v, i, a.v, a.i)) a = {v, i};
    }
    chosen = block_argmax(a, sh.arg).i;
    if (chosen == INT_MAX) chosen = 0;  // an all-NaN row
  } else {
    const bool use_k = p.top_k > 0 && p.top_k < vocab;
    const bool use_p = p.top_p < 1.0f;
    const bool use_min_p = p.min_p > 0.0f;
    float m = 0.0f;
    uint32_t min_key = 0;  // tokens with key >= min_key survive top-k and top-p
    if (use_k || use_p || use_min_p) {
      float local = -INFINITY;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) local = fmaxf(local, x(i));
      m = block_max(local, sh.f);
    }
    if (use_k) min_key = select_top_k(x, vocab, p.top_k, sh);
    if (use_p) {
      float local = 0.0f;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = x(i);
        if (float_key(v) >= min_key) local += expf(v - m);
      }
      const float z = block_sum(local, sh.f);
      // A positive target keeps at least the most likely token, even for top_p = 0.
      min_key = select_top_p(x, vocab, m, min_key, fmaxf(p.top_p * z, 1e-30f), sh);
    }
    // The exponential race: argmax over kept tokens of log p_i - log(-log u_i); log p_i is
    // x_i - m up to a constant that does not move the argmax.
    ArgMax a{-INFINITY, INT_MAX};
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x(i);
      if (float_key(v) < min_key || v == -INFINITY) continue;
      if (use_min_p && expf(v - m) < p.min_p) continue;
      const float u = sample_uniform(p.seed, p.step, static_cast<uint32_t>(i));
      const float score = (v - m) - logf(-logf(u));
      if (better(score, i, a.v, a.i)) a = {score, i};
    }
    a = block_argmax(a, sh.arg);
    chosen = a.i == INT_MAX ? 0 : a.i;
  }

  float chosen_logprob = 0.0f;
  if (p.want_logprob) {
    // Raw log_softmax, max-subtracted (step 1 of the spec).
    float local = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) local = fmaxf(local, raw[i]);
    const float rm = block_max(local, sh.f);
    float s = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) s += expf(raw[i] - rm);
    const float log_z = logf(block_sum(s, sh.f));
    chosen_logprob = (raw[chosen] - rm) - log_z;
    // Top raw logprobs: each pass finds the next token in (value desc, id asc) order.
    float prev_v = INFINITY;
    int prev_i = -1;
    const int n = min(p.num_top, max_top);
    for (int t = 0; t < n; ++t) {
      ArgMax a{-INFINITY, INT_MAX};
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = raw[i];
        const bool after = v < prev_v || (v == prev_v && i > prev_i);
        if (after && better(v, i, a.v, a.i)) a = {v, i};
      }
      a = block_argmax(a, sh.arg);
      if (threadIdx.x == 0) {
        out_top_ids[static_cast<size_t>(blockIdx.x) * max_top + t] = a.i;
        out_top_logprobs[static_cast<size_t>(blockIdx.x) * max_top + t] = (a.v - rm) - log_z;
      }
      prev_v = a.v;
      prev_i = a.i;
    }
  }
  if (threadIdx.x == 0) {
    out_ids[blockIdx.x] = chosen;
    out_logprobs[blockIdx.x] = chosen_logprob;
  }
}

// One row per block. Where vocab % 4 == 0 (every row 16-byte aligned) a thread reads float4s,
// kLoads of them in flight at a time: a row of 151,936 logits took 40.7 us on the H100 with one
// dependent 4-byte load per step, a twentieth of a batch-1 decode step.
__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* __restrict__ logits, int vocab,
                                                          int32_t* out_ids) {
  __shared__ ArgMax scratch[32];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  ArgMax a{-INFINITY, INT_MAX};
  if (vocab % 4 == 0) {
    constexpr int kLoads = 8;
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int n4 = vocab / 4, stride = static_cast<int>(blockDim.x);
    for (int base = threadIdx.x; base < n4; base += kLoads * stride) {
      float4 v[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u)
        v[u] = base + u * stride < n4 ? row4[base + u * stride] : make_float4(NAN, NAN, NAN, NAN);  // NaN never wins
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int i = 4 * (base + u * stride);
        if (better(v[u].x, i, a.v, a.i)) a = {v[u].x, i};
        if (better(v[u].y, i + 1, a.v, a.i)) a = {v[u].y, i + 1};
        if (better(v[u].z, i + 2, a.v, a.i)) a = {v[u].z, i + 2};
        if (better(v[u].w, i + 3, a.v, a.i)) a = {v[u].w, i + 3};
      }
    }
  } else {
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = row[i];
      if (better(v, i, a.v, a.i)) a = {v, i};
    }
  }
  a = block_argmax(a, scratch);
  if (threadIdx.x == 0) out_ids[blockIdx.x] = a.i == INT_MAX ? 0 : a.i;
}

__global__ void count_kernel(const int32_t* __restrict__ ids, const int32_t* __restrict__ row_begin,
                             const int32_t* __restrict__ prompt_len, int vocab, int32_t* counts) {
  const int r = blockIdx.y;
  const int begin = row_begin[r], end = row_begin[r + 1], prompt_end = begin + prompt_len[r];
  int32_t* row = counts + static_cast<size_t>(r) * vocab;
  for (int j = begin + blockIdx.x * blockDim.x + threadIdx.x; j < end; j += gridDim.x * blockDim.x) {
    const int id = ids[j];
    if (id < 0 || id >= vocab) continue;
    if (j < prompt_end)
      atomicOr(&row[id], kPromptBit);
    else
      atomicAdd(&row[id], 1);
  }
}

}  // namespace

void build_token_counts(const int32_t* ids, const int32_t* row_begin, const int32_t* prompt_len, int rows,
                        int vocab, int32_t* counts, cudaStream_t stream) {
  if (rows <= 0) return;
  CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(rows) * vocab * sizeof(int32_t), stream));
  count_kernel<<<dim3(8, rows), 256, 0, stream>>>(ids, row_begin, prompt_len, vocab, counts);
  CUDA_CHECK(cudaGetLastError());
}

void sample_rows(const float* logits, int vocab, const SampleRow* rows, int num_rows, const int32_t* counts,
                 const int32_t* suppress_ids, int max_top, int32_t* out_ids, float* out_logprobs,
                 int32_t* out_top_ids, float* out_top_logprobs, cudaStream_t stream) {
  if (num_rows <= 0) return;
  sample_kernel<<<num_rows, kThreads, 0, stream>>>(logits, vocab, rows, counts, suppress_ids, max_top, out_ids,
                                                   out_logprobs, out_top_ids, out_top_logprobs);
  CUDA_CHECK(cudaGetLastError());
}

void argmax_rows(const float* logits, int num_rows, int vocab, int32_t* out_ids, cudaStream_t stream) {
  if (num_rows <= 0) return;
  argmax_kernel<<<num_rows, kThreads, 0, stream>>>(logits, vocab, out_ids);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace nvllm::kernels
