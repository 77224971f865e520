#include "cmd/nvllm/bench_run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "io/progress.h"

namespace nvllm {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

RunResult run_requests(LoadedModel& m, const std::vector<EngineRequest>& requests, bool show_progress) {
  DataParallelEngine engine(m.engine, m.runner_ptrs(), nullptr);
  int64_t token_total = 0;
  for (const EngineRequest& r : requests) {
    engine.add_request(r);
    token_total += int64_t{r.params.max_tokens} * r.params.n;
  }
  const auto total = static_cast<int64_t>(requests.size());
  ProgressBar bar(total, stderr, show_progress && isatty(2));
  bar.set_token_total(token_total);
  ProgressLog log(total, token_total, 30, stderr, show_progress && !isatty(2));
  RunResult result;
  const auto start = Clock::now();
  while (engine.has_unfinished()) {
    const auto t = Clock::now();
    for (FinishedRequest& done : engine.step()) result.finished.push_back(std::move(done));
    result.step_s.push_back(seconds_since(t));
    result.step_device_s.push_back(engine.size() == 1 ? m.runner().last_step_device_seconds() : 0.0);
    result.step_started.push_back(engine.stats().started_seqs);
    result.step_finished.push_back(static_cast<int64_t>(result.finished.size()));
    bar.update(static_cast<int64_t>(result.finished.size()), engine.stats().output_tokens);
    log.update(static_cast<int64_t>(result.finished.size()), engine.stats().output_tokens);
  }
  result.seconds = seconds_since(start);
  result.stats = engine.stats();
  result.engines = engine.loads();
  bar.finish();
  log.finish(static_cast<int64_t>(result.finished.size()), engine.stats().output_tokens);
  return result;
}

void add_latency_run(LatencyTimes& t, RunResult run, int batch_size) {
  t.e2e_s.push_back(run.seconds);
  size_t i = 0;
  double prefill = 0;
  while (i < run.step_s.size()) {
    prefill += run.step_s[i];
    if (run.step_started[i++] >= batch_size) break;
  }
  t.prefill_s.push_back(prefill);
  t.prefill_steps = t.prefill_s.size() == 1 ? static_cast<int64_t>(i) : std::min<int64_t>(t.prefill_steps, i);
  for (; i < run.step_s.size() && run.step_finished[i - 1] == 0; ++i) {
    t.decode_s.push_back(run.step_s[i]);
    t.decode_device_s.push_back(run.step_device_s[i]);
  }
  t.last = std::move(run);
}

}  // namespace nvllm
