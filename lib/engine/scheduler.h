// Scheduler: waiting and running queues, one token budget per step, admission planned against
// the KV cache over time (or vLLM v1's greedy admission), preemption by recompute as the
// safety net.
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
//   1,000 requests of 1,024 + 2,048 tokens in an H100-sized cache of the Qwen3-8B shape are
//   preempted 914 times and 1.27 M tokens recomputed (replayed: bench/NOTES.md).
// - planned (the default): an offline job knows every request's max_tokens, so admission plans
//   the cache. Each running sequence has a trajectory (CachePlan): the blocks it holds, one more
//   token a step until its planned end (prompt + output - 1 tokens: its last sampled token is
//   never fed back), and the step it finishes, when the blocks only it holds are freed. A
//   sequence is admitted only if, with its own trajectory added, the free blocks cover the plan
//   at every future step. Blocks shared through the prefix cache or with a fork's parent are
//   held once and freed with their last holder. So while every running sequence's length is
//   known none is ever preempted, and the batch is as large as the cache holds over time: a
//   sequence may use blocks that another, finishing sooner, gives back before it needs them.
//   When every running and waiting sequence fits at its end at once, nothing is held back.
//   That needs every running sequence to advance one token a step, which holds under fcfs when
//   the token budget covers max_num_seqs decodes (the unfinished prefill is always the newest);
//   otherwise (the priority policy, a smaller budget) the plan is the sum of the ends: the
//   blocks every running sequence and the new one will still need to reach their ends must fit
//   the free blocks now, which needs no timing. Sequences not sampling this step (prefilling)
//   are planned to hold their ends for good. The sum of the ends is also the quick check: what
//   passes it passes the plan.
//   Pacing: when the cache cannot hold every running and waiting sequence at its end at once,
//   equal requests admitted together would also end together, and the cache would empty and
//   refill in waves (a third of it idle on average for 1,024 + 2,048 tokens). The cache lends
//   its blocks one step at a time: num_blocks block-steps a step (unspent ones do not carry
//   over), and each admission spends the block-steps its plan holds of its own over its run, so
//   admissions come at the rate the cache sustains (Little's law) and the running set is
//   staggered in age. Nothing is paced while nothing runs.
//   Requests that may stop early (eos not ignored, stop ids, stop strings) are planned at the
//   mean final length of the run's finished ones of that kind (OutputLengths); one that has
//   outrun the mean is expected to go a mean length further (as if lengths were memoryless);
//   at least min_tokens and one more token, at most max_tokens. Before any has finished only the
//   next token is planned, as greedy does. Counting them at max_tokens would be safe but would
//   shrink the batch to a fraction of what the cache holds when max_tokens is far above the
//   answers (chat jobs leave it at the context); an estimate keeps the batch, and preemption
//   catches the rare overrun and stays correct under either policy.
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
#include "engine/cache_plan.h"
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
  // --- the planned admission (scheduler_plan.cpp) ---
  bool lockstep() const;
  // Whether every running and waiting sequence fits the cache at its planned end at once
  // (shared blocks counted for each holder): then admission needs no pacing.
  bool all_fit_at_ends() const;
  int planned_outputs(const Sequence& seq) const;
  Trajectory running_trajectory(const Sequence& seq) const;
  // A waiting sequence admitted with `target` tokens in its table, taking `cost` free blocks.
  Trajectory candidate_trajectory(const Sequence& seq, int target, int64_t cost) const;
  // The running sequences' plan over time; fills block_end_.
  CachePlan build_plan();
  // Blocks of `shared` (held by running sequences) that `t` outlives their last holder in:
  // they stay in use past that holder's end, and become t's own.
  std::vector<KeptBlocks> kept_blocks(const std::vector<int>& shared, Trajectory& t) const;
  // Records `seq`, admitted into the plan, as a holder of its blocks until `steps`.
  void note_holder(const Sequence& seq, const std::vector<int>& shared, int64_t steps);
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
  // Pacing (planned admission, once the cache has been the limit): block-steps the cache may
  // still lend this step; an admission spends its whole run's.
  bool pacing_ = false;
  int64_t credit_ = 0;
  // The plan's last-holder bookkeeping, per block, valid for blocks of running tables after
  // build_plan(): the step the block is freed, and a stamp per pass.
  std::vector<int64_t> block_end_;
  std::vector<int64_t> block_claim_;
  int64_t plan_stamp_ = 0;
};

}  // namespace nvllm
