// The inspect-cache replay: a workload run through the real engine (scheduler, block manager,
// prefix cache) with a ReplayRunner instead of a model, so that what the KV cache does with it
// is measured without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/cache_trace.h"
#include "analysis/workload.h"
#include "engine/engine.h"
#include "model/config.h"

namespace nvllm {

struct ReplayResult {
  std::vector<FinishedRequest> finished;  // in the order of `requests` given to replay()
  std::vector<int64_t> finish_step;       // likewise: the step each request finished in
  std::vector<CacheTraceRow> trace;
  RunStats stats;  // the engine's, at the end: steps, mean batch, preemptions, recomputed tokens
  double modeled_s = 0;  // roofline time of the steps (with a cost model; else 0)
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  double hit_rate() const { return prompt_tokens ? double(cached_tokens) / prompt_tokens : 0.0; }
};

// An ordinary token that ends no request (no eos of `config`, no stop id of any request), so that
// every replayed request runs to max_tokens.
int32_t neutral_token(const std::vector<EngineRequest>& requests, const ModelConfig& config);

// Adds requests[order[0]], requests[order[1]], ... (ids must be their index in `requests`) to an
// engine over `num_blocks` KV blocks and steps it to the end; stop strings and min_tokens are
// dropped (no text in a replay; lengths come from max_tokens). `cost` (may be null) prices each
// step at the roofline.
ReplayResult replay(const std::vector<EngineRequest>& requests, const std::vector<size_t>& order,
                    const EngineConfig& config, int num_blocks, int32_t token, const StepCostModel* cost = nullptr);

}  // namespace nvllm
