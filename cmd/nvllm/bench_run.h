// What bench measures of a run: its requests to completion on a fresh engine, with what each step
// did (time, device time, sequences started and requests finished so far), and how bench latency
// splits those steps into the prefill and the decode steps of the whole batch.
#pragma once

#include <cstdint>
#include <vector>

#include "cmd/nvllm/model_setup.h"
#include "engine/data_parallel.h"
#include "engine/engine.h"
#include "engine/stats.h"

namespace nvllm {

struct RunResult {
  RunStats stats;
  double seconds = 0;
  std::vector<double> step_s;
  std::vector<double> step_device_s;   // one engine: the runner's device time of each step (0: not measured)
  std::vector<int64_t> step_started;   // sequences with their first token so far, after each step
  std::vector<int64_t> step_finished;  // requests finished so far, after each step
  std::vector<FinishedRequest> finished;
  std::vector<EngineLoad> engines;  // what each data-parallel engine did
};

// Runs `requests` to completion on a fresh engine; returns wall seconds and per-step series.
// `show_progress`: a bar on a terminal, a line every 30 s in a log (none with -q).
RunResult run_requests(LoadedModel& m, const std::vector<EngineRequest>& requests, bool show_progress = false);

// The timed parts of latency runs: prefill (every step up to the one that samples the last
// sequence's first token) and the decode steps of the whole batch after it (up to the one in which
// the first sequences finish: with chunked prefill the first prompts' sequences finish before the
// last ones, and the steps after them decode a smaller batch than the one asked for).
struct LatencyTimes {
  std::vector<double> prefill_s, decode_s, decode_device_s, e2e_s;
  int64_t prefill_steps = 0;  // the fewest of any iteration (the bound counts a weights read a step)
  RunResult last;             // the last iteration's run, for the prefill roofline's prompts
};

// Adds one iteration's run of `batch_size` sequences to `t`.
void add_latency_run(LatencyTimes& t, RunResult run, int batch_size);

}  // namespace nvllm
