// RunStats: what one engine run did, summed over its requests and steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nvllm {

struct RunStats {
  int64_t requests = 0;        // finished requests
  int64_t prompt_tokens = 0;   // prompt tokens of finished requests (once per request)
  int64_t cached_tokens = 0;   // of those, served from the prefix cache at first admission
  int64_t output_tokens = 0;   // tokens sampled so far (all sequences)
  int64_t started_seqs = 0;    // sequences that have sampled their first token
  int64_t steps = 0;           // engine steps that ran the model
  int64_t computed_tokens = 0; // tokens run through the model: prefill chunks, decodes, recompute
  int64_t preemptions = 0;
  int64_t recomputed_tokens = 0;  // tokens run through the model again after a preemption
  int64_t scheduled_seqs = 0;     // sequences in the steps' batches, summed over the steps
  int peak_blocks_in_use = 0;
  int num_kv_blocks = 0;
  double elapsed_s = 0;        // engine construction to the last step
  std::vector<double> ttft_s;  // per finished request: arrival to first token
  std::vector<double> tpot_s;  // per finished sequence with >1 token: (finish - first) / (tokens - 1)
  std::vector<double> e2e_s;   // per finished request: arrival to finish

  // cached_tokens / prompt_tokens: the share of prompt tokens the prefix cache served.
  // Adds `other`'s counts (not elapsed_s, not the distributions): the totals of data-parallel
  // engines. Peak and cache blocks add up too, each engine having its own cache.
  void add_counts(const RunStats& other);
  double prefix_cache_hit_rate() const { return prompt_tokens ? double(cached_tokens) / prompt_tokens : 0.0; }
  // Sequences per model step (decodes and prefill chunks alike).
  double mean_batch_size() const { return steps ? double(scheduled_seqs) / steps : 0.0; }
  // Several lines for stderr: requests, steps and mean batch, preemptions and recomputed tokens,
  // tokens, tok/s, hit rate, TTFT/TPOT p50.
  std::string summary() const;
  nlohmann::json to_json() const;
};

// The p-th percentile (0..100) of `values` with linear interpolation; 0 for an empty list.
double percentile(std::vector<double> values, double p);

}  // namespace nvllm
