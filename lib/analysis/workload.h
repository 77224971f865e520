// Benchmark workloads: synthetic request sets from lengths and a seed (including the published
// nano-vLLM benchmark), and the roofline arithmetic that says how fast a run could be at best.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/config.h"

namespace nvllm {

// A length given as "N" (fixed) or "MIN:MAX" (uniform, inclusive).
struct LengthRange {
  int min = 0;
  int max = 0;
};
// Parses "N" or "MIN:MAX"; throws nvllm::Error naming `flag` for anything else.
LengthRange parse_length_range(const std::string& text, const std::string& flag);

struct WorkloadSpec {
  int num_prompts = 256;
  LengthRange input_len{1024, 1024};
  LengthRange output_len{128, 128};
  int prefix_len = 0;       // tokens shared by every prompt, counted inside input_len
  int token_id_limit = 10000;  // ids drawn from [0, limit), as nano-vLLM does
  uint64_t seed = 0;
  SamplingParams params;    // max_tokens is set per request from output_len
};

// The nano-vLLM benchmark: 256 requests, prompt lengths then output lengths uniform in
// 100..1024, random token ids below 10000, ignore_eos, temperature 0.6.
WorkloadSpec nano_vllm_preset();

// Draws the requests. Deterministic for a spec; lengths are drawn prompt-first per request.
std::vector<EngineRequest> make_workload(const WorkloadSpec& spec);

// The least time a run could take on a card with `bandwidth` bytes/s and `flops` FLOP/s:
// every step reads all weights once, every decoded token reads its whole context's K/V once,
// and every token costs 2 FLOPs per weight plus attention; bytes and FLOPs may overlap, so the
// bound is the larger of the two times.
struct Roofline {
  double weight_bytes = 0;   // read per step
  double kv_bytes_per_token = 0;
  double bytes = 0;          // over the run
  double flops = 0;          // over the run
  double min_time_s(double bandwidth, double flops_per_s) const;
};

// Bytes a weight takes: in the layers' projections and in the LM head (2 and 2 for bf16; FP8
// weights keep a bf16 LM head: 1 and 2; the scales, under 0.1% of the codes, are left out).
struct WeightBytes {
  double layers = 2, lm_head = 2;
  WeightBytes(int both = 2) : layers(both), lm_head(both) {}  // NOLINT: one dtype for all
  WeightBytes(double layer_bytes, double lm_head_bytes) : layers(layer_bytes), lm_head(lm_head_bytes) {}
};

// `prompt_lens`/`output_lens` per request (n = 1), `steps` the engine steps the run took,
// `weight_dtype_bytes` and `kv_dtype_bytes` 2 for bf16. `cached_lens` (empty: none) are the
// prompt tokens each request took from the prefix cache: they are attended to, not computed.
Roofline roofline(const ModelConfig& config, const std::vector<int>& prompt_lens, const std::vector<int>& output_lens,
                  int64_t steps, WeightBytes weight_dtype_bytes, int kv_dtype_bytes,
                  const std::vector<int>& cached_lens = {});

// Measured ceilings of the H100 nvllm is tuned on (device copy, bf16 cuBLAS GEMM): the default
// roofline of bench on the GPU and of inspect-cache's modelled time.
constexpr double kH100Bandwidth = 3.03e12;
constexpr double kH100Flops = 854e12;
// FP8 projection weights run their GEMMs on the FP8 tensor cores, at twice the bf16 rate on
// Hopper (the H100's dense peaks: 1,979 and 989 TFLOP/s): rooflines take the bf16 rate twice.
constexpr double kFp8GemmRateFactor = 2.0;

// What one engine step costs at best: all weights read once, the K/V of each scheduled
// sequence's context read once, 2 FLOPs per weight and token (the LM head only where a token is
// sampled) plus attention over each token's keys. Time at the ceilings: the larger of the two.
struct StepCostModel {
  const ModelConfig* config = nullptr;
  WeightBytes weight_dtype_bytes = 2;
  int kv_dtype_bytes = 2;
  double bandwidth = kH100Bandwidth;
  double flops = kH100Flops;
  Roofline step(const Batch& batch) const;
  double seconds(const Batch& batch) const { return step(batch).min_time_s(bandwidth, flops); }
};

// One decode step of `batch` sequences, each with `context` tokens in the cache after the step:
// all weights read once, every sequence's K/V read once, 2 FLOPs per weight and row plus
// attention, the LM head on every row.
Roofline decode_step_roofline(const ModelConfig& config, int batch, int context, WeightBytes weight_dtype_bytes,
                              int kv_dtype_bytes);

// A figure a bench report prints, against its roofline: the time it took and the least time the
// card could take for the same work. A figure faster than its bound claims more than the card
// can do: the measurement or the bound is wrong, and the report says so.
struct RooflineCheck {
  std::string figure;     // as printed, e.g. "prefill p50"
  double measured_s = 0;
  double bound_s = 0;     // 0: no bound (no ceilings for this device)
  std::string cause;      // the likely cause, should it beat the bound
  // bound / measured: 1 at the bound, above 1 beyond what the card can do; 0 without a bound.
  double fraction_of_bound() const { return bound_s > 0 && measured_s > 0 ? bound_s / measured_s : 0.0; }
  // True exactly when the figure took less time than its bound (at the bound is not beyond it).
  bool exceeds_bound() const { return bound_s > 0 && measured_s > 0 && measured_s < bound_s; }
  // "WARNING: ..." naming the figure, both times, the share of the bound and the cause; "" when
  // exceeds_bound() is false.
  std::string warning() const;
  nlohmann::json to_json() const;  // {figure, measured_s, bound_s, fraction_of_bound, cause, message}
};

}  // namespace nvllm
