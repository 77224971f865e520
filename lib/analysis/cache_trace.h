// The KV-cache trace: one row per engine step (blocks in use, prefix hits, evictions,
// preemptions, recomputed tokens, batch sizes, queue lengths), written by `generate --cache-trace` and by the inspect-cache
// replay, and read back to summarise and chart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nvllm {

class Engine;

struct CacheTraceRow {
  int64_t step = 0;
  double time_s = 0;        // since the engine started
  int blocks_used = 0;
  int num_blocks = 0;
  int cached_blocks = 0;    // blocks holding a reusable hashed prefix (in use or free)
  int64_t query_tokens = 0; // cumulative, as the block manager counts them
  int64_t hit_tokens = 0;   // cumulative
  int64_t evictions = 0;    // cumulative
  int64_t preemptions = 0;  // cumulative
  int64_t recomputed_tokens = 0;  // cumulative: tokens computed again after a preemption
  int64_t scheduled_seqs = 0;     // cumulative: sequences in the steps' batches
  int running = 0;
  int waiting = 0;
};

// The row describing `engine` right after its step number `step`.
CacheTraceRow trace_row(const Engine& engine, int64_t step);

nlohmann::json to_json(const CacheTraceRow& row);
// Reads a trace written one JSON row per line; throws nvllm::Error naming the file and line.
std::vector<CacheTraceRow> read_cache_trace(const std::string& path);

struct CacheTraceSummary {
  int64_t steps = 0;
  int num_blocks = 0;
  int peak_blocks = 0;
  int64_t peak_step = 0;
  double mean_blocks = 0;
  int64_t query_tokens = 0;
  int64_t hit_tokens = 0;
  int64_t evictions = 0;
  int64_t preemptions = 0;
  int64_t recomputed_tokens = 0;
  double mean_batch = 0;  // sequences per step (0 for a trace written before the field existed)
  double hit_rate() const { return query_tokens ? double(hit_tokens) / query_tokens : 0.0; }
};
CacheTraceSummary summarize(const std::vector<CacheTraceRow>& rows);

// Blocks in use over the steps as a terminal chart `width` x `height` characters.
std::string blocks_chart_text(const std::vector<CacheTraceRow>& rows, int width = 72, int height = 12);
// The same curve as a standalone SVG document.
std::string blocks_chart_svg(const std::vector<CacheTraceRow>& rows);

}  // namespace nvllm
