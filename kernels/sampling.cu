// Sampling kernels; see sampling.h and docs/sampling.md. The CTAs of a sampled row walk the
// row's vocabulary in passes; every pass recomputes the processed logit of a token (penalties,
// eos suppression, temperature) from the raw logits instead of storing a copy, so that the raw
// logits stay available for logprobs and no [rows, vocab] scratch is needed.
//
// A row is one CTA, or with few rows on sm_90 a thread-block cluster of up to kMaxRowCtas CTAs
// (grid [ctas, rows], row_ctas): each CTA takes every ctas-th stretch of the vocabulary and the
// reductions (argmax, max, sum, the radix histograms) combine the CTAs' parts through
// distributed shared memory in rank order, so that every CTA of the row holds the same results
// (argmax, counts and the top-p masses, which are integers, as one CTA would have them; the
// logprobs' float sums to their rounding, in an order that follows the CTA count). One CTA of
// 1,024 threads took ~10 us for a 151,936-logit argmax and ~120 us for a draw on the H200: a
// batch-1 step's row ran on one SM.
#include "kernels/sampling.h"

#include <climits>
#include <cmath>

#include "core/sampling_mass.h"
#include "core/sampling_rng.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kMaxRowCtas = 8;  // a portable cluster size

// Where this CTA's threads stand in their row: CTA `rank` of `ctas` (blockIdx.x of gridDim.x);
// the row is blockIdx.y.
struct RowPart {
  int ctas, rank;
  __device__ RowPart() : ctas(static_cast<int>(gridDim.x)), rank(static_cast<int>(blockIdx.x)) {}
  __device__ int first() const { return rank * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x); }
  __device__ int stride() const { return ctas * static_cast<int>(blockDim.x); }
};

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
  uint64_t u64[32];
  unsigned hist[256];
  uint64_t mass[256];  // top-p masses (core/sampling_mass.h)
  // The row's histograms and reductions over its CTAs (only with more than one).
  unsigned row_hist[256];
  uint64_t row_mass[256];
  ArgMax part_arg, row_arg;
  float part_f, row_f;
  uint64_t part_u64, row_u64;
  int sel_bin;
  uint64_t sel_rest;
  int sel_rest_count;
};

// The row's argmax: the CTAs' block results combined (better() is a total order, so the
// result does not depend on the order). Every thread of every CTA of the row gets it.
__device__ ArgMax row_argmax(ArgMax a, const RowPart& row, Shared& sh) {
  a = block_argmax(a, sh.arg);
  if (row.ctas == 1) return a;
  if (threadIdx.x == 0) sh.part_arg = a;
  cluster_sync();
  if (threadIdx.x < 32) {
    ArgMax o{-INFINITY, INT_MAX};
    if (static_cast<int>(threadIdx.x) < row.ctas)
      o = {load_remote(&sh.part_arg.v, threadIdx.x), load_remote(&sh.part_arg.i, threadIdx.x)};
    o = warp_argmax(o);
    if (threadIdx.x == 0) sh.row_arg = o;
  }
  cluster_sync();  // row_arg written; every CTA has read the parts before they are written again
  return sh.row_arg;
}

// The CTAs' block results x combined by `op` from `init` in rank order (`part` and `whole` this
// CTA's shared slots for them): the same bits in every CTA.
template <typename T, typename Op>
__device__ T row_combine(T x, T init, Op op, T& part, T& whole, const RowPart& row) {
  if (row.ctas == 1) return x;
  if (threadIdx.x == 0) part = x;
  cluster_sync();
  if (threadIdx.x == 0) {
    T acc = init;
    for (int r = 0; r < row.ctas; ++r) acc = op(acc, load_remote(&part, r));
    whole = acc;
  }
  cluster_sync();
  return whole;
}

__device__ float row_sum(float x, const RowPart& row, Shared& sh) {
  return row_combine(block_sum(x, sh.f), 0.0f, [](float a, float b) { return a + b; }, sh.part_f, sh.row_f, row);
}
__device__ float row_max(float x, const RowPart& row, Shared& sh) {
  return row_combine(block_max(x, sh.f), -INFINITY, [](float a, float b) { return fmaxf(a, b); }, sh.part_f, sh.row_f,
                     row);
}
// The row's total of the threads' integers: exact, so the same whatever the order or CTA count.
__device__ uint64_t row_total(uint64_t x, const RowPart& row, Shared& sh) {
  return row_combine(block_sum(x, sh.u64), uint64_t{0}, [](uint64_t a, uint64_t b) { return a + b; }, sh.part_u64,
                     sh.row_u64, row);
}

// The row's 256 bins (each CTA's `part`) summed over its CTAs in rank order into `whole`;
// returns the bins to read: `part` itself with one CTA. Called by every thread after the
// histogram pass's __syncthreads; what it returns is readable after the next __syncthreads.
template <typename T>
__device__ const T* row_bins(T* part, T* whole, const RowPart& row) {
  if (row.ctas == 1) return part;
  cluster_sync();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) {
    T acc = 0;
    for (int r = 0; r < row.ctas; ++r) acc += load_remote(&part[b], r);
    whole[b] = acc;
  }
  cluster_sync();  // every CTA has read the parts before the next pass clears them
  return whole;
}

// The key K of the k-th largest processed logit: count(key > K) < k <= count(key >= K).
// Radix select, most significant byte first: 4 passes.
__device__ uint32_t select_top_k(const RowLogits& x, int vocab, int k, const RowPart& row, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    for (int i = row.first(); i < vocab; i += row.stride()) {
      const uint32_t key = order_key(x(i));
      if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    const unsigned* hist = row_bins(sh.hist, sh.row_hist, row);
    if (threadIdx.x == 0) {
      int above = 0, b = 255;
      for (; b > 0; --b) {
        if (above + static_cast<int>(hist[b]) >= remaining) break;
        above += hist[b];
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
// mass sums fixed_mass(exp(x - m)) over the tokens kept so far (key >= min_key), as integers.
// 1 <= target <= the kept tokens' total, so every pass finds a bin with mass (bin 0 at worst).
__device__ uint32_t select_top_p(const RowLogits& x, int vocab, float m, uint32_t min_key, uint64_t target,
                                 const RowPart& row, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  uint64_t remaining = target;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.mass[b] = 0;
    __syncthreads();
    for (int i = row.first(); i < vocab; i += row.stride()) {
      const float v = x(i);
      const uint32_t key = order_key(v);
      if (key >= min_key && (key & mask) == prefix) {
        const uint64_t w = fixed_mass(expf(v - m));
        if (w > 0) atomicAdd(reinterpret_cast<unsigned long long*>(&sh.mass[(key >> shift) & 255u]), w);
      }
    }
    __syncthreads();
    const uint64_t* mass = row_bins(sh.mass, sh.row_mass, row);
    if (threadIdx.x == 0) {
      uint64_t above = 0;
      int b = 255;
      for (; b > 0; --b) {
        if (above + mass[b] >= remaining) break;
        above += mass[b];
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
  const RowPart row;
  const SampleRow p = rows[blockIdx.y];
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
    for (int i = row.first(); i < vocab; i += row.stride()) {
      const float v = x(i);
      if (better(v, i, a.v, a.i)) a = {v, i};
    }
    chosen = row_argmax(a, row, sh).i;
    if (chosen == INT_MAX) chosen = 0;  // an all-NaN row
  } else {
    const bool use_k = p.top_k > 0 && p.top_k < vocab;
    const bool use_p = p.top_p < 1.0f;
    const bool use_min_p = p.min_p > 0.0f;
    float m = 0.0f;
    uint32_t min_key = 0;  // tokens with key >= min_key survive top-k and top-p
    if (use_k || use_p || use_min_p) {
      float local = -INFINITY;
      for (int i = row.first(); i < vocab; i += row.stride()) local = fmaxf(local, x(i));
      m = row_max(local, row, sh);
    }
    if (use_k) min_key = select_top_k(x, vocab, p.top_k, row, sh);
    if (use_p) {
      uint64_t local = 0;
      for (int i = row.first(); i < vocab; i += row.stride()) {
        const float v = x(i);
        if (order_key(v) >= min_key) local += fixed_mass(expf(v - m));
      }
      // A target of at least 1 keeps the most likely token, even for top_p = 0.
      min_key = select_top_p(x, vocab, m, min_key, top_p_target(p.top_p, row_total(local, row, sh)), row, sh);
    }
    // The exponential race: argmax over kept tokens of log p_i - log(-log u_i); log p_i is
    // x_i - m up to a constant that does not move the argmax.
    ArgMax a{-INFINITY, INT_MAX};
    for (int i = row.first(); i < vocab; i += row.stride()) {
      const float v = x(i);
      if (order_key(v) < min_key || v == -INFINITY) continue;
      if (use_min_p && expf(v - m) < p.min_p) continue;
      const float u = sample_uniform(p.seed, p.step, static_cast<uint32_t>(i));
      const float score = (v - m) - logf(-logf(u));
      if (better(score, i, a.v, a.i)) a = {score, i};
    }
    a = row_argmax(a, row, sh);
    chosen = a.i == INT_MAX ? 0 : a.i;
  }

  float chosen_logprob = 0.0f;
  if (p.want_logprob) {
    // Raw log_softmax, max-subtracted (step 1 of the spec).
    float local = -INFINITY;
    for (int i = row.first(); i < vocab; i += row.stride()) local = fmaxf(local, raw[i]);
    const float rm = row_max(local, row, sh);
    float s = 0.0f;
    for (int i = row.first(); i < vocab; i += row.stride()) s += expf(raw[i] - rm);
    const float log_z = logf(row_sum(s, row, sh));
    chosen_logprob = (raw[chosen] - rm) - log_z;
    // Top raw logprobs: each pass finds the next token in (value desc, id asc) order.
    float prev_v = INFINITY;
    int prev_i = -1;
    const int n = min(p.num_top, max_top);
    for (int t = 0; t < n; ++t) {
      ArgMax a{-INFINITY, INT_MAX};
      for (int i = row.first(); i < vocab; i += row.stride()) {
        const float v = raw[i];
        const bool after = v < prev_v || (v == prev_v && i > prev_i);
        if (after && better(v, i, a.v, a.i)) a = {v, i};
      }
      a = row_argmax(a, row, sh);
      if (threadIdx.x == 0 && row.rank == 0) {
        out_top_ids[static_cast<size_t>(blockIdx.y) * max_top + t] = a.i;
        out_top_logprobs[static_cast<size_t>(blockIdx.y) * max_top + t] = (a.v - rm) - log_z;
      }
      prev_v = a.v;
      prev_i = a.i;
    }
  }
  if (threadIdx.x == 0 && row.rank == 0) {
    out_ids[blockIdx.y] = chosen;
    out_logprobs[blockIdx.y] = chosen_logprob;
  }
}

// Where vocab % 4 == 0 (every row 16-byte aligned) a thread reads float4s, kLoads of them in
// flight at a time: a row of 151,936 logits took 40.7 us on the H100 with one dependent 4-byte
// load per step, a twentieth of a batch-1 decode step.
__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* __restrict__ logits, int vocab,
                                                          int32_t* out_ids, StepAdvance advance) {
  __shared__ Shared sh;
  const RowPart part;
  const float* row = logits + static_cast<size_t>(blockIdx.y) * vocab;
  ArgMax a{-INFINITY, INT_MAX};
  if (vocab % 4 == 0) {
    constexpr int kLoads = 8;
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int n4 = vocab / 4, stride = part.stride();
    for (int base = part.first(); base < n4; base += kLoads * stride) {
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
    for (int i = part.first(); i < vocab; i += part.stride()) {
      const float v = row[i];
      if (better(v, i, a.v, a.i)) a = {v, i};
    }
  }
  a = row_argmax(a, part, sh);
  if (threadIdx.x != 0 || part.rank != 0) return;
  const int token = a.i == INT_MAX ? 0 : a.i;
  out_ids[blockIdx.y] = token;
  if (advance.on()) advance_row(advance, blockIdx.y, token);
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

namespace {

// The largest cluster of sample_kernel's CTAs (1,024 threads, 64 registers: an SM each) the device
// can run at all: 8 on every H100 / H200 (GPCs of 16+ SMs), less where a GPC is smaller (a MIG
// slice), 1 before sm_90 or if the device cannot say.
int largest_row_cluster() {
  if (device_attribute(cudaDevAttrComputeCapabilityMajor) < 9) return 1;
  for (int ctas = kMaxRowCtas; ctas > 1; ctas /= 2) {
    const dim3 cluster(unsigned(ctas), 1, 1);
    if (max_active_clusters(reinterpret_cast<const void*>(sample_kernel), cluster, cluster, dim3(kThreads)) > 0)
      return ctas;
  }
  return 1;
}

}  // namespace

int row_ctas(int rows) {
  static const int largest = largest_row_cluster();
  static const int sms = device_attribute(cudaDevAttrMultiProcessorCount);
  int ctas = 1;
  while (ctas < largest && 2 * ctas * rows <= sms) ctas *= 2;  // ctas x rows <= sms
  return ctas;
}

namespace {

// kernel over [ctas, rows] CTAs, each row's CTAs a cluster where there are several.
template <typename... Params, typename... Args>
void launch_rows(void (*kernel)(Params...), int rows, cudaStream_t stream, Args&&... args) {
  NVLLM_CHECK(rows <= 65535, "sampling: ", rows, " rows in one step exceed the grid's 65,535");
  const int ctas = row_ctas(rows);
  const cudaLaunchAttribute attr = cluster_attr(ctas);
  launch_with(std::span<const cudaLaunchAttribute>(&attr, ctas > 1 ? 1 : 0), kernel, dim3(ctas, rows), dim3(kThreads),
              0, stream, std::forward<Args>(args)...);
}

}  // namespace

void sample_rows(const float* logits, int vocab, const SampleRow* rows, int num_rows, const int32_t* counts,
                 const int32_t* suppress_ids, int max_top, int32_t* out_ids, float* out_logprobs,
                 int32_t* out_top_ids, float* out_top_logprobs, cudaStream_t stream) {
  if (num_rows <= 0) return;
  NVLLM_CHECK(vocab <= kMaxMassVocab, "sampling: a vocabulary of ", vocab, " tokens; top_p's sums hold at most ",
              kMaxMassVocab);
  launch_rows(sample_kernel, num_rows, stream, logits, vocab, rows, counts, suppress_ids, max_top, out_ids,
              out_logprobs, out_top_ids, out_top_logprobs);
}

void argmax_rows(const float* logits, int num_rows, int vocab, int32_t* out_ids, cudaStream_t stream,
                 const StepAdvance& advance) {
  if (num_rows <= 0) return;
  launch_rows(argmax_kernel, num_rows, stream, logits, vocab, out_ids, advance);
}

}  // namespace nvllm::kernels
