#include "engine/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace nvllm {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  // Linear interpolation between closest ranks (numpy's default).
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

namespace {

nlohmann::json distribution(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  if (!v.empty()) mean /= static_cast<double>(v.size());
  return {{"count", v.size()},
          {"mean", mean},
          {"p50", percentile(v, 50)},
          {"p90", percentile(v, 90)},
          {"p99", percentile(v, 99)},
          {"max", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())}};
}

}  // namespace

void RunStats::add_counts(const RunStats& o) {
  requests += o.requests;
  prompt_tokens += o.prompt_tokens;
  cached_tokens += o.cached_tokens;
  output_tokens += o.output_tokens;
  started_seqs += o.started_seqs;
  steps += o.steps;
  computed_tokens += o.computed_tokens;
  preemptions += o.preemptions;
  recomputed_tokens += o.recomputed_tokens;
  scheduled_seqs += o.scheduled_seqs;
  peak_blocks_in_use += o.peak_blocks_in_use;
  num_kv_blocks += o.num_kv_blocks;
}

std::string RunStats::summary() const {
  const double secs = elapsed_s > 0 ? elapsed_s : 0.0;
  const auto rate = [&](double n) { return secs > 0 ? n / secs : 0.0; };
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "requests:      %lld in %.2f s (%.2f req/s), %lld steps (mean batch %.1f)\n"
                "preemptions:   %lld (%lld tokens recomputed)\n"
                "tokens:        %lld prompt + %lld output; %.1f output tok/s, %.1f total tok/s\n"
                "prefix cache:  %.1f%% hit (%lld of %lld prompt tokens cached); peak %d of %d KV blocks\n"
                "latency (p50): TTFT %.1f ms, TPOT %.2f ms, end-to-end %.1f ms",
                static_cast<long long>(requests), secs, rate(static_cast<double>(requests)),
                static_cast<long long>(steps), mean_batch_size(), static_cast<long long>(preemptions),
                static_cast<long long>(recomputed_tokens),
                static_cast<long long>(prompt_tokens), static_cast<long long>(output_tokens),
                rate(static_cast<double>(output_tokens)), rate(static_cast<double>(prompt_tokens + output_tokens)),
                100.0 * prefix_cache_hit_rate(), static_cast<long long>(cached_tokens),
                static_cast<long long>(prompt_tokens), peak_blocks_in_use, num_kv_blocks,
                1e3 * percentile(ttft_s, 50), 1e3 * percentile(tpot_s, 50), 1e3 * percentile(e2e_s, 50));
  return buf;
}

nlohmann::json RunStats::to_json() const {
  const double secs = elapsed_s;
  const auto rate = [&](double n) { return secs > 0 ? n / secs : 0.0; };
  return {{"requests", requests},
          {"prompt_tokens", prompt_tokens},
          {"cached_tokens", cached_tokens},
          {"output_tokens", output_tokens},
          {"steps", steps},
          {"computed_tokens", computed_tokens},
          {"preemptions", preemptions},
          {"recomputed_tokens", recomputed_tokens},
          {"mean_batch_size", mean_batch_size()},
          {"peak_blocks_in_use", peak_blocks_in_use},
          {"num_kv_blocks", num_kv_blocks},
          {"elapsed_s", elapsed_s},
          {"prefix_cache_hit_rate", prefix_cache_hit_rate()},
          {"requests_per_s", rate(static_cast<double>(requests))},
          {"output_tokens_per_s", rate(static_cast<double>(output_tokens))},
          {"total_tokens_per_s", rate(static_cast<double>(prompt_tokens + output_tokens))},
          {"ttft_s", distribution(ttft_s)},
          {"tpot_s", distribution(tpot_s)},
          {"e2e_s", distribution(e2e_s)}};
}

}  // namespace nvllm
