// Tests of the CPU ops against textbook references: naive loops in double for GEMM and
// attention (dense [seq, heads, dim] arrays, no paging), and hand-computed numbers for RMSNorm
// and RoPE frequencies.
#include "runtime/cpu_ops.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"

namespace nvllm {
namespace {

std::vector<float> random_vec(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace

TEST_CASE("cpu_ops: matmul_wt matches a double-precision loop and is tile/thread invariant") {
  std::mt19937 rng(7);
  for (int k : {1, 7, 8, 37, 64, 130}) {
    const int rows = 45;
    const int tokens = 11;
    auto x = random_vec(rng, tokens * k);
    auto w = random_vec(rng, rows * k);
    auto bias = random_vec(rng, rows);
    std::vector<float> y(tokens * rows);
    ThreadPool pool3(3);
    matmul_wt(pool3, x.data(), tokens, k, w.data(), rows, bias.data(), y.data());
    for (int t = 0; t < tokens; ++t) {
      for (int r = 0; r < rows; ++r) {
        double ref = bias[r];
        for (int j = 0; j < k; ++j) ref += static_cast<double>(x[t * k + j]) * w[r * k + j];
        // fp32 accumulation of k terms of size <= 1: error well under 1e-5 * k.
        CHECK(std::abs(y[t * rows + r] - ref) <= 1e-5 * k);
        // Every element is exactly dot_f32 + bias, whatever tile computed it.
        CHECK(y[t * rows + r] == dot_f32(&x[t * k], &w[r * k], k) + bias[r]);
      }
    }
    // Any sub-batch, one thread or three: bitwise the same rows.
    ThreadPool pool1(1);
    for (int start = 0; start < tokens; ++start) {
      for (int n = 1; start + n <= tokens; n += 2) {
        std::vector<float> ys(n * rows);
        matmul_wt(start % 2 ? pool1 : pool3, &x[start * k], n, k, w.data(), rows, bias.data(), ys.data());
        CHECK(std::equal(ys.begin(), ys.end(), y.begin() + start * rows));
      }
    }
  }
}

TEST_CASE("cpu_ops: rmsnorm of a hand-checked row") {
  // mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5; 1/sqrt(7.5) = 0.3651484.
  const float x[4] = {1, 2, 3, 4};
  const float w[4] = {1, 1, 1, 2};
  float out[4];
  rmsnorm_row(x, w, 4, 0.0f, out);
  CHECK(out[0] == doctest::Approx(0.3651484).epsilon(1e-6));
  CHECK(out[1] == doctest::Approx(0.7302967).epsilon(1e-6));
  CHECK(out[2] == doctest::Approx(1.0954451).epsilon(1e-6));
  CHECK(out[3] == doctest::Approx(2.9211870).epsilon(1e-6));
  // eps enters under the root: mean 7.5 + 0.5 = 8 -> 1/sqrt(8).
  rmsnorm_row(x, w, 4, 0.5f, out);
  CHECK(out[0] == doctest::Approx(1.0 / std::sqrt(8.0)).epsilon(1e-6));
}

TEST_CASE("cpu_ops: RoPE frequencies, plain and with llama3 scaling, and the rotation") {
  // theta 10000, head_dim 8: theta^(-2i/8) = 1, 0.1, 0.01, 0.001.
  RopeScaling none;
  auto f = rope_inv_freq(8, 10000.0, none);
  REQUIRE(f.size() == 4);
  CHECK(f[0] == doctest::Approx(1.0));
  CHECK(f[1] == doctest::Approx(0.1));
  CHECK(f[2] == doctest::Approx(0.01));
  CHECK(f[3] == doctest::Approx(0.001));

  // Llama 3 scaling, factor 8, low 1, high 4, original length 1024: wavelengths 2*pi/f are
  // 6.28, 62.8 (< 1024/4 = 256: kept), 628.3 (between 256 and 1024: smoothed with
  // s = (1024/628.3 - 1)/3 = 0.2099155, f = 0.01*((1-s)/8 + s) = 0.00308676) and 6283 (> 1024:
  // divided by 8 = 0.000125).
  RopeScaling l3;
  l3.type = "llama3";
  l3.factor = 8;
  l3.low_freq_factor = 1;
  l3.high_freq_factor = 4;
  l3.original_max_position_embeddings = 1024;
  f = rope_inv_freq(8, 10000.0, l3);
  CHECK(f[0] == doctest::Approx(1.0));
  CHECK(f[1] == doctest::Approx(0.1));
  CHECK(f[2] == doctest::Approx(0.00308676).epsilon(1e-5));
  CHECK(f[3] == doctest::Approx(0.000125));

  // Rotation at position 3 of one head [a0 a1 | b0 b1] with inv_freq {1, 0.01}: pair i turns
  // by angle 3*f_i.
  const std::vector<float> inv = {1.0f, 0.01f};
  float cs[4];
  rope_cos_sin(inv, 3, cs);
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  apply_rope(x, 1, 4, cs);
  CHECK(x[0] == doctest::Approx(1 * std::cos(3.0) - 3 * std::sin(3.0)));
  CHECK(x[2] == doctest::Approx(3 * std::cos(3.0) + 1 * std::sin(3.0)));
  CHECK(x[1] == doctest::Approx(2 * std::cos(0.03) - 4 * std::sin(0.03)));
  CHECK(x[3] == doctest::Approx(4 * std::cos(0.03) + 2 * std::sin(0.03)));
}

namespace {

struct SeqSpec {
  int context;
  int query;
};

// Dense textbook causal attention in double for one sequence: k, v [context, kv_heads, d],
// q [query, heads, d]; the queries are the last `query` positions.
std::vector<double> dense_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int context, int query, int heads,
                                    int kv_heads, int d) {
  std::vector<double> out(static_cast<size_t>(query) * heads * d, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int i = 0; i < query; ++i) {
    const int pos = context - query + i;
    for (int h = 0; h < heads; ++h) {
      const int g = h / (heads / kv_heads);
      std::vector<double> s(pos + 1);
      for (int j = 0; j <= pos; ++j) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += double(q[(i * heads + h) * d + e]) * k[(j * kv_heads + g) * d + e];
        s[j] = dot * scale;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));
      for (int j = 0; j <= pos; ++j)
        for (int e = 0; e < d; ++e) out[(i * heads + h) * d + e] += s[j] / sum * v[(j * kv_heads + g) * d + e];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("cpu_ops: paged attention matches dense attention") {
  std::mt19937 rng(42);
  const int d = 16;
  const std::vector<SeqSpec> seqs = {{1, 1}, {23, 5}, {40, 40}, {17, 1}, {33, 16}};
  for (int block_size : {1, 4, 16}) {
    for (const std::pair<int, int>& shape : {std::pair{4, 4}, std::pair{4, 2}, std::pair{8, 2}}) {
      const int heads = shape.first, kv_heads = shape.second;  // no structured binding: clang 14's CAPTURE
      CAPTURE(block_size);
      CAPTURE(heads);
      CAPTURE(kv_heads);
      int total_blocks = 0;
      for (const SeqSpec& s : seqs) total_blocks += (s.context + block_size - 1) / block_size;
      total_blocks += 3;  // spare blocks nobody reads
      // Blocks handed out in a shuffled order so that tables are not contiguous.
      std::vector<int32_t> free_blocks(total_blocks);
      std::iota(free_blocks.begin(), free_blocks.end(), 0);
      std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
      const int kv_width = kv_heads * d;
      std::vector<float> kc(static_cast<size_t>(total_blocks) * block_size * kv_width, NAN);
      std::vector<float> vc(kc.size(), NAN);
      PagedKv cache{kc.data(), vc.data(), total_blocks, block_size, kv_heads, d};

      int max_blocks = 0;
      for (const SeqSpec& s : seqs) max_blocks = std::max(max_blocks, (s.context + block_size - 1) / block_size);
      std::vector<int32_t> query_start = {0}, context_lens, tables(seqs.size() * max_blocks, -1);
      std::vector<float> q_all;
      std::vector<std::vector<double>> expected;
      size_t next_block = 0;
      for (size_t si = 0; si < seqs.size(); ++si) {
        const SeqSpec& s = seqs[si];
        auto k = random_vec(rng, static_cast<size_t>(s.context) * kv_width);
        auto v = random_vec(rng, k.size());
        auto q = random_vec(rng, static_cast<size_t>(s.query) * heads * d, 2.0f);
        const int nb = (s.context + block_size - 1) / block_size;
        for (int b = 0; b < nb; ++b) tables[si * max_blocks + b] = free_blocks[next_block++];
        // Every position's k/v goes to its slot (the cached prefix and this step's tokens alike).
        std::vector<int32_t> slots(s.context);
        for (int j = 0; j < s.context; ++j) slots[j] = tables[si * max_blocks + j / block_size] * block_size + j % block_size;
        write_kv(cache, k.data(), v.data(), kv_width, slots);
        q_all.insert(q_all.end(), q.begin(), q.end());
        query_start.push_back(query_start.back() + s.query);
        context_lens.push_back(s.context);
        expected.push_back(dense_attention(q, k, v, s.context, s.query, heads, kv_heads, d));
      }
      const int num_tokens = query_start.back();
      std::vector<float> out(static_cast<size_t>(num_tokens) * heads * d);
      ThreadPool pool(3);
      AttentionLayout layout{query_start, context_lens, tables, max_blocks};
      paged_attention(pool, q_all.data(), heads * d, heads, cache, layout, 1.0f / std::sqrt(float(d)), out.data());
      for (size_t si = 0; si < seqs.size(); ++si) {
        const float* o = out.data() + static_cast<size_t>(query_start[si]) * heads * d;
        for (size_t e = 0; e < expected[si].size(); ++e) {
          // fp32 softmax and sums over <= 40 keys of values in [-1, 1].
          REQUIRE(std::abs(o[e] - expected[si][e]) < 2e-5);
        }
      }
    }
  }
}

TEST_CASE("cpu_ops: paged attention rejects a block table entry outside the cache") {
  std::vector<float> kc(4 * 2 * 4), vc(kc.size());
  PagedKv cache{kc.data(), vc.data(), 4, 2, 1, 4};
  std::vector<int32_t> qs = {0, 1}, ctx = {3}, tables = {0, 9};
  std::vector<float> q(4), out(4);
  ThreadPool pool(1);
  CHECK_THROWS_WITH_AS(paged_attention(pool, q.data(), 4, 1, cache, {qs, ctx, tables, 2}, 1.0f, out.data()),
                       doctest::Contains("block table entry 1"), Error);
}

}  // namespace nvllm
