// Tests of tensor parallelism on the CPU runner: the split itself (hand-derived rank layouts,
// slice shapes), and that 2 and 4 simulated ranks give the logits of one within float32
// rounding, for Qwen3 (q/k norms, tied head), Qwen2 (qkv bias) and Llama (own head, llama3
// RoPE) shapes, with KV heads split (2 ranks, 2 KV heads) and replicated (4 ranks, 2 KV heads;
// 2 ranks, 1 KV head).
#include "runtime/tp_split.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/cpu_runner.h"
#include "runtime/cpu_runner_test_util.h"

namespace nvllm {
namespace {

using test::block_range;
using test::make_batch;
using test::random_weights;
using test::tiny_config;

TEST_CASE("cpu_tp: rank layouts, KV heads split or replicated, uneven vocabulary") {
  const ModelConfig c = tiny_config(Arch::kQwen3);  // 4 heads, 2 KV heads, intermediate 48, vocab 97
  SUBCASE("2 ranks: one KV head each") {
    const TpRank r = tp_rank(c, 2, 1);
    CHECK(r.q_head_first == 2);
    CHECK(r.q_heads == 2);
    CHECK(r.kv_head_first == 1);
    CHECK(r.kv_heads == 1);
    CHECK(r.inter_first == 24);
    CHECK(r.inter == 24);
    CHECK(r.vocab_first == 48);
    CHECK(r.vocab == 49);
  }
  SUBCASE("4 ranks: KV head 0 on ranks 0-1, KV head 1 on ranks 2-3") {
    const int kv_first[] = {0, 0, 1, 1}, vocab_first[] = {0, 24, 48, 72}, vocab[] = {24, 24, 24, 25};
    for (int k = 0; k < 4; ++k) {
      const TpRank r = tp_rank(c, 4, k);
      CHECK(r.q_head_first == k);
      CHECK(r.kv_head_first == kv_first[k]);
      CHECK(r.kv_heads == 1);
      CHECK(r.vocab_first == vocab_first[k]);
      CHECK(r.vocab == vocab[k]);
    }
  }
  SUBCASE("slice shapes") {
    const TpRank r = tp_rank(c, 4, 3);
    const ModelWeights w = shard_weights(c, random_weights(c, 1), r);
    CHECK(w.embed.shape() == std::vector<int64_t>{25, 32});
    CHECK(w.lm_head.empty());  // tied: the embedding slice is the head
    CHECK(w.layers[0].qkv.shape() == std::vector<int64_t>{3 * 12, 32});
    CHECK(w.layers[0].o_proj.shape() == std::vector<int64_t>{32, 12});
    CHECK(w.layers[0].gate_up.shape() == std::vector<int64_t>{24, 32});
    CHECK(w.layers[0].down.shape() == std::vector<int64_t>{32, 12});
    // Rank 3's k rows are KV head 1's: rows q_size + 12 .. q_size + 24 of the full qkv.
    const ModelWeights full = random_weights(c, 1);
    const float* want = full.layers[0].qkv.as<float>() + (c.q_size() + 12) * 32;
    CHECK(std::equal(want, want + 12 * 32, w.layers[0].qkv.as<float>() + 12 * 32));
  }
}

TEST_CASE("cpu_tp: sizes that do not divide are refused, naming the flag") {
  const ModelConfig c = tiny_config(Arch::kLlama);
  CHECK_THROWS_WITH_AS(tp_rank(c, 3, 0), doctest::Contains("--tensor-parallel-size 3"), Error);
  CHECK_THROWS_WITH_AS(tp_rank(c, 8, 0), doctest::Contains("num_attention_heads 4"), Error);
  ModelConfig odd = c;
  odd.intermediate_size = 50;
  CHECK_THROWS_WITH_AS(tp_rank(odd, 4, 0), doctest::Contains("intermediate_size 50"), Error);
  CHECK_THROWS_WITH_AS(CpuRunner(c, random_weights(c, 1), 16, 4, 1, 3), doctest::Contains("--tensor-parallel-size"),
                       Error);
}

// Logits of a prefill of two sequences, then two decode steps, through the paged cache.
std::vector<float> run(const ModelConfig& c, int tp) {
  CpuRunner r(c, random_weights(c, 7), 16, 16, 2, tp);
  std::vector<int32_t> a, b;
  for (int i = 0; i < 21; ++i) a.push_back((i * 37 + 5) % c.vocab_size);
  for (int i = 0; i < 9; ++i) b.push_back((i * 11 + 90) % c.vocab_size);  // ids in the last vocab slice too
  std::vector<float> all = r.forward_logits(make_batch({{a, 0, block_range(0, 2)}, {b, 0, block_range(4, 1)}}, 16));
  for (int step = 0; step < 2; ++step) {
    const auto l = r.forward_logits(make_batch({{{(step * 7 + 3) % c.vocab_size}, 21 + step, block_range(0, 2)},
                                                {{96 - step}, 9 + step, block_range(4, 1)}}, 16));
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

TEST_CASE("cpu_tp: 2 and 4 ranks give the logits of 1 within float32 rounding") {
  ModelConfig mqa = tiny_config(Arch::kLlama);
  mqa.num_kv_heads = 1;  // one KV head for two ranks
  const ModelConfig configs[] = {tiny_config(Arch::kQwen3), tiny_config(Arch::kQwen2), tiny_config(Arch::kLlama), mqa};
  for (const ModelConfig& c : configs) {
    const std::vector<float> ref = run(c, 1);
    float scale = 0;
    for (float v : ref) scale = std::max(scale, std::abs(v));
    for (int tp : {2, 4}) {
      CAPTURE(static_cast<int>(c.arch));
      CAPTURE(c.num_kv_heads);
      CAPTURE(tp);
      const std::vector<float> got = run(c, tp);
      REQUIRE(got.size() == ref.size());
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - ref[i])));
      // Only the order of the row-parallel sums changes (o_proj and down_proj split into tp
      // partial dot products): measured 1.7e-6 to 5.2e-6 on logits up to 15 (about 3 float32
      // ulps of the largest); the bound is 16 ulps of it. A wrong slice (another head, KV head
      // or vocabulary row) moves logits by O(0.1) or more.
      CHECK(worst <= 2e-6 * std::max(1.0f, scale));
    }
  }
}

}  // namespace
}  // namespace nvllm
