// SamplingParams: how one request picks its tokens and when it stops.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nvllm {

struct SamplingParams {
  int n = 1;                  // completions per prompt; they share the prompt's KV blocks
  float temperature = 1.0f;   // 0 means greedy
  float top_p = 1.0f;         // nucleus mass kept, (0, 1]
  int top_k = 0;              // 0 (or -1 in JSON) keeps every token
  float min_p = 0.0f;         // drop tokens with p < min_p * p_max
  uint64_t seed = 0;          // every request has one: its own, or derived from --seed
  int max_tokens = 256;
  int min_tokens = 0;         // eos and stop tokens are suppressed before this many
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<int> logprobs;  // return this many top log-probabilities per token (0: only the chosen)
  std::map<int32_t, float> logit_bias;  // OpenAI logit_bias: added to a token's logit before penalties (CPU runner only)

  bool greedy() const { return temperature <= 0.0f; }
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

}  // namespace nvllm
