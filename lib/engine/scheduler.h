// Scheduler: waiting and running queues, one token budget per step, preemption by recompute
// (vLLM v1 / nano-vLLM policy).
//
// Each step: running sequences first, in admission order (a decode takes 1 token, an
// unfinished prefill its next chunk), then waiting sequences in order while the token budget,
// max_num_seqs and free blocks allow. When a running sequence cannot get a block, the most
// recently admitted running sequence is preempted (blocks freed, back to the FRONT of waiting,
// recomputed later with the prefix cache's help), itself if it is the newest; a step that
// preempted admits nothing new.
//
// Chunked prefill off: a prompt is scheduled only whole. add_request rejects prompts longer
// than the budget, so this never blocks; the one exception is recomputing a preempted
// sequence whose prompt + output outgrew the budget, which is then chunked (the alternative
// is a sequence that can never run again).
//
// Priority policy (vLLM's --scheduling-policy priority): waiting and running are both kept in
// order of (priority, arrival), lower priority values first. Admission takes waiting in that
// order, and the victim of a preemption is the back of running: the lowest-priority sequence,
// the newest among equals. A preempted sequence goes back to waiting in its place by that order.
// Under fcfs every priority counts as equal, which is the policy described above.
//
// n > 1: samples 1..n-1 follow sample 0 in the waiting queue and, at their first admission,
// share its full prompt blocks (through the prefix cache, or directly with caching off); one
// waits while its parent is still prefilling those blocks.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace nvllm {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  bool chunked_prefill = true;
  bool priority = false;  // the priority policy (see above); false: fcfs
};

struct ScheduledSeq {
  Sequence* seq;
  int num_new;  // tokens computed this step, starting at seq->num_computed
  bool sample;  // the step ends with every known token in the cache: a token is sampled
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> scheduled;
  // Sequences that can never continue: prompt + output outgrew the whole KV cache. Already
  // marked finished ("length") and removed from the queues.
  std::vector<Sequence*> out_of_cache;
  int num_tokens = 0;
  bool preempted = false;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockManager& blocks);

  void add(Sequence* seq);  // to the tail of waiting
  SchedulerOutput schedule();
  // Frees the blocks of running sequences marked finished and drops them from running.
  void remove_finished();

  bool empty() const { return running_.empty() && waiting_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  void preempt(Sequence* victim);
  void finish_out_of_cache(Sequence* seq, SchedulerOutput& out);
  bool schedule_running(SchedulerOutput& out, int& budget);
  void admit_waiting(SchedulerOutput& out, int& budget);
  // Puts `seq` into `queue` by (priority, arrival) under the priority policy.
  void insert_ordered(std::deque<Sequence*>& queue, Sequence* seq);
  // Blocks of `seq` can already share at admission (prefix cache hit or its parent's prompt).
  PrefixHit shared_prefix(const Sequence& seq) const;

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::deque<Sequence*> running_;  // admission (or priority) order: the back is preempted first
  int64_t num_preemptions_ = 0;
};

}  // namespace nvllm
