// Timing smoke test at the Qwen3-0.6B shape with random weights (skipped unless asked for with
// --no-skip): start-up (KV sizing, graph capture), prefill throughput and decode step times at
// batch 1 and 256 through the real Runner interface. A first baseline for issue 5, not a gate.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "runtime/cpu_runner_test_util.h"
#include "runtime/cuda/cuda_runner.h"

namespace nvllm {
namespace {

HostTensor random_bf16(std::vector<int64_t> shape, float scale, float offset, uint64_t& state) {
  HostTensor t(DType::kBF16, std::move(shape));
  uint16_t* p = t.as<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float u = static_cast<float>(state >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    p[i] = f32_to_bf16(offset + scale * u);
  }
  return t;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("gpu.bench.qwen3_0_6b_shape" * doctest::skip()) {
  ModelConfig c;
  c.arch = Arch::kQwen3;
  c.vocab_size = 151936;
  c.hidden_size = 1024;
  c.intermediate_size = 3072;
  c.num_layers = 28;
  c.num_heads = 16;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 40960;
  c.rope_theta = 1000000.0;
  c.qk_norm = true;
  c.tie_word_embeddings = true;
  uint64_t state = 88172645463325252ull;
  ModelWeights w = test::make_weights(c, [&](std::string_view name, std::vector<int64_t> shape) {
    if (name.ends_with("norm")) return random_bf16(std::move(shape), 0.1f, 1.0f, state);
    return random_bf16(std::move(shape), name == "down_proj" ? 0.03f : 0.05f, 0.0f, state);
  });

  const int bs = 16, prompt = 512, blocks_per_seq = 1024 / 16;  // 256 x 64 blocks
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams drawn;
  drawn.temperature = 0.6f;

  // Prefills `batch` prompts of 512 tokens (16 per step), then times 64 decode steps.
  auto run = [&](Runner& runner, int batch, const SamplingParams* sp, const char* label) {
    std::vector<std::vector<int32_t>> hist(batch);
    for (int s = 0; s < batch; ++s)
      for (int i = 0; i < prompt; ++i) hist[s].push_back((s * 7919 + i * 104729) % c.vocab_size);
    auto fill_common = [&](Batch& b, int s) {
      b.sample.push_back(1);
      b.params.push_back(sp);
      b.prompt_tokens.emplace_back(hist[s].data(), prompt);
      b.output_tokens.emplace_back();
      b.seeds.push_back(s);
      b.sample_step.push_back(static_cast<int32_t>(hist[s].size()) - prompt);
      b.suppress_eos.push_back(0);
      for (int j = 0; j < blocks_per_seq; ++j) b.block_tables.push_back(s * blocks_per_seq + j);
    };
    StepOutput out;
    auto t0 = std::chrono::steady_clock::now();
    for (int first = 0; first < batch; first += 16) {
      Batch b;
      b.max_blocks_per_seq = blocks_per_seq;
      b.query_start.push_back(0);
      for (int s = first; s < std::min(batch, first + 16); ++s) {
        for (int i = 0; i < prompt; ++i) {
          b.token_ids.push_back(hist[s][i]);
          b.positions.push_back(i);
          b.slot_mapping.push_back(s * blocks_per_seq * bs + i);
        }
        b.query_start.push_back(b.query_start.back() + prompt);
        b.context_lens.push_back(prompt);
        fill_common(b, s);
      }
      runner.execute(b, out);
      for (int s = first; s < std::min(batch, first + 16); ++s) hist[s].push_back(out.token_ids[s - first]);
    }
    const double prefill_s = seconds_since(t0);
    const int steps = 64;
    t0 = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step) {
      Batch b;
      b.max_blocks_per_seq = blocks_per_seq;
      b.decode_only = true;
      b.query_start.push_back(0);
      for (int s = 0; s < batch; ++s) {
        const int pos = static_cast<int>(hist[s].size()) - 1;
        b.token_ids.push_back(hist[s].back());
        b.positions.push_back(pos);
        b.slot_mapping.push_back(s * blocks_per_seq * bs + pos);
        b.query_start.push_back(s + 1);
        b.context_lens.push_back(pos + 1);
        fill_common(b, s);
      }
      runner.execute(b, out);
      for (int s = 0; s < batch; ++s) hist[s].push_back(out.token_ids[s]);
    }
    const double decode_s = seconds_since(t0);
    std::printf("%-12s batch %3d %s: prefill %.0f tok/s; decode %.3f ms/step = %.0f tok/s\n", label, batch,
                sp == &greedy ? "greedy" : "T=0.6 ", batch * prompt / prefill_s, decode_s / steps * 1e3,
                batch * steps / decode_s);
  };

  // Small batches with the projections on cuBLASLt (gemv off) and on gemv, then the default.
  for (int gemv : {0, 8, -1}) {
    CudaRunnerOptions opt;
    opt.max_num_seqs = 256;
    opt.max_num_batched_tokens = 8192;
    opt.max_model_len = 4096;
    opt.num_kv_blocks = 256 * blocks_per_seq;
    if (gemv >= 0) opt.gemv_max_batch = gemv;
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Runner> runner = make_cuda_runner(c, w, opt);
    const std::string label = gemv < 0 ? "default" : gemv == 0 ? "cublas" : "gemv";
    std::printf("%s: start-up %.2f s\n", label.c_str(), seconds_since(t0));
    if (gemv >= 0) {
      for (int batch : {1, 2, 4, 8}) run(*runner, batch, &greedy, label.c_str());
    } else {
      run(*runner, 1, &greedy, "default");
      run(*runner, 1, &drawn, "default");
      run(*runner, 256, &greedy, "default");
      run(*runner, 256, &drawn, "default");
    }
  }
}

}  // namespace nvllm
