// The planned admission's arithmetic (scheduler.h): how long each sequence is planned to run,
// its trajectory, and the plan of the running sequences over time.
#include <algorithm>

#include "engine/scheduler.h"

namespace nvllm {

bool Scheduler::lockstep() const {
  // Every running sequence past its prefill is scheduled every step: decodes go first (fcfs
  // keeps the one unfinished prefill at the back of running) and all of them fit the budget.
  return !config_.priority && config_.max_num_batched_tokens >= config_.max_num_seqs;
}

int Scheduler::planned_outputs(const Sequence& seq) const {
  const SamplingParams& p = *seq.params;
  int outputs = p.max_tokens;
  if (seq.may_stop_early) {
    // The run's mean length of such sequences; one that has come that far is expected to go a
    // mean length further (as if lengths were memoryless); at least min_tokens and one more
    // token. Nothing learned yet: only the next token, as greedy admission plans.
    const int so_far = seq.num_output();
    int guess = std::max(so_far + 1, p.min_tokens);
    if (const std::optional<int> mean = finished_lengths_.mean()) {
      guess = std::max(guess, so_far < *mean ? *mean : so_far + *mean);
    }
    outputs = std::min(outputs, guess);
  }
  return outputs;
}

int Scheduler::planned_tokens(const Sequence& seq) const {
  const int64_t capacity = int64_t{blocks_.num_blocks()} * blocks_.block_size();
  return static_cast<int>(std::min<int64_t>(int64_t{seq.prompt_len} + planned_outputs(seq) - 1, capacity));
}

int Scheduler::reserved_blocks(const Sequence& seq) const {
  return std::max(0, blocks_.blocks_for(planned_tokens(seq)) - static_cast<int>(seq.table.blocks.size()));
}

bool Scheduler::all_fit_at_ends() const {
  int64_t blocks = 0;
  for (const Sequence* s : running_) blocks += blocks_.blocks_for(planned_tokens(*s));
  for (const Sequence* s : waiting_) {
    if (blocks > blocks_.num_blocks()) return false;
    blocks += blocks_.blocks_for(planned_tokens(*s));
  }
  return blocks <= blocks_.num_blocks();
}

Trajectory Scheduler::running_trajectory(const Sequence& seq) const {
  Trajectory t;
  t.tokens = seq.num_tokens();
  t.end_tokens = planned_tokens(seq);
  t.held = static_cast<int>(seq.table.blocks.size());
  // Samples this step: its last step is known (one token a step from now on). Otherwise it is
  // still prefilling, or was not scheduled: held at its end for good.
  if (seq.num_new > 0 && seq.num_computed + seq.num_new == seq.num_tokens()) {
    t.steps = planned_outputs(seq) - seq.num_output();
  }
  return t;
}

Trajectory Scheduler::candidate_trajectory(const Sequence& seq, int target, int64_t cost) const {
  Trajectory t;
  t.tokens = seq.num_tokens();
  t.end_tokens = planned_tokens(seq);
  t.held = blocks_.blocks_for(target);
  t.own = static_cast<int>(cost);  // new blocks and revived cached ones; kept_blocks() adds shared ones
  if (target == seq.num_tokens()) t.steps = planned_outputs(seq) - seq.num_output();
  return t;
}

CachePlan Scheduler::build_plan() {
  CachePlan plan(blocks_.block_size(), blocks_.num_free_blocks());
  std::vector<Trajectory> ts;
  for (const Sequence* s : running_) ts.push_back(running_trajectory(*s));
  // Each block is freed when its last holder ends: block_end_[b] is that step, and that
  // holder (the first of equals) counts it as its own.
  if (block_end_.size() < static_cast<size_t>(blocks_.num_blocks())) {
    block_end_.resize(blocks_.num_blocks());
    block_claim_.resize(blocks_.num_blocks(), 0);
  }
  ++plan_stamp_;
  for (size_t i = 0; i < running_.size(); ++i) {
    for (int b : running_[i]->table.blocks) {
      if (block_claim_[b] != plan_stamp_) {
        block_claim_[b] = plan_stamp_;
        block_end_[b] = ts[i].steps;
      } else {
        block_end_[b] = std::max(block_end_[b], ts[i].steps);
      }
    }
  }
  ++plan_stamp_;
  for (size_t i = 0; i < running_.size(); ++i) {
    for (int b : running_[i]->table.blocks) {
      if (block_end_[b] == ts[i].steps && block_claim_[b] != plan_stamp_) {
        block_claim_[b] = plan_stamp_;
        ++ts[i].own;
      }
    }
    plan.add(ts[i]);
  }
  return plan;
}

std::vector<KeptBlocks> Scheduler::kept_blocks(const std::vector<int>& shared, Trajectory& t) const {
  std::vector<KeptBlocks> kept;
  for (int b : shared) {
    if (t.steps <= block_end_[b]) continue;  // its holder outlives t: still the holder's
    ++t.own;  // t will free it, not the holder
    if (kept.empty() || kept.back().from != block_end_[b]) kept.push_back({block_end_[b], 0});
    ++kept.back().count;
  }
  return kept;
}

void Scheduler::note_holder(const Sequence& seq, const std::vector<int>& shared, int64_t steps) {
  size_t next_shared = 0;
  for (int b : seq.table.blocks) {
    if (next_shared < shared.size() && shared[next_shared] == b) {
      block_end_[b] = std::max(block_end_[b], steps);
      ++next_shared;
    } else {
      block_end_[b] = steps;
    }
  }
}

}  // namespace nvllm
