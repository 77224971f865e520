// Small-batch decode (1 to kFusedMaxBatch sequences) as four fused kernels per layer
// (decode_fused.cu): attention (norm, qkv, rope, cache write, attention over a thread-block
// cluster), o_proj + residual, norm + gate_up + silu, down + residual, chained with PDL. A
// projection's weights are copied whole into shared memory or, where a CTA's share does not fit,
// streamed through it in tiles; every sequence of the step is multiplied with them there. Where
// the attention kernel's clusters cannot hold a kv head's q/k/v rows (8B-class layers), norm +
// qkv runs as a fifth kernel over every SM before it (FusedDecodePlan::split_qkv).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/kernels.h"

namespace nvllm::kernels {

struct FusedDecodeShape {
  int hidden, intermediate, num_heads, num_kv_heads, head_dim, block_size;
  KvDtype kv_dtype = KvDtype::kBf16;  // the attention kernel reads (and writes) this cache type
  bool fp8_weights = false;           // the projections' weights are E4M3 codes, a scale per row
  // Rows of the fused q/k/v projection: the q heads, then k's and v's.
  __host__ __device__ int qkv_rows() const { return (num_heads + 2 * num_kv_heads) * head_dim; }
};

// How a projection whose CTA share does not fit in shared memory streams it: the shared memory
// such a CTA may take (0: all a CTA may have) and the most k values of a tile (16 rows).
// whole: the largest share copied whole before the kernel waits (0: all a CTA may have); a
// larger one streams. Tiles of 2,048 values (64 KB of bf16, 32 KB of E4M3) won or tied against
// 1,024 on every streamed shape measured, and 512 lost to 1,024 (bench/NOTES.md, sixteenth and
// nineteenth sessions): each tile costs its refilling warps a wait for all warps, so fewer, larger tiles
// win until two no longer fit (4,096 bf16 values: Llama-3.2-1B's down fell off the fused path).
struct FusedStreaming {
  size_t smem = 0;
  int tile_k = 2048;
  size_t whole = 0;
};

// The most sequences a fused step takes: the columns of the projections' mma.sync (n = 8).
constexpr int kFusedMaxBatch = 8;
// A step of several sequences splits each cluster of the attention kernel among the sequences it
// serves (a power of two of groups); it pays only while every sequence keeps at least this many of
// the kernel's CTAs over the kv heads (num_kv_heads * cluster / that power of two). Measured on the
// H100 (bench/NOTES.md, twentieth session): with 16 or more, steps of 2-8 ran 8-28% faster than the
// separate kernels; with 8, ties and losses (3% and 0%), with 4, a loss of 20%. So a cluster serves
// at most FusedDecodePlan::seq_group sequences, and a larger step runs more clusters a kv head.
constexpr int kFusedMinSeqCtas = 16;

// How the fused path runs on this device for steps of up to max_batch sequences; cluster == 0
// when it does not apply (`why` says why).
struct FusedDecodePlan {
  FusedDecodeShape shape{};
  int max_batch = 1;
  int cluster = 0;  // CTAs of a cluster of the attention kernel (a kv head's, or a share of one's)
  // Several sequences: the most a cluster serves (each keeping kFusedMinSeqCtas CTAs over the kv
  // heads); a step of B runs ceil(B / seq_group) clusters a kv head, their sequences in even shares.
  int seq_group = 1;
  int grid = 0;     // CTAs of the projection kernels (the SM count)
  // The q/k/v projection is a kernel of its own (index 4 below), whose outputs the attention
  // kernel reads from FusedDecodeStep::qkv: where no cluster of the attention kernel can hold its
  // share of those weights.
  bool split_qkv = false;
  // Dynamic shared memory of a CTA of the attention, o_proj, gate_up, down and (split_qkv) q/k/v
  // kernels: what each uses, more for down so that at most two of its CTAs share an SM
  // (decode_fused.cu).
  size_t smem[5] = {};
  // Of the projection kernels (index 1-4): 0 when a CTA's share of the weights fits in shared
  // memory and is copied whole before the kernel waits for its inputs; else the number of
  // shared-memory stages its weight tiles stream through.
  int stages[5] = {};
  int parts[5] = {};  // streamed: the k parts of a row's tiles
  const char* why = nullptr;
};

// A projection's weights [n, k]: bf16 rows (scale null), or E4M3 codes with one fp32 scale per
// row, y = (x . codes) * scale (the plan's fp8_weights).
struct FusedWeight {
  const void* w = nullptr;
  const float* scale = nullptr;
};

// One layer's weights and caches (of the plan's kv_dtype).
struct FusedDecodeLayer {
  const bf16* input_norm;
  FusedWeight qkv;
  const bf16 *qkv_bias, *q_norm, *k_norm;
  FusedWeight o_proj;
  const bf16* post_norm;
  FusedWeight gate_up, down;
  KvCache kv;
};

// The step's `batch` sequences (device pointers, [batch] each): position, cache slot (< 0: not
// written), context length (the new token included) and block-table row (table_width entries
// apart); the residual stream h [batch][hidden] (updated in place), and scratch for the attention
// output [batch][num_heads * head_dim] and the MLP activation [batch][intermediate].
struct FusedDecodeStep {
  const int32_t *position, *slot, *context_len, *block_table;
  const float* inv_freq;  // [head_dim / 2]
  float eps, scale;
  bf16 *h, *attn, *act;
  // The q/k/v projection's outputs [batch][q_size + 2 kv_size] where the plan splits it out
  // (FusedDecodePlan::split_qkv; unused otherwise).
  bf16* qkv = nullptr;
  // Layer 0 (null in the others): h = embed[token] here, the embedding folded into the attention
  // kernel; `token` is the step's token ids.
  const bf16* embed = nullptr;
  const int32_t* token = nullptr;
  // The norms' sums of squares, published by the kernels that write h: o_proj and down leave one
  // partial sum per CTA and sequence of the squares of the h rows they wrote, in ss[0] and ss[1]
  // (kFusedSsWords / 2 floats each: sequence b's at b * kFusedSsParts), and gate_up and the next
  // layer's attention add them up instead of reducing h over the block. Null: every norm sums h
  // itself. ss_ready: ss[1] holds the sums of this layer's input (false in layer 0, whose h the
  // attention kernel sums itself).
  float* ss = nullptr;
  bool ss_ready = false;
  // Timing only (null otherwise): the kernels of this layer record, per CTA, globaltimer stamps at
  // start, after the PDL wait, once the weights landed, at the end, phase marks, once the
  // activations are read, the SM id and clock64 at start and end, at
  // trace + (kernel * kFusedTraceCtas + cta) * kFusedTraceFields, kernel 0-4 in chain order: the
  // q/k/v kernel (split plans only), attention, o_proj, gate_up, down.
  unsigned long long* trace = nullptr;
  int batch = 1;        // sequences in the step, 1 .. the plan's max_batch
  int table_width = 0;  // block-table entries a sequence (batch > 1)
};
constexpr int kFusedSsParts = 256;  // FusedDecodeStep::ss: at most this many projection CTAs
constexpr int kFusedSsWords = 2 * kFusedMaxBatch * kFusedSsParts;  // floats of FusedDecodeStep::ss
constexpr int kFusedTraceCtas = 256, kFusedTraceFields = 12;
// The fields of one CTA's trace record: globaltimer stamps (ns), the SM id, clock64 stamps.
enum FusedTraceField {
  kTraceStart, kTraceWaited, kTraceWeights, kTraceEnd, kTraceSm, kTracePhase1, kTracePhase2, kTracePhase3,
  kTraceInputs, kTraceClockStart, kTraceClockEnd
};
static_assert(kTraceClockEnd < kFusedTraceFields);
// Trace words of one layer (five kernels' slots).
constexpr size_t kFusedTraceLayerWords = size_t(5) * kFusedTraceCtas * kFusedTraceFields;

// Checks the model and device (head_dim 64 or 128, 1 to 8 q heads per kv head, sm_90+, clusters
// of 16 or 8 CTAs schedulable), sizes the projections' shared memory (whole shares, or streamed
// tiles), splits the q/k/v projection out where the attention kernel cannot hold its weight rows,
// and prepares the kernels.
// Throws only on CUDA errors.
// `max_cluster` (16 or 8) caps the attention kernel's cluster: tests run both sizes.
// `max_batch`: the most sequences of a step (1 .. kFusedMaxBatch); shared memory grows with it, so
// batch 1 has its own plan.
FusedDecodePlan fused_decode_plan(const FusedDecodeShape& shape, int max_cluster = 16,
                                  const FusedStreaming& streaming = {}, int max_batch = 1);
// One layer of a decode step of st.batch tokens (at most the plan's max_batch): h = layer(h),
// the new k/v written to the cache. Four kernels (five with split_qkv), launched with PDL.
void fused_decode_layer(const FusedDecodePlan& plan, const FusedDecodeStep& step, const FusedDecodeLayer& layer,
                        cudaStream_t stream);
// The layer's kernels on either side of its row-parallel projections, for a tensor-parallel rank
// whose o_proj and down (partial sums of every row of h) and their sums over the ranks are the
// caller's: the q/k/v projection (split_qkv) and the attention into step.attn; gate_up into
// step.act from h once o_proj's residual step is in it. step.ss must be null (no kernel here
// publishes sums of squares) and step.embed too (the caller puts the embedding into h).
void fused_decode_attention(const FusedDecodePlan& plan, const FusedDecodeStep& step, const FusedDecodeLayer& layer,
                            cudaStream_t stream);
void fused_decode_gate_up(const FusedDecodePlan& plan, const FusedDecodeStep& step, const FusedDecodeLayer& layer,
                          cudaStream_t stream);

}  // namespace nvllm::kernels
