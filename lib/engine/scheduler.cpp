#include "engine/scheduler.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace nvllm {

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks) : config_(config), blocks_(blocks) {}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::kWaiting;
  if (config_.priority) {
    insert_ordered(waiting_, seq);
  } else {
    waiting_.push_back(seq);
  }
}

void Scheduler::insert_ordered(std::deque<Sequence*>& queue, Sequence* seq) {
  const auto before = [](const Sequence* a, const Sequence* b) {
    return a->priority != b->priority ? a->priority < b->priority : a->id < b->id;
  };
  queue.insert(std::upper_bound(queue.begin(), queue.end(), seq, before), seq);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  // Pacing: the cache lends its blocks for one step, block-steps, to admissions (see the header).
  credit_ = std::min<int64_t>(credit_ + blocks_.num_blocks(), blocks_.num_blocks());
  for (Sequence* s : running_) s->num_new = 0;
  int budget = config_.max_num_batched_tokens;
  out.preempted = schedule_running(out, budget);
  if (!out.preempted) admit_waiting(out, budget);
  for (const ScheduledSeq& s : out.scheduled) out.num_tokens += s.num_new;
  return out;
}

bool Scheduler::schedule_running(SchedulerOutput& out, int& budget) {
  const int capacity = blocks_.num_blocks() * blocks_.block_size();
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    if (seq->num_tokens() > capacity) {  // cannot hold its own K/V even alone
      finish_out_of_cache(seq, out);
      continue;
    }
    const int num_new = std::min(seq->num_tokens() - seq->num_computed, budget);
    const int target = seq->num_computed + num_new;
    bool self_preempted = false;
    while (!blocks_.can_append(seq->table, target)) {
      Sequence* victim = running_.back();
      preempt(victim);
      preempted = true;
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the newest: nothing after it is running
    blocks_.append(seq->table, seq->token_ids, target);
    count_recomputed(*seq, num_new);
    seq->num_new = num_new;
    out.scheduled.push_back({seq, num_new, target == seq->num_tokens()});
    budget -= num_new;
    ++i;
  }
  return preempted;
}

PrefixHit Scheduler::shared_prefix(const Sequence& seq) const {
  const int bs = blocks_.block_size();
  // At least the last token is computed, so that there are logits to sample from.
  const int cap = (seq.num_tokens() - 1) / bs * bs;
  PrefixHit hit = blocks_.find_prefix(seq.token_ids, cap);
  const Sequence* parent = seq.parent;
  if (!blocks_.prefix_caching() && parent && seq.num_cached < 0 && parent->status == SequenceStatus::kRunning) {
    const int shared = std::min(cap, (seq.prompt_len - 1) / bs * bs) / bs;
    if (static_cast<int>(parent->table.blocks.size()) >= shared) {
      hit.blocks.assign(parent->table.blocks.begin(), parent->table.blocks.begin() + shared);
      hit.hashed = false;
    }
  }
  return hit;
}

void Scheduler::count_recomputed(const Sequence& seq, int num_new) {
  num_recomputed_tokens_ += std::clamp(seq.recompute_until - seq.num_computed, 0, num_new);
}

void Scheduler::admit_waiting(SchedulerOutput& out, int& budget) {
  const int bs = blocks_.block_size();
  const int capacity = blocks_.num_blocks() * bs;
  const bool planned = config_.admission == Admission::kPlanned;
  // Planned: the blocks the running sequences will still add to reach their ends, and the plan
  // over time, built when the ends alone do not fit (see the header).
  int64_t reserved = 0;
  if (planned) {
    for (const Sequence* s : running_) reserved += reserved_blocks(*s);
  }
  std::optional<CachePlan> plan;
  pacing_ = planned && !all_fit_at_ends();
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    if (seq->num_tokens() > capacity) {
      finish_out_of_cache(seq, out);
      continue;
    }
    // A fork waits until its parent has (or, this step, will have) computed the shared blocks.
    const Sequence* parent = seq->parent;
    if (parent && seq->num_cached < 0 && parent->status == SequenceStatus::kRunning &&
        parent->num_computed + parent->num_new < (seq->prompt_len - 1) / bs * bs) {
      break;
    }
    const PrefixHit hit = shared_prefix(*seq);
    const int hit_tokens = hit.num_tokens(bs);
    int num_new = seq->num_tokens() - hit_tokens;
    if (num_new > budget) {
      // Chunking off: whole prompts only, unless it can never fit a step (see the header).
      if (!config_.chunked_prefill && num_new <= config_.max_num_batched_tokens) break;
      num_new = budget;
    }
    const int target = hit_tokens + num_new;
    const int64_t cost = blocks_.admission_cost(hit, target);
    Trajectory t;
    std::vector<KeptBlocks> kept;
    bool kept_known = false;
    std::vector<int> shared;  // hit blocks another running sequence holds
    if (planned) {
      // Paced: this step's share of the cache is spent (never with nothing running).
      const bool paced = pacing_ && !running_.empty();
      if (paced && credit_ <= 0) break;
      t = candidate_trajectory(*seq, target, cost);
      for (int b : hit.blocks) {
        if (blocks_.ref_count(b) > 0) shared.push_back(b);
      }
      const int64_t later = std::max(0, blocks_.blocks_for(t.end_tokens) - t.held);
      bool fits = cost + reserved + later <= blocks_.num_free_blocks();
      if (!fits && lockstep() && cost <= blocks_.num_free_blocks()) {
        if (!plan) plan = build_plan();
        kept = kept_blocks(shared, t);
        kept_known = true;
        fits = plan->fits(t, cost, kept);
      }
      if (!fits) break;
    } else if (cost > blocks_.num_free_blocks()) {
      break;
    }
    blocks_.admit(seq->table, hit, seq->token_ids, target, seq->num_tokens());
    waiting_.pop_front();
    seq->status = SequenceStatus::kRunning;
    seq->num_computed = hit_tokens;
    count_recomputed(*seq, num_new);
    if (planned) {
      reserved += reserved_blocks(*seq);
      if (plan) {
        if (!kept_known) kept = kept_blocks(shared, t);
        plan->add(t, cost, kept);
        note_holder(*seq, shared, t.steps);
      }
      if (pacing_) credit_ -= block_steps(t, planned_outputs(*seq) - seq->num_output(), bs);
    }
    if (seq->num_cached < 0) seq->num_cached = hit.hashed ? hit_tokens : 0;
    seq->num_new = num_new;
    if (config_.priority) {
      insert_ordered(running_, seq);
    } else {
      running_.push_back(seq);
    }
    out.scheduled.push_back({seq, num_new, target == seq->num_tokens()});
    budget -= num_new;
  }
}

void Scheduler::preempt(Sequence* victim) {
  if (running_.empty() || running_.back() != victim) throw std::logic_error("Scheduler::preempt: not the newest");
  running_.pop_back();
  blocks_.free(victim->table);
  victim->recompute_until = std::max(victim->recompute_until, victim->num_computed);
  victim->num_computed = 0;
  victim->num_new = 0;
  victim->status = SequenceStatus::kWaiting;
  if (config_.priority) {
    insert_ordered(waiting_, victim);
  } else {
    waiting_.push_front(victim);
  }
  ++num_preemptions_;
}

void Scheduler::finish_out_of_cache(Sequence* seq, SchedulerOutput& out) {
  if (seq->status == SequenceStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  }
  blocks_.free(seq->table);
  seq->status = SequenceStatus::kFinished;
  seq->finish_reason = "length";
  out.out_of_cache.push_back(seq);
}

void Scheduler::remove_finished() {
  std::erase_if(running_, [&](Sequence* s) {
    if (!s->finished()) return false;
    blocks_.free(s->table);
    if (s->may_stop_early) finished_lengths_.add(s->num_output());
    return true;
  });
}

}  // namespace nvllm
