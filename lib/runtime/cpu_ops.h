// The float32 building blocks of the CPU forward: GEMM against a weight matrix, RMSNorm, RoPE
// (with Llama 3 frequency scaling), SiLU-and-multiply, and attention over the paged KV cache.
//
// Determinism contract: every output element is produced by one thread with a reduction in a
// fixed order that depends only on that element's inputs, never on how many tokens are in the
// batch, where they sit in it, or how many threads run. That is what makes greedy outputs
// identical with prefix caching, chunked prefill, other block sizes and preemption.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "runtime/cpu_thread_pool.h"

namespace nvllm {

// Dot product of a[0..n) and b[0..n) in the fixed order every kernel here uses: eight lane
// partial sums over blocks of eight, lanes combined pairwise, then the tail added in order.
float dot_f32(const float* a, const float* b, int n);

// y[t, r] = sum_k x[t, k] * w[r, k] (+ bias[r]) for t < num_tokens, r < rows.
// x [num_tokens, k], w [rows, k] row-major (a PyTorch Linear weight), bias [rows] or null,
// y [num_tokens, rows]. Each y element equals dot_f32(x[t], w[r], k) (+ bias[r]) exactly.
void matmul_wt(ThreadPool& pool, const float* x, int num_tokens, int k, const float* w, int rows,
               const float* bias, float* y);

// out[i] = x[i] * (1 / sqrt(mean(x^2) + eps)) * w[i] for one row of n; out may alias x.
void rmsnorm_row(const float* x, const float* w, int n, float eps, float* out);

// RMSNorm of `num_rows` rows of n, in parallel over rows; out may alias x.
void rmsnorm_rows(ThreadPool& pool, const float* x, const float* w, int num_rows, int n, float eps,
                  float* out);

// inv_freq[i] = theta^(-2i/head_dim) for i < head_dim/2, with Llama 3 scaling applied when
// scaling.type == "llama3".
std::vector<float> rope_inv_freq(int head_dim, double theta, const RopeScaling& scaling);

// Rotates `num_heads` heads of `head_dim` in place, NeoX style: element i pairs with
// i + head_dim/2, angle = position * inv_freq[i].
// x [num_heads, head_dim]; cos_sin [head_dim] = cos of the half angles, then sin.
void rope_cos_sin(const std::vector<float>& inv_freq, int32_t position, float* cos_sin);
void apply_rope(float* x, int num_heads, int head_dim, const float* cos_sin);

// out[t, i] = silu(gu[t, i]) * gu[t, inter + i]. gu [num_tokens, 2*inter], out [num_tokens, inter].
void silu_mul(ThreadPool& pool, const float* gu, int num_tokens, int inter, float* out);

// The KV cache of one layer: k and v each [num_blocks, block_size, num_kv_heads, head_dim], in
// float32, or with k8/v8 set, as E4M3 codes with one scale per KV head (k_scale, v_scale
// [num_kv_heads]): written as e4m3(x / scale), read as e4m3 * scale.
struct PagedKv {
  float* k = nullptr;
  float* v = nullptr;
  int num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  uint8_t* k8 = nullptr;
  uint8_t* v8 = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

// Writes token t's k/v ([num_kv_heads, head_dim] each, at k + t*stride, v + t*stride) into
// slot slot_mapping[t]; negative slots are skipped (padding).
void write_kv(const PagedKv& cache, const float* k, const float* v, int64_t stride,
              std::span<const int32_t> slot_mapping);

// Where the queries of a batch sit: sequence s owns query rows query_start[s]..query_start[s+1]
// and has context_lens[s] tokens in the cache (its queries are the last ones), whose blocks are
// block_tables[s * max_blocks_per_seq + j].
struct AttentionLayout {
  std::span<const int32_t> query_start;
  std::span<const int32_t> context_lens;
  std::span<const int32_t> block_tables;
  int max_blocks_per_seq = 0;
};

// Causal grouped-query attention: the query at row q_start + i of a sequence sits at position
// context_len - query_len + i and attends to positions 0..that position of its sequence, read
// through the block table. Scores scaled by `scale`, softmax in fp32.
// q [num_tokens, num_heads, head_dim] with row stride q_stride; out [num_tokens, num_heads*head_dim].
void paged_attention(ThreadPool& pool, const float* q, int64_t q_stride, int num_heads,
                     const PagedKv& cache, const AttentionLayout& layout, float scale, float* out);

}  // namespace nvllm
