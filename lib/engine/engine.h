// Engine: requests in, finished requests out, one scheduler step at a time.
//
//   Engine engine(config, runner, tokenizer.get());
//   engine.add_request({.id = "0", .prompt_ids = ids, .params = params});
//   while (engine.has_unfinished())
//     for (FinishedRequest& done : engine.step()) write(done);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/runner.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "engine/stats.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {

struct EngineConfig {
  int block_size = 16;                 // tokens per KV block: power of two, 1..256
  bool prefix_caching = true;
  bool chunked_prefill = true;         // off: a prompt is prefilled in one step or waits
  int max_num_seqs = 256;              // sequences in one step
  int max_num_batched_tokens = 8192;   // token budget of one step
  int max_model_len = 4096;            // prompt + output tokens of one sequence
  std::vector<int32_t> eos_token_ids;  // stop unless ignore_eos
  bool priority_scheduling = false;    // --scheduling-policy priority (see Scheduler)
  Admission admission = Admission::kPlanned;  // --admission planned|greedy (see Scheduler)
};

struct EngineRequest {
  std::string id;  // opaque to the engine; comes back in FinishedRequest
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  int priority = 0;  // lower runs first under --scheduling-policy priority (as in vLLM)
};

struct FinishedSequence {
  std::vector<int32_t> token_ids;  // generated tokens (an eos / stop id / stop string token included)
  std::string text;                // detokenized, stop string cut; empty without a tokenizer
  std::string finish_reason;       // "stop" or "length"
  std::string stop_string;         // the stop string that ended it ("" if none)
  int32_t stop_token_id = -1;      // the stop_token_ids id that ended it (-1 if none; eos is not one)
  std::vector<float> logprobs;     // per token, when params.logprobs is set
  std::vector<std::vector<TokenLogprob>> top_logprobs;
};

struct FinishedRequest {
  std::string id;
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens served from the prefix cache at first admission
  double arrival_s = 0, first_token_s = 0, finish_s = 0;  // Engine::now_s() clock
  std::vector<FinishedSequence> outputs;                  // params.n of them, in sample order
};

class Engine {
 public:
  // `runner` decides the cache size (runner.num_kv_blocks()). `tokenizer` may be null: then
  // outputs carry no text and stop strings are not checked (bench, cache replay).
  Engine(const EngineConfig& config, Runner& runner, const Tokenizer* tokenizer);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws nvllm::Error, naming the limit, for one that can never run: an
  // empty prompt, prompt + 1 longer than max_model_len, more blocks than the whole cache, a
  // prompt longer than max_num_batched_tokens with chunked prefill off, n or max_tokens < 1.
  // max_tokens is capped to max_model_len - prompt (the request then ends with "length").
  void add_request(EngineRequest request);
  // add_request's checks alone, and its cap of max_tokens to what the context leaves (applied to
  // `request`). Reads only what is fixed at construction (the config, the cache size), so another
  // thread may call it while this engine steps (DataParallelEngine does).
  void check_request(EngineRequest& request) const;
  // Schedules, runs the model once, and returns the requests that finished in this step.
  // Stop checks after each sampled token, in this order: eos (unless ignore_eos) and
  // stop_token_ids once min_tokens are out -> "stop"; a stop string in the detokenized text
  // (cut there unless include_stop_str_in_output) -> "stop"; max_tokens, the context
  // (max_model_len), or a sequence grown past the whole KV cache -> "length".
  std::vector<FinishedRequest> step();
  bool has_unfinished() const;

  const RunStats& stats() const;
  const BlockManager& block_manager() const;
  const Scheduler& scheduler() const;
  // Seconds since the engine was constructed.
  double now_s() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvllm
