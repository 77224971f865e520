// What the two decode-attention kernels share (attention_decode.cu: CUDA cores;
// attention_decode_tc.cu: tensor cores; both over bf16 and FP8 caches): their parameters, how a
// context is split, and how a CTA leaves a head's result. Internal to those two files (and their
// test, attention_decode_test.cu).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace nvllm::kernels::decode_detail {

// How contexts are split (partition_for): bf16, 128-token partitions up to 4 splits, then longer
// partitions (up to 512 tokens) rather than more splits, then at most kMaxSplits. Each split
// is a CTA with a fixed cost (q load, block combine, partial write, the reduce): at batch 256 x
// context ~800 the nano-vLLM run went from 17,630 to 19,000 output tok/s on the H100 when
// 7 splits of 128 became 4 of 208, while batch-1 latency (8 kv heads x a few splits) was unchanged.
// An FP8 token is half the bytes, so the fixed cost weighs twice as much, and more so on the
// tensor cores (attention_decode_tc.cu), which spend far less a token: there one split covers a
// context up to 2,048 tokens (no partials, no reduce), for both cache types. FP8: 82.9% of 3.03
// TB/s at 256 x 1,024 on the H100 against 79.4% with two splits of 512 (bench/NOTES.md, fifteenth
// session); bf16 at Qwen3-8B's heads: 94.5-94.9% against 87.9-88.1% with bf16's CUDA-core policy
// (and 84% against 72% at 256 x 256; seventeenth session). The price is fewer CTAs for a few long
// sequences (batch 1 outside the fused path: kv heads x 1 split).
struct SplitPolicy {
  int partition;      // tokens per split, at least
  int target_splits;  // splits before partitions grow
  int max_partition;  // tokens per split before splits grow again
};
constexpr SplitPolicy kBf16Splits{128, 4, 512};  // the CUDA cores, bf16
constexpr SplitPolicy kFp8Splits{512, 1, 2048};  // the CUDA cores, FP8
constexpr SplitPolicy kTcSplits{512, 1, 2048};   // the tensor cores, both
constexpr int kMaxSplits = 32;       // bounds the workspace; at most a warp (the reduce's weights)
int decode_small_step_ctas();        // kernels.h: set_decode_small_step_ctas (launch.cu)
bool decode_cluster_merge();         // kernels.h: set_decode_cluster_merge (launch.cu)
constexpr float kLog2e = 1.4426950408889634f;

struct DecodeParams {
  const bf16* q;
  int q_stride;
  const void* k_cache;  // bf16 or fp8_e4m3, the kernel's T
  const void* v_cache;
  const float* k_scale;  // [num_kv_heads], FP8 only
  const float* v_scale;
  const int32_t* context_lens;
  const int32_t* seq_order;  // [S] or nullptr: grid row y takes sequence seq_order[y] (sequence_of)
  const int32_t* block_tables;
  int max_blocks_per_seq;
  bf16* out;            // [S, H * D]
  float* partial_acc;   // [S, H, splits, D] when splits > 1
  float* partial_ml;    // [S, H, splits, 2] (running max in log2 units, sum)
  int num_heads;
  int num_kv_heads;
  int block_shift;      // log2(block_size)
  float scale_log2;     // softmax scale * log2(e): scores go straight into exp2
  int num_splits;       // grid z and the workspace stride; each sequence uses splits_for(ctx, split)
  SplitPolicy split;    // the kernel's and cache type's (kBf16Splits, kFp8Splits, kTcSplits or small steps')
};

// The sequence grid row `y` of a decode kernel takes.
__device__ __forceinline__ int sequence_of(const DecodeParams& p, int y) { return p.seq_order ? p.seq_order[y] : y; }

// How a sequence of `ctx` tokens is split. It depends on the sequence (and the cache type) alone,
// never on the batch: a sequence's attention must round the same way whatever else is decoded
// with it (eager and CUDA-graph steps, different batch sizes), so that outputs do not depend on
// scheduling.
__host__ __device__ inline int partition_for(int ctx, const SplitPolicy& sp) {
  auto round16 = [](int v) { return ceil_div(v, 16) * 16; };
  auto larger = [](int a, int b) { return a > b ? a : b; };
  const int grown = round16(ceil_div(ctx, sp.target_splits)), widest = round16(ceil_div(ctx, kMaxSplits));
  return larger(sp.partition, larger(grown < sp.max_partition ? grown : sp.max_partition, widest));
}
__host__ __device__ inline int splits_for(int ctx, const SplitPolicy& sp) {
  return ctx > 0 ? ceil_div(ctx, partition_for(ctx, sp)) : 1;
}

// A CTA's result for (sequence s, q head `head`, output element d < D): `a` the unnormalised sum
// of p * v (scales applied), `mx` its running max (log2 units), `sum` the sum of p. With one split
// the normalised output, else the split's partial for the reduce kernel.
__device__ __forceinline__ void store_head_output(const DecodeParams& p, int s, int head, int split, int used, int D,
                                                  int d, float a, float mx, float sum) {
  if (used == 1) {
    p.out[size_t(s) * p.num_heads * D + head * D + d] = __float2bfloat16(sum > 0.f ? a / sum : 0.f);
    return;
  }
  const size_t at = (size_t(s) * p.num_heads + head) * p.num_splits + split;
  p.partial_acc[at * D + d] = a;
  if (d == 0) {
    p.partial_ml[at * 2] = mx;
    p.partial_ml[at * 2 + 1] = sum;
  }
}

// The tensor-core kernel (attention_decode_tc.cu) over an FP8 (`fp8`) or bf16 cache, for q heads
// per kv head `group` <= kTcMaxGroup (the mma's N side) and head_dim 64 or 128; the caller
// launches the reduce after it, unless `cluster_merge`: then the p.num_splits CTAs of a
// (sequence, kv head) are one cluster and combine their parts themselves (p.num_splits <=
// tc_cluster_merge_splits()).
constexpr int kTcMaxGroup = 8;
// `chained`: with PDL (attention_decode).
void launch_decode_tc(const DecodeParams& p, bool fp8, int head_dim, int num_seqs, bool chained, bool cluster_merge,
                      cudaStream_t stream);
// The most parts a cluster of the tensor-core kernel may combine on this device: 16 (a
// non-portable cluster size) or 8 where 16 cannot run; 0 before sm_90.
int tc_cluster_merge_splits();
// Steps of up to this many sequences combine their parts in clusters; larger small steps (the
// same parts) in the reduce kernel. H200, bench latency p50 (bench/NOTES.md, thirty-seventh
// session): one sequence -1.0% (Llama-3-8B, Qwen3-8B) to -1.4% (FP8 Llama-3-8B) a step; two
// Qwen3-8B +2.6%, four FP8 Llama-3-8B +4.0%.
constexpr int kTcClusterMergeMaxSeqs = 1;

}  // namespace nvllm::kernels::decode_detail
