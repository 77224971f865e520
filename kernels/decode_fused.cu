// Small-batch decode as four fused kernels per layer: the single-stream latency path, and steps
// of up to 8 sequences.
//
// At batch 1 a decode step reads every weight once (1.19 GB for Qwen3-0.6B) and does almost no
// arithmetic: the floor is the weight stream, 0.39 ms at 3.03 TB/s. As ~255 separate kernels
// (norms, projections, RoPE, attention and its reduce) the step took 1.14 ms on the H100: every
// kernel boundary and every dependent L2 round trip of a small kernel sits on the critical path.
// Here a layer is four kernels, each a grid of about one CTA per SM that owns a contiguous run of
// weight rows:
//   attention  x = rmsnorm(h); qkv = x W_qkv^T (+ bias); q/k norm + RoPE; the new k/v into the
//              cache; attention over the context. A thread-block cluster per kv head (and
//              share of the step's sequences): its CTAs share the head's q/k/v rows, exchange
//              their outputs through distributed shared memory, split the context among
//              themselves and merge the splits the same way.
//   o_proj     h += attn W_o^T
//   gate_up    x = rmsnorm(h); act = silu(x W_gate^T) * (x W_up^T)
//   down       h += act W_down^T
// Every kernel is launched with PDL (launch.cuh) and, before it waits for the kernel ahead of it,
// starts a TMA copy of its weight rows into shared memory, copies its constants (norm weights,
// RoPE frequencies) there by cp.async, and the attention kernel asks L2 for its part of the cached
// K/V: the weights of one kernel stream in while the one before it still runs, and after the wait
// a CTA reads only a few KB of activations. The dot products run on the
// tensor cores (mma.sync, the weights as A, x as a column of B) in about a fifth of the
// instructions FMAs take; that bought only 1% of the step (bench/NOTES.md, sixth session): what
// a kernel spends after its data has landed is mostly not arithmetic. The residual stream h is
// updated in place: each of its rows has one writer, and every reader waits for that writer.
// Values that the separate kernels (and Hugging Face) keep in bf16 are rounded at the same points.
//
// Activations written by an earlier kernel of the chain are read with ld.global.cg (L2, not the
// SM's L1): with PDL a CTA can be resident before its producer finishes.
//
// Every shape through the same kernels: head_dim 64 or 128 and 1-8 q heads per kv head in the
// attention kernel (templates on head_dim and the group held in registers); a projection whose
// CTA share does not fit in shared memory streams it through a ring of stages (ring_dots) instead
// of copying it whole before the wait. Weights are bf16 rows or E4M3 codes with a scale per row
// (kFp8W: the codes converted to bf16 in registers, exactly, and each row's sum times its scale).
//
// An FP8 KV cache (attention_kernel's T = fp8_e4m3): a lane reads its dims of a cached token as
// codes (8 bytes) and converts them in registers (to floats, or to f16 for the tensor cores,
// exactly); the new token's k and v are quantised (the
// codes go to the cache) and the attention uses the same codes for it, as for every other token;
// k_scale goes into the query, v_scale into the output. The codes of the new token replace its
// values in shared memory behind one more block barrier; quantising them again where the loop
// reads them, without the barrier, was slower on the H100 (a Qwen3-0.6B batch-1 step 0.696 vs
// 0.678 ms; bf16 0.666: bench/NOTES.md).
//
// A step of several sequences (kMulti; FusedDecodeStep::batch, at most 8): the weights are still
// read once, and each CTA multiplies them with every sequence's input, held in shared memory as
// rows [batch][k]: the sequences are the columns of B in each m16n8k16 product (lane (g, t) gives
// sequence g's values and gets sequences 2t and 2t + 1's sums), so a product costs what it costs
// at batch 1. Norms, residual rows and the published sums of squares are per sequence. The
// attention kernel's cluster splits into a power of two of groups, one a sequence: every CTA
// multiplies its q/k/v rows with all the inputs and pushes sequence b's outputs to b's CTAs
// only, which then run the batch-1 attention, split and merges over b's context (a CTA of a group
// past the batch only multiplies). Each sequence keeps 16 or more CTAs (kFusedMinSeqCtas): a
// cluster serves at most the plan's seq_group sequences, and a larger step runs several clusters a
// kv head, each taking an even share of the sequences.
#include <cooperative_groups.h>

#include <algorithm>
#include <array>
#include <bit>
#include <type_traits>

#include "core/kv_layout.h"
#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/decode_fused.h"
#include "kernels/decode_fused_blocks.cuh"
#include "kernels/decode_fused_tokens.cuh"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels {
namespace {

namespace cg = cooperative_groups;

[[maybe_unused]] constexpr int kPrefetchTokens = 64;  // attention, per CTA: cached K/V asked into L2 before the wait
constexpr int kMaxGroup = 8;                          // attention: q heads per kv head
[[maybe_unused]] constexpr float kLog2e = 1.4426950408889634f;
static_assert(kThreads >= 2 * 128, "the cache write gives one thread to each new k and v value");

// --- the kernels ---

// Sequence b's row of the residual stream h [batch][hidden] as a step's first kernel reads it: in
// layer 0 (st.embed set) the embedding row of its token, a constant.
__device__ __forceinline__ const bf16* step_h_row(const FusedDecodeStep& st, int b, int hidden) {
  return st.embed != nullptr ? st.embed + size_t(st.token[b]) * hidden : st.h + size_t(b) * hidden;
}

// Layer 0 (st.embed set): this CTA's share of h = the embedding rows of the step's sequences, by
// a layer's first kernel (the attention kernel, or the q/k/v kernel of a split plan).
template <bool kMulti>
__device__ __forceinline__ void store_embedding(const FusedDecodeStep& st, int hidden) {
  if (st.embed == nullptr) return;
  for (int i = (blockIdx.x * kThreads + threadIdx.x) * 8; i < (kMulti ? st.batch : 1) * hidden;
       i += gridDim.x * kThreads * 8)
    store8(st.h + i, kMulti ? load8(step_h_row(st, i / hidden, hidden) + i % hidden)
                            : load8(step_h_row(st, 0, hidden) + i));
}

// One cluster per kv head g (a step of several sequences: R of them, each serving a share of the
// sequences; the kernel's comments below say "the cluster" for either); CTA `rank` of C owns rows
// [rank * rows, (rank + 1) * rows) of the group's q heads, k and v (G + 2 heads of D rows), the
// rank-th of C context splits, and the outputs [rank * outs, (rank + 1) * outs) of the group (they
// may span two heads); with several sequences, C, rank and the outputs are those of its sequence's
// group of CTAs (Cs, sr). Both exchanges are pushes into the consumer's shared memory by st.async,
// which counts the bytes on the consumer's mbarrier: a CTA waits for exactly the data it needs, and
// the cluster meets in a barrier only once, at the start (every CTA running, its mbarriers
// initialised, before the first push). Nothing is read from another CTA's shared memory, and a CTA
// leaves only after all pushes to it have landed.
// D: head_dim, 64 or 128. GM: the q heads per kv head this instantiation holds in registers (1,
// 2, 4 or 8); the model's group G (shape.num_heads / num_kv_heads) is at most GM, and heads
// G .. GM-1 are computed on scratch and never stored. T: the cache element, bf16 or fp8_e4m3.
// kFp8W: the q/k/v weights are E4M3 codes (a template: as a runtime branch, the bf16 kernel's
// step grew 3% on the H100). kMulti: a step of st.batch sequences; without it, of one, whose
// index arithmetic then folds away (as a runtime batch, the batch-1 kernel ran 2.5 us slower a
// layer on the H100: bench/NOTES.md).
// kSplit: the plan's q/k/v projection is a kernel of its own (qkv_proj_kernel, before this one;
// FusedDecodePlan::split_qkv): the CTA reads its sequence's q/k/v of the group from st.qkv after
// the wait instead of holding weight rows, multiplying and exchanging them (kFp8W is false then).
template <int D, int GM, typename T, bool kFp8W, bool kMulti, bool kSplit>
__global__ void __launch_bounds__(kThreads) attention_kernel(FusedDecodeShape shape, FusedDecodeStep st,
                                                             FusedDecodeLayer w, int flags, int ss_parts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kFp8 = std::is_same_v<T, fp8_e4m3>;
  // The token loop (decode_fused_tokens.cuh): on the tensor cores for groups of 5-8 heads, on the
  // CUDA cores for smaller ones.
  using Tokens = std::conditional_t<(GM > 4), TensorTokens<D, T>, CudaCoreTokens<D, GM, T>>;
  T* const k_cache = static_cast<T*>(w.kv.k);
  T* const v_cache = static_cast<T*>(w.kv.v);
  extern __shared__ __align__(128) char smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int C = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int H = shape.hidden, G = shape.num_heads / shape.num_kv_heads;
  // A step of several sequences: each kv head has R clusters (the launch's grid says how many),
  // which take the batch's sequences in even shares, the share-th the B from share * batch / R. B
  // sequences split their cluster: sequence b's attention runs on the Cs CTAs b * Cs .. (over a
  // power of two of sequences; CTAs past the B only multiply), each CTA multiplying its weight
  // rows with every one of the B inputs. One sequence: R = 1, Cs = C.
  const int R = kMulti ? int(gridDim.x) / (shape.num_kv_heads * C) : 1;
  const int g = blockIdx.x / C / R, share = blockIdx.x / C % R;
  const int seq0 = kMulti ? share * st.batch / R : 0;  // my cluster's first sequence of the step
  const int B = kMulti ? (share + 1) * st.batch / R - seq0 : 1;
  const int Cs = kMulti ? C / batch_p2(B) : C;
  const int sb = kMulti ? rank / Cs : 0, sr = kMulti ? rank % Cs : rank;  // my sequence, my rank among its CTAs
  const bool attends = !kMulti || sb < B;
  const int sq = seq0 + (kMulti ? min(sb, B - 1) : 0);  // a sequence of the step to read inputs of
  const AttnLayout L = attn_layout(kSplit ? 0 : H, G, C, D, kFp8W, B, kMulti);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + L.bar);  // weights, exchange, inbox
  if (threadIdx.x == 0) {
    mbar_init(bar + 1);
    mbar_init(bar + 2);
    if (attends) {
      if (!kSplit) mbar_expect(bar + 1, (G + 2) * D * 4);  // my sequence's q, k and v of the group
      mbar_expect(bar + 2, Cs * (L.outs + 2 * G) * 4);  // every split's partial of my outputs, (max, sum) of each head
    }
  }
  cluster_arrive();  // "started": paired with the wait before the first push
  char* ws = smem + L.w;
  bf16* x = reinterpret_cast<bf16*>(smem + L.x);
  float* dots = reinterpret_cast<float*>(smem + L.dots);
  float* q = reinterpret_cast<float*>(smem + L.qkv);  // [G][D], then the new k [D] and v [D]
  float* k_new = q + G * D;
  float* v_new = k_new + D;
  float* acc = reinterpret_cast<float*>(smem + L.acc);
  float* ml = reinterpret_cast<float*>(smem + L.ml);
  float* inbox = reinterpret_cast<float*>(smem + L.inbox);        // [Cs splits][outs]
  float* inbox_ml = reinterpret_cast<float*>(smem + L.inbox_ml);  // [Cs splits][G heads][m, l]
  float* red = reinterpret_cast<float*>(smem + L.red);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const Tracer trace(st.trace, 1);

  // Group row i (the G q heads, then k, then v) -> its row of the fused qkv matrix.
  const int q_rows = G * D, q_size = shape.num_heads * D, kv_size = shape.num_kv_heads * D;
  const int padded = dots_stride(L.rows, B);  // dots' rows
  auto matrix_row = [&](int i) {
    return i < q_rows ? g * q_rows + i : i < q_rows + D ? q_size + g * D + (i - q_rows)
                                                        : q_size + kv_size + g * D + (i - q_rows - D);
  };
  const int i0 = rank * L.rows;
  if constexpr (!kSplit)
    copy_rows(ws, H, kFp8W, L.rows, [&](int i) { return weight_row<kFp8W>(w.qkv, matrix_row(i0 + i), H); }, bar,
              flags);
  // The constants of this thread's first item below (row tid % L.rows of sequence tid / L.rows),
  // read before the wait: the row's FP8 scale and its bias. (A CTA has at most 10 heads of 128
  // rows over 8 CTAs, 160 rows: at batch 1 one a thread.) Later items read theirs after the wait.
  const int first_row = kMulti ? tid % L.rows : tid;
  const bool has_first = !kSplit && tid < B * L.rows;
  const float qkv_scale = early_scale<kFp8W>(w.qkv, has_first, matrix_row(i0 + first_row));
  const float qkv_bias = early_bias(w.qkv_bias, has_first, matrix_row(i0 + first_row));
  bf16* norm_s = reinterpret_cast<bf16*>(smem + L.norm);
  bf16* q_norm_s = w.q_norm != nullptr ? reinterpret_cast<bf16*>(smem + L.qk_norm) : nullptr;  // null: no q/k norm
  bf16* k_norm_s = w.k_norm != nullptr ? reinterpret_cast<bf16*>(smem + L.qk_norm) + D : nullptr;
  float* freq_s = reinterpret_cast<float*>(smem + L.freq);
  if constexpr (!kSplit) stage(norm_s, w.input_norm, H * 2);
  if (q_norm_s != nullptr) stage(q_norm_s, w.q_norm, D * 2);
  if (k_norm_s != nullptr) stage(k_norm_s, w.k_norm, D * 2);
  stage(freq_s, st.inv_freq, D / 2 * 4);
  cp_async_commit();
  const int position = st.position[sq], slot = st.slot[sq];  // used after the wait
  // Layer 0 reads its input from the embedding table (a constant) and leaves it in h.
  auto h_row = [&](int b) { return step_h_row(st, b, H); };  // sequence b of the step

  // This CTA's context split of its sequence. The cached K/V of its tokens were written by earlier
  // steps, so they are constants here: the first tokens' go into registers before the wait, the
  // next ones into L2.
  const int ctx = st.context_len[sq];
  const int per = ceil_div(ctx, Cs), start = min(ctx, sr * per), end = attends ? min(ctx, start + per) : start;
  const size_t row_stride = size_t(kv_size);  // elements per cache slot: [slot][kv head][D]
  const TokenSplit<T> split{k_cache, v_cache, kMulti ? st.block_table + size_t(sq) * st.table_width : st.block_table,
                            __ffs(shape.block_size) - 1, row_stride, size_t(g) * D, start, end, ctx};
  const int cached_end = split.cached_end();
  Tokens tokens(split, tid);
  tokens.load_first();
  const int ahead = start + Tokens::kFirst;  // tokens the first loads do not cover
  // A line a thread (a cached row is 64-256 bytes, aligned to its size).
  constexpr int kRowLines = D * int(sizeof(T)) > 128 ? D * int(sizeof(T)) / 128 : 1;
  for (int j = tid; j < 2 * kRowLines * min(cached_end - ahead, kPrefetchTokens); j += kThreads) {
    const int row = j / kRowLines, t = ahead + row / 2;
    prefetch_l2_line(((row & 1) ? v_cache : k_cache) + split.row(t) + j % kRowLines * (128 / int(sizeof(T))));
  }
  // FP8: this kv head's scales (constants, read before the wait).
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (kFp8) {
    k_scale = w.kv.k_scale[g];
    v_scale = w.kv.v_scale[g];
  }
  wait_inputs(flags);
  trace.mark(kTraceWaited);

  if constexpr (kSplit) {  // my sequence's q, k and v of the group, as qkv_proj_kernel rounded them
    if (attends)
      for (int i = tid * 8; i < (G + 2) * D; i += kThreads * 8) {  // heads are whole 8-value pieces
        float v[8];
        to_float8(load8_cg(st.qkv + size_t(sq) * (q_size + 2 * kv_size) + matrix_row(i)), v);
#pragma unroll
        for (int j = 0; j < 8; ++j) q[i + j] = v[j];
      }
    trace.mark(kTraceInputs);
    trace.mark(kTraceWeights);  // (no weights: the q/k/v rows are its inputs)
    cp_async_wait<0>();  // the staged q/k norms and frequencies, read by the rope below
    __syncthreads();
    cluster_wait();  // every CTA of the cluster has started: the merge's pushes may go
    if (!attends) {
      trace.end();
      return;
    }
  } else {
    store_embedding<kMulti>(st, H);
    const float* ss_in = st.ss_ready ? st.ss + kFusedSsWords / 2 : nullptr;
    if constexpr (kMulti)
      load_normed_rows([&](int b) { return h_row(seq0 + b); },
                       ss_in != nullptr ? ss_in + seq0 * kFusedSsParts : nullptr, ss_parts, norm_s, H, B, st.eps, x,
                       red);
    else
      load_normed_any(h_row(0), ss_in, ss_parts, norm_s, H, st.eps, x, red);
    trace.mark(kTraceInputs);
    mbar_wait(bar, 0);
    trace.mark(kTraceWeights);
    whole_dots<kFp8W>(ws, x, L.rows, H, dots, B);
    for (int i = tid; i < B * L.rows; i += kThreads) {  // row r's value replaces warp 0's partial
      const int b = kMulti ? i / L.rows : 0, r = kMulti ? i % L.rows : i;
      dots[b * padded + r] = qkv_output<kFp8W>(row_dot(dots, L.rows, r, b, B), i == tid, qkv_scale, qkv_bias, w.qkv,
                                               w.qkv_bias, matrix_row(i0 + r));
    }
    __syncthreads();
    cluster_wait();  // every CTA of the cluster has started: pushes may go
    // My rows' outputs of sequence b into the q/k/v of each of its CTAs.
    const int pieces = L.rows / 4;
    for (int i = tid; i < B * pieces * Cs; i += kThreads) {
      const int b = kMulti ? i / (pieces * Cs) : 0, to = b * Cs + (kMulti ? i % (pieces * Cs) : i) / pieces;
      const int piece = i % pieces;
      st_async16(cluster_addr(q + i0 + 4 * piece, to), reinterpret_cast<const float4*>(dots + b * padded)[piece],
                 cluster_addr(bar + 1, to));
    }
    if (!attends) {  // nothing is pushed to a CTA past the batch's sequences
      trace.end();
      return;
    }
    mbar_wait(bar + 1, 0);
  }
  trace.mark(kTracePhase1);

  // Heads 0..G-1: the q heads (normed, roped, scaled for exp2); head G: the new k. A warp each;
  // lane `lane` rotates the pairs (i, i + D/2) for i = lane + 32 j. A q head is stored back in the
  // order the token loop reads it (Tokens::q_index).
  for (int hd = warp; hd <= G; hd += kWarps) {
    float* head = hd < G ? q + hd * D : k_new;
    const bf16* norm_w = hd < G ? q_norm_s : k_norm_s;
    constexpr int kPairs = D / 64;
    float a[kPairs], b[kPairs], ss = 0.f;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      a[j] = head[lane + 32 * j];
      b[j] = head[lane + 32 * j + D / 2];
      ss += a[j] * a[j] + b[j] * b[j];
    }
    const float rstd = norm_w != nullptr ? rsqrtf(warp_sum(ss) / D + st.eps) : 1.f;
    const float m = hd < G ? st.scale * kLog2e * k_scale : 1.f;  // FP8: scores are q . code * k_scale
    auto at = [&](int i) { return hd < G ? Tokens::q_index(i) : i; };
    __syncwarp();  // the head's values are all read before any moves
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int i = lane + 32 * j;
      const float2 r = norm_rope_pair(a[j], b[j], rstd, norm_w, i, D / 2, float(position), freq_s[i]);
      head[at(i)] = r.x * m;
      head[at(i + D / 2)] = r.y * m;
    }
  }
  __syncthreads();
  if constexpr (kFp8) {
    // The new token's k and v as codes: into the cache, and in place of the values for the
    // attention below (every CTA of the sequence quantises the same values the same way).
    if (tid < 2 * D) {
      const bool is_k = tid < D;
      float* value = is_k ? k_new + tid : v_new + tid - D;
      const fp8_e4m3 code = e4m3_of(*value, is_k ? k_scale : v_scale);
      if (sr == 0 && slot >= 0)
        (is_k ? k_cache : v_cache)[size_t(slot) * row_stride + size_t(g) * D + tid % D] = code;
      *value = float(code);
    }
    __syncthreads();
  } else if (sr == 0 && slot >= 0 && tid < 2 * D) {  // the new token's k and v into the cache
    const bool is_k = tid < D;
    (is_k ? k_cache : v_cache)[size_t(slot) * row_stride + size_t(g) * D + tid % D] =
        __float2bfloat16(is_k ? k_new[tid] : v_new[tid - D]);
  }
  trace.mark(kTracePhase2);

  tokens.run(q, k_new, v_new, G, acc, ml);
  __syncthreads();
  // This split's result for every output of the group (a warp that saw no token has max -inf),
  // pushed straight to the inbox of the CTA of my sequence that finishes it; the thread of output
  // (h, d < Cs) also pushes head h's (max, sum) to that sequence's CTA d.
  const int first = sb * Cs;  // my sequence's first CTA
  for (int i = tid; i < G * D; i += kThreads) {
    const int h = i / D, d = i % D;
    const SoftmaxPart r = merge_softmax(
        kWarps, [&](int j) { return ml[(j * G + h) * 2]; }, [&](int j) { return ml[(j * G + h) * 2 + 1]; },
        [&](int j) { return acc[(j * G + h) * D + d]; });
    const int to = first + i / L.outs;
    st_async4(cluster_addr(inbox + sr * L.outs + i % L.outs, to), r.acc, cluster_addr(bar + 2, to));
    if (d < Cs)
      st_async8(cluster_addr(inbox_ml + 2 * (sr * G + h), first + d), make_float2(r.m, r.l),
                cluster_addr(bar + 2, first + d));
  }
  mbar_wait(bar + 2, 0);  // every split's partial of my outputs has landed
  trace.mark(kTracePhase3);

  // Merge the Cs splits of this CTA's outputs: Cs lanes per output, one split each, reduced by
  // shuffles (a split with no tokens has max -inf). outs * Cs = G * D pairs: whole warps.
  auto lanes_max = [&](float v) { return kMulti ? warp_max(v, Cs) : C == 16 ? warp_max<16>(v) : warp_max<8>(v); };
  auto lanes_sum = [&](float v) { return kMulti ? warp_sum(v, Cs) : C == 16 ? warp_sum<16>(v) : warp_sum<8>(v); };
  for (int i = tid; i < L.outs * Cs; i += kThreads) {
    const int o = i / Cs, j = i % Cs;
    const int oi = sr * L.outs + o, h = oi / D, d = oi % D;
    const float mj = inbox_ml[2 * (j * G + h)];
    const float mx = lanes_max(mj);
    const float wj = mj == -INFINITY ? 0.f : exp2f(mj - mx);
    const float l = inbox_ml[2 * (j * G + h) + 1] * wj, a = inbox[j * L.outs + o] * wj;
    const float sl = lanes_sum(l), sa = lanes_sum(a);
    if (j == 0)
      st.attn[size_t(sq) * q_size + size_t(g * G + h) * D + d] = __float2bfloat16(sl > 0.f ? sa / sl * v_scale : 0.f);
  }
  trace.end();
#endif
}

// h[b][r] += x[b] W^T [r] for this CTA's rows and the step's `batch` sequences (o_proj with x =
// attn, down with x = act; x [batch][k], h [batch][n]).
// ss_out (not null): this CTA's sum of the squares of the rows it wrote, sequence b's at
// ss_out[b * kFusedSsParts + blockIdx.x].
// kStream: the weight rows are streamed through `stages` stages in `parts` k parts (ring_dots); a
// template so that the whole-share kernel's code (and registers) stay as they are without it.
// kFp8W: the weights are E4M3 codes with a scale per row (w.scale). kMulti: as attention_kernel.
template <bool kStream, bool kFp8W, bool kMulti>
__global__ void __launch_bounds__(kThreads) residual_proj_kernel(const bf16* x_in, int k, FusedWeight w, int n,
                                                                 bf16* h, float* ss_out, int flags, int stages,
                                                                 int parts, unsigned long long* trace_base,
                                                                 int trace_kernel, int step_batch) {
  extern __shared__ __align__(128) char smem[];
  const int batch = kMulti ? step_batch : 1;
  const Tracer trace(trace_base, trace_kernel);
  int r0, r1;
  my_rows(n, &r0, &r1);
  const int rows = r1 - r0, max_rows = ceil_div(n, int(gridDim.x));
  const ProjLayout L = proj_layout(max_rows, k, max_rows, false, kStream ? stages : 0, parts, kFp8W, batch);
  bf16* x = reinterpret_cast<bf16*>(smem + L.x);
  float* res = reinterpret_cast<float*>(smem + L.res);
  float* dots = reinterpret_cast<float*>(smem + L.dots);
  auto src = [&](int i) { return weight_row<kFp8W>(w, r0 + i, k); };
  // The FP8 scale of this thread's first item's row (as in attention_kernel).
  const int first_row = kMulti && rows > 0 ? int(threadIdx.x) % rows : int(threadIdx.x);
  const float scale0 = early_scale<kFp8W>(w, int(threadIdx.x) < batch * rows, r0 + first_row);
  const Ring ring = share_start<kStream, kFp8W>(smem, L, stages, parts, k, rows, src, flags);
  wait_inputs(flags);
  trace.mark(kTraceWaited);
  for (int i = threadIdx.x; i < batch * rows; i += kThreads) {  // with x
    const int b = kMulti ? i / rows : 0, r = kMulti ? i % rows : i;
    res[b * max_rows + r] = __bfloat162float(__ldcg(h + size_t(b) * n + r0 + r));
  }
  if constexpr (kMulti)
    load_vectors(x_in, k, batch, x);
  else
    load_vector(x_in, k, x);
  trace.mark(kTraceInputs);
  share_dots<kStream, kFp8W>(ring, src, smem, L, x, rows, k, dots, flags, trace, batch);
  if constexpr (kMulti) {
    // Each output's square replaces its residual, and warp b adds up sequence b's.
    for (int i = threadIdx.x; i < batch * rows; i += kThreads) {
      const int b = i / rows, r = i % rows;
      float y = row_dot(dots, rows, r, b, batch);
      if constexpr (kFp8W) y *= i == int(threadIdx.x) ? scale0 : w.scale[r0 + r];
      const bf16 v = __float2bfloat16(res[b * max_rows + r] + round_bf16(y));
      h[size_t(b) * n + r0 + r] = v;
      res[b * max_rows + r] = __bfloat162float(v) * __bfloat162float(v);
    }
    if (ss_out != nullptr) {
      __syncthreads();
      const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
      if (warp < batch) {
        float sq = 0.f;
        for (int r = lane; r < rows; r += 32) sq += res[warp * max_rows + r];
        sq = warp_sum(sq);
        if (lane == 0) ss_out[warp * kFusedSsParts + blockIdx.x] = sq;
      }
    }
    trace.end();
    return;
  }
  float sq = 0.f;
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    float y = row_dot(dots, rows, r);
    if constexpr (kFp8W) y *= r == int(threadIdx.x) ? scale0 : w.scale[r0 + r];
    const bf16 v = __float2bfloat16(res[r] + round_bf16(y));  // the residual is kept in bf16
    h[r0 + r] = v;
    sq += __bfloat162float(v) * __bfloat162float(v);
  }
  if (ss_out != nullptr) {
    if (max_rows <= 32) {  // the rows are warp 0's: no block reduction
      if (threadIdx.x < 32) {
        sq = warp_sum(sq);
        if (threadIdx.x == 0) ss_out[blockIdx.x] = sq;
      }
    } else {
      sq = block_sum(sq, reinterpret_cast<float*>(smem + L.red));
      if (threadIdx.x == 0) ss_out[blockIdx.x] = sq;
    }
  }
  trace.end();
}

// act[b][r] = silu(x[b] W_gate^T [r]) * (x[b] W_up^T [r]) with x[b] = rmsnorm(h[b]), for this
// CTA's rows and the step's `batch` sequences.
// ss (not null): the published sums of squares of h, `parts` of them a sequence.
// kStream, kFp8W, kMulti: as residual_proj_kernel.
template <bool kStream, bool kFp8W, bool kMulti>
__global__ void __launch_bounds__(kThreads) gate_up_kernel(const bf16* h, const float* ss, int parts,
                                                           const bf16* norm_w, int hidden, FusedWeight gate_up,
                                                           int inter, bf16* act, float eps, int flags, int stages,
                                                           int k_parts, unsigned long long* trace_base,
                                                           int step_batch) {
  extern __shared__ __align__(128) char smem[];
  const int batch = kMulti ? step_batch : 1;
  const Tracer trace(trace_base, 3);
  int r0, r1;
  my_rows(inter, &r0, &r1);
  const int rows = r1 - r0;
  const ProjLayout L =
      proj_layout(2 * ceil_div(inter, int(gridDim.x)), hidden, 0, true, kStream ? stages : 0, k_parts, kFp8W, batch);
  bf16* x = reinterpret_cast<bf16*>(smem + L.x);
  float* dots = reinterpret_cast<float*>(smem + L.dots);
  float* red = reinterpret_cast<float*>(smem + L.red);
  auto matrix_row = [&](int i) { return i < rows ? r0 + i : inter + r0 + i - rows; };  // gate rows, then up rows
  auto src = [&](int i) { return weight_row<kFp8W>(gate_up, matrix_row(i), hidden); };
  // The FP8 scales of this thread's first item's rows (as in attention_kernel).
  const bool has_first = int(threadIdx.x) < batch * rows;
  const int first_row = kMulti && rows > 0 ? int(threadIdx.x) % rows : int(threadIdx.x);
  const float gate_scale0 = early_scale<kFp8W>(gate_up, has_first, r0 + first_row),
              up_scale0 = early_scale<kFp8W>(gate_up, has_first, inter + r0 + first_row);
  const Ring ring = share_start<kStream, kFp8W>(smem, L, stages, k_parts, hidden, 2 * rows, src, flags);
  bf16* norm_s = reinterpret_cast<bf16*>(smem + L.norm);
  stage(norm_s, norm_w, hidden * 2);
  cp_async_commit();
  wait_inputs(flags);
  trace.mark(kTraceWaited);
  if constexpr (kMulti)
    load_normed_rows([&](int b) { return h + size_t(b) * hidden; }, ss, parts, norm_s, hidden, batch, eps, x, red);
  else
    load_normed_any(h, ss, parts, norm_s, hidden, eps, x, red);
  trace.mark(kTraceInputs);
  share_dots<kStream, kFp8W>(ring, src, smem, L, x, 2 * rows, hidden, dots, flags, trace, batch);
  for (int i = threadIdx.x; i < batch * rows; i += kThreads) {
    const int b = kMulti ? i / rows : 0, r = kMulti ? i % rows : i;
    float g = row_dot(dots, 2 * rows, r, b, batch), u = row_dot(dots, 2 * rows, rows + r, b, batch);
    if constexpr (kFp8W) {
      const bool first = i == int(threadIdx.x);
      g *= first ? gate_scale0 : gate_up.scale[r0 + r];
      u *= first ? up_scale0 : gate_up.scale[inter + r0 + r];
    }
    act[size_t(b) * inter + r0 + r] = silu_mul_products(g, u);
  }
  trace.end();
}

// st.qkv[b][r] = x[b] W_qkv^T [r] (+ bias) with x[b] = rmsnorm(h[b]), for this CTA's rows of the n
// of the q/k/v projection and the step's sequences, rounded as attention_kernel rounds its own
// rows: the projection of a plan whose attention kernel cannot hold its share of these weights
// (FusedDecodePlan::split_qkv). Layer 0 (st.embed set): h[b] is the embedding row of the step's
// token, read from the table, and this kernel leaves it in h as attention_kernel does otherwise.
// ss_parts: the published sums of squares a sequence (st.ss_ready). kStream, kFp8W, kMulti: as
// residual_proj_kernel.
template <bool kStream, bool kFp8W, bool kMulti>
__global__ void __launch_bounds__(kThreads) qkv_proj_kernel(FusedDecodeStep st, const bf16* norm_w, FusedWeight w,
                                                            const bf16* bias, int n, int hidden, int ss_parts,
                                                            int flags, int stages, int k_parts) {
  extern __shared__ __align__(128) char smem[];
  const int batch = kMulti ? st.batch : 1;
  const Tracer trace(st.trace, 0);
  int r0, r1;
  my_rows(n, &r0, &r1);
  const int rows = r1 - r0;
  const ProjLayout L =
      proj_layout(ceil_div(n, int(gridDim.x)), hidden, 0, true, kStream ? stages : 0, k_parts, kFp8W, batch);
  bf16* x = reinterpret_cast<bf16*>(smem + L.x);
  float* dots = reinterpret_cast<float*>(smem + L.dots);
  float* red = reinterpret_cast<float*>(smem + L.red);
  auto src = [&](int i) { return weight_row<kFp8W>(w, r0 + i, hidden); };
  // The FP8 scale and the bias of this thread's first item's row (as in attention_kernel).
  const bool has_first = int(threadIdx.x) < batch * rows;
  const int first_row = kMulti && rows > 0 ? int(threadIdx.x) % rows : int(threadIdx.x);
  const float scale0 = early_scale<kFp8W>(w, has_first, r0 + first_row);
  const float bias0 = early_bias(bias, has_first, r0 + first_row);
  const Ring ring = share_start<kStream, kFp8W>(smem, L, stages, k_parts, hidden, rows, src, flags);
  bf16* norm_s = reinterpret_cast<bf16*>(smem + L.norm);
  stage(norm_s, norm_w, hidden * 2);
  cp_async_commit();
  wait_inputs(flags);
  trace.mark(kTraceWaited);
  auto h_row = [&](int b) { return step_h_row(st, b, hidden); };  // sequence b of the step
  store_embedding<kMulti>(st, hidden);
  const float* ss = st.ss_ready ? st.ss + kFusedSsWords / 2 : nullptr;
  if constexpr (kMulti)
    load_normed_rows(h_row, ss, ss_parts, norm_s, hidden, batch, st.eps, x, red);
  else
    load_normed_any(h_row(0), ss, ss_parts, norm_s, hidden, st.eps, x, red);
  trace.mark(kTraceInputs);
  share_dots<kStream, kFp8W>(ring, src, smem, L, x, rows, hidden, dots, flags, trace, batch);
  for (int i = threadIdx.x; i < batch * rows; i += kThreads) {
    const int b = kMulti ? i / rows : 0, r = kMulti ? i % rows : i;
    const float v = qkv_output<kFp8W>(row_dot(dots, rows, r, b, batch), i == int(threadIdx.x), scale0, bias0, w, bias,
                                      r0 + r);
    st.qkv[size_t(b) * n + r0 + r] = __float2bfloat16(v);
  }
  trace.end();
}

// --- host side ---

// What a projection kernel's CTA holds beside its weight rows: the residual rows it updates
// (o_proj, down), or the norm weights of its input, as gate and up rows of the same index (gate_up)
// or as plain rows (the q/k/v projection of a split plan).
enum class ProjKind { kResidual, kNormedPairs, kNormed };

// The shared memory of a projection kernel of n rows (pairs of them for kNormedPairs) with k
// inputs on `grid` CTAs: the whole share when it fits in max_smem (stages 0), else as many
// streamed stages of tiles of at most tile_k values as fit in stream_smem, up to the tiles there
// are (stages -1: not even two fit).
struct ProjSmem {
  size_t bytes;
  int stages, parts;
};
ProjSmem proj_smem(int n, int k, int grid, ProjKind kind, bool fp8, size_t max_smem, size_t stream_smem, int tile_k,
                   size_t whole_smem, int batch) {
  const int rows = ceil_div(n, grid), share = kind == ProjKind::kNormedPairs ? 2 * rows : rows,
            parts = stream_parts(k, tile_k, fp8);
  auto layout = [&](int stages) {
    return kind == ProjKind::kResidual ? proj_layout(rows, k, rows, false, stages, parts, fp8, batch)
                                       : proj_layout(share, k, 0, true, stages, parts, fp8, batch);
  };
  if (layout(0).total <= std::min(max_smem, whole_smem)) return {layout(0).total, 0, 1};
  int stages = std::min(kMaxStages, ceil_div(share, kTileRows) * parts);
  while (stages >= 2 && layout(stages).total > stream_smem) --stages;
  return stages >= 2 ? ProjSmem{layout(stages).total, stages, parts} : ProjSmem{0, -1, 0};
}

// The attention kernel's shared memory for clusters serving up to `most` sequences (the split of
// the cluster changes with them), in the kernel for one sequence or for several (`multi`), holding
// its weight rows or (`split`) reading q/k/v from the q/k/v kernel (attention_kernel's kSplit).
size_t attention_smem(const FusedDecodeShape& s, int cluster, int most, bool multi, bool split) {
  size_t bytes = 0;
  for (int batch = 1; batch <= most; ++batch)
    bytes = std::max(bytes, attn_layout(split ? 0 : s.hidden, s.num_heads / s.num_kv_heads, cluster, s.head_dim,
                                        !split && s.fp8_weights, batch, multi)
                                .total);
  return bytes;
}

// The projection kernels' instantiations: streamed or whole shares, bf16 or E4M3 weights, one
// sequence or several.
using ResidualKernel = void (*)(const bf16*, int, FusedWeight, int, bf16*, float*, int, int, int, unsigned long long*,
                                int, int);
using GateUpKernel = void (*)(const bf16*, const float*, int, const bf16*, int, FusedWeight, int, bf16*, float, int,
                              int, int, unsigned long long*, int);
template <bool kMulti>
ResidualKernel residual_for(bool stream, bool fp8) {
  return stream ? (fp8 ? residual_proj_kernel<true, true, kMulti> : residual_proj_kernel<true, false, kMulti>)
                : (fp8 ? residual_proj_kernel<false, true, kMulti> : residual_proj_kernel<false, false, kMulti>);
}
ResidualKernel residual_for(bool stream, bool fp8, bool multi) {
  return multi ? residual_for<true>(stream, fp8) : residual_for<false>(stream, fp8);
}
template <bool kMulti>
GateUpKernel gate_up_for(bool stream, bool fp8) {
  return stream ? (fp8 ? gate_up_kernel<true, true, kMulti> : gate_up_kernel<true, false, kMulti>)
                : (fp8 ? gate_up_kernel<false, true, kMulti> : gate_up_kernel<false, false, kMulti>);
}
GateUpKernel gate_up_for(bool stream, bool fp8, bool multi) {
  return multi ? gate_up_for<true>(stream, fp8) : gate_up_for<false>(stream, fp8);
}
using QkvKernel = void (*)(FusedDecodeStep, const bf16*, FusedWeight, const bf16*, int, int, int, int, int, int);
template <bool kMulti>
QkvKernel qkv_for(bool stream, bool fp8) {
  return stream ? (fp8 ? qkv_proj_kernel<true, true, kMulti> : qkv_proj_kernel<true, false, kMulti>)
                : (fp8 ? qkv_proj_kernel<false, true, kMulti> : qkv_proj_kernel<false, false, kMulti>);
}
QkvKernel qkv_for(bool stream, bool fp8, bool multi) {
  return multi ? qkv_for<true>(stream, fp8) : qkv_for<false>(stream, fp8);
}

// The attention kernel for a shape: head_dim 64 or 128, the group's heads held as the next of
// 1, 2, 4, 8 (fused_decode_plan has checked both), the cache element, the weights' type (none
// where the q/k/v projection is split out), one sequence or several.
using AttentionKernel = void (*)(FusedDecodeShape, FusedDecodeStep, FusedDecodeLayer, int, int);
template <int D, typename T, bool kFp8W, bool kMulti, bool kSplit>
AttentionKernel attention_for(int group) {
  return group == 1   ? attention_kernel<D, 1, T, kFp8W, kMulti, kSplit>
         : group == 2 ? attention_kernel<D, 2, T, kFp8W, kMulti, kSplit>
         : group <= 4 ? attention_kernel<D, 4, T, kFp8W, kMulti, kSplit>
                      : attention_kernel<D, 8, T, kFp8W, kMulti, kSplit>;
}
template <typename T, bool kFp8W, bool kMulti, bool kSplit>
AttentionKernel attention_for(int group, int head_dim) {
  return head_dim == 64 ? attention_for<64, T, kFp8W, kMulti, kSplit>(group)
                        : attention_for<128, T, kFp8W, kMulti, kSplit>(group);
}
template <typename T, bool kMulti>
AttentionKernel attention_for(const FusedDecodeShape& s, bool split) {
  const int group = s.num_heads / s.num_kv_heads;
  return split           ? attention_for<T, false, kMulti, true>(group, s.head_dim)
         : s.fp8_weights ? attention_for<T, true, kMulti, false>(group, s.head_dim)
                         : attention_for<T, false, kMulti, false>(group, s.head_dim);
}
template <bool kMulti>
AttentionKernel attention_for(const FusedDecodeShape& s, bool split) {
  return s.kv_dtype == KvDtype::kFp8E4M3 ? attention_for<fp8_e4m3, kMulti>(s, split)
                                         : attention_for<bf16, kMulti>(s, split);
}
AttentionKernel attention_for(const FusedDecodeShape& s, bool multi, bool split) {
  return multi ? attention_for<true>(s, split) : attention_for<false>(s, split);
}

// Lets f launch with `bytes` of dynamic shared memory. Plans for different batch sizes share the
// kernels, so a plan only raises what an earlier one allowed, never lowers it.
void allow_smem(const void* f, size_t bytes) {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, f));
  if (size_t(a.maxDynamicSharedSizeBytes) < bytes)
    CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

}  // namespace

FusedDecodePlan fused_decode_plan(const FusedDecodeShape& s, int max_cluster, const FusedStreaming& streaming,
                                  int max_batch) {
  FusedDecodePlan p;
  p.shape = s;
  p.max_batch = max_batch;
  auto no = [&](const char* why) {
    p.cluster = 0;
    p.why = why;
    return p;
  };
  if (s.head_dim != 64 && s.head_dim != 128) return no("head_dim is not 64 or 128");
  const int group = s.num_kv_heads > 0 && s.num_heads % s.num_kv_heads == 0 ? s.num_heads / s.num_kv_heads : 0;
  if (group < 1 || group > kMaxGroup) return no("q heads per kv head not 1 to 8");
  const bool multi = max_batch > 1;
  const AttentionKernel holding = attention_for(s, multi, false), splitting = attention_for(s, multi, true);
  if (s.hidden % kChunk != 0 || s.intermediate % kChunk != 0)
    return no("hidden or intermediate size not a multiple of 32");
  if (s.fp8_weights && (s.hidden % 64 != 0 || s.intermediate % 64 != 0))
    return no("FP8 weights with a hidden or intermediate size not a multiple of 64");
  if (!valid_block_size(s.block_size)) return no("block size not a power of two from 1 to 256");
  if (max_batch < 1 || max_batch > kFusedMaxBatch) return no("more sequences a step than the mma's 8 columns");
  const int major = device_attribute(cudaDevAttrComputeCapabilityMajor),
            max_smem = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin),
            sm_smem = device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor),
            reserved = device_attribute(cudaDevAttrReservedSharedMemoryPerBlock),
            sms = device_attribute(cudaDevAttrMultiProcessorCount);
  if (major < 9) return no("needs sm_90 or newer (clusters, TMA)");
  p.grid = std::min(sms, kFusedSsParts);
  const int H = s.hidden, I = s.intermediate, D = s.head_dim, q_size = s.num_heads * D;
  // One shared-memory carveout for all the kernels: an SM runs CTAs of different carveouts only
  // after draining, which would undo the overlap PDL gives.
  const ResidualKernel o_kernel = residual_for(false, s.fp8_weights, multi),
                       o_stream = residual_for(true, s.fp8_weights, multi);
  const GateUpKernel gu_kernel = gate_up_for(false, s.fp8_weights, multi),
                     gu_stream = gate_up_for(true, s.fp8_weights, multi);
  const QkvKernel qkv_kernel = qkv_for(false, s.fp8_weights, multi), qkv_stream = qkv_for(true, s.fp8_weights, multi);
  for (const void* f : {reinterpret_cast<const void*>(holding), reinterpret_cast<const void*>(splitting),
                        reinterpret_cast<const void*>(o_kernel), reinterpret_cast<const void*>(o_stream),
                        reinterpret_cast<const void*>(gu_kernel), reinterpret_cast<const void*>(gu_stream),
                        reinterpret_cast<const void*>(qkv_kernel), reinterpret_cast<const void*>(qkv_stream)})
    CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  // The projections. A streamed one takes all the shared memory a CTA may have (the most stages
  // in flight) unless FusedStreaming::smem says less. Half an SM, which lets the next kernel's CTA
  // launch beside it, measured mixed on the H100 (batch 1, tiles of 1,024; half vs all):
  // Qwen3-1.7B 1.645 vs 1.699 ms a step, TinyLlama 1.031 vs 0.975, Llama-3.2-1B 1.180 vs 1.163 in
  // one call and 1.169 vs 1.187 in another (bench/NOTES.md).
  const size_t stream_smem = std::min(size_t(max_smem), streaming.smem > 0 ? streaming.smem : size_t(max_smem));
  // A batch's input vectors take shared memory from the stages: where two tiles of tile_k values
  // no longer fit beside them, tiles of half as many (down to 512).
  auto size = [&](int n, int k, ProjKind kind) {
    ProjSmem r{0, -1, 0};
    for (int tile_k = streaming.tile_k; r.stages < 0 && tile_k >= (max_batch > 1 ? 512 : streaming.tile_k);
         tile_k /= 2)
      r = proj_smem(n, k, std::min(n, sms), kind, s.fp8_weights, max_smem, stream_smem, tile_k,
                    streaming.whole > 0 ? streaming.whole : max_smem, max_batch);
    return r;
  };
  const ProjSmem down = size(H, I, ProjKind::kResidual), gu = size(I, H, ProjKind::kNormedPairs),
                 o = size(H, q_size, ProjKind::kResidual);
  // The block scheduler puts a newly launched kernel's CTAs wherever they fit, and down's (55 KB,
  // 60 registers for Qwen3-0.6B) fit four to an SM that gate_up has left: such SMs pull four
  // weight shares through one port and finish last. Sized past a third of the SM, at most two
  // share one: 0.666 vs 0.699 ms GPU a step on the H100 (bench/NOTES.md, tenth session). Three
  // to an SM gave 0.675, one 0.730; the same cap on o_proj made the step slower.
  const size_t two_per_sm = align_up(size_t(sm_smem) / 3 - size_t(reserved) + 1, 16);
  p.smem[3] = std::min(size_t(max_smem), std::max(down.bytes, two_per_sm));
  if (o.stages < 0 || gu.stages < 0 || down.stages < 0)
    return no("not even two streamed tiles of a projection fit in shared memory");
  for (const auto& [i, k] : {std::pair{1, o}, std::pair{2, gu}, std::pair{3, down}}) {
    p.stages[i] = k.stages;
    p.parts[i] = k.parts;
  }
  p.smem[1] = o.bytes;
  p.smem[2] = gu.bytes;

  // Clusters of 16 CTAs (non-portable, but H100 has them) put ~one CTA per SM on the attention
  // kernel's weights and context; 8 where 16 cannot be scheduled, and first where the down kernel
  // before it takes more than half an SM's shared memory: a cluster needs all its SMs at once,
  // and one of 16 behind such a down kernel started late (H100 trace, Llama-3.2-1B: attention
  // 20.1 us a layer at 16, 12.5 at 8; bench/NOTES.md).
  const size_t half_sm = size_t(sm_smem) / 2 - size_t(reserved);
  const std::array<int, 2> clusters = p.smem[3] > half_sm ? std::array{8, 16} : std::array{16, 8};
  // The attention kernel holding its rows of the q/k/v weights, or (split) reading the q/k/v
  // kernel's outputs: true once a cluster size is placed. held_fits: some cluster size's CTA held
  // its rows in shared memory (whether or not enough such clusters could run at once).
  bool held_fits = false;
  auto place_attention = [&](bool split) {
    const AttentionKernel attention = split ? splitting : holding;
    for (int cluster : clusters) {
      if (cluster > max_cluster) continue;
      // The sequences a cluster serves: a power of two of groups of CTAs a sequence, each group
      // kFusedMinSeqCtas CTAs or more over the kv heads (a last share may hold fewer sequences, one
      // included). None: this cluster size leaves a sequence too few CTAs.
      const int seq_group = multi ? std::min(max_batch, int(std::bit_floor(unsigned(s.num_kv_heads * cluster /
                                                                                        kFusedMinSeqCtas))))
                                  : 1;
      if (seq_group < 1) continue;
      const size_t smem = attention_smem(s, cluster, seq_group, multi, split);
      // A CTA's q/k/v rows go out as float4 pieces; the (max, sum) of a head go to CTAs 0..C-1
      // from the threads of its first C dims.
      if (smem > size_t(max_smem) || (group + 2) * D % (4 * cluster) != 0 || group * D % cluster != 0 ||
          D < cluster)
        continue;
      if (!split) held_fits = true;
      allow_smem(reinterpret_cast<const void*>(attention), smem);
      if (cluster > 8)  // left on once on: another plan's clusters of 16 may launch the kernel
        CUDA_CHECK(cudaFuncSetAttribute(attention, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
      const int clusters_most = s.num_kv_heads * ceil_div(max_batch, seq_group);
      const int active = max_active_clusters(reinterpret_cast<const void*>(attention),
                                             dim3(clusters_most * cluster), dim3(unsigned(cluster)), dim3(kThreads),
                                             smem);
      // Several sequences: every cluster of the largest step at once (larger CTAs fit fewer
      // clusters, and one more than fit runs as a second wave: twice the kernel's time; 0: this
      // size cannot run).
      if (active >= (multi ? clusters_most : 1)) {
        p.cluster = cluster;
        p.seq_group = seq_group;
        p.smem[0] = smem;
        p.split_qkv = split;
        return true;
      }
    }
    return false;
  };
  // Where the attention kernel cannot hold its share of the q/k/v weights (8B-class layers: a kv
  // head's q/k/v rows over at most 16 CTAs), the projection runs as a kernel of its own over every
  // SM, whole or streamed as the others, and the attention kernel reads its outputs. H200, batch
  // 1, against the separate kernels (bench/NOTES.md, fifty-second session): Qwen3-8B 4.38 -> 4.05
  // ms, Qwen2.5-3B's shape -14%, a TP 4 shard's -12%, Llama-3.2-3B's -5%, Qwen3-4B's +3%. Not for
  // FP8 weights: FP8 Llama-3-8B ran 26% slower split, and the fused FP8 projections only tied
  // the separate ones at 8B-class sizes even where the attention holds its rows.
  // Only where shared memory is what fails: a layout that fits but cannot run every cluster of a
  // step at once keeps the separate kernels, as before the split (not measured split).
  if (!place_attention(false) && !held_fits && !s.fp8_weights) {
    const ProjSmem qkv = size(s.qkv_rows(), H, ProjKind::kNormed);
    if (qkv.stages >= 0 && place_attention(true)) {
      p.smem[4] = qkv.bytes;
      p.stages[4] = qkv.stages;
      p.parts[4] = qkv.parts;
    }
  }
  if (p.cluster == 0 && s.fp8_weights && !held_fits)
    return no("no cluster of 16 or 8 CTAs of the attention kernel holds its q/k/v rows, and FP8 weights do not "
              "split that projection out");
  if (p.cluster == 0)
    return no(multi ? "no cluster of 16 or 8 CTAs of the attention kernel keeps 16 CTAs a sequence with every "
                      "cluster of the step at once"
                    : "no cluster of 16 or 8 CTAs fits the attention kernel (shared memory)");
  for (ResidualKernel f : {o_kernel, o_stream})
    allow_smem(reinterpret_cast<const void*>(f), std::max(p.smem[1], p.smem[3]));
  for (GateUpKernel f : {gu_kernel, gu_stream}) allow_smem(reinterpret_cast<const void*>(f), p.smem[2]);
  if (p.split_qkv)
    for (QkvKernel f : {qkv_kernel, qkv_stream}) allow_smem(reinterpret_cast<const void*>(f), p.smem[4]);
  return p;
}

namespace {

// A layer's launches: the plan's checks, and what every kernel of the layer shares.
struct LayerLaunch {
  const FusedDecodePlan& p;
  const FusedDecodeStep& st;
  const FusedDecodeLayer& w;
  cudaStream_t stream;
  static constexpr int kFlags = kFlagEarly | kFlagEvict;

  LayerLaunch(const FusedDecodePlan& plan, const FusedDecodeStep& step, const FusedDecodeLayer& layer, cudaStream_t s)
      : p(plan), st(step), w(layer), stream(s) {
    NVLLM_CHECK(p.cluster > 0, "internal: fused decode without a plan (", p.why ? p.why : "none", ")");
    // A plan for several sequences is sized for 2 .. max_batch of them; one sequence has its own.
    NVLLM_CHECK(st.batch >= (p.max_batch > 1 ? 2 : 1) && st.batch <= p.max_batch, "internal: a fused decode step of ",
                st.batch, " sequences on a plan for ", p.max_batch > 1 ? "2 to " : "", p.max_batch);
    const KvDtype kv = p.shape.kv_dtype;
    NVLLM_CHECK(w.kv.dtype == kv && (kv == KvDtype::kBf16 || (w.kv.k_scale && w.kv.v_scale)),
                "internal: fused decode planned for another KV-cache type, or an FP8 cache without scales");
    NVLLM_CHECK((w.qkv.scale != nullptr) == fp8() && (w.o_proj.scale != nullptr) == fp8() &&
                    (w.gate_up.scale != nullptr) == fp8() && (w.down.scale != nullptr) == fp8(),
                "internal: fused decode planned for other weights (bf16 vs FP8) than the layer's");
  }
  bool fp8() const { return p.shape.fp8_weights; }
  bool multi() const { return p.max_batch > 1; }
  int grid_h() const { return std::min(p.shape.hidden, p.grid); }
  // Published sums of squares: o_proj's for gate_up, down's for the next layer's attention.
  bool publish() const { return st.ss != nullptr && p.shape.hidden <= kMaxPublishedHidden; }
  float* ss_post() const { return publish() ? st.ss : nullptr; }
  float* ss_next() const { return publish() ? st.ss + kFusedSsWords / 2 : nullptr; }

  void attention() const {
    const FusedDecodeShape& s = p.shape;
    FusedDecodeStep sta = st;
    sta.ss_ready = publish() && st.ss_ready;
    if (p.split_qkv) {  // the q/k/v projection first; the attention kernel reads its outputs
      NVLLM_CHECK(st.qkv != nullptr, "internal: a split q/k/v projection without FusedDecodeStep::qkv");
      launch_pdl(qkv_for(p.stages[4] > 0, fp8(), multi()), dim3(std::min(s.qkv_rows(), p.grid)), dim3(kThreads),
                 p.smem[4], stream, sta, w.input_norm, w.qkv, w.qkv_bias, s.qkv_rows(), s.hidden, grid_h(), kFlags,
                 p.stages[4], p.parts[4]);
      sta.embed = nullptr;  // h holds the embedding now
    }
    const cudaLaunchAttribute attrs[2] = {cluster_attr(p.cluster), pdl_attr()};
    const int shares = ceil_div(st.batch, p.seq_group);  // clusters a kv head
    launch_with({attrs, pdl_enabled() ? 2u : 1u}, attention_for(s, multi(), p.split_qkv),
                dim3(s.num_kv_heads * shares * p.cluster), dim3(kThreads), p.smem[0], stream, s, sta, w, kFlags,
                grid_h());
  }
  void residual(int slot, const bf16* x, int k, FusedWeight weight, float* ss_out) const {
    launch_pdl(residual_for(p.stages[slot] > 0, fp8(), multi()), dim3(grid_h()), dim3(kThreads), p.smem[slot], stream,
               x, k, weight, p.shape.hidden, st.h, ss_out, kFlags, p.stages[slot], p.parts[slot], st.trace,
               slot == 1 ? 2 : 4, st.batch);
  }
  void gate_up() const {
    const int I = p.shape.intermediate;
    launch_pdl(gate_up_for(p.stages[2] > 0, fp8(), multi()), dim3(std::min(I, p.grid)), dim3(kThreads), p.smem[2],
               stream, static_cast<const bf16*>(st.h), static_cast<const float*>(ss_post()), grid_h(), w.post_norm,
               p.shape.hidden, w.gate_up, I, st.act, st.eps, kFlags, p.stages[2], p.parts[2], st.trace, st.batch);
  }
};

}  // namespace

void fused_decode_layer(const FusedDecodePlan& p, const FusedDecodeStep& st, const FusedDecodeLayer& w,
                        cudaStream_t stream) {
  const LayerLaunch l(p, st, w, stream);
  l.attention();
  l.residual(1, static_cast<const bf16*>(st.attn), p.shape.num_heads * p.shape.head_dim, w.o_proj, l.ss_post());
  l.gate_up();
  l.residual(3, static_cast<const bf16*>(st.act), p.shape.intermediate, w.down, l.ss_next());
}

void fused_decode_attention(const FusedDecodePlan& p, const FusedDecodeStep& st, const FusedDecodeLayer& w,
                            cudaStream_t stream) {
  NVLLM_CHECK(st.ss == nullptr && st.embed == nullptr,
              "internal: a rank's fused attention with published sums of squares or the embedding");
  LayerLaunch(p, st, w, stream).attention();
}

void fused_decode_gate_up(const FusedDecodePlan& p, const FusedDecodeStep& st, const FusedDecodeLayer& w,
                          cudaStream_t stream) {
  NVLLM_CHECK(st.ss == nullptr, "internal: a rank's fused gate_up with published sums of squares");
  LayerLaunch(p, st, w, stream).gate_up();
}

}  // namespace nvllm::kernels
