// ReplayRunner: a Runner that computes nothing. It answers every sampled sequence with one
// fixed ordinary token, so the scheduler and block manager run exactly as in a real job of the
// same lengths, without a model: what `nvllm inspect-cache` replays. With a cost model it adds
// up what each step would take at best on a card (the roofline time).
#pragma once

#include "analysis/workload.h"
#include "engine/runner.h"

namespace nvllm {

class ReplayRunner : public Runner {
 public:
  // `token` must be no eos or stop token of the replayed requests (the caller picks one).
  ReplayRunner(int num_kv_blocks, int32_t token, const StepCostModel* cost = nullptr)
      : num_kv_blocks_(num_kv_blocks), token_(token), cost_(cost) {}

  void execute(const Batch& batch, StepOutput& out) override {
    const int n = batch.num_seqs();
    out.token_ids.assign(n, -1);
    out.logprobs.assign(n, 0.0f);
    out.top_logprobs.assign(n, {});
    for (int s = 0; s < n; ++s) {
      if (batch.sample[s]) out.token_ids[s] = token_;
    }
    if (cost_) modeled_seconds_ += cost_->seconds(batch);
  }
  // Roofline time of the steps so far (0 without a cost model).
  double modeled_seconds() const { return modeled_seconds_; }
  int num_kv_blocks() const override { return num_kv_blocks_; }
  const char* name() const override { return "replay"; }

 private:
  int num_kv_blocks_;
  int32_t token_;
  const StepCostModel* cost_;
  double modeled_seconds_ = 0;
};

}  // namespace nvllm
