// DataParallelEngine: --data-parallel-size N, N engines in one process, each over its own runner
// (its own GPU, or its share of the CPU threads). Each request goes to the engine with the least
// outstanding predicted work (WorkBalancer); each engine is stepped in its own thread, and step()
// hands back whatever any of them finished. With one engine there is no thread and no balancing:
// every call is that engine's, so data parallel size 1 runs exactly as a plain Engine.
//
//   DataParallelEngine engine(config, {&runner0, &runner1}, tokenizer.get());
//   engine.add_request(request);   // throws nvllm::Error for a request that can never run
//   while (engine.has_unfinished())
//     for (FinishedRequest& done : engine.step()) write(done);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace nvllm {

// A request's predicted token work: prompt tokens plus the tokens it may generate (max_tokens,
// already capped by Engine::check_request, times n). Requests end early on a stop, so this is an
// upper bound, the same for every engine.
int64_t predicted_work(const EngineRequest& request);

// The balancing rule: each engine's outstanding predicted work (of requests sent to it and not
// yet finished); a new request goes to the engine with the least, the lowest index among equals.
class WorkBalancer {
 public:
  explicit WorkBalancer(int engines);
  // The engine for a request of `work`; its outstanding work grows by `work`.
  int assign(int64_t work);
  // A request of `work` sent to `engine` finished.
  void finish(int engine, int64_t work);
  int64_t outstanding(int engine) const { return outstanding_.at(engine); }

 private:
  std::vector<int64_t> outstanding_;
};

// What one engine of the group did (bench throughput reports it per engine).
struct EngineLoad {
  RunStats counts;          // its counts (the latency distributions are in the group's stats())
  double device_s = 0;      // its runner's device time, summed over its steps (0: not measured)
  double last_step_s = 0;   // when its latest step ended, on the group's clock (now_s())
};

class DataParallelEngine {
 public:
  // One engine per runner, all with `config`; the runners outlive the group. `tokenizer` as for
  // Engine (it must be safe to use from several threads at once: encode/decode are const).
  DataParallelEngine(const EngineConfig& config, std::span<Runner* const> runners, const Tokenizer* tokenizer);
  // One engine (data parallel size 1).
  DataParallelEngine(const EngineConfig& config, Runner& runner, const Tokenizer* tokenizer)
      : DataParallelEngine(config, std::span<Runner* const>(std::vector<Runner*>{&runner}), tokenizer) {}
  ~DataParallelEngine();  // stops the threads after their current step (an interrupted run)
  DataParallelEngine(const DataParallelEngine&) = delete;
  DataParallelEngine& operator=(const DataParallelEngine&) = delete;

  // Checks the request (Engine::add_request's errors, thrown here) and queues it on the engine
  // with the least outstanding predicted work.
  void add_request(EngineRequest request);
  // The requests finished since the last call. One engine: its step. Several: waits until at
  // least one engine has completed a step since the last call (or an engine failed: its error
  // is rethrown here), so the caller keeps its queue topped up and its progress current.
  std::vector<FinishedRequest> step();
  bool has_unfinished() const;
  // Requests queued and not yet admitted to a running batch, over all engines.
  int num_waiting() const;
  // Totals over the engines as of the last step(): counts summed, distributions joined, elapsed
  // the wall time since construction (one engine: that engine's own statistics).
  const RunStats& stats() const;
  // Per engine, as of the last step().
  std::vector<EngineLoad> loads() const;
  int size() const { return static_cast<int>(workers_.size()); }
  // The engine itself when there is only one (the cache trace reads its block manager); null
  // with several, whose engines belong to their threads.
  const Engine* single() const;
  double now_s() const;

 private:
  struct Worker;
  void work(Worker& w);      // a worker thread's loop
  void publish(Worker& w, std::vector<FinishedRequest>& done);  // under mu_
  void collect();            // under mu_: the workers' news into merged_

  std::vector<std::unique_ptr<Worker>> workers_;
  std::chrono::steady_clock::time_point start_;
  WorkBalancer balancer_;
  // Main thread only: where each unfinished request went, and its predicted work.
  std::unordered_multimap<std::string, std::pair<int, int64_t>> placed_;
  int64_t unfinished_ = 0;
  RunStats merged_;

  mutable std::mutex mu_;  // guards everything below and each Worker's shared fields
  std::condition_variable wake_;      // a worker has new requests, or stop_
  std::condition_variable progress_;  // a worker completed a step, or failed
  std::vector<std::pair<int, FinishedRequest>> done_;  // (engine, request) finished, not yet returned
  int64_t steps_done_ = 0, steps_seen_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace nvllm
