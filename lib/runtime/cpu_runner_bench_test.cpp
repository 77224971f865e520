// Timing of the CPU runner on a Qwen2.5-0.5B-shaped model with random weights. Skipped by
// default (it allocates 2 GB); run with: nvllm_tests -tc='cpu_runner bench*' --no-skip
#include <doctest/doctest.h>

#include <chrono>
#include <string_view>
#include <thread>

#include "runtime/cpu_ops.h"
#include "runtime/cpu_runner.h"
#include "runtime/cpu_runner_test_util.h"

namespace nvllm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Cheap fill: a 2 GB model from mt19937 takes longer than the benchmark.
HostTensor fast_tensor(uint32_t& state, std::vector<int64_t> shape, float scale, float offset = 0.0f) {
  HostTensor t(DType::kF32, std::move(shape));
  for (float& x : t.f32()) {
    state = state * 1664525u + 1013904223u;
    x = offset + scale * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
  }
  return t;
}

}  // namespace

TEST_CASE("cpu_runner bench: 0.5B model prefill and decode" * doctest::skip()) {
  ModelConfig c;
  c.arch = Arch::kQwen2;
  c.vocab_size = 151936;
  c.hidden_size = 896;
  c.intermediate_size = 4864;
  c.num_layers = 24;
  c.num_heads = 14;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.rope_theta = 1000000.0;
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  uint32_t st = 1;
  ModelWeights w = test::make_weights(c, [&](std::string_view name, std::vector<int64_t> shape) {
    return name.ends_with("norm") ? fast_tensor(st, std::move(shape), 0.1f, 1.0f) : fast_tensor(st, std::move(shape), 0.05f);
  });
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  CpuRunner r(c, std::move(w), 16, 256, threads);
  SamplingParams greedy;
  greedy.temperature = 0;

  for (int batch : {1, 8}) {
    std::vector<test::SeqChunk> seqs;
    std::vector<std::vector<int32_t>> prompts(batch);
    for (int s = 0; s < batch; ++s) {
      for (int i = 0; i < 64; ++i) prompts[s].push_back((s * 977 + i * 131) % c.vocab_size);
      seqs.push_back({prompts[s], 0, test::block_range(s * 8, 8)});
    }
    auto fill = [&](Batch& b) {
      b.sample.assign(batch, 1);
      b.params.assign(batch, &greedy);
      b.prompt_tokens.assign(prompts.begin(), prompts.end());
      b.output_tokens.assign(batch, {});
      b.seeds.assign(batch, 0);
      b.sample_step.assign(batch, 0);
      b.suppress_eos.assign(batch, 0);
    };
    Batch b = test::make_batch(seqs, 16);
    fill(b);
    StepOutput out;
    auto t0 = std::chrono::steady_clock::now();
    r.execute(b, out);
    const double prefill = seconds_since(t0);
    const int steps = 4;
    t0 = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step) {
      for (int s = 0; s < batch; ++s) seqs[s] = {{out.token_ids[s]}, 64 + step, seqs[s].blocks};
      b = test::make_batch(seqs, 16);
      fill(b);
      r.execute(b, out);
    }
    const double decode = seconds_since(t0) / steps;
    MESSAGE("threads ", threads, " batch ", batch, ": prefill ", batch * 64, " tokens ", prefill, " s (",
            batch * 64 / prefill, " tok/s); decode step ", decode, " s (", batch / decode, " tok/s)");
  }
}

TEST_CASE("cpu_runner bench: matmul" * doctest::skip()) {
  const int k = 896, rows = 4864;
  std::vector<float> w(static_cast<size_t>(rows) * k, 0.01f), x(64 * k, 0.5f), y(64 * rows);
  ThreadPool pool(static_cast<int>(std::thread::hardware_concurrency()));
  for (int t : {1, 4, 64}) {
    const int reps = t == 64 ? 5 : 50;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) matmul_wt(pool, x.data(), t, k, w.data(), rows, nullptr, y.data());
    const double s = seconds_since(t0) / reps;
    MESSAGE("matmul T=", t, " [", rows, "x", k, "]: ", s * 1e3, " ms, ", 2.0 * t * rows * k / s / 1e9, " GFLOP/s");
  }
}

}  // namespace nvllm
