// Batch-1 decode as four fused kernels per layer: the single-stream latency path.
//
// At batch 1 a decode step reads every weight once (1.19 GB for Qwen3-0.6B) and does almost no
// arithmetic: the floor is the weight stream, 0.39 ms at 3.03 TB/s. As ~255 separate kernels
// (norms, projections, RoPE, attention and its reduce) the step took 1.14 ms on the H100: every
// kernel boundary and every dependent L2 round trip of a small kernel sits on the critical path.
// Here a layer is four kernels, each a grid of about one CTA per SM that owns a contiguous run of
// weight rows:
//   attention  x = rmsnorm(h); qkv = x W_qkv^T (+ bias); q/k norm + RoPE; the new k/v into the
//              cache; attention over the context. One thread-block cluster per kv head: its CTAs
//              share the head's q/k/v rows, exchange their outputs through distributed shared
//              memory, split the context among themselves and merge the splits the same way.
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
// codes (8 or 4 bytes) and converts them in registers; the new token's k and v are quantised (the
// codes go to the cache) and the attention uses the same codes for it, as for every other token;
// k_scale goes into the query, v_scale into the output. The codes of the new token replace its
// values in shared memory behind one more block barrier; quantising them again where the loop
// reads them, without the barrier, was slower on the H100 (a Qwen3-0.6B batch-1 step 0.696 vs
// 0.678 ms; bf16 0.666: bench/NOTES.md).
#include <cooperative_groups.h>

#include <algorithm>
#include <array>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/decode_fused.h"
#include "kernels/decode_fused_blocks.cuh"
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

// One cluster per kv head g; CTA `rank` of C owns rows [rank * rows, (rank + 1) * rows) of the
// group's q heads, k and v (G + 2 heads of D rows), the rank-th of C context splits, and the
// outputs [rank * outs, (rank + 1) * outs) of the group (they may span two heads). Both exchanges
// are pushes into the consumer's shared memory by st.async, which counts the bytes on the
// consumer's mbarrier: a CTA waits for exactly the data it needs, and the cluster meets in a
// barrier only once, at the start (every CTA running, its mbarriers initialised, before the first
// push). Nothing is read from another CTA's shared memory, and a CTA leaves only after all pushes
// to it have landed.
// D: head_dim, 64 or 128. GM: the q heads per kv head this instantiation holds in registers (1,
// 2, 4 or 8); the model's group G (shape.num_heads / num_kv_heads) is at most GM, and heads
// G .. GM-1 are computed on scratch and never stored. T: the cache element, bf16 or fp8_e4m3.
// kFp8W: the q/k/v weights are E4M3 codes (a template: as a runtime branch, the bf16 kernel's
// step grew 3% on the H100).
template <int D, int GM, typename T, bool kFp8W>
__global__ void __launch_bounds__(kThreads) attention_kernel(FusedDecodeShape shape, FusedDecodeStep st,
                                                             FusedDecodeLayer w, int flags, int ss_parts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kFp8 = std::is_same_v<T, fp8_e4m3>;
  // A lane holds kDims dims of a token: 4 for groups of 8 heads, so that its accumulators (GM x
  // kDims) stay at 32 floats and the kernel at ~150 registers, small enough to share an SM with
  // the down kernel it follows (240 registers at 8 dims took an SM's whole register file, and the
  // kernel could not launch before down had drained).
  constexpr int kDims = GM > 4 ? 4 : 8;
  using Raw = std::conditional_t<kFp8, std::conditional_t<kDims == 8, uint2, uint32_t>,
                                 std::conditional_t<kDims == 8, uint4, uint2>>;  // a lane's dims of a cached token
  constexpr int kLanes = D / kDims;  // lanes that hold one token's D dims
  constexpr int kTokenGroups = kThreads / kLanes;
  T* const k_cache = static_cast<T*>(w.kv.k);
  T* const v_cache = static_cast<T*>(w.kv.v);
  extern __shared__ __align__(128) char smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int C = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int H = shape.hidden, g = blockIdx.x / C, G = shape.num_heads / shape.num_kv_heads;
  const AttnLayout L = attn_layout(H, G, C, D, kFp8W);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + L.bar);  // weights, exchange, inbox
  if (threadIdx.x == 0) {
    mbar_init(bar + 1);
    mbar_init(bar + 2);
    mbar_expect(bar + 1, (G + 2) * D * 4);           // the group's q, k and v
    mbar_expect(bar + 2, C * (L.outs + 2 * G) * 4);  // every split's partial of my outputs, (max, sum) of each head
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
  float* inbox = reinterpret_cast<float*>(smem + L.inbox);        // [C splits][outs]
  float* inbox_ml = reinterpret_cast<float*>(smem + L.inbox_ml);  // [C splits][G heads][m, l]
  float* red = reinterpret_cast<float*>(smem + L.red);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const Tracer trace(st.trace, 0);

  // Group row i (the G q heads, then k, then v) -> its row of the fused qkv matrix.
  const int q_rows = G * D, q_size = shape.num_heads * D, kv_size = shape.num_kv_heads * D;
  auto matrix_row = [&](int i) {
    return i < q_rows ? g * q_rows + i : i < q_rows + D ? q_size + g * D + (i - q_rows)
                                                        : q_size + kv_size + g * D + (i - q_rows - D);
  };
  const int i0 = rank * L.rows;
  copy_rows(ws, H, kFp8W, L.rows, [&](int i) { return weight_row<kFp8W>(w.qkv, matrix_row(i0 + i), H); }, bar, flags);
  // FP8 weights: the scale of this thread's row (a CTA has at most 10 heads of 128 rows over 8
  // CTAs, 160 rows: one a thread).
  const float qkv_scale = early_scale<kFp8W>(w.qkv, tid < L.rows, matrix_row(i0 + tid));
  bf16* norm_s = reinterpret_cast<bf16*>(smem + L.norm);
  bf16* q_norm_s = w.q_norm != nullptr ? reinterpret_cast<bf16*>(smem + L.qk_norm) : nullptr;  // null: no q/k norm
  bf16* k_norm_s = w.k_norm != nullptr ? reinterpret_cast<bf16*>(smem + L.qk_norm) + D : nullptr;
  float* freq_s = reinterpret_cast<float*>(smem + L.freq);
  stage(norm_s, w.input_norm, H * 2);
  if (q_norm_s != nullptr) stage(q_norm_s, w.q_norm, D * 2);
  if (k_norm_s != nullptr) stage(k_norm_s, w.k_norm, D * 2);
  stage(freq_s, st.inv_freq, D / 2 * 4);
  cp_async_commit();
  const int position = st.position[0], slot = st.slot[0];  // used after the wait
  // Layer 0 reads its input from the embedding table (a constant) and leaves it in h.
  const bf16* h_in = st.embed != nullptr ? st.embed + size_t(st.token[0]) * H : st.h;

  // This CTA's context split. The cached K/V of its tokens were written by earlier steps, so
  // they are constants here: the first tokens' go into registers before the wait, the next ones
  // into L2. kTokenGroups groups of kLanes lanes walk the tokens, lane `sub` holding dims
  // sub*kDims .. sub*kDims+kDims-1.
  const int ctx = st.context_len[0], bs = shape.block_size;
  const int per = ceil_div(ctx, C), start = min(ctx, rank * per), end = min(ctx, start + per);
  const size_t row_stride = size_t(kv_size);  // elements per cache slot: [slot][kv head][D]
  auto cache_row = [&](int t) {
    return (size_t(st.block_table[t / bs]) * bs + t % bs) * row_stride + size_t(g) * D;
  };
  const int grp = tid / kLanes, sub = tid % kLanes;
  constexpr int kU = 3;  // tokens per group and iteration
  Raw kv[kU], vv[kU];
  auto load_tokens = [&](int t0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = t0 + u * kTokenGroups;
      if (t < end && t != ctx - 1) {
        kv[u] = __ldcg(reinterpret_cast<const Raw*>(k_cache + cache_row(t) + sub * kDims));
        vv[u] = __ldcg(reinterpret_cast<const Raw*>(v_cache + cache_row(t) + sub * kDims));
      }
    }
  };
  load_tokens(start + grp);
  const int ahead = start + kTokenGroups * kU;  // tokens the first loads do not cover
  for (int j = tid; j < 2 * min(end - ahead, kPrefetchTokens); j += kThreads) {
    const int t = ahead + j / 2;
    if (t != ctx - 1) prefetch_l2_bytes(((j & 1) ? v_cache : k_cache) + cache_row(t), D * sizeof(T));
  }
  // FP8: this kv head's scales (constants, read before the wait).
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (kFp8) {
    k_scale = w.kv.k_scale[g];
    v_scale = w.kv.v_scale[g];
  }
  wait_inputs(flags);
  trace.mark(kTraceWaited);

  if (st.embed != nullptr)  // this CTA's share of h = the embedding row
    for (int i = (blockIdx.x * kThreads + tid) * 8; i < H; i += gridDim.x * kThreads * 8)
      store8(st.h + i, load8(h_in + i));
  load_normed_any(h_in, st.ss_ready ? st.ss + kFusedSsParts : nullptr, ss_parts, norm_s, H, st.eps, x, red);
  trace.mark(kTraceInputs);
  mbar_wait(bar, 0);
  trace.mark(kTraceWeights);
  whole_dots<kFp8W>(ws, x, L.rows, H, dots);
  for (int r = tid; r < L.rows; r += kThreads) {  // row r's value replaces warp 0's partial
    float v = row_dot(dots, L.rows, r);
    if constexpr (kFp8W) v *= qkv_scale;
    v = round_bf16(v);
    if (w.qkv_bias != nullptr) v = round_bf16(v + __bfloat162float(w.qkv_bias[matrix_row(i0 + r)]));
    dots[r] = v;
  }
  __syncthreads();
  cluster_wait();  // every CTA of the cluster has started: pushes may go
  for (int i = tid; i < L.rows / 4 * C; i += kThreads) {  // my rows' outputs into every CTA's q/k/v
    const int to = i / (L.rows / 4), piece = i % (L.rows / 4);
    st_async16(cluster_addr(q + i0 + 4 * piece, to), reinterpret_cast<const float4*>(dots)[piece],
               cluster_addr(bar + 1, to));
  }
  mbar_wait(bar + 1, 0);
  trace.mark(kTracePhase1);

  // Heads 0..G-1: the q heads (normed, roped, scaled for exp2); head G: the new k. A warp each;
  // lane `lane` rotates the pairs (i, i + D/2) for i = lane + 32 j.
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
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int i = lane + 32 * j;
      const float2 r = norm_rope_pair(a[j], b[j], rstd, norm_w, i, D / 2, float(position), freq_s[i]);
      head[i] = r.x * m;
      head[i + D / 2] = r.y * m;
    }
  }
  __syncthreads();
  if constexpr (kFp8) {
    // The new token's k and v as codes: into the cache, and in place of the values for the
    // attention below (every CTA quantises the same values the same way).
    if (tid < 2 * D) {
      const bool is_k = tid < D;
      float* value = is_k ? k_new + tid : v_new + tid - D;
      const fp8_e4m3 code = e4m3_of(*value, is_k ? k_scale : v_scale);
      if (rank == 0 && slot >= 0)
        (is_k ? k_cache : v_cache)[size_t(slot) * row_stride + size_t(g) * D + tid % D] = code;
      *value = float(code);
    }
    __syncthreads();
  } else if (rank == 0 && slot >= 0 && tid < 2 * D) {  // the new token's k and v into the cache
    const bool is_k = tid < D;
    (is_k ? k_cache : v_cache)[size_t(slot) * row_stride + size_t(g) * D + tid % D] =
        __float2bfloat16(is_k ? k_new[tid] : v_new[tid - D]);
  }
  trace.mark(kTracePhase2);

  // Online softmax over the split; the new token's k/v come from shared memory. An iteration
  // takes up to kU tokens per group: their dot products first (independent chains, so their
  // shuffles overlap), then one softmax update per head with the largest of them. The same trip
  // count for the whole block (the kLanes-lane shuffles need every group of a warp); a slot u
  // that no group has a token for is skipped by all (t0 - grp is the same for every thread).
  // Heads past G read whatever lies in shared memory after q (finite) and are never stored.
  float m[GM], l[GM], o[GM][kDims];
  softmax_start(m, l, o);
  // Token t's k or v dims of this lane: the new token's from shared memory, a cached one from
  // the registers loaded for slot u, zeros past the split.
  auto token_dims = [&](int t, const float* fresh, const Raw& cached, float (&f)[kDims]) {
    if (t == ctx - 1) {
#pragma unroll
      for (int i = 0; i < kDims; ++i) f[i] = fresh[sub * kDims + i];
    } else if (t < end) {
      if constexpr (kFp8 && kDims == 8) {
        e4m3x8_to_float(cached, f);
      } else if constexpr (kFp8) {
        e4m3x4_to_float(cached, f);
      } else {
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&cached);
#pragma unroll
        for (int i = 0; i < kDims / 2; ++i) {
          const float2 v = __bfloat1622float2(pairs[i]);
          f[2 * i] = v.x;
          f[2 * i + 1] = v.y;
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kDims; ++i) f[i] = 0.f;
    }
  };
  for (int t0 = start + grp; t0 - grp < end; t0 += kTokenGroups * kU) {
    if (t0 != start + grp) load_tokens(t0);
    const int slots = min(kU, ceil_div(end - (t0 - grp), kTokenGroups));  // slots some group has a token in
    float d[kU][GM];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (u >= slots) break;
      float kf[kDims];
      token_dims(t0 + u * kTokenGroups, k_new, kv[u], kf);
#pragma unroll
      for (int h = 0; h < GM; ++h) {
        const float4* qh = reinterpret_cast<const float4*>(q + h * D + sub * kDims);
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < kDims / 4; ++i) {
          const float4 qv = qh[i];
          dot = fmaf(qv.x, kf[4 * i], dot);
          dot = fmaf(qv.y, kf[4 * i + 1], dot);
          dot = fmaf(qv.z, kf[4 * i + 2], dot);
          dot = fmaf(qv.w, kf[4 * i + 3], dot);
        }
        d[u][h] = warp_sum<kLanes>(dot);
      }
    }
    const int mine = min(slots, ceil_div(end - t0, kTokenGroups));  // this group's tokens: slots 0 .. mine-1
    if (mine <= 0) continue;
    softmax_rescale(m, l, o, d, mine);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (u >= mine) break;
      float vf[kDims];
      token_dims(t0 + u * kTokenGroups, v_new, vv[u], vf);
      softmax_add(m, l, o, d[u], vf);
    }
  }
  // Merge the token groups of a warp (lanes kLanes apart), then the warps through shared memory.
#pragma unroll
  for (int h = 0; h < GM; ++h) {
#pragma unroll
    for (int off = kLanes; off < 32; off *= 2) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[h], off), lo = __shfl_xor_sync(0xffffffffu, l[h], off);
      const float mx = fmaxf(m[h], mo);
      const float a = mx == -INFINITY ? 0.f : exp2f(m[h] - mx), b = mx == -INFINITY ? 0.f : exp2f(mo - mx);
#pragma unroll
      for (int i = 0; i < kDims; ++i) o[h][i] = o[h][i] * a + __shfl_xor_sync(0xffffffffu, o[h][i], off) * b;
      m[h] = mx;
      l[h] = l[h] * a + lo * b;
    }
    if (h < G && lane < kLanes) {
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[(warp * G + h) * D + sub * kDims + i] = o[h][i];
      if (lane == 0) {
        ml[(warp * G + h) * 2] = m[h];
        ml[(warp * G + h) * 2 + 1] = l[h];
      }
    }
  }
  __syncthreads();
  // This split's result for every output of the group (a warp that saw no token has max -inf),
  // pushed straight to the inbox of the CTA that finishes it; the thread of output (h, d < C)
  // also pushes head h's (max, sum) to CTA d.
  for (int i = tid; i < G * D; i += kThreads) {
    const int h = i / D, d = i % D;
    const SoftmaxPart r = merge_softmax(
        kWarps, [&](int j) { return ml[(j * G + h) * 2]; }, [&](int j) { return ml[(j * G + h) * 2 + 1]; },
        [&](int j) { return acc[(j * G + h) * D + d]; });
    const int to = i / L.outs;
    st_async4(cluster_addr(inbox + rank * L.outs + i % L.outs, to), r.acc, cluster_addr(bar + 2, to));
    if (d < C)
      st_async8(cluster_addr(inbox_ml + 2 * (rank * G + h), d), make_float2(r.m, r.l), cluster_addr(bar + 2, d));
  }
  mbar_wait(bar + 2, 0);  // every split's partial of my outputs has landed
  trace.mark(kTracePhase3);

  // Merge the C splits of this CTA's outputs: C lanes per output, one split each, reduced by
  // shuffles (a split with no tokens has max -inf). outs * C = G * D pairs: whole warps.
  for (int i = tid; i < L.outs * C; i += kThreads) {
    const int o = i / C, j = i % C;
    const int oi = rank * L.outs + o, h = oi / D, d = oi % D;
    const float mj = inbox_ml[2 * (j * G + h)];
    const float mx = C == 16 ? warp_max<16>(mj) : warp_max<8>(mj);
    const float wj = mj == -INFINITY ? 0.f : exp2f(mj - mx);
    const float l = inbox_ml[2 * (j * G + h) + 1] * wj, a = inbox[j * L.outs + o] * wj;
    const float sl = C == 16 ? warp_sum<16>(l) : warp_sum<8>(l), sa = C == 16 ? warp_sum<16>(a) : warp_sum<8>(a);
    if (j == 0) st.attn[size_t(g * G + h) * D + d] = __float2bfloat16(sl > 0.f ? sa / sl * v_scale : 0.f);
  }
  trace.end();
#endif
}

// h[r] += x W^T [r] for this CTA's rows (o_proj with x = attn, down with x = act).
// ss_out (not null): this CTA's sum of the squares of the rows it wrote, at ss_out[blockIdx.x].
// kStream: the weight rows are streamed through `stages` stages in `parts` k parts (ring_dots); a
// template so that the whole-share kernel's code (and registers) stay as they are without it.
// kFp8W: the weights are E4M3 codes with a scale per row (w.scale).
template <bool kStream, bool kFp8W>
__global__ void __launch_bounds__(kThreads) residual_proj_kernel(const bf16* x_in, int k, FusedWeight w, int n,
                                                                 bf16* h, float* ss_out, int flags, int stages,
                                                                 int parts, unsigned long long* trace_base,
                                                                 int trace_kernel) {
  extern __shared__ __align__(128) char smem[];
  const Tracer trace(trace_base, trace_kernel);
  int r0, r1;
  my_rows(n, &r0, &r1);
  const int rows = r1 - r0, max_rows = ceil_div(n, int(gridDim.x));
  const ProjLayout L = proj_layout(max_rows, k, max_rows, false, kStream ? stages : 0, parts, kFp8W);
  bf16* x = reinterpret_cast<bf16*>(smem + L.x);
  float* res = reinterpret_cast<float*>(smem + L.res);
  float* dots = reinterpret_cast<float*>(smem + L.dots);
  auto src = [&](int i) { return weight_row<kFp8W>(w, r0 + i, k); };
  const float scale0 = early_scale<kFp8W>(w, int(threadIdx.x) < rows, r0 + threadIdx.x);
  const Ring ring = share_start<kStream, kFp8W>(smem, L, stages, parts, k, rows, src, flags);
  wait_inputs(flags);
  trace.mark(kTraceWaited);
  for (int r = threadIdx.x; r < rows; r += kThreads) res[r] = __bfloat162float(__ldcg(h + r0 + r));  // with x
  load_vector(x_in, k, x);
  trace.mark(kTraceInputs);
  share_dots<kStream, kFp8W>(ring, src, smem, L, x, rows, k, dots, flags, trace);
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

// act[r] = silu(x W_gate^T [r]) * (x W_up^T [r]) with x = rmsnorm(h), for this CTA's rows.
// ss (not null): the published sums of squares of h, `parts` of them.
// kStream, kFp8W: as residual_proj_kernel.
template <bool kStream, bool kFp8W>
__global__ void __launch_bounds__(kThreads) gate_up_kernel(const bf16* h, const float* ss, int parts,
                                                           const bf16* norm_w, int hidden, FusedWeight gate_up,
                                                           int inter, bf16* act, float eps, int flags, int stages,
                                                           int k_parts, unsigned long long* trace_base) {
  extern __shared__ __align__(128) char smem[];
  const Tracer trace(trace_base, 2);
  int r0, r1;
  my_rows(inter, &r0, &r1);
  const int rows = r1 - r0;
  const ProjLayout L =
      proj_layout(2 * ceil_div(inter, int(gridDim.x)), hidden, 0, true, kStream ? stages : 0, k_parts, kFp8W);
  bf16* x = reinterpret_cast<bf16*>(smem + L.x);
  float* dots = reinterpret_cast<float*>(smem + L.dots);
  float* red = reinterpret_cast<float*>(smem + L.red);
  auto matrix_row = [&](int i) { return i < rows ? r0 + i : inter + r0 + i - rows; };  // gate rows, then up rows
  auto src = [&](int i) { return weight_row<kFp8W>(gate_up, matrix_row(i), hidden); };
  const bool my_row = int(threadIdx.x) < rows;
  const float gate_scale0 = early_scale<kFp8W>(gate_up, my_row, r0 + threadIdx.x),
              up_scale0 = early_scale<kFp8W>(gate_up, my_row, inter + r0 + threadIdx.x);
  const Ring ring = share_start<kStream, kFp8W>(smem, L, stages, k_parts, hidden, 2 * rows, src, flags);
  bf16* norm_s = reinterpret_cast<bf16*>(smem + L.norm);
  stage(norm_s, norm_w, hidden * 2);
  cp_async_commit();
  wait_inputs(flags);
  trace.mark(kTraceWaited);
  load_normed_any(h, ss, parts, norm_s, hidden, eps, x, red);
  trace.mark(kTraceInputs);
  share_dots<kStream, kFp8W>(ring, src, smem, L, x, 2 * rows, hidden, dots, flags, trace);
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    float g = row_dot(dots, 2 * rows, r), u = row_dot(dots, 2 * rows, rows + r);
    if constexpr (kFp8W) {
      const bool mine = r == int(threadIdx.x);
      g *= mine ? gate_scale0 : gate_up.scale[r0 + r];
      u *= mine ? up_scale0 : gate_up.scale[inter + r0 + r];
    }
    act[r0 + r] = __float2bfloat16(silu_mul_one(round_bf16(g), round_bf16(u)));
  }
  trace.end();
}

// --- host side ---

// The shared memory of a projection kernel of n rows with k inputs on `grid` CTAs (pairs: gate
// and up rows, which update no residual): the whole share when it fits in max_smem (stages 0),
// else as many streamed stages of tiles of at most tile_k values as fit in stream_smem, up to the
// tiles there are (stages -1: not even two fit).
struct ProjSmem {
  size_t bytes;
  int stages, parts;
};
ProjSmem proj_smem(int n, int k, int grid, bool pairs, bool fp8, size_t max_smem, size_t stream_smem, int tile_k,
                   size_t whole_smem) {
  const int rows = ceil_div(n, grid), share = pairs ? 2 * rows : rows, parts = stream_parts(k, tile_k, fp8);
  auto layout = [&](int stages) {
    return pairs ? proj_layout(share, k, 0, true, stages, parts, fp8)
                 : proj_layout(rows, k, rows, false, stages, parts, fp8);
  };
  if (layout(0).total <= std::min(max_smem, whole_smem)) return {layout(0).total, 0, 1};
  int stages = std::min(kMaxStages, ceil_div(share, kTileRows) * parts);
  while (stages >= 2 && layout(stages).total > stream_smem) --stages;
  return stages >= 2 ? ProjSmem{layout(stages).total, stages, parts} : ProjSmem{0, -1, 0};
}

size_t attention_smem(const FusedDecodeShape& s, int cluster) {
  return attn_layout(s.hidden, s.num_heads / s.num_kv_heads, cluster, s.head_dim, s.fp8_weights).total;
}

// The projection kernels' instantiations: streamed or whole shares, bf16 or E4M3 weights.
using ResidualKernel = void (*)(const bf16*, int, FusedWeight, int, bf16*, float*, int, int, int, unsigned long long*,
                                int);
using GateUpKernel = void (*)(const bf16*, const float*, int, const bf16*, int, FusedWeight, int, bf16*, float, int,
                              int, int, unsigned long long*);
ResidualKernel residual_for(bool stream, bool fp8) {
  return stream ? (fp8 ? residual_proj_kernel<true, true> : residual_proj_kernel<true, false>)
                : (fp8 ? residual_proj_kernel<false, true> : residual_proj_kernel<false, false>);
}
GateUpKernel gate_up_for(bool stream, bool fp8) {
  return stream ? (fp8 ? gate_up_kernel<true, true> : gate_up_kernel<true, false>)
                : (fp8 ? gate_up_kernel<false, true> : gate_up_kernel<false, false>);
}

// The attention kernel for a shape: head_dim 64 or 128, the group's heads held as the next of
// 1, 2, 4, 8 (fused_decode_plan has checked both), the cache element, the weights' type.
using AttentionKernel = void (*)(FusedDecodeShape, FusedDecodeStep, FusedDecodeLayer, int, int);
template <int D, typename T, bool kFp8W>
AttentionKernel attention_for(int group) {
  return group == 1   ? attention_kernel<D, 1, T, kFp8W>
         : group == 2 ? attention_kernel<D, 2, T, kFp8W>
         : group <= 4 ? attention_kernel<D, 4, T, kFp8W>
                      : attention_kernel<D, 8, T, kFp8W>;
}
template <typename T, bool kFp8W>
AttentionKernel attention_for(int group, int head_dim) {
  return head_dim == 64 ? attention_for<64, T, kFp8W>(group) : attention_for<128, T, kFp8W>(group);
}
template <typename T>
AttentionKernel attention_for(const FusedDecodeShape& s) {
  const int group = s.num_heads / s.num_kv_heads;
  return s.fp8_weights ? attention_for<T, true>(group, s.head_dim) : attention_for<T, false>(group, s.head_dim);
}
AttentionKernel attention_for(const FusedDecodeShape& s) {
  return s.kv_dtype == KvDtype::kFp8E4M3 ? attention_for<fp8_e4m3>(s) : attention_for<bf16>(s);
}

cudaLaunchAttribute cluster_attr(int cluster) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = unsigned(cluster);
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

}  // namespace

FusedDecodePlan fused_decode_plan(const FusedDecodeShape& s, int max_cluster, const FusedStreaming& streaming) {
  FusedDecodePlan p;
  p.shape = s;
  auto no = [&](const char* why) {
    p.cluster = 0;
    p.why = why;
    return p;
  };
  if (s.head_dim != 64 && s.head_dim != 128) return no("head_dim is not 64 or 128");
  const int group = s.num_kv_heads > 0 && s.num_heads % s.num_kv_heads == 0 ? s.num_heads / s.num_kv_heads : 0;
  if (group < 1 || group > kMaxGroup) return no("q heads per kv head not 1 to 8");
  const AttentionKernel attention = attention_for(s);
  if (s.hidden % kChunk != 0 || s.intermediate % kChunk != 0)
    return no("hidden or intermediate size not a multiple of 32");
  if (s.fp8_weights && (s.hidden % 64 != 0 || s.intermediate % 64 != 0))
    return no("FP8 weights with a hidden or intermediate size not a multiple of 64");
  if (s.block_size < 1) return no("block size below 1");
  int device = 0, major = 0, max_smem = 0, sm_smem = 0, reserved = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (major < 9) return no("needs sm_90 or newer (clusters, TMA)");
  p.grid = std::min(sms, kFusedSsParts);
  const int H = s.hidden, I = s.intermediate, D = s.head_dim, q_size = s.num_heads * D;
  // One shared-memory carveout for all the kernels: an SM runs CTAs of different carveouts only
  // after draining, which would undo the overlap PDL gives.
  const ResidualKernel o_kernel = residual_for(false, s.fp8_weights), o_stream = residual_for(true, s.fp8_weights);
  const GateUpKernel gu_kernel = gate_up_for(false, s.fp8_weights), gu_stream = gate_up_for(true, s.fp8_weights);
  for (const void* f : {reinterpret_cast<const void*>(attention), reinterpret_cast<const void*>(o_kernel),
                        reinterpret_cast<const void*>(o_stream), reinterpret_cast<const void*>(gu_kernel),
                        reinterpret_cast<const void*>(gu_stream)})
    CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  // The projections. A streamed one takes all the shared memory a CTA may have (the most stages
  // in flight) unless FusedStreaming::smem says less. Half an SM, which lets the next kernel's CTA
  // launch beside it, measured mixed on the H100 (batch 1, tiles of 1,024; half vs all):
  // Qwen3-1.7B 1.645 vs 1.699 ms a step, TinyLlama 1.031 vs 0.975, Llama-3.2-1B 1.180 vs 1.163 in
  // one call and 1.169 vs 1.187 in another (bench/NOTES.md).
  const size_t stream_smem = std::min(size_t(max_smem), streaming.smem > 0 ? streaming.smem : size_t(max_smem));
  auto size = [&](int n, int k, bool pairs) {
    return proj_smem(n, k, std::min(n, sms), pairs, s.fp8_weights, max_smem, stream_smem, streaming.tile_k,
                     streaming.whole > 0 ? streaming.whole : max_smem);
  };
  const ProjSmem down = size(H, I, false), gu = size(I, H, true), o = size(H, q_size, false);
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
  for (int cluster : clusters) {
    if (cluster > max_cluster) continue;
    const size_t smem = attention_smem(s, cluster);
    // A CTA's q/k/v rows go out as float4 pieces; the (max, sum) of a head go to CTAs 0..C-1
    // from the threads of its first C dims.
    if (smem > size_t(max_smem) || (group + 2) * D % (4 * cluster) != 0 || group * D % cluster != 0 || D < cluster)
      continue;
    CUDA_CHECK(cudaFuncSetAttribute(attention, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CUDA_CHECK(cudaFuncSetAttribute(attention, cudaFuncAttributeNonPortableClusterSizeAllowed, cluster > 8));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(s.num_kv_heads * cluster);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr = cluster_attr(cluster);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int active = 0;
    if (cudaOccupancyMaxActiveClusters(&active, attention, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // clear it: this size is just not available
      continue;
    }
    if (active >= 1) {
      p.cluster = cluster;
      p.smem[0] = smem;
      break;
    }
  }
  if (p.cluster == 0) return no("no cluster of 16 or 8 CTAs fits the attention kernel (shared memory)");
  for (ResidualKernel f : {o_kernel, o_stream})
    CUDA_CHECK(
        cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(std::max(p.smem[1], p.smem[3]))));
  for (GateUpKernel f : {gu_kernel, gu_stream})
    CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(p.smem[2])));
  return p;
}

void fused_decode_layer(const FusedDecodePlan& p, const FusedDecodeStep& st, const FusedDecodeLayer& w,
                        cudaStream_t stream) {
  NVLLM_CHECK(p.cluster > 0, "internal: fused decode without a plan (", p.why ? p.why : "none", ")");
  const FusedDecodeShape& s = p.shape;
  const int flags = kFlagEarly | kFlagEvict, H = s.hidden, I = s.intermediate, q_size = s.num_heads * s.head_dim;
  const int grid_h = std::min(H, p.grid), grid_i = std::min(I, p.grid);

  // Published sums of squares: o_proj's for gate_up, down's for the next layer's attention.
  const bool publish = st.ss != nullptr && H <= kMaxPublishedHidden;
  float* ss_post = publish ? st.ss : nullptr;
  float* ss_next = publish ? st.ss + kFusedSsParts : nullptr;
  FusedDecodeStep sta = st;
  sta.ss_ready = publish && st.ss_ready;
  cudaLaunchAttribute attrs[2] = {cluster_attr(p.cluster), {}};
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  NVLLM_CHECK(w.kv.dtype == s.kv_dtype && (s.kv_dtype == KvDtype::kBf16 || (w.kv.k_scale && w.kv.v_scale)),
              "internal: fused decode planned for another KV-cache type, or an FP8 cache without scales");
  launch_with({attrs, pdl_enabled() ? 2u : 1u}, attention_for(s), dim3(s.num_kv_heads * p.cluster), dim3(kThreads),
              p.smem[0], stream, s, sta, w, flags, grid_h);
  const bool fp8 = s.fp8_weights;
  NVLLM_CHECK((w.qkv.scale != nullptr) == fp8 && (w.o_proj.scale != nullptr) == fp8 &&
                  (w.gate_up.scale != nullptr) == fp8 && (w.down.scale != nullptr) == fp8,
              "internal: fused decode planned for other weights (bf16 vs FP8) than the layer's");
  launch_pdl(residual_for(p.stages[1] > 0, fp8), dim3(grid_h), dim3(kThreads), p.smem[1], stream,
             static_cast<const bf16*>(st.attn), q_size, w.o_proj, H, st.h, ss_post, flags, p.stages[1], p.parts[1],
             st.trace, 1);
  launch_pdl(gate_up_for(p.stages[2] > 0, fp8), dim3(grid_i), dim3(kThreads), p.smem[2], stream,
             static_cast<const bf16*>(st.h), static_cast<const float*>(ss_post), grid_h, w.post_norm, H, w.gate_up,
             I, st.act, st.eps, flags, p.stages[2], p.parts[2], st.trace);
  launch_pdl(residual_for(p.stages[3] > 0, fp8), dim3(grid_h), dim3(kThreads), p.smem[3], stream,
             static_cast<const bf16*>(st.act), I, w.down, H, st.h, ss_next, flags, p.stages[3], p.parts[3],
             st.trace, 3);
}

}  // namespace nvllm::kernels
