// Tests of the CPU forward: a hand-computed one-token case, a one-layer model against a plain
// dense double-precision implementation written out here (no paging, no tiling), and batch
// invariance (alone vs in a batch, chunked vs whole prefill, block sizes, thread counts).
#include "runtime/cpu_runner.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "runtime/cpu_ops.h"
#include "runtime/cpu_runner_test_util.h"

namespace nvllm {
namespace {

using test::block_range;
using test::make_batch;
using test::random_weights;
using test::SeqChunk;
using test::tiny_config;

HostTensor tensor(std::vector<int64_t> shape, std::vector<float> values) {
  HostTensor t(DType::kF32, std::move(shape));
  REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
  std::copy(values.begin(), values.end(), t.as<float>());
  return t;
}

// ---- dense reference in double: the textbook formulas, one sequence from position 0 ----

using Mat = std::vector<std::vector<double>>;

std::vector<double> ref_rmsnorm(const std::vector<double>& x, const float* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * w[i];
  return out;
}

// y = W x (+ b), W [rows, cols] row-major.
std::vector<double> ref_linear(const HostTensor& w, const std::vector<double>& x, const HostTensor* b = nullptr) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  std::vector<double> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double s = b && !b->empty() ? b->as<float>()[r] : 0.0;
    for (int64_t c = 0; c < cols; ++c) s += double(w.as<float>()[r * cols + c]) * x[c];
    y[r] = s;
  }
  return y;
}

void ref_rope(double* v, int d, int pos, const std::vector<float>& inv_freq) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = double(pos) * inv_freq[i];
    const double x1 = v[i], x2 = v[i + d / 2];
    v[i] = x1 * std::cos(a) - x2 * std::sin(a);
    v[i + d / 2] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

Mat ref_forward(const ModelConfig& c, const ModelWeights& w, const std::vector<int32_t>& tokens) {
  const int n = static_cast<int>(tokens.size()), hid = c.hidden_size, d = c.head_dim;
  const int H = c.num_heads, KV = c.num_kv_heads, I = c.intermediate_size;
  const auto inv_freq = rope_inv_freq(d, c.rope_theta, c.rope_scaling);
  Mat x(n, std::vector<double>(hid));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < hid; ++i) x[t][i] = w.embed.as<float>()[tokens[t] * hid + i];
  for (const LayerWeights& L : w.layers) {
    Mat q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      auto qkv = ref_linear(L.qkv, ref_rmsnorm(x[t], L.input_norm.as<float>(), c.rms_norm_eps), &L.qkv_bias);
      q[t].assign(qkv.begin(), qkv.begin() + H * d);
      k[t].assign(qkv.begin() + H * d, qkv.begin() + (H + KV) * d);
      v[t].assign(qkv.begin() + (H + KV) * d, qkv.end());
      for (int h = 0; h < H; ++h) {
        if (c.qk_norm) {
          auto nq = ref_rmsnorm({q[t].begin() + h * d, q[t].begin() + (h + 1) * d}, L.q_norm.as<float>(), c.rms_norm_eps);
          std::copy(nq.begin(), nq.end(), q[t].begin() + h * d);
        }
        ref_rope(&q[t][h * d], d, t, inv_freq);
      }
      for (int h = 0; h < KV; ++h) {
        if (c.qk_norm) {
          auto nk = ref_rmsnorm({k[t].begin() + h * d, k[t].begin() + (h + 1) * d}, L.k_norm.as<float>(), c.rms_norm_eps);
          std::copy(nk.begin(), nk.end(), k[t].begin() + h * d);
        }
        ref_rope(&k[t][h * d], d, t, inv_freq);
      }
    }
    for (int t = 0; t < n; ++t) {
      std::vector<double> attn(H * d, 0.0);
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / KV);
        std::vector<double> s(t + 1);
        double m = -1e300, sum = 0;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int e = 0; e < d; ++e) dot += q[t][h * d + e] * k[j][g * d + e];
          s[j] = dot / std::sqrt(double(d));
          m = std::max(m, s[j]);
        }
        for (double& e : s) sum += (e = std::exp(e - m));
        for (int j = 0; j <= t; ++j)
          for (int e = 0; e < d; ++e) attn[h * d + e] += s[j] / sum * v[j][g * d + e];
      }
      auto o = ref_linear(L.o_proj, attn);
      for (int i = 0; i < hid; ++i) x[t][i] += o[i];
      auto gu = ref_linear(L.gate_up, ref_rmsnorm(x[t], L.post_norm.as<float>(), c.rms_norm_eps));
      std::vector<double> act(I);
      for (int i = 0; i < I; ++i) act[i] = gu[i] / (1.0 + std::exp(-gu[i])) * gu[I + i];
      auto down = ref_linear(L.down, act);
      for (int i = 0; i < hid; ++i) x[t][i] += down[i];
    }
  }
  Mat logits(n);
  for (int t = 0; t < n; ++t) logits[t] = ref_linear(w.lm_head_or_embed(), ref_rmsnorm(x[t], w.final_norm.as<float>(), c.rms_norm_eps));
  return logits;
}

}  // namespace

TEST_CASE("cpu_runner: hand-computed single token") {
  // hidden 2, one head of dim 2, intermediate 1, vocab 3, eps 0, unit norm weights.
  // Token 0 embeds as [3, 4]; rmsnorm -> [3, 4] / sqrt(12.5) = [0.8485281, 1.1313708] =: n.
  // One key at position 0: softmax over it is 1, so attention returns v = n (v rows = identity),
  // o_proj = identity: x = [3, 4] + n = [3.8485281, 5.1313708] (a multiple of [3, 4], so the
  // post norm gives n again). gate = n0, up = n1: a = silu(0.8485281) * 1.1313708 = 0.6722480.
  // down = [1, -1]: x = [4.5207761, 4.4591229]. Final norm: x / sqrt(mean(x^2)) =
  // [1.0068420, 0.9931109]; lm_head rows [1,0], [0,1], [1,1] -> [1.0068420, 0.9931109, 1.9999529].
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.vocab_size = 3;
  c.hidden_size = 2;
  c.intermediate_size = 1;
  c.num_layers = 1;
  c.num_heads = 1;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.rms_norm_eps = 0.0;
  ModelWeights w;
  w.embed = tensor({3, 2}, {3, 4, 1, 1, 1, 1});
  LayerWeights L;
  L.input_norm = tensor({2}, {1, 1});
  L.qkv = tensor({6, 2}, {0.5f, -1, 2, 0.25f, /*k*/ 1, 1, -1, 3, /*v*/ 1, 0, 0, 1});
  L.o_proj = tensor({2, 2}, {1, 0, 0, 1});
  L.post_norm = tensor({2}, {1, 1});
  L.gate_up = tensor({2, 2}, {1, 0, 0, 1});
  L.down = tensor({2, 1}, {1, -1});
  w.layers.push_back(std::move(L));
  w.final_norm = tensor({2}, {1, 1});
  w.lm_head = tensor({3, 2}, {1, 0, 0, 1, 1, 1});
  CpuRunner runner(c, std::move(w), 4, 2, 1);
  auto logits = runner.forward_logits(make_batch({{{0}, 0, {1}}}, 4));
  REQUIRE(logits.size() == 3);
  CHECK(logits[0] == doctest::Approx(1.0068420).epsilon(1e-6));
  CHECK(logits[1] == doctest::Approx(0.9931109).epsilon(1e-6));
  CHECK(logits[2] == doctest::Approx(1.9999529).epsilon(1e-6));
}

TEST_CASE("cpu_runner: one layer matches a dense double-precision forward") {
  for (Arch arch : {Arch::kQwen3, Arch::kQwen2, Arch::kLlama}) {
    CAPTURE(static_cast<int>(arch));
    const ModelConfig c = tiny_config(arch, 1);
    ModelWeights w = random_weights(c, 11);
    // Positions up to 80 pass the llama3 band edges (original length 64 in tiny_config).
    std::vector<int32_t> tokens;
    for (int i = 0; i < 80; ++i) tokens.push_back((i * 37 + 5) % c.vocab_size);
    const Mat expected = ref_forward(c, w, tokens);
    CpuRunner runner(c, std::move(w), 16, 8, 2);
    auto logits = runner.forward_logits(make_batch({{tokens, 0, block_range(2, 5)}}, 16));
    double worst = 0;
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int v = 0; v < c.vocab_size; ++v)
        worst = std::max(worst, std::abs(logits[t * c.vocab_size + v] - expected[t][v]));
    // fp32 vs double through one layer with O(1) activations: errors are ~1e-6.
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("cpu_runner: logits are bitwise batch invariant") {
  const ModelConfig c = tiny_config(Arch::kQwen3, 2);
  std::vector<int32_t> a;
  for (int i = 0; i < 40; ++i) a.push_back((i * 13 + 7) % c.vocab_size);
  std::vector<int32_t> other1(23, 5), other2;
  for (int i = 0; i < 31; ++i) other2.push_back((i * 29 + 1) % c.vocab_size);
  const size_t V = c.vocab_size;

  // Reference: A alone, whole prefill, block size 16, one thread.
  CpuRunner solo(c, random_weights(c, 3), 16, 16, 1);
  const auto ref = solo.forward_logits(make_batch({{a, 0, block_range(0, 3)}}, 16));

  SUBCASE("inside a batch of several, three threads") {
    CpuRunner r(c, random_weights(c, 3), 16, 16, 3);
    auto got = r.forward_logits(make_batch({{other1, 0, block_range(0, 2)}, {a, 0, block_range(5, 3)},
                                            {other2, 0, block_range(10, 2)}}, 16));
    CHECK(std::equal(ref.begin(), ref.end(), got.begin() + other1.size() * V));
  }
  SUBCASE("chunked prefill, then decode, mixed with other sequences") {
    CpuRunner r(c, random_weights(c, 3), 16, 16, 2);
    const auto blocks = std::vector<int32_t>{7, 1, 12};
    std::vector<float> got;
    auto take = [&](const std::vector<float>& l, size_t first_row, size_t rows) {
      got.insert(got.end(), l.begin() + first_row * V, l.begin() + (first_row + rows) * V);
    };
    // Chunk of 13, then 14 beside another sequence's prefill, then decodes one by one.
    take(r.forward_logits(make_batch({{{a.begin(), a.begin() + 13}, 0, blocks}}, 16)), 0, 13);
    take(r.forward_logits(make_batch({{other1, 0, block_range(2, 2)}, {{a.begin() + 13, a.begin() + 27}, 13, blocks}}, 16)),
         other1.size(), 14);
    for (int p = 27; p < 40; ++p) take(r.forward_logits(make_batch({{{a[p]}, p, blocks}}, 16)), 0, 1);
    CHECK(got == ref);
  }
  SUBCASE("block size 256") {
    CpuRunner r(c, random_weights(c, 3), 256, 2, 1);
    auto got = r.forward_logits(make_batch({{a, 0, {1}}}, 256));
    CHECK(got == ref);
  }
}

TEST_CASE("cpu_runner: execute samples greedy = argmax of the last token's logits") {
  const ModelConfig c = tiny_config(Arch::kQwen2, 2);
  CpuRunner r(c, random_weights(c, 5), 16, 8, 2);
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7}, b = {9, 8};
  const auto logits = r.forward_logits(make_batch({{a, 0, {0}}, {b, 0, {1}}}, 16));
  Batch batch = make_batch({{a, 0, {2}}, {b, 0, {3}}}, 16);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  batch.sample = {1, 1};
  batch.params = {&greedy, &greedy};
  batch.prompt_tokens = {a, b};
  batch.output_tokens = {{}, {}};
  batch.seeds = {1, 2};
  batch.sample_step = {0, 0};
  batch.suppress_eos = {0, 0};
  StepOutput out;
  r.execute(batch, out);
  REQUIRE(out.token_ids.size() == 2);
  for (int s = 0; s < 2; ++s) {
    const size_t row = s == 0 ? a.size() - 1 : a.size() + b.size() - 1;
    const float* l = &logits[row * c.vocab_size];
    const int best = static_cast<int>(std::max_element(l, l + c.vocab_size) - l);
    CHECK(out.token_ids[s] == best);
  }
  // A sequence mid-prefill asks for nothing and gets -1; an empty batch gives empty output.
  Batch partial = make_batch({{{11, 12}, 0, {4}}}, 16);
  partial.params = {&greedy};
  StepOutput out2;
  r.execute(partial, out2);
  CHECK(out2.token_ids == std::vector<int32_t>{-1});
  r.execute(Batch{}, out2);
  CHECK(out2.token_ids.empty());
}

TEST_CASE("cpu_runner: rejects weights that do not match the config") {
  const ModelConfig c = tiny_config(Arch::kLlama, 1);
  ModelWeights w = random_weights(c, 1);
  std::mt19937 rng(1);
  w.layers[0].down = test::random_tensor(rng, {c.hidden_size, 7}, 1.0f);
  CHECK_THROWS_WITH_AS(CpuRunner(c, std::move(w), 16, 4, 1), doctest::Contains("layers.0.down_proj"), Error);
}

}  // namespace nvllm
