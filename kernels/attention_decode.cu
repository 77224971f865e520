// Decode attention (one query per sequence) over the paged KV cache: flash-decoding.
//
// Grid: (kv head x q-head chunk, sequence, context split). One CTA reads the K and V rows of
// one kv head over one slice of one sequence's context exactly once and serves every q head
// of that kv head (grouped-query sharing), with an online softmax in fp32. With more than one
// split, each CTA leaves an unnormalised partial (max, sum, acc) in the workspace and a reduce
// pass combines the splits.
//
// Bytes: sum over sequences of context_len * num_kv_heads * head_dim * 2 (K and V) * the
// element size (2 for bf16, 1 for FP8 codes), plus the small partials; FLOPs: 4 * num_heads *
// head_dim per context token, so this is bandwidth-bound (1 to 4 FLOPs per byte).
//
// One kernel template for both cache types: a lane's 16-byte load is 8 bf16 values or 16 FP8
// codes, converted to fp32 in registers. An FP8 cache's scales are folded in, k_scale into the
// query (scores are q . code * k_scale) and v_scale into the output (sum p code * v_scale): the
// inner loop sees codes only.
#include <algorithm>
#include <type_traits>

#include "core/kv_layout.h"
#include "kernels/attention_decode.cuh"
#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

using namespace decode_detail;

constexpr int kThreads = 128;
constexpr int kUnroll = 4;          // tokens per group whose K/V loads are in flight together
constexpr int kMinPartition = 64;   // tokens; bounds the workspace (see max_splits)

// 16 bytes of a cache row as fp32: 8 bf16 values or 16 FP8 codes.
template <typename T>
struct RowPiece {
  static constexpr int kValues = 16 / sizeof(T);
  static __device__ __forceinline__ void to_float(const uint4& raw, float (&f)[kValues]) {
    if constexpr (std::is_same_v<T, fp8_e4m3>)
      e4m3x16_to_float(raw, f);
    else
      to_float8(reinterpret_cast<const Bf16x8&>(raw), f);
  }
};

// T: the cache element (bf16 or fp8_e4m3); D: head dim; kHeads: q heads served per CTA (a
// divisor of the group size).
// Thread layout: kLanes = D / kVec consecutive lanes hold one token's row, kVec values each (one
// 16-byte load); the CTA's kGroups such groups walk the split's tokens with stride kGroups.
template <typename T, int D, int kHeads>
__global__ void __launch_bounds__(kThreads) attention_decode_kernel(DecodeParams p) {
  constexpr bool kFp8 = std::is_same_v<T, fp8_e4m3>;
  constexpr int kVec = RowPiece<T>::kValues;
  constexpr int kLanes = D / kVec;
  constexpr int kGroups = kThreads / kLanes;
  __shared__ float sm_acc[kGroups][kHeads][D];
  __shared__ float sm_m[kGroups][kHeads];
  __shared__ float sm_l[kGroups][kHeads];

  const int group_size = p.num_heads / p.num_kv_heads;
  const int chunks = group_size / kHeads;
  const int kvh = blockIdx.x / chunks;
  const int head0 = kvh * group_size + (blockIdx.x % chunks) * kHeads;
  const int s = sequence_of(p, blockIdx.y), split = blockIdx.z;
  const int ctx = p.context_lens[s];
  constexpr SplitPolicy kSplit = kFp8 ? kFp8Splits : kBf16Splits;  // (p.split, as constants)
  const int partition = partition_for(ctx, kSplit), used = splits_for(ctx, kSplit);
  if (split >= used) return;  // the reduce reads only the sequence's own splits
  const int start = split * partition;
  const int end = min(ctx, start + partition);

  const int g = threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
  // FP8: scores are q . code * k_scale, so the query takes the head's k_scale.
  float q_scale = p.scale_log2;
  if constexpr (kFp8) q_scale *= p.k_scale[kvh];
  float qf[kHeads][kVec];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
#pragma unroll
    for (int j = 0; j < kVec / 8; ++j)
      to_float8(load8(p.q + size_t(s) * p.q_stride + (head0 + h) * D + sub * kVec + j * 8), qf[h] + j * 8);
#pragma unroll
    for (int i = 0; i < kVec; ++i) qf[h][i] *= q_scale;
  }
  float m[kHeads], l[kHeads], acc[kHeads][kVec];
  softmax_start(m, l, acc);

  const int32_t* table = p.block_tables + size_t(s) * p.max_blocks_per_seq;
  const int block_mask = (1 << p.block_shift) - 1;
  const size_t row_stride = size_t(p.num_kv_heads) * D;  // elements between consecutive cache slots
  const size_t head_off = size_t(kvh) * D + sub * kVec;
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);

  // The trip count is the same for every thread (the shuffles below need whole warps);
  // tokens past the end are masked.
  for (int t0 = start + g; t0 - g < end; t0 += kGroups * kUnroll) {
    uint4 kv[kUnroll], vv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // issue every load before the first use
      const int t = t0 + u * kGroups;
      if (t < end) {
        const size_t slot = size_t(table[t >> p.block_shift]) << p.block_shift | (t & block_mask);
        kv[u] = *reinterpret_cast<const uint4*>(k_cache + slot * row_stride + head_off);
        vv[u] = *reinterpret_cast<const uint4*>(v_cache + slot * row_stride + head_off);
      } else {
        kv[u] = make_uint4(0, 0, 0, 0);
        vv[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float sc[kUnroll][kHeads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[kVec];
      RowPiece<T>::to_float(kv[u], kf);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) d = fmaf(qf[h][i], kf[i], d);
        sc[u][h] = warp_sum<kLanes>(d);  // every lane of the group gets the score
        if (t0 + u * kGroups >= end) sc[u][h] = -INFINITY;
      }
    }
    // One rescale per kUnroll tokens: the new max covers all of them (masked ones score -inf).
    softmax_rescale(m, l, acc, sc, kUnroll);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (t0 + u * kGroups >= end) continue;
      float vf[kVec];
      RowPiece<T>::to_float(vv[u], vf);
      softmax_add(m, l, acc, sc[u], vf);
    }
  }

  // Combine the groups of the CTA through shared memory.
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) sm_acc[g][h][sub * kVec + i] = acc[h][i];
    if (sub == 0) {
      sm_m[g][h] = m[h];
      sm_l[g][h] = l[h];
    }
  }
  __syncthreads();
  // FP8: the output is sum p code * v_scale / sum p (the reduce of the splits is linear in it).
  float out_scale = 1.f;
  if constexpr (kFp8) out_scale = p.v_scale[kvh];
  for (int o = threadIdx.x; o < kHeads * D; o += kThreads) {
    const int h = o / D, d = o % D;
    const SoftmaxPart r = merge_softmax(  // a group that saw no token has max -inf
        kGroups, [&](int j) { return sm_m[j][h]; }, [&](int j) { return sm_l[j][h]; },
        [&](int j) { return sm_acc[j][h][d]; });
    const float mx = r.m, sum = r.l;
    float a = r.acc;
    if constexpr (kFp8) a *= out_scale;
    store_head_output(p, s, head0 + h, split, used, D, d, a, mx, sum);
  }
}

// Combines the splits of one (sequence, q head): out = sum_z acc_z 2^(m_z - M) / sum_z l_z 2^(m_z - M).
// Grid (H, S), D threads (one per output element). The first warp turns the splits' (m, l) into
// weights once for the block; then each thread's acc loads are independent and issued together.
template <bool kChained>
__global__ void attention_decode_reduce_kernel(DecodeParams p, int head_dim) {
  if constexpr (kChained) pdl_enter();
  __shared__ float weight[kMaxSplits];
  __shared__ float total;
  const int head = blockIdx.x, s = blockIdx.y, d = threadIdx.x;
  const int used = splits_for(p.context_lens[s], p.split);
  if (used == 1) return;  // the decode kernel wrote the output itself
  const size_t base = (size_t(s) * p.num_heads + head) * p.num_splits;
  if (d < 32) {  // used <= kMaxSplits = 32: one split per lane
    const float m = d < used ? p.partial_ml[(base + d) * 2] : -INFINITY;
    const float l = d < used ? p.partial_ml[(base + d) * 2 + 1] : 0.f;
    const float mx = warp_max(m);
    const float w = m == -INFINITY ? 0.f : exp2f(m - mx);
    weight[d] = w;
    const float sum = warp_sum(l * w);
    if (d == 0) total = sum;
  }
  __syncthreads();
  float a = 0.f;
#pragma unroll 8
  for (int z = 0; z < used; ++z) a += p.partial_acc[(base + z) * head_dim + d] * weight[z];
  p.out[size_t(s) * p.num_heads * head_dim + head * head_dim + d] = __float2bfloat16(total > 0.f ? a / total : 0.f);
}

size_t partial_bytes_per_split(int num_seqs, int num_heads, int head_dim) {
  return size_t(num_seqs) * num_heads * (head_dim + 2) * sizeof(float);
}

int max_splits(int max_context_len) {
  return std::clamp(ceil_div(std::max(max_context_len, 1), kMinPartition), 1, kMaxSplits);
}

// Combines the splits after either decode kernel (`chained`: with PDL).
void launch_reduce(const DecodeParams& p, int head_dim, int num_seqs, cudaStream_t stream, bool chained = false) {
  if (p.num_splits <= 1) return;
  const dim3 grid(p.num_heads, num_seqs);
  if (chained && pdl_enabled()) {
    launch_pdl(attention_decode_reduce_kernel<true>, grid, dim3(head_dim), 0, stream, p, head_dim);
  } else {
    attention_decode_reduce_kernel<false><<<grid, head_dim, 0, stream>>>(p, head_dim);
    CUDA_CHECK(cudaGetLastError());
  }
}

template <typename T, int D, int kHeads>
void launch(const DecodeParams& p, int blocks_x, int num_seqs, cudaStream_t stream) {
  // Launched normally, not with PDL: griddepcontrol in this kernel cost 4% of nano-vLLM
  // throughput on the H100 (16,950 vs 17,630 tok/s, same machine), even with PDL off.
  attention_decode_kernel<T, D, kHeads><<<dim3(blocks_x, num_seqs, p.num_splits), kThreads, 0, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
  launch_reduce(p, D, num_seqs, stream);
}

template <typename T, int D>
void launch_heads(const DecodeParams& p, int heads_per_cta, int blocks_x, int num_seqs, cudaStream_t stream) {
  switch (heads_per_cta) {
    case 4: return launch<T, D, 4>(p, blocks_x, num_seqs, stream);
    case 2: return launch<T, D, 2>(p, blocks_x, num_seqs, stream);
    default: return launch<T, D, 1>(p, blocks_x, num_seqs, stream);
  }
}

template <typename T>
void launch_dims(const DecodeParams& p, int head_dim, int heads_per_cta, int blocks_x, int num_seqs,
                 cudaStream_t stream) {
  if (head_dim == 128)
    launch_heads<T, 128>(p, heads_per_cta, blocks_x, num_seqs, stream);
  else
    launch_heads<T, 64>(p, heads_per_cta, blocks_x, num_seqs, stream);
}

// Which kernel attention_decode runs for a model's heads and cache, how it splits a context, and
// its CTAs a sequence and split (the grid's x).
struct DecodeChoice {
  bool tensor_cores;
  SplitPolicy split;
  int heads_per_cta;  // the CUDA cores' kernel: q heads a CTA
  int blocks_x;
  bool cluster_merge;  // small steps' parts as their cluster combines them (set_decode_cluster_merge)
};

// Groups of 2..8 q heads a kv head on the tensor cores (H100, bench.attention_decode*, % of 3.03
// TB/s at 256 x 1,024 / 64 x 4,096 / 8 x 32,768 / 256 x 256): at 4 (Qwen3-8B, Llama-3-8B) bf16
// 88 / 92 / 92 / 73 against 75 / 81 / 82 / 59 on the CUDA cores, FP8 86 / 85 / 84 / 66 against
// 52 / 55 / 55 / 35; at 2 (Qwen3-0.6B) bf16 92 / 94 / 92 / 78 against 91 / 92 / 87 / 77, FP8
// 88 / 86 / 85 / 70 against 86 / 85 / 85 / 64 (bench/NOTES.md, seventeenth session). A group
// of 1 (unmeasured) would use one mma column in 8; it stays on the CUDA cores, as do groups over 8.
// Small steps (set_decode_small_step_ctas): a step of at most kDecodeSmallStep sequences on the
// tensor cores splits each context into parts of at least kMinPartition tokens, up to ctas / kv
// heads of them; with set_decode_cluster_merge, at most as many as a cluster combines
// (tc_cluster_merge_splits: 16 on the H100 / H200, which 132 / 8 kv heads does not reach; a
// tensor-parallel rank's 2-4 kv heads go from 32 to 16 parts past 1,024 tokens). num_seqs 0: the
// policy of large steps.
DecodeChoice decode_choice(int num_heads, int num_kv_heads, bool fp8, DecodeKernel kernel, int num_seqs) {
  const int group = num_heads / num_kv_heads;
  const bool tensor_cores = kernel == DecodeKernel::kTensorCores ||
                            (kernel == DecodeKernel::kAuto && group >= 2 && group <= kTcMaxGroup);
  const int heads_per_cta = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
  SplitPolicy tc = kTcSplits;
  bool cluster_merge = false;
  if (const int ctas = decode_small_step_ctas();
      ctas > num_kv_heads && num_seqs >= 1 && num_seqs <= kDecodeSmallStep) {
    int parts = std::min(ctas / num_kv_heads, kMaxSplits);
    if (const int most = tensor_cores && decode_cluster_merge() ? tc_cluster_merge_splits() : 0; most > 1) {
      parts = std::min(parts, most);
      cluster_merge = true;
    }
    tc = SplitPolicy{kMinPartition, parts, kTcSplits.max_partition};
  }
  return {tensor_cores, tensor_cores ? tc : fp8 ? kFp8Splits : kBf16Splits, heads_per_cta,
          tensor_cores ? num_kv_heads : num_kv_heads * (group / heads_per_cta), cluster_merge};
}

}  // namespace

int attention_decode_ctas(int num_seqs, int context_len, int num_heads, int num_kv_heads, bool fp8_cache) {
  // The large steps' policy: the fused path's rule (FusedDecode::separate_starves) was measured
  // against it.
  const DecodeChoice k = decode_choice(num_heads, num_kv_heads, fp8_cache, DecodeKernel::kAuto, 0);
  return num_seqs * k.blocks_x * splits_for(std::max(context_len, 1), k.split);
}

size_t attention_decode_workspace_bytes(int max_num_seqs, int num_heads, int head_dim, int max_context_len) {
  return partial_bytes_per_split(max_num_seqs, num_heads, head_dim) * max_splits(max_context_len);
}

void attention_decode(const bf16* q, int q_stride, const KvCache& cache, const AttentionBatch& batch, bf16* out,
                      int num_heads, int num_kv_heads, int head_dim, int block_size, float scale, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, DecodeKernel kernel, bool chained) {
  if (batch.num_seqs <= 0) return;
  NVLLM_CHECK(head_dim == 64 || head_dim == 128, "attention_decode: head_dim ", head_dim,
              " is not supported (64 or 128)");
  NVLLM_CHECK(valid_block_size(block_size), "attention_decode: block_size ", block_size,
              " must be a power of two in 1..", kMaxBlockSize);
  NVLLM_CHECK(num_kv_heads > 0 && num_heads % num_kv_heads == 0, "attention_decode: num_heads ",
              num_heads, " is not a multiple of num_kv_heads ", num_kv_heads);
  const int group = num_heads / num_kv_heads;
  NVLLM_CHECK(kernel != DecodeKernel::kTensorCores || group <= kTcMaxGroup,
              "attention_decode: the tensor-core kernel takes up to ", kTcMaxGroup, " q heads a kv head, not ", group);
  const bool fp8 = cache.dtype == KvDtype::kFp8E4M3;
  NVLLM_CHECK(!fp8 || (cache.k_scale != nullptr && cache.v_scale != nullptr),
              "attention_decode: an FP8 cache needs scales");
  const DecodeChoice choice = decode_choice(num_heads, num_kv_heads, fp8, kernel, batch.num_seqs);
  const bool tensor_cores = choice.tensor_cores;
  const int heads_per_cta = choice.heads_per_cta, blocks_x = choice.blocks_x;

  // Enough splits for the longest context the batch may hold; each sequence uses its own
  // splits_for(ctx) <= this.
  const int ctx = std::max(batch.max_context_len, 1);
  const SplitPolicy sp = choice.split;
  // splits_for(c, sp) <= this for every c <= ctx (the bound grows with c).
  const int splits = std::min(kMaxSplits, std::max(std::min(sp.target_splits, ceil_div(ctx, sp.partition)),
                                                   ceil_div(ctx, sp.max_partition)));
  const size_t per_split = partial_bytes_per_split(batch.num_seqs, num_heads, head_dim);
  NVLLM_CHECK(splits == 1 || (workspace != nullptr && per_split * splits <= workspace_bytes),
              "attention_decode: the workspace holds ", workspace_bytes, " bytes, ", per_split * splits,
              " are needed for ", batch.num_seqs, " sequences of up to ", ctx, " tokens");

  DecodeParams p;
  p.q = q;
  p.q_stride = q_stride;
  p.k_cache = cache.k;
  p.v_cache = cache.v;
  p.k_scale = cache.k_scale;
  p.v_scale = cache.v_scale;
  p.context_lens = batch.context_lens;
  // Longest first where a step's CTAs outnumber the GPU's slots: a long context's CTA started
  // last was the kernel's tail (bench.attention_decode's mixed contexts, bench/NOTES.md
  // thirty-eighth session). Small steps run in about one wave and skip the extra load.
  p.seq_order = batch.num_seqs > kDecodeSmallStep ? batch.decode_order : nullptr;
  p.block_tables = batch.block_tables;
  p.max_blocks_per_seq = batch.max_blocks_per_seq;
  p.out = out;
  p.partial_acc = static_cast<float*>(workspace);
  p.partial_ml = p.partial_acc + size_t(batch.num_seqs) * num_heads * splits * head_dim;
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.block_shift = __builtin_ctz(unsigned(block_size));
  p.scale_log2 = scale * kLog2e;
  p.num_splits = splits;
  p.split = sp;
  if (tensor_cores) {
    // The reduce kernel combines the parts (the same arithmetic) of steps of more sequences, and
    // of a context past 16 x 2,048 tokens, which takes more parts than a cluster holds.
    const bool cluster = choice.cluster_merge && batch.num_seqs <= kTcClusterMergeMaxSeqs && splits > 1 &&
                         splits <= tc_cluster_merge_splits();
    launch_decode_tc(p, fp8, head_dim, batch.num_seqs, chained, cluster, stream);
    if (!cluster) launch_reduce(p, head_dim, batch.num_seqs, stream, chained);
  } else if (fp8) {
    launch_dims<fp8_e4m3>(p, head_dim, heads_per_cta, blocks_x, batch.num_seqs, stream);
  } else {
    launch_dims<bf16>(p, head_dim, heads_per_cta, blocks_x, batch.num_seqs, stream);
  }
}

}  // namespace nvllm::kernels
