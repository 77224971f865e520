// TpRunner: --tensor-parallel-size N on one host. N CudaRunners, rank r on GPU device + r over
// its share of the model (runtime/tp_split.h: heads, KV heads, MLP columns, vocabulary rows),
// joined by NCCL (TpComm). Every rank runs every step on its own thread: the same Batch (one
// scheduler and block manager above), the same block tables into its own KV cache of its KV
// heads, its own CUDA graphs (NCCL calls captured in them), and the same sampling over the
// gathered logits, so every rank draws the same tokens; rank 0's are returned.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_runner_impl.h"
#include "runtime/cuda/tp_comm.h"

namespace nvllm::cuda_detail {

// Runs a function on every rank at once, rank 0 on the calling thread and rank r > 0 on a
// thread of its own (kept for the runner's life, so a step costs a wake-up, not a thread).
class RankThreads {
 public:
  explicit RankThreads(int ranks);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // fn(r) for every rank r, returning when all have; then rethrows the first exception. When a
  // rank fails, `on_failure` runs at once (the others may be waiting for it inside NCCL).
  void run(const std::function<void(int)>& fn, const std::function<void()>& on_failure);

 private:
  void loop(int rank);
  void call(int rank);

  int ranks_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};  // bumped (under mu_) once per run()
  std::atomic<int> pending_{0};          // ranks > 0 still running the current job
  const std::function<void(int)>* fn_ = nullptr;
  const std::function<void()>* on_failure_ = nullptr;
  std::exception_ptr error_;  // under mu_
  bool stop_ = false;         // under mu_
};

class TpRunner final : public Runner {
 public:
  TpRunner(const ModelConfig& config, const ModelWeights& weights, const CudaRunnerOptions& options);
  ~TpRunner() override;
  void execute(const Batch& batch, StepOutput& out) override;
  int num_kv_blocks() const override { return ranks_[0]->num_kv_blocks(); }  // the same on every rank
  const char* name() const override { return "cuda"; }
  double last_step_device_seconds() const override { return ranks_[0]->last_step_device_seconds(); }
  CudaRunner& rank0() { return *ranks_[0]; }

 private:
  void on_every_rank(const std::function<void(int)>& fn);

  std::vector<std::unique_ptr<TpComm>> comms_;
  std::vector<std::unique_ptr<CudaRunner>> ranks_;
  std::vector<StepOutput> outs_;
  RankThreads threads_;
};

}  // namespace nvllm::cuda_detail
