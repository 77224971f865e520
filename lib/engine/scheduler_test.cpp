// Scheduler decisions step by step, on hand-built sequences: who runs, how many tokens, who
// is preempted and where it goes. The numbers are worked out by hand in the comments.
#include <doctest/doctest.h>

#include "engine/scheduler_test_util.h"

namespace nvllm {
namespace {

using test::Fixture;
using test::Plan;
using test::summary;
constexpr Admission kGreedy = Admission::kGreedy;

}  // namespace

TEST_CASE("scheduler: out of blocks, the newest running sequence is preempted to the front of waiting") {
  Fixture f(4, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100, .admission = kGreedy});
  Sequence* a = f.add(4, 10);
  Sequence* b = f.add(4, 20);
  Sequence* c = f.add(4, 30);
  Sequence* d = f.add(4, 40);
  // Step 1: four 4-token prompts, one block each: all admitted, all sample.
  SchedulerOutput out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{0, 4}, {1, 4}, {2, 4}, {3, 4}});
  CHECK(f.blocks.num_free_blocks() == 0);
  f.run(out);
  // Step 2: each decode needs a 2nd block. a preempts d (the newest) and takes its block, b
  // preempts c; c and d wait at the front, c first (admission order kept), nothing admitted.
  out = f.scheduler.schedule();
  CHECK(out.preempted);
  CHECK(summary(out) == Plan{{0, 1}, {1, 1}});
  CHECK(f.scheduler.num_preemptions() == 2);
  CHECK(f.scheduler.num_running() == 2);
  CHECK(f.scheduler.num_waiting() == 2);
  CHECK(c->status == SequenceStatus::kWaiting);
  CHECK(c->num_computed == 0);
  CHECK(c->table.blocks.empty());
  CHECK(f.blocks.num_free_blocks() == 0);
  f.run(out);
  // Step 3: a and b decode inside their 2nd blocks; still no room for c.
  out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{0, 1}, {1, 1}});
  CHECK_FALSE(out.preempted);
  f.run(out);
  // a finishes: its two blocks free up; c (front of waiting) comes back and recomputes all 5
  // of its tokens in both; d still waits.
  a->status = SequenceStatus::kFinished;
  f.scheduler.remove_finished();
  out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{1, 1}, {2, 5}});
  CHECK(out.scheduled[1].sample);
  // c's 4 prompt tokens were computed before its preemption (their blocks since reused): 4
  // recomputed; its sampled token is new.
  CHECK(f.scheduler.num_recomputed_tokens() == 4);
  CHECK(f.scheduler.num_waiting() == 1);
  (void)b;
  (void)d;
  f.blocks.check_invariants();
}

TEST_CASE("scheduler: a lone sequence that cannot grow preempts itself; one that can never fit finishes") {
  // Planned admission caps the plan at the whole cache, so it is admitted alone all the same.
  for (Admission admission : {kGreedy, Admission::kPlanned}) {
    Fixture f(2, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100, .admission = admission});
    Sequence* a = f.add(8);  // fills both blocks
    SchedulerOutput out = f.scheduler.schedule();
    CHECK(summary(out) == Plan{{0, 8}});
    f.run(out);
    // 9 tokens need 3 blocks, more than the cache: "length".
    out = f.scheduler.schedule();
    CHECK(out.scheduled.empty());
    REQUIRE(out.out_of_cache.size() == 1);
    CHECK(a->finish_reason == "length");
    CHECK(f.scheduler.empty());
    CHECK(f.blocks.num_free_blocks() == 2);
  }
}

TEST_CASE("scheduler: chunked prefill splits a long prompt, decodes go first; off, prompts wait whole") {
  for (bool chunked : {true, false}) {
    CAPTURE(chunked);
    Fixture f(64, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 10, .chunked_prefill = chunked, .admission = kGreedy});
    f.add(3);
    SchedulerOutput out = f.scheduler.schedule();
    CHECK(summary(out) == Plan{{0, 3}});
    f.run(out);
    f.add(25, 100);  // longer than the budget
    f.add(9, 200);
    out = f.scheduler.schedule();
    if (chunked) {
      // The decode first, then 9 tokens of the long prompt (no sample yet).
      CHECK(summary(out) == Plan{{0, 1}, {1, 9}});
      CHECK_FALSE(out.scheduled[1].sample);
      f.run(out);
      out = f.scheduler.schedule();
      CHECK(summary(out) == Plan{{0, 1}, {1, 9}});
      f.run(out);
      out = f.scheduler.schedule();
      CHECK(summary(out) == Plan{{0, 1}, {1, 7}, {2, 2}});  // the long prompt ends and samples
      CHECK(out.scheduled[1].sample);
      CHECK_FALSE(out.scheduled[2].sample);
    } else {
      // A 25-token prompt never fits a 10-token step (add_request rejects it in the engine);
      // here the scheduler falls back to chunks rather than never running it.
      CHECK(summary(out) == Plan{{0, 1}, {1, 9}});
      f.run(out);
      out = f.scheduler.schedule();
      CHECK(summary(out) == Plan{{0, 1}, {1, 9}});
      f.run(out);
      out = f.scheduler.schedule();
      // The 9-token prompt would fit a step, so it waits until it can go whole.
      CHECK(summary(out) == Plan{{0, 1}, {1, 7}});
      f.run(out);
      out = f.scheduler.schedule();
      CHECK(summary(out) == Plan{{0, 1}, {1, 1}});
      f.run(out);
      out = f.scheduler.schedule();
      CHECK(summary(out) == Plan{{0, 1}, {1, 1}});  // 9 + 2 decodes > 10: still waits
    }
    for (const ScheduledSeq& s : out.scheduled) CHECK(s.num_new >= 1);
    CHECK(out.num_tokens <= 10);
  }
}

TEST_CASE("scheduler: max_num_seqs caps the running set") {
  Fixture f(64, 4, {.max_num_seqs = 2, .max_num_batched_tokens = 100, .admission = kGreedy});
  f.add(3);
  f.add(3);
  f.add(3);
  SchedulerOutput out = f.scheduler.schedule();
  CHECK(out.scheduled.size() == 2);
  CHECK(f.scheduler.num_waiting() == 1);
}

TEST_CASE("scheduler: a preempted sequence recomputes with the prefix cache's help") {
  Fixture f(5, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100, .admission = kGreedy});
  Sequence* a = f.add(7, 10);  // 2 blocks
  Sequence* b = f.add(9, 50);  // 3 blocks (last partial)
  SchedulerOutput out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{0, 7}, {1, 9}});
  f.run(out);
  f.run(f.scheduler.schedule());  // a: 8 tokens in 2 blocks; b: 10 tokens in 3
  // a needs a 3rd block for its 9th token: b is preempted (its 2 full blocks stay cached).
  out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{0, 1}});
  f.run(out);
  a->status = SequenceStatus::kFinished;
  f.scheduler.remove_finished();
  const int64_t hits_before = f.blocks.counters().hit_tokens;
  out = f.scheduler.schedule();
  // b has 11 tokens; blocks [50..53] and [54..57] are still cached: 8 hit, 3 computed.
  CHECK(summary(out) == Plan{{1, 3}});
  CHECK(f.blocks.counters().hit_tokens - hits_before == 8);
  // b had computed 10 tokens when it was preempted; 8 come back from the cache, so positions 8
  // and 9 are recomputed and position 10 (its sampled token) is new.
  CHECK(f.scheduler.num_recomputed_tokens() == 2);
  CHECK(b->num_cached == 0);  // the first admission's hit is what a request reports
}

TEST_CASE("scheduler: a prompt exactly the size of the token budget is prefilled whole, chunking on or off") {
  for (bool chunked : {false, true}) {
    CAPTURE(chunked);
    Fixture f(16, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 8, .chunked_prefill = chunked, .admission = kGreedy});
    f.add(8, 10);
    f.add(1, 50);
    SchedulerOutput out = f.scheduler.schedule();
    // The whole budget goes to the first prompt in one piece; the second waits for the next step.
    CHECK(summary(out) == Plan{{0, 8}});
    CHECK(out.scheduled[0].sample);
    CHECK(out.num_tokens == 8);
    f.run(out);
    out = f.scheduler.schedule();
    CHECK(summary(out) == Plan{{0, 1}, {1, 1}});
  }
}

TEST_CASE("scheduler: chunking off, a prompt of exactly the budget waits for a step with the whole budget free") {
  Fixture f(16, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 8, .chunked_prefill = false, .admission = kGreedy});
  f.add(4, 10);
  SchedulerOutput out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{0, 4}});
  f.run(out);
  f.add(8, 50);
  // The decode takes 1 token; 7 are left, and the 8-token prompt is not cut into a piece of 7.
  out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{0, 1}});
  CHECK(f.scheduler.num_waiting() == 1);
}

}  // namespace nvllm
