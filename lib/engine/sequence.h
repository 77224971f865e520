// Sequence: one completion being generated (a request with n > 1 has n of them): its tokens,
// how many of them the KV cache holds, its blocks, and its status.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/runner.h"
#include "engine/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {

enum class SequenceStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t id = 0;                 // unique per engine, in arrival order
  int64_t request = 0;            // owning request's key in the engine
  int sample_index = 0;           // 0..n-1 within the request
  const Sequence* parent = nullptr;  // sample 0 of the request for the others: whose prompt blocks to share
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;              // sequence_seed(request seed, sample_index)
  int priority = 0;               // the request's; lower runs first under the priority policy

  std::vector<int32_t> token_ids;  // prompt then output
  int prompt_len = 0;
  int num_computed = 0;      // leading tokens whose K/V is in the cache
  int num_cached = -1;       // prefix-cache hit at first admission (-1: not yet admitted)
  int num_new = 0;           // tokens scheduled in the current step
  // Something other than max_tokens may end it (eos not ignored, stop ids, stop strings): the
  // planned admission cannot know its length (set by the engine at add_request).
  bool may_stop_early = false;
  // Tokens whose K/V a preemption threw away (the most computed at any preemption): computing
  // them again is recomputation.
  int recompute_until = 0;
  BlockTable table;
  SequenceStatus status = SequenceStatus::kWaiting;

  double first_token_s = -1, finish_s = -1;
  std::string finish_reason;
  // What ended it with "stop", as vLLM's stop_reason: a stop string, or a stop_token_ids id
  // (-1: neither; eos and "length" have no stop reason).
  std::string stop_string;
  int32_t stop_token_id = -1;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;  // only with a tokenizer
  std::string text;                                     // output text, a stop string cut

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output() const { return num_tokens() - prompt_len; }
  std::span<const int32_t> prompt() const { return std::span<const int32_t>(token_ids).first(prompt_len); }
  std::span<const int32_t> output() const { return std::span<const int32_t>(token_ids).subspan(prompt_len); }
  bool finished() const { return status == SequenceStatus::kFinished; }
};

}  // namespace nvllm
