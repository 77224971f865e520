// A paged KV cache with random contents for the attention tests, its FP8 form (E4M3 codes with
// per-head scales, quantised as the CPU runner quantises), and the CPU reference of causal
// grouped-query attention over it (double accumulation).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {

// E: bf16 (the cache the kernels read), or float (the values an FP8 cache's codes stand for).
template <typename E>
struct PagedCacheOf {
  int num_kv_heads, head_dim, block_size, max_blocks_per_seq, num_blocks;
  std::vector<E> k, v;                 // [num_blocks, block_size, KVH, D]
  std::vector<int32_t> block_tables;   // [S, max_blocks_per_seq], blocks shuffled over the pool

  // Row (token `t` of sequence `s`, kv head `h`) of k or v.
  size_t at(int s, int t, int h) const {
    const int block = block_tables[size_t(s) * max_blocks_per_seq + t / block_size];
    return ((size_t(block) * block_size + t % block_size) * num_kv_heads + h) * head_dim;
  }
};

using PagedCache = PagedCacheOf<bf16>;

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

// A cache in FP8: each element of `c` divided by its head's scale and rounded to E4M3 (the CPU
// runner's f32_to_f8e4m3), on the device with the scales; `values` holds what the codes stand for
// (code * scale, in float), the reference's cache.
struct Fp8Cache {
  std::vector<uint8_t> k, v;
  std::vector<float> k_scale, v_scale;  // [KVH]
  PagedCacheOf<float> values;
  DeviceBuffer<uint8_t> d_k, d_v;
  DeviceBuffer<float> d_k_scale, d_v_scale;

  KvCache view() const { return {d_k.get(), d_v.get(), KvDtype::kFp8E4M3, d_k_scale.get(), d_v_scale.get()}; }
};

inline std::vector<uint8_t> quantize(const std::vector<bf16>& x, const std::vector<float>& scale, int head_dim) {
  std::vector<uint8_t> codes(x.size());
  const size_t heads = scale.size();
  for (size_t i = 0; i < x.size(); ++i) codes[i] = f32_to_f8e4m3(to_f(x[i]) / scale[i / head_dim % heads]);
  return codes;
}

inline std::vector<float> dequantize(const std::vector<uint8_t>& codes, const std::vector<float>& scale,
                                     int head_dim) {
  std::vector<float> x(codes.size());
  const size_t heads = scale.size();
  for (size_t i = 0; i < x.size(); ++i) x[i] = f8e4m3_to_f32(codes[i]) * scale[i / head_dim % heads];
  return x;
}

inline Fp8Cache make_fp8(const PagedCache& c, std::vector<float> k_scale, std::vector<float> v_scale) {
  std::vector<uint8_t> k = quantize(c.k, k_scale, c.head_dim), v = quantize(c.v, v_scale, c.head_dim);
  PagedCacheOf<float> values{c.num_kv_heads, c.head_dim,  c.block_size,   c.max_blocks_per_seq,
                             c.num_blocks,   dequantize(k, k_scale, c.head_dim), dequantize(v, v_scale, c.head_dim),
                             c.block_tables};
  return Fp8Cache{k, v, k_scale, v_scale, std::move(values), DeviceBuffer<uint8_t>(k), DeviceBuffer<uint8_t>(v),
                  DeviceBuffer<float>(k_scale), DeviceBuffer<float>(v_scale)};
}

// Device fills of the timing cases' caches (inputs far too big to build on the host): a hash of
// the element's index, as bf16 values in [-1, 1) or as finite E4M3 codes (0x7f and 0xff, the
// NaNs, are left out). Static: each test file has its own copy.
static __device__ uint32_t hash_index(size_t i, uint32_t seed) {
  uint32_t x = uint32_t(i) * 2654435761u ^ seed;
  x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
  return x;
}
static __global__ void fill_random(bf16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(float(hash_index(i, seed) & 0xFFFF) / 32768.f - 1.f);
}
static __global__ void fill_random_codes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint8_t c = uint8_t(hash_index(i, seed));
    p[i] = (c & 0x7f) == 0x7f ? c ^ 1 : c;
  }
}

// out[row, h, :] for query rows query_start[s]..query_start[s+1] of sequence s, which sit at
// the last positions of its context: row i of a q_len-row sequence sees keys 0..ctx-q_len+i.
template <typename E>
std::vector<float> attention_ref(const std::vector<bf16>& q, int q_stride, const PagedCacheOf<E>& c,
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
          const E* kt = c.k.data() + c.at(int(s), t, h / group);
          double dot = 0;
          for (int j = 0; j < d; ++j) dot += double(to_f(qh[j])) * to_f(kt[j]);
          p[t] = dot * scale;
          mx = std::max(mx, p[t]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t = 0; t < keys; ++t) {
          p[t] = std::exp(p[t] - mx);
          sum += p[t];
          const E* vt = c.v.data() + c.at(int(s), t, h / group);
          for (int j = 0; j < d; ++j) acc[j] += p[t] * to_f(vt[j]);
        }
        for (int j = 0; j < d; ++j) out[(size_t(row) * num_heads + h) * d + j] = float(acc[j] / sum);
      }
    }
  }
  return out;
}

}  // namespace nvllm::kernels::test
