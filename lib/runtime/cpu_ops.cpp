#include "runtime/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "core/dtype.h"
#include "core/error.h"

namespace nvllm {

namespace {

// The V8 helpers below are internal and inlined; the ABI note GCC gives for passing 32-byte
// vectors without AVX does not concern them.
#pragma GCC diagnostic ignored "-Wpsabi"

// Eight float lanes. GCC lowers this to whatever vector width the target has (two SSE
// registers on baseline x86-64); lane-wise adds and multiplies are exact IEEE operations, so
// the result is the same whichever instructions carry them out.
typedef float V8 __attribute__((vector_size(32)));

inline V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float hsum8(V8 a) { return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])); }

// res[t * NR + r] = dot(xs[t], ws[r]) for NT token rows and NR weight rows: each weight block
// loaded once serves NT tokens. Every (t, r) pair runs exactly the same sequence of operations
// as dot_f32, whatever the tile shape, so the tiling never changes a result.
template <int NT, int NR>
[[gnu::always_inline]] inline void dot_tile(const float* const* xs, const float* const* ws, int k, float* res) {
  V8 acc[NT][NR] = {};
  int kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    V8 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = load8(ws[r] + kk);
    for (int t = 0; t < NT; ++t) {
      const V8 xv = load8(xs[t] + kk);
      for (int r = 0; r < NR; ++r) acc[t][r] += xv * wv[r];
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < NR; ++r) {
      float s = hsum8(acc[t][r]);
      for (int j = kk; j < k; ++j) s += xs[t][j] * ws[r][j];
      res[t * NR + r] = s;
    }
  }
}

// Runs tile <NT, NR> over weight rows [r0, r1) for tokens t0..t0+NT-1, then the leftover rows
// one at a time.
template <int NT, int NR>
[[gnu::always_inline]] inline void tile_rows(const float* x, int t0, int k, const float* w, int r0, int r1, int rows,
               const float* bias, float* y) {
  const float* xs[NT];
  for (int t = 0; t < NT; ++t) xs[t] = x + static_cast<int64_t>(t0 + t) * k;
  float res[NT * NR];
  int r = r0;
  auto store = [&](int rr, int nr) {
    for (int t = 0; t < NT; ++t) {
      for (int i = 0; i < nr; ++i) {
        float v = res[t * nr + i];
        if (bias) v += bias[rr + i];
        y[static_cast<int64_t>(t0 + t) * rows + rr + i] = v;
      }
    }
  };
  for (; r + NR <= r1; r += NR) {
    const float* ws[NR];
    for (int i = 0; i < NR; ++i) ws[i] = w + static_cast<int64_t>(r + i) * k;
    dot_tile<NT, NR>(xs, ws, k, res);
    store(r, NR);
  }
  for (; r < r1; ++r) {
    const float* ws[1] = {w + static_cast<int64_t>(r) * k};
    dot_tile<NT, 1>(xs, ws, k, res);
    store(r, 1);
  }
}

}  // namespace

float dot_f32(const float* a, const float* b, int n) {
  const float* xs[1] = {a};
  const float* ws[1] = {b};
  float r;
  dot_tile<1, 1>(xs, ws, n, &r);
  return r;
}

namespace {

// Weight rows [begin, end) for every token. Built twice: for AVX2 (twice the lanes per
// instruction, no FMA, so the very same roundings) and for baseline x86-64; the loader picks one.
__attribute__((target_clones("avx2", "default"))) void matmul_rows(const float* x, int num_tokens, int k,
                                                                   const float* w, int rows, const float* bias,
                                                                   float* y, int64_t begin, int64_t end) {
  // Rows per block: a block of the weight (~64 KiB) stays in L2 while every token tile passes
  // over it, so the weight streams from memory once per call.
  const int block = std::clamp(16384 / std::max(1, k), 4, 256);
  for (int64_t rb = begin; rb < end; rb += block) {
    const int r0 = static_cast<int>(rb);
    const int r1 = static_cast<int>(std::min<int64_t>(end, rb + block));
    int t = 0;
    for (; t + 4 <= num_tokens; t += 4) tile_rows<4, 2>(x, t, k, w, r0, r1, rows, bias, y);
    switch (num_tokens - t) {
      case 3: tile_rows<3, 1>(x, t, k, w, r0, r1, rows, bias, y); break;
      case 2: tile_rows<2, 2>(x, t, k, w, r0, r1, rows, bias, y); break;
      case 1: tile_rows<1, 4>(x, t, k, w, r0, r1, rows, bias, y); break;
      default: break;
    }
  }
}

}  // namespace

void matmul_wt(ThreadPool& pool, const float* x, int num_tokens, int k, const float* w, int rows,
               const float* bias, float* y) {
  pool.parallel_for(
      rows, [&](int64_t begin, int64_t end) { matmul_rows(x, num_tokens, k, w, rows, bias, y, begin, end); },
      /*min_chunk=*/16);
}

void rmsnorm_row(const float* x, const float* w, int n, float eps, float* out) {
  const float mean = dot_f32(x, x, n) / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < n; ++i) out[i] = (x[i] * inv) * w[i];
}

void rmsnorm_rows(ThreadPool& pool, const float* x, const float* w, int num_rows, int n, float eps,
                  float* out) {
  pool.parallel_for(
      num_rows,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) rmsnorm_row(x + r * n, w, n, eps, out + r * n);
      },
      /*min_chunk=*/8);
}

std::vector<float> rope_inv_freq(int head_dim, double theta, const RopeScaling& scaling) {
  const int half = head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    double f = std::pow(theta, -2.0 * i / head_dim);
    if (scaling.type == "llama3") {
      // Llama 3.1: long wavelengths are slowed down by `factor`, short ones kept, and the band
      // between interpolates smoothly between the two.
      const double old_len = scaling.original_max_position_embeddings;
      const double low_wavelen = old_len / scaling.low_freq_factor;
      const double high_wavelen = old_len / scaling.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / scaling.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0 - smooth) * f / scaling.factor + smooth * f;
      }
    }
    inv[i] = static_cast<float>(f);
  }
  return inv;
}

void rope_cos_sin(const std::vector<float>& inv_freq, int32_t position, float* cos_sin) {
  const int half = static_cast<int>(inv_freq.size());
  for (int i = 0; i < half; ++i) {
    // The angle in fp32, as the reference computes position * inv_freq.
    const float angle = static_cast<float>(position) * inv_freq[i];
    cos_sin[i] = std::cos(angle);
    cos_sin[half + i] = std::sin(angle);
  }
}

void apply_rope(float* x, int num_heads, int head_dim, const float* cos_sin) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* p = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float c = cos_sin[i];
      const float s = cos_sin[half + i];
      const float a = p[i];
      const float b = p[half + i];
      p[i] = a * c - b * s;
      p[half + i] = b * c + a * s;
    }
  }
}

void silu_mul(ThreadPool& pool, const float* gu, int num_tokens, int inter, float* out) {
  pool.parallel_for(
      num_tokens,
      [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const float* g = gu + t * 2 * inter;
          const float* u = g + inter;
          float* o = out + t * inter;
          for (int i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        }
      },
      /*min_chunk=*/4);
}

void write_kv(const PagedKv& cache, const float* k, const float* v, int64_t stride,
              std::span<const int32_t> slot_mapping) {
  const int64_t slots = static_cast<int64_t>(cache.num_blocks) * cache.block_size;
  const int64_t width = static_cast<int64_t>(cache.num_kv_heads) * cache.head_dim;
  for (size_t t = 0; t < slot_mapping.size(); ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    NVLLM_CHECK(slot < slots, "CpuRunner: slot_mapping[", t, "] = ", slot, " is outside the KV cache (",
                slots, " slots); the block manager handed out a block the runner does not have");
    if (cache.k8) {
      for (int64_t i = 0; i < width; ++i) {
        const int h = static_cast<int>(i / cache.head_dim);
        cache.k8[slot * width + i] = f32_to_f8e4m3(k[t * stride + i] / cache.k_scale[h]);
        cache.v8[slot * width + i] = f32_to_f8e4m3(v[t * stride + i] / cache.v_scale[h]);
      }
      continue;
    }
    std::memcpy(cache.k + slot * width, k + t * stride, width * sizeof(float));
    std::memcpy(cache.v + slot * width, v + t * stride, width * sizeof(float));
  }
}

namespace {

// Checks what attention will dereference, before any worker thread runs (workers must not throw).
void check_layout(const PagedKv& cache, const AttentionLayout& L, int num_tokens) {
  const size_t num_seqs = L.context_lens.size();
  NVLLM_CHECK(L.query_start.size() == num_seqs + 1, "CpuRunner: query_start has ", L.query_start.size(),
              " entries for ", num_seqs, " sequences (want num_seqs + 1)");
  NVLLM_CHECK(L.query_start[num_seqs] == num_tokens, "CpuRunner: query_start ends at ",
              L.query_start[num_seqs], " but the batch has ", num_tokens, " tokens");
  NVLLM_CHECK(L.block_tables.size() >= num_seqs * static_cast<size_t>(L.max_blocks_per_seq),
              "CpuRunner: block_tables holds ", L.block_tables.size(), " entries, want num_seqs * ",
              L.max_blocks_per_seq);
  for (size_t s = 0; s < num_seqs; ++s) {
    const int qlen = L.query_start[s + 1] - L.query_start[s];
    const int ctx = L.context_lens[s];
    NVLLM_CHECK(qlen >= 0 && ctx >= qlen, "CpuRunner: sequence ", s, " has ", qlen,
                " queries but context length ", ctx);
    const int blocks = (ctx + cache.block_size - 1) / cache.block_size;
    NVLLM_CHECK(blocks <= L.max_blocks_per_seq, "CpuRunner: sequence ", s, " needs ", blocks,
                " blocks for ", ctx, " tokens but its block table has ", L.max_blocks_per_seq);
    for (int j = 0; j < blocks; ++j) {
      const int32_t b = L.block_tables[s * L.max_blocks_per_seq + j];
      NVLLM_CHECK(b >= 0 && b < cache.num_blocks, "CpuRunner: sequence ", s, " block table entry ", j,
                  " is ", b, ", outside the ", cache.num_blocks, " KV blocks");
    }
  }
}

}  // namespace

void paged_attention(ThreadPool& pool, const float* q, int64_t q_stride, int num_heads,
                     const PagedKv& cache, const AttentionLayout& layout, float scale, float* out) {
  const int num_tokens = layout.query_start.empty() ? 0 : layout.query_start.back();
  check_layout(cache, layout, num_tokens);
  const int d = cache.head_dim;
  const int group = num_heads / cache.num_kv_heads;
  const int64_t kv_width = static_cast<int64_t>(cache.num_kv_heads) * d;
  std::vector<int32_t> seq_of(num_tokens);
  int max_ctx = 0;
  for (size_t s = 0; s + 1 < layout.query_start.size(); ++s) {
    for (int t = layout.query_start[s]; t < layout.query_start[s + 1]; ++t) seq_of[t] = static_cast<int32_t>(s);
    max_ctx = std::max(max_ctx, static_cast<int>(layout.context_lens[s]));
  }
  const int bs = cache.block_size;
  pool.parallel_for(
      static_cast<int64_t>(num_tokens) * num_heads,
      [&](int64_t begin, int64_t end) {
        std::vector<float> p(max_ctx), row(d);
        // Head h's K or V at slot s: the float32 cache in place, or E4M3 dequantised into `row`.
        auto kv_row = [&](const float* f32, const uint8_t* f8, const float* scales, int64_t s, int kv_head) {
          const int64_t at = s * kv_width + static_cast<int64_t>(kv_head) * d;
          if (!f8) return f32 + at;
          for (int i = 0; i < d; ++i) row[i] = f8e4m3_to_f32(f8[at + i]) * scales[kv_head];
          return static_cast<const float*>(row.data());
        };
        for (int64_t item = begin; item < end; ++item) {
          const int t = static_cast<int>(item / num_heads);
          const int h = static_cast<int>(item % num_heads);
          const int s = seq_of[t];
          const int qlen = layout.query_start[s + 1] - layout.query_start[s];
          const int pos = layout.context_lens[s] - qlen + (t - layout.query_start[s]);
          const int32_t* table = layout.block_tables.data() + static_cast<int64_t>(s) * layout.max_blocks_per_seq;
          const float* qh = q + t * q_stride + static_cast<int64_t>(h) * d;
          const int kv_head = h / group;
          auto slot_of = [&](int j) { return static_cast<int64_t>(table[j / bs]) * bs + j % bs; };
          float m = -std::numeric_limits<float>::infinity();
          for (int j = 0; j <= pos; ++j) {
            p[j] = dot_f32(qh, kv_row(cache.k, cache.k8, cache.k_scale, slot_of(j), kv_head), d) * scale;
            m = std::max(m, p[j]);
          }
          float sum = 0.0f;
          for (int j = 0; j <= pos; ++j) {
            p[j] = std::exp(p[j] - m);
            sum += p[j];
          }
          float* o = out + static_cast<int64_t>(t) * num_heads * d + static_cast<int64_t>(h) * d;
          std::fill(o, o + d, 0.0f);
          for (int j = 0; j <= pos; ++j) {
            const float* vj = kv_row(cache.v, cache.v8, cache.v_scale, slot_of(j), kv_head);
            for (int i = 0; i < d; ++i) o[i] += p[j] * vj[i];
          }
          for (int i = 0; i < d; ++i) o[i] /= sum;
        }
      },
      /*min_chunk=*/4);
}

}  // namespace nvllm
