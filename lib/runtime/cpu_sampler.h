// The reference sampler: picks one token from a sequence's fp32 logits exactly as
// docs/sampling.md defines it (raw logprobs, penalties, eos suppression, greedy,
// temperature, top-k, top-p, min-p, exponential-race draw). The CUDA sampler implements the
// same text; this one is what its tests compare with.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/runner.h"
#include "engine/sampling_params.h"

namespace nvllm {

// Everything one sampled sequence contributes.
struct SamplerInput {
  std::span<const float> logits;  // [vocab]
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;
  uint64_t seed = 0;  // per sequence (sequence_seed)
  int32_t step = 0;   // index of the token being sampled
  bool suppress_eos = false;
  std::span<const int32_t> eos_token_ids;
};

struct SamplerResult {
  int32_t token_id = -1;
  float logprob = 0.0f;  // raw log_softmax of the logits at token_id
  std::vector<TokenLogprob> top_logprobs;  // params->logprobs highest raw logprobs, or empty
};

SamplerResult sample_token(const SamplerInput& in);

// The steps of sample_token, exposed for tests.

// Applies repetition, frequency and presence penalties in place (spec step 2).
void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens);

// The tokens that survive top-k, top-p and min-p on temperature-scaled logits (spec step 5),
// with their softmax probabilities over the top-k set. keep[i] is 1 for a surviving token.
struct KeptDistribution {
  std::vector<float> prob;
  std::vector<uint8_t> keep;
};
KeptDistribution filter_distribution(std::span<const float> scaled_logits, int top_k, float top_p,
                                     float min_p);

// Index of the largest value, lowest index on ties.
int32_t argmax_lowest(std::span<const float> values);

}  // namespace nvllm
