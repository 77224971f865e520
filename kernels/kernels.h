// Launch functions of every CUDA kernel. Kernels see plain pointers, sizes and a stream, never
// engine types. The small kernels of a decode step (norms, rope, gemv, activation) are launched
// with programmatic dependent launch (launch.cuh): each may start while the one before it
// finishes. bf16 tensors are row-major;
// "[a, b]" gives the shape.
//
// KV cache layout (lib/core/kv_layout.h), per layer: k_cache and v_cache are each
// [num_blocks, block_size, num_kv_heads, head_dim]; token slot s lives in block s / block_size at
// offset s % block_size. Its elements are bf16, or E4M3 codes with scales (KvCache).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace nvllm::kernels {

using bf16 = __nv_bfloat16;

// Whether the launches that may use PDL do (on sm_90+ only). Process-wide, as launches are; the
// CUDA runner sets it from CudaTuning::pdl (A/B timing), default on.
void set_pdl(bool on);

// The small-batch projections' grids (kernels/gemv_stream.cuh), one for the bf16 gemvs and one for
// the FP8 ones: at most this many blocks an SM (fewer where fewer fit), each walking an equal share
// of the row groups; 0: one block a row group; kGemvAllFit: every block that fits at once (an SM
// holds at most 32). The defaults, measured end to end (bench/NOTES.md, forty-fourth session,
// H200): a block a group for bf16 (every block that fits, walking: Llama-3-8B batch 1 +3-5% a
// step), every block that fits for FP8 (Llama-3-8B batch 1 -1.4%, batch 2 -2.7%, Qwen3-8B batch 1
// -1.3%; its 16 KB ring lets 9 blocks share an SM). Process-wide, as set_pdl; the CUDA runner sets
// them from CudaTuning.
constexpr int kGemvAllFit = 32;
constexpr int kGemvDefaultBlocksPerSm = 0, kGemvFp8DefaultBlocksPerSm = kGemvAllFit;
void set_gemv_blocks_per_sm(int bf16_blocks, int fp8_blocks);

// Decode steps of at most kDecodeSmallStep sequences on the tensor-core decode attention split
// each context into up to ctas / kv heads parts of at least 64 tokens (at most 32), so that a
// single sequence runs about `ctas` CTAs instead of one a kv head (and its tiles one warp after
// another); 0 (the kernels' default): the one policy of every batch (a split up to 2,048 tokens).
// Within each side of the threshold a sequence's result does not depend on the batch; across it,
// it agrees to rounding (as across the fused path's threshold). Process-wide, as set_pdl; the
// CUDA runner sets the device's SM count (CudaTuning::decode_small_step_parts). Measured on the
// H100 (bench/NOTES.md, thirty-third session): Llama-3-8B batch 1 -1.7% a step, with FP8 weights
// -3.4%, a tensor-parallel-4 rank's shape -4.7%, batch 4 -1%; batch 8 +0.6%, hence 4.
constexpr int kDecodeSmallStep = 4;
void set_decode_small_step_ctas(int ctas);
// Those small steps' parts combined inside the attention kernel: the parts of a (sequence, kv
// head) run as one thread-block cluster (sm_90, up to 16 CTAs; the parts of every small step
// then at most the cluster's size) and add their results through distributed shared memory, in
// the reduce kernel's order (the same bits), instead of writing them out for a reduce kernel
// launched after. Steps of one sequence only (measured: attention_decode.cuh,
// kTcClusterMergeMaxSeqs). On (the default) unless set off here (CudaTuning::decode_cluster_merge).
void set_decode_cluster_merge(bool on);

// The element type of a KV cache: bf16 values, or FP8 E4M3 codes (one byte) with one scale per
// KV head for K and one for V: x is stored as e4m3(x / scale) (round to nearest even, saturating
// at +-448) and read as code * scale, as the CPU runner's FP8 cache (lib/runtime/cpu_ops.h).
// The kernels fold the scales into the attention's score scale (K) and output (V), and read the
// codes in registers; the CUDA runner's --kv-cache-dtype fp8.
enum class KvDtype : uint8_t { kBf16, kFp8E4M3 };

// One layer's paged K and V caches as the kernels take them (device pointers).
struct KvCache {
  void* k = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim] of bf16 or E4M3 codes
  void* v = nullptr;
  KvDtype dtype = KvDtype::kBf16;
  const float* k_scale = nullptr;  // [num_kv_heads], FP8 only
  const float* v_scale = nullptr;
};

// out[t, :] = embed[ids[t], :]. ids must be < vocab (checked by the caller).
void embedding(const int32_t* ids, const bf16* embed, bf16* out, int num_tokens, int hidden,
               cudaStream_t stream);
// A tensor-parallel rank's share of the embedding: out[t, :] = embed[ids[t] - first, :] for the
// ids in [first, first + rows) (the rows `embed` holds), zeros for the others, so that the ranks'
// outputs summed (all-reduced) are the whole lookup.
void embedding_slice(const int32_t* ids, const bf16* embed, bf16* out, int num_tokens, int hidden, int first,
                     int rows, cudaStream_t stream);

// Weights a small kernel asks L2 for on behalf of a later kernel (the next projection of a decode
// step): [p, p + bytes), p 16-byte aligned, bytes a multiple of 16; empty: nothing. Blocks added
// past the kernel's own (l2_ahead_blocks) let the next kernel launch, ask for a share each in
// 16 KB bulk prefetches (the weights are constants, so before the PDL wait), wait and end: the
// card reads weights while the step runs its latency-bound kernels (norms, RoPE, attention, SiLU),
// and the projection finds its first rows in L2. Only a little pays: asked for more, the step's
// latency-bound loads queue behind the prefetches (bench/NOTES.md, thirty-fifth session).
struct L2Ahead {
  const void* p = nullptr;
  size_t bytes = 0;
};
// The blocks a kernel adds to its grid for `a` (64 KB a block, at most one an SM); 0 when empty.
int l2_ahead_blocks(const L2Ahead& a);

// out = rmsnorm(x) * weight, per row of `hidden` (fp32 statistics).
void rmsnorm(const bf16* x, const bf16* weight, bf16* out, int num_tokens, int hidden, float eps,
             cudaStream_t stream);

// The fused residual step between sublayers: residual += x (rounded to bf16, as Hugging Face
// does), then x = rmsnorm(residual) * weight. Both in place.
void add_rmsnorm(bf16* x, bf16* residual, const bf16* weight, int num_tokens, int hidden, float eps,
                 cudaStream_t stream, L2Ahead ahead = {});

// The tensor-parallel sum over peer memory (peer_reduce.cu): the ranks of one process, one GPU
// each, every GPU able to read the others' memory. Rank r's staging buffer and signals live on
// GPU r; every rank holds the same pointers (set up by the runtime's TpComm).
inline constexpr int kPeerMaxRanks = 8;
inline constexpr int kPeerBlocks = 32;  // the grid of every call (the barrier is per block)
inline constexpr int kPeerPushElems = 8 * 8192;  // the largest sum that goes by flagged pushes
struct PeerReduce {
  bf16* buffers[kPeerMaxRanks] = {};       // rank r's staging: two halves of `capacity` elements
  uint32_t* signals[kPeerMaxRanks] = {};   // rank r's [kPeerBlocks][kPeerMaxRanks] epochs, zeroed
  uint32_t* epochs = nullptr;              // this rank's [kPeerBlocks] call counters, zeroed
  const volatile uint32_t* abort = nullptr;  // host-mapped; non-zero: stop waiting for peers
  size_t capacity = 0;
  // Small sums (at most kPeerPushElems elements) go by pushes that carry their own flag: rank r's
  // inbox [2][kPeerMaxRanks][kPeerPushElems / 2] 8-byte words (two bf16 and the call's epoch),
  // zeroed, and this rank's [kPeerBlocks] call counters for them. Null: every sum by the barrier.
  uint64_t* inbox[kPeerMaxRanks] = {};
  uint32_t* push_epochs = nullptr;
  int rank = 0, ranks = 0;
  // A timing tool (CudaTuning::peer_trace; null: off): this rank's %globaltimer stamps of its
  // pushed sums, [kPeerTraceCalls][kPeerTraceFields] indexed by the call's push epoch, the slots
  // below. Stamped by block 0's thread 0 (row 0), the projection's by each block's last group.
  unsigned long long* trace = nullptr;
};
inline constexpr int kPeerTraceCalls = 2048, kPeerTraceFields = 8;
enum PeerTraceSlot : int {
  kPeerTraceKind = 0,      // 1: peer_reduce_push_kernel, 2: peer_reduce_pushed_kernel (after gemv_push)
  kPeerTraceEntry = 1,     // the sum kernel's first instruction
  kPeerTraceWaited = 2,    // past its PDL wait: the projection before it has ended (push kernel)
  kPeerTraceReady = 3,     // row 0's first chunk received from every rank
  kPeerTraceEnd = 4,       // the sum and norm of block 0's rows written
  kPeerTraceGemvLast = 5,  // the latest of this rank's gemv_push blocks' pushes (atomicMax)
  kPeerTraceTokens = 6,
};
// Whether peer_all_reduce takes [tokens, hidden] (staging capacity, hidden % 8 == 0).
bool peer_reduce_fits(const PeerReduce& p, int tokens, int hidden);
// x [tokens, hidden] = the sum of every rank's x, in the same rank order on every rank (identical
// results everywhere). With `weight`: then add_rmsnorm's residual step on the sum (residual =
// bf16(bf16(sum) + residual), x = rmsnorm(residual) * weight), as the all-reduce followed by
// add_rmsnorm computes it. Every rank calls it with the same sizes, in the same order, as with
// NCCL's collectives.
void peer_all_reduce(const PeerReduce& p, bf16* x, bf16* residual, const bf16* weight, int tokens, int hidden,
                     float eps, cudaStream_t stream, L2Ahead ahead = {});
// Whether [tokens, hidden] goes by pushes (inboxes set up, at most kPeerPushElems elements).
bool peer_push_fits(const PeerReduce& p, int tokens, int hidden);
// peer_all_reduce's pushed sum for partials that gemv_push already wrote into every rank's inbox
// (this rank's own too): the same sums bit for bit, without waiting for the projection to end
// first. Every rank calls it right after its gemv_push.
void peer_reduce_pushed(const PeerReduce& p, bf16* x, bf16* residual, const bf16* weight, int tokens, int hidden,
                        float eps, cudaStream_t stream, L2Ahead ahead = {});

// On the fused projection output qkv [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim]
// (q heads, then k heads, then v heads), in place: per-head RMSNorm of q and k when q_norm /
// k_norm are non-null (Qwen3), then rotary embedding of q and k (neox style: the two halves of
// each head rotate as pairs (i, i + head_dim/2)) with angle position * inv_freq[i] (inv_freq has
// head_dim/2 entries; llama3 scaling is folded into it by the caller). Then writes k and v of
// token t into the caches at slot_mapping[t] (skipped when < 0), quantised there for an FP8
// cache (qkv keeps the bf16 values). With row_scales / col_scales (qkv the unscaled product of an
// FP8 GEMM), every value first gets its token's and its column's scale as scale_rows_cols would
// give it (v rows too, written back): bit for bit scale_rows_cols then this kernel, one pass less.
// With bias [(num_heads + 2 * num_kv_heads) * head_dim] (Qwen2's q/k/v bias), every value then
// gets its column's bias, the sum rounded to bf16 (v rows written back), before the norm.
void qk_norm_rope_cache(bf16* qkv, const int32_t* positions, const int32_t* slot_mapping,
                        const bf16* q_norm, const bf16* k_norm, float eps, const float* inv_freq,
                        const KvCache& cache, int num_tokens, int num_heads, int num_kv_heads,
                        int head_dim, int block_size, cudaStream_t stream, const float* row_scales = nullptr,
                        const float* col_scales = nullptr, const bf16* bias = nullptr, L2Ahead ahead = {});

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, intermediate + i].
void silu_mul(const bf16* gate_up, bf16* out, int num_tokens, int intermediate, cudaStream_t stream,
              L2Ahead ahead = {});

// Small-batch linear layer: y[b, n] = sum_k x[b, k] * w[n, k] for b < batch, 1 <= batch <= 8
// (decode steps of few sequences; gemv.cu says where it beats cuBLASLt and where not).
// w [N, K] row-major (a Hugging Face Linear weight as stored), x [batch, K], y [batch, N];
// K % 8 == 0 and 16-byte aligned rows. fp32 accumulation. A row's result does not depend on the
// batch size.
constexpr int kGemvMaxBatch = 8;
void gemv(const bf16* x, const bf16* w, bf16* y, int batch, int n, int k, cudaStream_t stream);
// The same with fp32 output: the LM head's logits.
void gemv_f32(const bf16* x, const bf16* w, float* y, int batch, int n, int k, cudaStream_t stream);
// A gate_up projection's activation in one kernel: act [batch, half] = silu(x gate^T) * (x up^T)
// for gate_up [2 * half, k] (the gates' rows, then the ups'), bit for bit gemv into [batch, 2 *
// half] then silu_mul (each product rounded to bf16 first), without the products' round trip and
// silu_mul's launch. gemv_fp8_silu: the same for E4M3 codes and their row scales (gemv_fp8, kRow).
void gemv_silu(const bf16* x, const bf16* gate_up, bf16* act, int batch, int half, int k, cudaStream_t stream);
// Whether gemv and gemv_f32 of n rows of k values take the kernel for many short rows (a warp a
// group of rows) rather than the ring of row groups (gemv.cu); the same at every batch size.
bool gemv_short_rows(int n, int k);
// gemv whose outputs, rounded to bf16 as gemv stores them, go as flagged words straight into every
// rank's push inbox (this rank's too) for peer_reduce_pushed, each row group's as soon as its block
// has it: a tensor-parallel row-parallel projection and its sum with no kernel boundary between
// the last rows and the pushes. peer_push_fits(p, batch, n) and n % 8 == 0; y is not written.
void gemv_push(const bf16* x, const bf16* w, const PeerReduce& p, int batch, int n, int k, cudaStream_t stream);

// How E4M3 weights [N, K] are scaled (value = code * scale): one scale for the tensor; one per
// output row (compressed-tensors channel scales, --quantization fp8); one per 128 x 128 block,
// row-major [ceil(N / 128), ceil(K / 128)] (weight_block_size [128, 128], weight_scale_inv).
enum class Fp8Scaling : uint8_t { kTensor, kRow, kBlock128 };
// gemv with E4M3 weight codes w [N, K] and their fp32 scales (gemv_fp8.cu): y = x · (w * scale)^T
// in fp32, bf16 out. K % 16 == 0, 16-byte aligned rows; 1 <= batch <= kGemvMaxBatch. A row's
// result does not depend on the batch size. `rows_per_block` (2 or 4; 0: the measured default)
// is for timing the kernel's variants only.
void gemv_fp8(const bf16* x, const uint8_t* w, const float* scale, Fp8Scaling scaling, bf16* y, int batch, int n,
              int k, cudaStream_t stream, int rows_per_block = 0);
void gemv_fp8_silu(const bf16* x, const uint8_t* gate_up, const float* scale, Fp8Scaling scaling, bf16* act,
                   int batch, int half, int k, cudaStream_t stream);
// gemv_push for E4M3 codes and their row scales: gemv_fp8's outputs (kRow), rounded to bf16 as it
// stores them, into every rank's push inbox for peer_reduce_pushed. The same conditions.
void gemv_fp8_push(const bf16* x, const uint8_t* w, const float* scale, const PeerReduce& p, int batch, int n, int k,
                   cudaStream_t stream);

// E4M3 codes of each row of x [rows, cols] (fp8_quant.cu): scales[r] = amax(row r) / 448 and
// codes[r, c] = e4m3(x[r, c] / scales[r]), rounded to nearest even (an all-zero row: scale 0,
// zero codes), bit for bit as the CPU's --quantization fp8. Weights per output channel at load;
// activations per token before an FP8 GEMM. cols % 8 == 0, 16-byte aligned rows.
void quantize_rows_fp8(const bf16* x, uint8_t* codes, float* scales, int rows, int cols, cudaStream_t stream);
// y [m, n] = bf16(y * row_scales[m] * col_scales[n]), in place: the per-token and per-channel
// scales of an FP8 GEMM that ran with unit scales. n % 8 == 0.
void scale_rows_cols(bf16* y, const float* row_scales, const float* col_scales, int m, int n, cudaStream_t stream);
// add_rmsnorm on x (in place) and then quantize_rows_fp8 of its result into codes and
// code_scales, as one kernel, bit for bit the passes: between an FP8 GEMM and the next FP8 GEMM.
// With row_scales, x arrives as the first GEMM's unscaled product and is scaled first, as
// scale_rows_cols would (col_scales per channel). row_scales may be code_scales. hidden % 8 == 0.
void add_rmsnorm_fp8(bf16* x, const float* row_scales, const float* col_scales, bf16* residual, const bf16* weight,
                     uint8_t* codes, float* code_scales, int num_tokens, int hidden, float eps, cudaStream_t stream);
// The three passes between an FP8 gate_up GEMM and an FP8 down GEMM as one kernel, bit for bit:
// scale_rows_cols on gate_up [tokens, 2 * intermediate] (its unscaled product; row_scales per
// token, col_scales per channel), silu_mul into act [tokens, intermediate], quantize_rows_fp8 of
// act into codes and act_scales. intermediate % 8 == 0. act may be null (the runner's FP8 path
// reads only the codes): then the bf16 row is neither stored nor read back.
void silu_mul_fp8(const bf16* gate_up, const float* row_scales, const float* col_scales, bf16* act, uint8_t* codes,
                  float* act_scales, int num_tokens, int intermediate, cudaStream_t stream);

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
  // [S], device, optional: the order in which attention_decode's CTAs take the sequences of a
  // step of more than kDecodeSmallStep (a permutation of 0 .. S - 1, longest context first:
  // decode_order); nullptr, or a smaller step, takes them as they come. The results do not depend
  // on it.
  const int32_t* decode_order = nullptr;
};

// Causal grouped-query attention for prefill chunks. q rows have stride q_stride elements
// (the fused qkv buffer can be passed directly); out is [num_tokens, num_heads * head_dim].
// An FP8 cache's codes are converted to bf16 (exact) as its tiles are staged.
void attention_prefill(const bf16* q, int q_stride, const KvCache& cache, const AttentionBatch& batch,
                       bf16* out, int num_heads, int num_kv_heads, int head_dim, int block_size, float scale,
                       cudaStream_t stream);

// The same on the CUDA cores (no tensor cores), bf16 caches only: slower, kept as a second
// implementation that the tests compare with.
void attention_prefill_simt(const bf16* q, int q_stride, const bf16* k_cache, const bf16* v_cache,
                            const AttentionBatch& batch, bf16* out, int num_heads, int num_kv_heads,
                            int head_dim, int block_size, float scale, cudaStream_t stream);

// Attention of one query per sequence (query_start[s] = s) over its paged context, split along
// the context for long sequences (flash-decoding); `workspace` holds the partial results.
// Two kernels, both over bf16 or FP8 caches: the tensor cores (attention_decode_tc.cu: 16 tokens by
// the q heads of a kv head, up to 8, a mma) and the CUDA cores (each lane reads 16 bytes of a
// token's row at a time and converts them in registers). kAuto takes the tensor cores for groups
// of 2..8 q heads a kv head; tests and timing name one (the tensor cores refuse groups over 8).
// `chained`: the tensor-core kernel (and its split reduce) launched with PDL, so that the next
// kernel's blocks arrive while its last tiles run: for steps whose next kernel takes part in PDL
// and has work to start before its wait (the o_proj gemv's weight stream). Where the next kernel
// is a cuBLASLt GEMM it costs: Qwen3-8B batch 16 was 2-3% slower with it, batch 1 1-2.5% faster
// (H100, bench/NOTES.md, twenty-fourth session). The CUDA-core kernel is always launched normally.
enum class DecodeKernel : uint8_t { kAuto, kCudaCores, kTensorCores };
size_t attention_decode_workspace_bytes(int max_num_seqs, int num_heads, int head_dim, int max_context_len);
void attention_decode(const bf16* q, int q_stride, const KvCache& cache, const AttentionBatch& batch, bf16* out,
                      int num_heads, int num_kv_heads, int head_dim, int block_size, float scale, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, DecodeKernel kernel = DecodeKernel::kAuto,
                      bool chained = false);
// The CTAs attention_decode (kAuto) runs for `num_seqs` sequences of `context_len` tokens: the
// parallelism it has. Each CTA's warps take their tiles one after another, so with few CTAs on the
// GPU (small batches) it is latency-bound, not bandwidth-bound.
int attention_decode_ctas(int num_seqs, int context_len, int num_heads, int num_kv_heads, bool fp8_cache);

// --- Rows (rows.cu) ---

// dst[r, :] = src[index[r], :] for r < rows; rows of `cols` elements.
void gather_rows(const bf16* src, const int32_t* index, bf16* dst, int rows, int cols, cudaStream_t stream);

// The fused batch-1 decode kernels have their own headers: decode_fused.h, decode_head.h.

}  // namespace nvllm::kernels
