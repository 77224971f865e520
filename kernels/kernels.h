// Launch functions of every CUDA kernel. Kernels see plain pointers, sizes and a stream, never
// engine types. The small kernels of a decode step (norms, rope, gemv, activation) are launched
// with programmatic dependent launch (launch.cuh): each may start while the one before it
// finishes. bf16 tensors are row-major;
// "[a, b]" gives the shape.
//
// KV cache layout, per layer: k_cache and v_cache are each [num_blocks, block_size, num_kv_heads,
// head_dim]; token slot s lives in block s / block_size at offset s % block_size.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace nvllm::kernels {

using bf16 = __nv_bfloat16;

// out[t, :] = embed[ids[t], :]. ids must be < vocab (checked by the caller).
void embedding(const int32_t* ids, const bf16* embed, bf16* out, int num_tokens, int hidden,
               cudaStream_t stream);

// out = rmsnorm(x) * weight, per row of `hidden` (fp32 statistics).
void rmsnorm(const bf16* x, const bf16* weight, bf16* out, int num_tokens, int hidden, float eps,
             cudaStream_t stream);

// The fused residual step between sublayers: residual += x (rounded to bf16, as Hugging Face
// does), then x = rmsnorm(residual) * weight. Both in place.
void add_rmsnorm(bf16* x, bf16* residual, const bf16* weight, int num_tokens, int hidden, float eps,
                 cudaStream_t stream);

// On the fused projection output qkv [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim]
// (q heads, then k heads, then v heads), in place: per-head RMSNorm of q and k when q_norm /
// k_norm are non-null (Qwen3), then rotary embedding of q and k (neox style: the two halves of
// each head rotate as pairs (i, i + head_dim/2)) with angle position * inv_freq[i] (inv_freq has
// head_dim/2 entries; llama3 scaling is folded into it by the caller). Then writes k and v of
// token t into the caches at slot_mapping[t] (skipped when < 0).
void qk_norm_rope_cache(bf16* qkv, const int32_t* positions, const int32_t* slot_mapping,
                        const bf16* q_norm, const bf16* k_norm, float eps, const float* inv_freq,
                        bf16* k_cache, bf16* v_cache, int num_tokens, int num_heads, int num_kv_heads,
                        int head_dim, int block_size, cudaStream_t stream);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, intermediate + i].
void silu_mul(const bf16* gate_up, bf16* out, int num_tokens, int intermediate, cudaStream_t stream);

// Small-batch linear layer: y[b, n] = sum_k x[b, k] * w[n, k] for b < batch, 1 <= batch <= 8
// (decode steps of few sequences, where cuBLAS streams weights at ~half the copy rate).
// w [N, K] row-major (a Hugging Face Linear weight as stored), x [batch, K], y [batch, N];
// K % 8 == 0 and 16-byte aligned rows. fp32 accumulation.
constexpr int kGemvMaxBatch = 8;
void gemv(const bf16* x, const bf16* w, bf16* y, int batch, int n, int k, cudaStream_t stream);
// The same with x = silu_mul(gate_up) computed on load (gate_up [batch, 2k]; bitwise what
// silu_mul then gemv would give): the down projection without a separate activation kernel.
void gemv_silu(const bf16* gate_up, const bf16* w, bf16* y, int batch, int n, int k, cudaStream_t stream);
// The same with fp32 output: the LM head's logits.
void gemv_f32(const bf16* x, const bf16* w, float* y, int batch, int n, int k, cudaStream_t stream);

// Where attention finds its sequences: S sequences, the queries of sequence s are rows
// query_start[s] .. query_start[s+1] of q and sit at the last positions of its context
// (context_lens[s] tokens, all already in the paged cache, this step's included).
struct AttentionBatch {
  const int32_t* query_start;   // [S + 1], device
  const int32_t* context_lens;  // [S], device
  const int32_t* block_tables;  // [S, max_blocks_per_seq], device
  int max_blocks_per_seq;
  int num_seqs;
  int max_query_len;            // host-side bound, for the grid
  int max_context_len;          // host-side bound, for the grid / split: every context_lens[s]
                                // must be <= it (decode splits the context by it; a CUDA graph
                                // must be captured with the largest context it will replay)
};

// Causal grouped-query attention for prefill chunks. q rows have stride q_stride elements
// (the fused qkv buffer can be passed directly); out is [num_tokens, num_heads * head_dim].
void attention_prefill(const bf16* q, int q_stride, const bf16* k_cache, const bf16* v_cache,
                       const AttentionBatch& batch, bf16* out, int num_heads, int num_kv_heads,
                       int head_dim, int block_size, float scale, cudaStream_t stream);

// The same on the CUDA cores (no tensor cores): slower, kept as a second implementation that
// the tests compare with and a fallback for GPUs without bf16 mma.
void attention_prefill_simt(const bf16* q, int q_stride, const bf16* k_cache, const bf16* v_cache,
                            const AttentionBatch& batch, bf16* out, int num_heads, int num_kv_heads,
                            int head_dim, int block_size, float scale, cudaStream_t stream);

// Attention of one query per sequence (query_start[s] = s) over its paged context, split along
// the context for long sequences (flash-decoding); `workspace` holds the partial results.
size_t attention_decode_workspace_bytes(int max_num_seqs, int num_heads, int head_dim, int max_context_len);
void attention_decode(const bf16* q, int q_stride, const bf16* k_cache, const bf16* v_cache,
                      const AttentionBatch& batch, bf16* out, int num_heads, int num_kv_heads, int head_dim,
                      int block_size, float scale, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream);

// --- Batch-1 decode as four fused kernels per layer (decode_fused.cu) ---

struct FusedDecodeShape {
  int hidden, intermediate, num_heads, num_kv_heads, head_dim, block_size;
};

// How the fused path runs on this device; cluster == 0 when it does not apply (`why` says why).
struct FusedDecodePlan {
  FusedDecodeShape shape{};
  int cluster = 0;  // CTAs per kv head in the attention kernel (a thread-block cluster)
  int grid = 0;     // CTAs of the projection kernels (the SM count)
  // Dynamic shared memory of a CTA of the attention, o_proj, gate_up and down kernels: what each
  // uses, more for down so that at most two of its CTAs share an SM (decode_fused.cu).
  size_t smem[4] = {};
  const char* why = nullptr;
};

// One layer's weights and caches.
struct FusedDecodeLayer {
  const bf16 *input_norm, *qkv, *qkv_bias, *q_norm, *k_norm, *o_proj, *post_norm, *gate_up, *down;
  bf16 *k_cache, *v_cache;
};

// The step's one sequence (device pointers): its position, cache slot (< 0: not written),
// context length (the new token included) and block-table row; the residual stream h [hidden]
// (updated in place), and scratch for the attention output [num_heads * head_dim] and the MLP
// activation [intermediate].
struct FusedDecodeStep {
  const int32_t *position, *slot, *context_len, *block_table;
  const float* inv_freq;  // [head_dim / 2]
  float eps, scale;
  bf16 *h, *attn, *act;
  // Layer 0 (null in the others): h = embed[token] here, the embedding folded into the attention
  // kernel; `token` is the step's token id.
  const bf16* embed = nullptr;
  const int32_t* token = nullptr;
  // The norms' sums of squares, published by the kernels that write h: o_proj and down leave one
  // partial sum per CTA of the squares of the h rows they wrote, in ss[0] and ss[1]
  // (kFusedSsParts floats each), and gate_up and the next layer's attention add them up instead
  // of reducing h over the block. Null: every norm sums h itself. ss_ready: ss[1] holds the sums
  // of this layer's input (false in layer 0, whose h the attention kernel sums itself).
  float* ss = nullptr;
  bool ss_ready = false;
  // Timing only (null otherwise): the four kernels of this layer record, per CTA, globaltimer
  // stamps at start, after the PDL wait, once the weights landed, at the end, phase marks, once
  // the activations are read, the SM id and clock64 at start and end, at
  // trace + (kernel * kFusedTraceCtas + cta) * kFusedTraceFields.
  unsigned long long* trace = nullptr;
};
constexpr int kFusedSsParts = 256;  // FusedDecodeStep::ss: at most this many projection CTAs
constexpr int kFusedTraceCtas = 256, kFusedTraceFields = 12;
// The fields of one CTA's trace record: globaltimer stamps (ns), the SM id, clock64 stamps.
enum FusedTraceField {
  kTraceStart, kTraceWaited, kTraceWeights, kTraceEnd, kTraceSm, kTracePhase1, kTracePhase2, kTracePhase3,
  kTraceInputs, kTraceClockStart, kTraceClockEnd
};
static_assert(kTraceClockEnd < kFusedTraceFields);
// Trace words of one layer (four kernels).
constexpr size_t kFusedTraceLayerWords = size_t(4) * kFusedTraceCtas * kFusedTraceFields;

// Checks the model and device (head_dim 128, 1, 2 or 4 q heads per kv head, sm_90+,
// a CTA's weight rows in shared memory, clusters of 16 or 8 CTAs schedulable) and prepares the
// kernels. Throws only on CUDA errors.
FusedDecodePlan fused_decode_plan(const FusedDecodeShape& shape);
// One layer of one decode token: h = layer(h), the new k/v written to the cache. Four kernels,
// launched with PDL.
void fused_decode_layer(const FusedDecodePlan& plan, const FusedDecodeStep& step, const FusedDecodeLayer& layer,
                        cudaStream_t stream);

// --- Batch-1 decode's final norm, LM head and greedy token in one kernel (decode_head.cu) ---

struct DecodeHeadArgs {
  const bf16* h;       // the residual stream [hidden]
  const bf16* norm_w;  // the final norm's weight [hidden]
  const bf16* w;       // the LM head [vocab, hidden]
  int vocab, hidden;
  float eps;
  float* logits;                // [vocab]
  int32_t* token;               // the argmax of logits, lowest id on ties
  int32_t* next_token;          // also written there when not null
  unsigned long long* scratch;  // 2 words, zero before the first launch; each launch leaves them zero
  // Chained steps (all null, or all set): the step's inputs in the device staging, which the
  // last CTA advances to the sequence's next decode step (position + 1, its slot from the
  // block-table row of `table_width` entries or -1 past them, context + 1), and two words of
  // mapped host memory: word position % 2 gets (position << 32) | token, so the host reads the
  // token without a copy.
  int32_t *position = nullptr, *slot = nullptr, *context_len = nullptr;
  const int32_t* block_table = nullptr;
  int block_size = 0, table_width = 0;
  unsigned long long* host_token = nullptr;
  // Bytes the next step reads first (layer 0's qkv weights, which no earlier kernel of that step
  // can have copied ahead), asked into L2 by each CTA once it has read its rows (null: none).
  const void* l2_next = nullptr;
  size_t l2_next_bytes = 0;
};
// Whether decode_head handles this hidden size (a multiple of 256, at most 2048).
bool decode_head_supported(int hidden);
// logits = (rmsnorm(h) * norm_w) W^T and *token = argmax(logits) for one row, on `sms` SMs,
// launched with PDL.
void decode_head(const DecodeHeadArgs& args, int sms, cudaStream_t stream);

}  // namespace nvllm::kernels
