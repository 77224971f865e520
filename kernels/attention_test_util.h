// A paged KV cache with random contents for the attention tests, and the CPU reference of
// causal grouped-query attention over it (double accumulation).
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/kernel_test_util.h"

namespace nvllm::kernels::test {

struct PagedCache {
  int num_kv_heads, head_dim, block_size, max_blocks_per_seq, num_blocks;
  std::vector<bf16> k, v;              // [num_blocks, block_size, KVH, D]
  std::vector<int32_t> block_tables;   // [S, max_blocks_per_seq], blocks shuffled over the pool

  // Row (token `t` of sequence `s`, kv head `h`) of k or v.
  size_t at(int s, int t, int h) const {
    const int block = block_tables[size_t(s) * max_blocks_per_seq + t / block_size];
    return ((size_t(block) * block_size + t % block_size) * num_kv_heads + h) * head_dim;
  }
};

inline PagedCache make_cache(std::mt19937& rng, const std::vector<int>& context_lens, int num_kv_heads,
                             int head_dim, int block_size) {
  PagedCache c{num_kv_heads, head_dim, block_size, 1, 0, {}, {}, {}};
  int total = 0;
  for (int len : context_lens) {
    c.max_blocks_per_seq = std::max(c.max_blocks_per_seq, (len + block_size - 1) / block_size);
    total += (len + block_size - 1) / block_size;
  }
  c.num_blocks = total + 3;  // a few blocks nobody uses
  std::vector<int32_t> perm(c.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.block_tables.assign(context_lens.size() * c.max_blocks_per_seq, -1);
  int next = 0;
  for (size_t s = 0; s < context_lens.size(); ++s)
    for (int b = 0; b < (context_lens[s] + block_size - 1) / block_size; ++b)
      c.block_tables[s * c.max_blocks_per_seq + b] = perm[next++];
  const size_t elems = size_t(c.num_blocks) * block_size * num_kv_heads * head_dim;
  c.k = random_bf16(rng, elems);
  c.v = random_bf16(rng, elems);
  return c;
}

// out[row, h, :] for query rows query_start[s]..query_start[s+1] of sequence s, which sit at
// the last positions of its context: row i of a q_len-row sequence sees keys 0..ctx-q_len+i.
inline std::vector<float> attention_ref(const std::vector<bf16>& q, int q_stride, const PagedCache& c,
                                        const std::vector<int>& query_start, const std::vector<int>& context_lens,
                                        int num_heads, float scale) {
  const int d = c.head_dim, group = num_heads / c.num_kv_heads;
  std::vector<float> out(size_t(query_start.back()) * num_heads * d);
  std::vector<double> p, acc(d);
  for (size_t s = 0; s + 1 < query_start.size(); ++s) {
    const int q_len = query_start[s + 1] - query_start[s], ctx = context_lens[s];
    for (int i = 0; i < q_len; ++i) {
      const int row = query_start[s] + i, keys = ctx - q_len + i + 1;
      for (int h = 0; h < num_heads; ++h) {
        const bf16* qh = q.data() + size_t(row) * q_stride + h * d;
        p.assign(keys, 0);
        double mx = -INFINITY, sum = 0;
        for (int t = 0; t < keys; ++t) {
          const bf16* kt = c.k.data() + c.at(int(s), t, h / group);
          double dot = 0;
          for (int j = 0; j < d; ++j) dot += double(to_f(qh[j])) * to_f(kt[j]);
          p[t] = dot * scale;
          mx = std::max(mx, p[t]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t = 0; t < keys; ++t) {
          p[t] = std::exp(p[t] - mx);
          sum += p[t];
          const bf16* vt = c.v.data() + c.at(int(s), t, h / group);
          for (int j = 0; j < d; ++j) acc[j] += p[t] * to_f(vt[j]);
        }
        for (int j = 0; j < d; ++j) out[(size_t(row) * num_heads + h) * d + j] = float(acc[j] / sum);
      }
    }
  }
  return out;
}

}  // namespace nvllm::kernels::test
