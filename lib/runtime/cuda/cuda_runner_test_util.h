// The CUDA runner tests' harness: tiny random models built in memory (gpu_tiny_config), bf16 and
// float32 copies of their weights, and run_both / run_single, which drive the CUDA runner and the
// CPU runner (the float32 reference) through the same batches and collect their logits and tokens.
#pragma once

#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/fp8_weights.h"
#include "model/kv_scales.h"
#include "runtime/cpu_runner.h"
#include "runtime/cpu_runner_test_util.h"
#include "runtime/cuda/cuda_runner.h"

namespace nvllm::cuda_runner_test {

inline ModelConfig gpu_tiny_config(Arch arch) {
  ModelConfig c = test::tiny_config(arch, 2);
  c.vocab_size = 509;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  return c;
}

// Rounds every weight to bf16 so that both runners compute with the same numbers: `f32` for
// the CPU runner, `bf16` for the CUDA runner.
inline void round_to_bf16(HostTensor& f32, HostTensor& bf16) {
  if (f32.empty()) return;
  bf16 = HostTensor(DType::kBF16, f32.shape());
  for (int64_t i = 0; i < f32.numel(); ++i) {
    const uint16_t h = f32_to_bf16(f32.as<float>()[i]);
    bf16.as<uint16_t>()[i] = h;
    f32.as<float>()[i] = bf16_to_f32(h);
  }
}

inline void split_weights(ModelWeights& f32, ModelWeights& bf16) {
  round_to_bf16(f32.embed, bf16.embed);
  round_to_bf16(f32.final_norm, bf16.final_norm);
  round_to_bf16(f32.lm_head, bf16.lm_head);
  bf16.layers.resize(f32.layers.size());
  for (size_t l = 0; l < f32.layers.size(); ++l) {
    LayerWeights &a = f32.layers[l], &b = bf16.layers[l];
    round_to_bf16(a.input_norm, b.input_norm);
    round_to_bf16(a.qkv, b.qkv);
    round_to_bf16(a.qkv_bias, b.qkv_bias);
    round_to_bf16(a.q_norm, b.q_norm);
    round_to_bf16(a.k_norm, b.k_norm);
    round_to_bf16(a.o_proj, b.o_proj);
    round_to_bf16(a.post_norm, b.post_norm);
    round_to_bf16(a.gate_up, b.gate_up);
    round_to_bf16(a.down, b.down);
  }
}

// random_weights draws projections from U(-0.3, 0.3): a gain of ~0.17 sqrt(k) for k inputs, ~2
// at 128, which amplifies bf16 rounding into several percent of logit error. Scaling them by
// `factor` (0.4: a gain near 1, what trained models have) keeps the comparison about the
// implementation, not conditioning. Above hidden 256 every projection is scaled down by
// sqrt(256 / hidden) more, which keeps about that gain: at hidden 2,048 a flat 0.4 gave 0.13
// relative logit error without q/k norms, fused and separate kernels alike; scaling only q/k/v and
// gate/up left logits large enough for 0.29 of log-prob error at 1.2% relative logit error.
// (Every runner test at hidden 256 or less keeps the weights it was written with.)
inline void scale_projections(ModelWeights& w, float factor, int hidden) {
  const float f = factor * std::sqrt(256.f / static_cast<float>(std::max(hidden, 256)));
  for (LayerWeights& l : w.layers)
    for (HostTensor* t : {&l.qkv, &l.o_proj, &l.gate_up, &l.down})
      for (float& v : t->f32()) v *= f;
}

// Greedy sampling fields for every sequence in `b`; `sample[s]` says which ones want a token.
inline void add_sampling(Batch& b, const std::vector<uint8_t>& sample, const std::vector<const SamplingParams*>& params,
                  const std::vector<std::vector<int32_t>>& histories, int step) {
  const int S = b.num_seqs();
  b.sample = sample;
  b.params = params;
  b.prompt_tokens.resize(S);
  b.output_tokens.resize(S);
  for (int s = 0; s < S; ++s) b.prompt_tokens[s] = histories[s];
  b.seeds.assign(S, 1234);
  b.sample_step.assign(S, step);
  b.suppress_eos.assign(S, 0);
}

inline double rel_error(const float* a, const float* ref, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;  // per step, per sequence
  std::vector<std::vector<float>> logits;    // per step: sampled rows
  bool fused = false;                        // the decode steps ran the fused kernels
  // With an FP8 cache: per sampled row, the relative error against the CPU runner with the FP8
  // cache (rel) and against the CPU runner without one (rel_unquantised).
  std::vector<double> rel, rel_unquantised;
};

inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// FP8 KV scales for a test model: per (layer, KV head), 1.0 (vLLM's default, what a checkpoint
// without scales gets: these models' k and v are O(1), codes in E4M3's normal range) and coarser
// ones (1/8: codes ~8 of the same values; 4: codes mostly subnormal, where E4M3's step is 2^-9).
inline KvScales test_kv_scales(const ModelConfig& c) {
  KvScales s = default_kv_scales(c);
  for (size_t i = 0; i < s.k.size(); ++i) {
    s.k[i] = i % 3 == 0 ? 1.0f : i % 3 == 1 ? 0.125f : 4.0f;
    s.v[i] = i % 3 == 0 ? 4.0f : i % 3 == 1 ? 1.0f : 0.125f;
  }
  return s;
}

// The tolerance of an FP8 run's logits against the CPU runner with the same FP8 cache: bf16's
// 2e-2 and room for codes one step apart. The runners quantise the same k and v up to bf16
// rounding (the CUDA runner's are bf16, the CPU runner's float32), and a value within that
// rounding of an E4M3 rounding edge gets the neighbouring code: a few percent of the elements
// differ by a whole step (6-12% of the value), which the logits feel far more than bf16's 0.4%.
// Measured on the H100 (bench/NOTES.md): worst 0.045, mean 0.017-0.030, where the FP8 cache
// itself moves the logits by 0.03-0.12 from the unquantised ones; hence the second check of
// each run, that the CUDA runner is closer to the FP8 function than to the unquantised one.
inline constexpr double kFp8RelTolerance = 6e-2;
// FP8 weights: the CUDA runner's FP8 GEMMs (prefill, steps over gemv_max_batch rows) also round
// each activation to E4M3 per token (3 mantissa bits: up to 6% an element), which the CPU
// runner's --quantization fp8 does not; measured on the H100 (bench/NOTES.md, fifteenth session):
// worst 0.070, mean 0.028-0.045, where the FP8 weights move the logits 0.14-0.15 from bf16's.
inline constexpr double kFp8WeightsRelTolerance = 0.1;

// The CPU runner without an FP8 cache and FP8 weights, for FP8 runs (`quantised`; null otherwise):
// the weights of run_both's and run_single's models.
inline std::unique_ptr<CpuRunner> unquantised_cpu(const ModelConfig& c, uint32_t seed, bool quantised, int block_size,
                                                  int blocks) {
  if (!quantised) return nullptr;
  ModelWeights wf = test::random_weights(c, seed), wb;
  scale_projections(wf, 0.4f, c.hidden_size);
  split_weights(wf, wb);
  return std::make_unique<CpuRunner>(c, std::move(wf), block_size, blocks, 2);
}

// Three sequences: prompts of 5, 17 and 33 tokens; a first step holds only the third's first 10
// tokens (nothing samples); step 1 prefills the first two and the third's tokens 10..19 (over its
// cached first chunk); step 2 mixes two decodes with the rest of the third prompt; then decode-only
// steps (padded to a graph size of 4 when graphs are on). The CUDA runner's greedy tokens are
// fed back to both runners, so both see the same inputs.
// `fp8_weights`: the CUDA runner with CudaRunnerOptions::fp8_weights, the CPU runner with
// --quantization fp8's weights (quantize_weights_fp8); compared as FP8 KV runs are.
// The decode-only steps take the fused kernels where the shape allows (RunResult::fused), unless
// `fused_max_batch` says fewer sequences (1: the separate kernels) or gemv_max_batch is given (the
// steps it names go to the gemv).
inline RunResult run_both(const ModelConfig& c, uint32_t seed, bool enforce_eager, bool mixed, double* worst_rel,
                          int* checked_tokens, int gemv_max_batch = -1, const KvScales* fp8 = nullptr,
                          int tensor_parallel = 1, bool fp8_weights = false, int fused_max_batch = -1) {
  ModelWeights wf = test::random_weights(c, seed), wb;
  scale_projections(wf, 0.4f, c.hidden_size);
  split_weights(wf, wb);
  if (fp8_weights) quantize_weights_fp8(wf);  // the bf16-rounded values, as the GPU quantises them
  const int block_size = 16, blocks_per_seq = 72;  // max_model_len 1152: graphs for context bounds 1024 and 1152
  CpuRunner cpu(c, std::move(wf), block_size, 3 * blocks_per_seq, 2, 1, fp8);
  const bool quantised = fp8 != nullptr || fp8_weights;
  const std::unique_ptr<CpuRunner> cpu32 = unquantised_cpu(c, seed, quantised, block_size, 3 * blocks_per_seq);
  CudaRunnerOptions opt;
  if (fp8 != nullptr) opt.fp8_kv = *fp8;
  opt.fp8_weights = fp8_weights;
  opt.block_size = block_size;
  opt.max_num_seqs = 8;
  opt.max_num_batched_tokens = 256;
  opt.max_model_len = blocks_per_seq * block_size;
  opt.num_kv_blocks = 3 * blocks_per_seq;
  opt.enforce_eager = enforce_eager;
  if (gemv_max_batch >= 0) opt.gemv_max_batch = gemv_max_batch;  // else the default
  if (fused_max_batch >= 0 || gemv_max_batch >= 0) opt.tuning.fused_max_batch = std::max(1, fused_max_batch);
  opt.tensor_parallel_size = tensor_parallel;
  std::unique_ptr<Runner> gpu = make_cuda_runner(c, wb, opt);
  CHECK(gpu->num_kv_blocks() == 3 * blocks_per_seq);

  RunResult result;
  result.fused = tensor_parallel == 1 && cuda_runner_fused_decode(*gpu, enforce_eager ? 3 : 4);
  std::mt19937 rng(seed + 1);
  std::vector<std::vector<int32_t>> hist(3);
  for (int s = 0; s < 3; ++s) {
    const int len = s == 0 ? 5 : s == 1 ? 17 : 33;
    for (int i = 0; i < len; ++i) hist[s].push_back(static_cast<int32_t>(rng() % c.vocab_size));
  }
  // Plain greedy everywhere takes the argmax fast path; `mixed` adds a greedy sequence with
  // logprobs and a seeded top-p draw, which take the full sampler.
  SamplingParams greedy, greedy_logprobs, drawn;
  greedy.temperature = 0.0f;
  greedy_logprobs.temperature = 0.0f;
  greedy_logprobs.logprobs = 2;
  drawn.temperature = 0.8f;
  drawn.top_p = 0.9f;
  const std::vector<const SamplingParams*> params =
      mixed ? std::vector<const SamplingParams*>{&greedy, &greedy_logprobs, &drawn}
            : std::vector<const SamplingParams*>{&greedy, &greedy, &greedy};
  auto blocks = [&](int s) { return test::block_range(s * blocks_per_seq, blocks_per_seq); };

  *worst_rel = 0.0;
  {  // A step whose only work is a prompt chunk that ends no prompt: nothing samples.
    Batch b = test::make_batch({{std::vector<int32_t>(hist[2].begin(), hist[2].begin() + 10), 0, blocks(2)}},
                               block_size);
    add_sampling(b, {0}, {params[2]}, {hist[2]}, 0);
    cpu.forward_logits(b);
    StepOutput out;
    gpu->execute(b, out);
    CHECK(out.token_ids == std::vector<int32_t>{-1});
  }
  for (int step = 0; step < 7; ++step) {
    std::vector<test::SeqChunk> chunks;
    std::vector<uint8_t> sample;
    if (step == 0) {
      chunks = {{hist[0], 0, blocks(0)}, {hist[1], 0, blocks(1)},
                {std::vector<int32_t>(hist[2].begin() + 10, hist[2].begin() + 20), 10, blocks(2)}};
      sample = {1, 1, 0};
    } else if (step == 1) {
      chunks = {{{hist[0].back()}, static_cast<int>(hist[0].size()) - 1, blocks(0)},
                {{hist[1].back()}, static_cast<int>(hist[1].size()) - 1, blocks(1)},
                {std::vector<int32_t>(hist[2].begin() + 20, hist[2].end()), 20, blocks(2)}};
      sample = {1, 1, 1};
    } else {
      for (int s = 0; s < 3; ++s)
        chunks.push_back({{hist[s].back()}, static_cast<int>(hist[s].size()) - 1, blocks(s)});
      sample = {1, 1, 1};
    }
    Batch b = test::make_batch(chunks, block_size);
    add_sampling(b, sample, params, hist, step);
    const std::vector<float> ref_all = cpu.forward_logits(b);
    const std::vector<float> ref32_all = cpu32 ? cpu32->forward_logits(b) : std::vector<float>{};
    StepOutput out;
    gpu->execute(b, out);
    const std::vector<float> got = cuda_runner_last_logits(*gpu);
    result.tokens.push_back(out.token_ids);
    result.logits.push_back(got);
    const double tolerance = fp8_weights ? kFp8WeightsRelTolerance : quantised ? kFp8RelTolerance : 2e-2;

    int r = 0;
    for (int s = 0; s < 3; ++s) {
      if (!sample[s]) {
        CHECK(out.token_ids[s] == -1);
        continue;
      }
      INFO("step ", step, " sequence ", s);
      const float* ref = ref_all.data() + static_cast<size_t>(b.query_start[s + 1] - 1) * c.vocab_size;
      const float* row = got.data() + static_cast<size_t>(r) * c.vocab_size;
      const double rel = rel_error(row, ref, c.vocab_size);
      *worst_rel = std::max(*worst_rel, rel);
      CHECK(rel < tolerance);  // bf16 weights and activations against float32: ~1e-2 expected
      if (cpu32) {
        result.rel.push_back(rel);
        result.rel_unquantised.push_back(
            rel_error(row, ref32_all.data() + static_cast<size_t>(b.query_start[s + 1] - 1) * c.vocab_size,
                      c.vocab_size));
      }
      std::vector<float> sorted(ref, ref + c.vocab_size);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const int ref_token = static_cast<int>(std::max_element(ref, ref + c.vocab_size) - ref);
      const float spread = sorted[0] - *std::min_element(ref, ref + c.vocab_size);
      if (params[s]->greedy() && sorted[0] - sorted[1] > (quantised ? 0.04f : 0.02f) * spread) {
        CHECK(out.token_ids[s] == ref_token);
        ++*checked_tokens;
      }
      if (params[s]->logprobs) {
        // Raw logprob of the chosen token: the CPU's log_softmax, to bf16 accuracy.
        double z = 0;
        for (int i = 0; i < c.vocab_size; ++i) z += std::exp(double(ref[i]) - sorted[0]);
        const double ref_lp = double(ref[out.token_ids[s]]) - sorted[0] - std::log(z);
        // Unquantised: to bf16 accuracy. Quantised, the GPU's codes are rounded from bf16 values and
        // the CPU's from float32 ones, so a code may differ by one E4M3 step and the logits by a few
        // percent (their check above): there the log-prob must be the log-softmax of the GPU's own
        // logits, which moves at most twice their largest difference from the CPU's (a log-sum-exp
        // moves at most by that difference; measured 0.21 off at a log-prob of -0.86 over an FP8
        // cache, 14 q heads over 2 at head_dim 128).
        double off = 0;
        for (int i = 0; i < c.vocab_size; ++i) off = std::max(off, std::abs(double(row[i]) - ref[i]));
        CHECK(std::abs(out.logprobs[s] - ref_lp) <
              (quantised ? 2 * off + 1e-3 : 0.05 + 0.02 * std::abs(ref_lp)));
        REQUIRE(out.top_logprobs[s].size() == 2);
        CHECK(out.top_logprobs[s][0].token_id == out.token_ids[s]);
        CHECK(out.top_logprobs[s][0].logprob == out.logprobs[s]);
        CHECK(out.top_logprobs[s][1].logprob <= out.top_logprobs[s][0].logprob);
      } else {
        CHECK(out.top_logprobs[s].empty());
      }
      hist[s].push_back(out.token_ids[s]);
      ++r;
    }
  }
  return result;
}

// The one sequence of the batch-1 tests: a random 20-token prompt (hist, which grows by the tokens
// fed back), its cache blocks scattered (a shuffled block list for max_model_len tokens), greedy
// sampling; batch(step) is the prompt at step 0, else the decode of the newest token.
struct OneSequence {
  static constexpr int kBlockSize = 16, kBlocks = 64;
  std::vector<int32_t> blocks, hist;
  SamplingParams greedy;

  OneSequence(const ModelConfig& c, uint32_t seed) {
    const CudaRunnerOptions opt = options();
    std::mt19937 rng(seed);
    blocks = test::block_range(0, kBlocks);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    blocks.resize(opt.max_model_len / kBlockSize);
    for (int i = 0; i < 20; ++i) hist.push_back(static_cast<int32_t>(rng() % c.vocab_size));
    greedy.temperature = 0.0f;
  }
  static CudaRunnerOptions options() {
    CudaRunnerOptions opt;
    opt.block_size = kBlockSize;
    opt.max_num_seqs = 4;
    opt.max_num_batched_tokens = 128;
    opt.max_model_len = 512;
    opt.num_kv_blocks = kBlocks;
    return opt;
  }
  Batch batch(int step) const {
    const test::SeqChunk chunk = step == 0 ? test::SeqChunk{hist, 0, blocks}
                                           : test::SeqChunk{{hist.back()}, static_cast<int>(hist.size()) - 1, blocks};
    Batch b = test::make_batch({chunk}, kBlockSize);
    add_sampling(b, {1}, {&greedy}, {hist}, step);
    return b;
  }
};

// One sequence: a prompt of 20 tokens, then `decodes` single-token decode steps (the batch-1
// path: the fused kernels when `fused`), the CUDA runner's greedy tokens fed back to
// both runners, or the tokens of `forced` when given (so that two runs see the same inputs).
// Its cache blocks are scattered (a shuffled block list). Checks every step's logits and
// greedy token against the CPU runner.
inline RunResult run_single(const ModelConfig& c, uint32_t seed, bool enforce_eager, bool fused, int decodes,
                     const std::vector<int32_t>* forced, double* worst_rel, int* checked_tokens,
                     const KvScales* fp8 = nullptr, int tensor_parallel = 1, bool fp8_weights = false) {
  ModelWeights wf = test::random_weights(c, seed), wb;
  scale_projections(wf, 0.4f, c.hidden_size);
  split_weights(wf, wb);
  if (fp8_weights) quantize_weights_fp8(wf);  // the bf16-rounded values, as the GPU quantises them
  CpuRunner cpu(c, std::move(wf), OneSequence::kBlockSize, OneSequence::kBlocks, 2, 1, fp8);
  const bool quantised = fp8 != nullptr || fp8_weights;
  const std::unique_ptr<CpuRunner> cpu32 =
      unquantised_cpu(c, seed, quantised, OneSequence::kBlockSize, OneSequence::kBlocks);
  CudaRunnerOptions opt = OneSequence::options();
  opt.enforce_eager = enforce_eager;
  opt.tuning.fused_decode = fused;
  opt.fp8_weights = fp8_weights;
  if (fp8 != nullptr) opt.fp8_kv = *fp8;
  opt.tensor_parallel_size = tensor_parallel;
  std::unique_ptr<Runner> gpu = make_cuda_runner(c, wb, opt);

  OneSequence seq(c, seed + 7);
  std::vector<int32_t>& hist = seq.hist;
  RunResult result;
  result.fused = cuda_runner_fused_decode(*gpu);
  *worst_rel = 0.0;
  for (int step = 0; step <= decodes; ++step) {
    const Batch b = seq.batch(step);
    const std::vector<float> ref_all = cpu.forward_logits(b);
    StepOutput out;
    gpu->execute(b, out);
    result.logits.push_back(cuda_runner_last_logits(*gpu));
    result.tokens.push_back(out.token_ids);
    const std::vector<float>& got = result.logits.back();
    INFO("step ", step, ", context ", hist.size());
    const size_t last = static_cast<size_t>(b.query_start[1] - 1) * c.vocab_size;
    const float* ref = ref_all.data() + last;
    const double rel = rel_error(got.data(), ref, c.vocab_size);
    *worst_rel = std::max(*worst_rel, rel);
    CHECK(rel < (fp8_weights ? kFp8WeightsRelTolerance : fp8 ? kFp8RelTolerance : 2e-2));
    if (cpu32) {
      result.rel.push_back(rel);
      result.rel_unquantised.push_back(rel_error(got.data(), cpu32->forward_logits(b).data() + last, c.vocab_size));
    }
    // The greedy token is the argmax of the runner's own logits (lowest id among equal maxima),
    // whichever kernel picked it.
    CHECK(out.token_ids[0] == static_cast<int>(std::max_element(got.begin(), got.end()) - got.begin()));
    std::vector<float> sorted(ref, ref + c.vocab_size);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    const float spread = sorted[0] - *std::min_element(ref, ref + c.vocab_size);
    if (sorted[0] - sorted[1] > (quantised ? 0.04f : 0.02f) * spread) {
      CHECK(out.token_ids[0] == static_cast<int>(std::max_element(ref, ref + c.vocab_size) - ref));
      ++*checked_tokens;
    }
    hist.push_back(forced != nullptr ? forced->at(step) : out.token_ids[0]);
  }
  return result;
}

// `n` sequences decoded together, one token a step: prompts of 20, 25, 30, ... random tokens, each
// sequence on its own shuffled share of the cache's blocks.
struct Sequences {
  std::vector<std::vector<int32_t>> blocks, hist;
  SamplingParams greedy;

  Sequences(const ModelConfig& c, int n, uint32_t seed) {
    std::mt19937 rng(seed);
    const int each = OneSequence::kBlocks / n;
    for (int s = 0; s < n; ++s) {
      blocks.push_back(test::block_range(s * each, each));
      std::shuffle(blocks.back().begin(), blocks.back().end(), rng);
      hist.emplace_back();
      for (int i = 0; i < 20 + 5 * s; ++i) hist.back().push_back(static_cast<int32_t>(rng() % c.vocab_size));
    }
    greedy.temperature = 0.0f;
  }
  Batch batch(int step) const {
    const int n = static_cast<int>(hist.size());
    std::vector<test::SeqChunk> chunks;
    for (int s = 0; s < n; ++s)
      chunks.push_back(step == 0 ? test::SeqChunk{hist[s], 0, blocks[s]}
                                 : test::SeqChunk{{hist[s].back()}, static_cast<int>(hist[s].size()) - 1, blocks[s]});
    Batch b = test::make_batch(chunks, OneSequence::kBlockSize);
    add_sampling(b, std::vector<uint8_t>(n, 1), std::vector<const SamplingParams*>(n, &greedy), hist, step);
    return b;
  }
};

// How chained_run runs: `seqs` sequences decoded together (1: OneSequence), the fused decode
// kernels (whose batch-1 head writes the token into the next step's inputs) or the separate ones
// (the sampler's argmax tokens copied there), `tp` tensor-parallel ranks, chaining steps of up to
// `chain_max_seqs` sequences.
struct ChainRun {
  bool fused = true;
  int tp = 1, seqs = 1, chain_max_seqs = 8;
};

// The greedy tokens (every sequence's, step by step) of a prefill and then `decodes` decode steps
// on the CUDA runner with chain_decode on or off. At the steps in `swap_at` one sequence's next
// input (sequence step % seqs) is not its sampled token but vocab - 1 - token, so a chained step
// (which decodes the sampled ones) must be dropped.
inline std::vector<int32_t> chained_run(const ModelConfig& c, bool chain, int decodes, const std::set<int>& swap_at,
                                        int* chained, const ChainRun& run = {}) {
  ModelWeights wf = test::random_weights(c, 5), wb;
  scale_projections(wf, 0.4f, c.hidden_size);
  split_weights(wf, wb);
  CudaRunnerOptions opt = OneSequence::options();
  opt.tuning.chain_decode = chain;
  opt.tuning.chain_max_seqs = run.chain_max_seqs;
  opt.tuning.fused_decode = run.fused;
  opt.tensor_parallel_size = run.tp;
  std::unique_ptr<Runner> gpu = make_cuda_runner(c, wb, opt);
  OneSequence one(c, 9);
  Sequences many(c, run.seqs, 9);
  one.greedy.max_tokens = many.greedy.max_tokens = decodes + 1;  // the last step chains nothing
  std::vector<int32_t> sampled;
  for (int step = 0; step <= decodes; ++step) {
    StepOutput out;
    gpu->execute(run.seqs == 1 ? one.batch(step) : many.batch(step), out);
    for (int s = 0; s < run.seqs; ++s) {
      const int32_t t = out.token_ids[s];
      sampled.push_back(t);
      std::vector<int32_t>& hist = run.seqs == 1 ? one.hist : many.hist[s];
      hist.push_back(swap_at.count(step) && s == step % run.seqs ? c.vocab_size - 1 - t : t);
    }
  }
  *chained = cuda_runner_chained_steps(*gpu);
  return sampled;
}

// The chained cases' check on a small `arch` model (group 2, head_dim 128): chained_run's tokens
// with the chain on equal those with it off, off chains nothing, and on chains every decode step
// after the first but the three after a swap (at steps 10, 11 and 30), or none when the step has
// more sequences than chain_max_seqs.
inline void check_chained_matches_unchained(Arch arch, const ChainRun& run) {
  ModelConfig c = gpu_tiny_config(arch);
  c.hidden_size = 256;
  c.intermediate_size = 384;
  c.head_dim = 128;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  const std::set<int> swap_at{10, 11, 30};
  int chained_off = 0, chained_on = 0;
  const std::vector<int32_t> plain = chained_run(c, false, 80, swap_at, &chained_off, run);
  const std::vector<int32_t> chained = chained_run(c, true, 80, swap_at, &chained_on, run);
  CHECK(plain == chained);
  CHECK(chained_off == 0);
  MESSAGE("chained steps (", run.tp, " rank(s), fused ", run.fused, ", ", run.seqs, " sequence(s), chained up to ",
          run.chain_max_seqs, "): ", chained_on, " of 80 decode steps");
  CHECK(chained_on == (run.seqs <= run.chain_max_seqs ? 80 - 1 - 3 : 0));
}

}  // namespace nvllm::cuda_runner_test
