// Scheduler: waiting and running queues, one token budget per step, admission planned against
// the KV cache (or vLLM v1's greedy admission), preemption by recompute as the safety net.
//
// Each step: running sequences first, in admission order (a decode takes 1 token, an
// unfinished prefill its next chunk), then waiting sequences in order while the token budget,
// max_num_seqs and the admission policy allow. When a running sequence cannot get a block, the
// most recently admitted running sequence is preempted (blocks freed, back to the FRONT of
// waiting, recomputed later with the prefix cache's help), itself if it is the newest; a step
// that preempted admits nothing new.
//
// Admission (--admission):
// - greedy (vLLM v1, nano-vLLM): admit while the free blocks hold what the sequence needs NOW.
//   Running sequences then grow into each other and the newest are preempted and recomputed:
//   1,000 requests of 1,024 + 2,048 tokens in an H100-sized cache preempt about a thousand
//   times (bench/NOTES.md).
// - planned (the default): an offline job knows every request's max_tokens, so admission plans
//   the cache. A sequence is admitted only if the blocks it takes now, plus the blocks every
//   running sequence and itself will still take to reach their planned ends, fit in the free
//   blocks. The arithmetic is the block manager's: a sequence's end is prompt + output - 1
//   tokens (its last sampled token is never fed back), blocks_for() of that, minus the blocks
//   its table already holds. Shared prefix blocks (prefix-cache hits, a fork's parent blocks)
//   are held once and cost nothing to share; the blocks a sequence adds later are its own, so
//   "in use + every sequence's remaining growth <= cache" holds at every step: while every
//   running sequence's length is known, none is ever preempted. When every request fits at its end, nothing
//   changes against greedy; when the cache is the limit, the batch stays at what the cache
//   holds to the end instead of overshooting and oscillating through preemptions.
//   A sequence's planned output length is max_tokens when only max_tokens can end it. One that
//   may stop early (eos not ignored, stop ids, stop strings) is planned at the mean final
//   length of the run's finished sequences of that kind that ran longer than it has so far
//   (OutputLengths), at least min_tokens and one more token, at most max_tokens; before any
//   such sequence has finished (or once it has outrun them all) only the next token is
//   planned, as greedy does. Counting them at max_tokens instead would shrink the batch to a
//   fraction of what the cache holds whenever max_tokens is far above typical answers (chat
//   jobs leave it at the context); an estimate keeps the batch and leaves the rare overshoot
//   to preemption, which stays correct for either policy.
//   Why ends, not the peak over time: a plan that lets sequences finishing soon lend their
//   blocks to new ones assumes every sequence advances one token a step, which chunked prefill
//   and the token budget break; summing the ends needs no timing and cannot be wrong.
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
#include "engine/output_lengths.h"
#include "engine/sequence.h"

namespace nvllm {

// --admission: how waiting sequences are admitted (see above).
enum class Admission { kPlanned, kGreedy };

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  bool chunked_prefill = true;
  bool priority = false;  // the priority policy (see above); false: fcfs
  Admission admission = Admission::kPlanned;
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
  // Tokens scheduled again after a preemption threw their K/V away (prefix-cache hits excluded).
  int64_t num_recomputed_tokens() const { return num_recomputed_tokens_; }
  // Tokens `seq` is planned to hold in the cache at its last step (see "planned" above); at
  // most the whole cache.
  int planned_tokens(const Sequence& seq) const;
  // Blocks `seq` will still add to its table to reach planned_tokens.
  int reserved_blocks(const Sequence& seq) const;

 private:
  void preempt(Sequence* victim);
  void finish_out_of_cache(Sequence* seq, SchedulerOutput& out);
  bool schedule_running(SchedulerOutput& out, int& budget);
  void admit_waiting(SchedulerOutput& out, int& budget);
  void count_recomputed(const Sequence& seq, int num_new);
  // Puts `seq` into `queue` by (priority, arrival) under the priority policy.
  void insert_ordered(std::deque<Sequence*>& queue, Sequence* seq);
  // Blocks of `seq` can already share at admission (prefix cache hit or its parent's prompt).
  PrefixHit shared_prefix(const Sequence& seq) const;

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::deque<Sequence*> running_;  // admission (or priority) order: the back is preempted first
  int64_t num_preemptions_ = 0;
  int64_t num_recomputed_tokens_ = 0;
  OutputLengths finished_lengths_;  // of finished sequences that may stop early
};

}  // namespace nvllm
