#include "analysis/replay.h"

#include <set>
#include <string>

#include "analysis/replay_runner.h"

namespace nvllm {

int32_t neutral_token(const std::vector<EngineRequest>& requests, const ModelConfig& config) {
  std::set<int32_t> avoid(config.eos_token_ids.begin(), config.eos_token_ids.end());
  for (const EngineRequest& r : requests) avoid.insert(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end());
  int32_t token = 0;
  while (avoid.count(token)) ++token;
  return token;
}

ReplayResult replay(const std::vector<EngineRequest>& requests, const std::vector<size_t>& order,
                    const EngineConfig& config, int num_blocks, int32_t token, const StepCostModel* cost) {
  ReplayRunner runner(num_blocks, token, cost);
  Engine engine(config, runner, nullptr);
  for (size_t i : order) {
    EngineRequest r = requests[i];
    r.params.stop.clear();
    r.params.min_tokens = 0;
    engine.add_request(std::move(r));
  }
  ReplayResult result;
  result.finished.resize(requests.size());
  result.finish_step.resize(requests.size());
  for (int64_t step = 1; engine.has_unfinished(); ++step) {
    for (FinishedRequest& done : engine.step()) {
      const size_t i = std::stoul(done.id);
      result.prompt_tokens += done.prompt_tokens;
      result.cached_tokens += done.cached_tokens;
      result.finished[i] = std::move(done);
      result.finish_step[i] = step;
    }
    result.trace.push_back(trace_row(engine, step));
  }
  result.stats = engine.stats();
  result.modeled_s = runner.modeled_seconds();
  return result;
}

}  // namespace nvllm
