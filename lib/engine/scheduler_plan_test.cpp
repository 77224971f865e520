// The planned admission (scheduler.h) step by step on hand-built sequences in blocks of 4
// tokens: the plan over time at its boundary, shared blocks, the fallback to summed ends, a
// sequence that may stop early, and pacing. The numbers are worked out in the comments.
#include <doctest/doctest.h>

#include "engine/scheduler_test_util.h"

namespace nvllm {
namespace {

using test::Driver;
using test::Fixture;
using test::Plan;
using test::summary;

}  // namespace

TEST_CASE("planned admission: admitted the first step its growth fits beside the running ones, not a step before") {
  // 10 blocks. a: 4 prompt tokens, 9 outputs, alone: steps 1-9, 3 blocks from step 3 on. b comes
  // after step 5 with `prompt` tokens and 10 outputs. At step 6 a holds 3 blocks for 4 more
  // steps and 7 are free; b takes blocks_for(prompt) now and blocks_for(prompt + 3) at a's last
  // step. 25 tokens: 7 blocks, and 28 tokens (7) at a's end: exactly the free blocks, admitted
  // at step 6. 26 tokens: 29 (8 blocks) at a's end, one over: it waits one step (then 28 again).
  // Summing ends (a 3 + b 9 of 10) would keep b out until a is gone (step 10): under the
  // priority policy, which does not advance every sequence each step, that is the plan.
  struct Case {
    int prompt;
    bool priority;
    int64_t admitted;
  };
  for (const Case c : {Case{25, false, 6}, Case{26, false, 7}, Case{25, true, 10}}) {
    CAPTURE(c.prompt);
    CAPTURE(c.priority);
    Fixture f(10, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100, .priority = c.priority});
    Driver d(f);
    f.add(4, 10, 9);
    for (int i = 0; i < 5; ++i) d.step();
    Sequence* b = f.add(c.prompt, 100, 10);
    CHECK(f.scheduler.planned_tokens(*b) == c.prompt + 9);
    d.run_to_end();
    CHECK(d.admitted_at.at(1) == c.admitted);
    CHECK(f.scheduler.num_preemptions() == 0);
    CHECK(f.blocks.counters().peak_blocks_in_use <= 10);
  }
  // Greedy admission takes the 26-token b at step 6 (7 blocks are free) and preempts it at
  // step 9, when it needs an 8th block while a still holds 3.
  Fixture g(10, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100, .admission = Admission::kGreedy});
  Driver d(g);
  g.add(4, 10, 9);
  for (int i = 0; i < 5; ++i) d.step();
  g.add(26, 100, 10);
  d.run_to_end();
  CHECK(d.admitted_at.at(1) == 6);
  CHECK(g.scheduler.num_preemptions() == 1);
}

TEST_CASE("planned admission: blocks shared with a running sequence count once") {
  // 6 blocks. a: 12 prompt tokens (3 full blocks) and 5 outputs, ends at 16 tokens (4 blocks)
  // after step 5. b, queued after step 1, starts with a's 12 tokens (3 shared blocks) and `own`
  // tokens of its own, 5 outputs. At step 2, 2 blocks are free. With 5 own tokens b takes 2
  // blocks now (17 tokens: 5) and needs a 6th block at 21 tokens, in step 6, after a has freed
  // its 4th: 4 + 2 = 6, it fits. Counting the shared blocks for each holder (4 + 6 = 10) it
  // would not. With 6 own tokens b would need its 6th block at step 4 (21 tokens), while a
  // still holds 4: 7 > 6, it waits.
  for (const int own : {5, 6}) {
    CAPTURE(own);
    Fixture f(6, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
    Driver d(f);
    Sequence* a = f.add(12, 10, 5);
    d.step();
    Sequence* b = f.add(12, 10, 5);
    for (int i = 0; i < own; ++i) b->token_ids.push_back(500 + i);
    b->prompt_len = 12 + own;
    const SchedulerOutput out = d.step();
    if (own == 5) {
      CHECK(summary(out) == Plan{{0, 1}, {1, 5}});  // b's 12 shared tokens come from the cache
      CHECK(b->table.blocks[0] == a->table.blocks[0]);
    } else {
      CHECK(summary(out) == Plan{{0, 1}});
    }
    d.run_to_end();
    CHECK(f.scheduler.num_preemptions() == 0);
    CHECK(f.blocks.counters().peak_blocks_in_use <= 6);
  }
}

TEST_CASE("planned admission: a sequence that may stop early is planned at the learned mean") {
  Fixture f(100, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  Driver d(f);
  // Nothing learned yet: x (may stop early, max_tokens 100) is planned to its next token only.
  Sequence* x = f.add(4, 10, 100, /*may_stop_early=*/true);
  CHECK(f.scheduler.planned_tokens(*x) == 4);  // 4 prompt tokens + 1 output - 1
  d.stop_at[x->id] = 12;
  d.run_to_end();
  // The mean of {12}: a fresh one plans 12 outputs, and so does one with 11 (below the mean);
  // one with 12 or more is expected to go another 12: 24, 25. min_tokens is a floor,
  // max_tokens a ceiling.
  Sequence* y = f.add(4, 20, 100, /*may_stop_early=*/true);
  CHECK(f.scheduler.planned_tokens(*y) == 4 + 12 - 1);
  for (int i = 0; i < 11; ++i) y->token_ids.push_back(i);
  CHECK(f.scheduler.planned_tokens(*y) == 4 + 12 - 1);
  y->token_ids.push_back(11);
  CHECK(f.scheduler.planned_tokens(*y) == 4 + 24 - 1);
  y->token_ids.push_back(12);
  CHECK(f.scheduler.planned_tokens(*y) == 4 + 25 - 1);
  f.params[y->id].min_tokens = 40;
  CHECK(f.scheduler.planned_tokens(*y) == 4 + 40 - 1);
  f.params[y->id].max_tokens = 30;
  CHECK(f.scheduler.planned_tokens(*y) == 4 + 30 - 1);
  // A sequence whose length is known is planned at max_tokens whatever was learned.
  Sequence* z = f.add(4, 30, 26);
  CHECK(f.scheduler.planned_tokens(*z) == 4 + 26 - 1);
}

TEST_CASE("planned admission: a sequence stopping early hands its plan to the next one at once") {
  // 10 blocks. x teaches the mean 12. a (may stop early) is planned at 12 outputs: 15 tokens,
  // 4 blocks, through step 12 of its run. b (known length, 37 tokens at its end: all 10 blocks)
  // fits only alone. a stops after 2 outputs: b is admitted the next step, not after a's plan.
  Fixture f(10, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  Driver d(f);
  Sequence* x = f.add(4, 10, 100, /*may_stop_early=*/true);
  d.stop_at[x->id] = 12;
  d.run_to_end();
  const int64_t start = d.steps;
  Sequence* a = f.add(4, 20, 100, /*may_stop_early=*/true);
  Sequence* b = f.add(4, 30, 34);
  CHECK(f.scheduler.planned_tokens(*a) == 15);
  CHECK(f.scheduler.planned_tokens(*b) == 37);
  d.stop_at[a->id] = 2;
  d.run_to_end();
  CHECK(d.admitted_at.at(a->id) == start + 1);
  CHECK(d.admitted_at.at(b->id) == start + 3);  // a ran steps start+1 and start+2
  CHECK(f.scheduler.num_preemptions() == 0);
}

TEST_CASE("planned admission: when the cache is the limit, admissions are paced by the block-steps they take") {
  // 10 blocks. Four requests of 4 prompt tokens and 9 outputs: 12 tokens (3 blocks) at their
  // ends, 12 blocks for all four: more than the cache, so admissions are paced. Each one holds
  // 1,2,2,2,2,3,3,3,3 blocks over its 9 steps: 21 block-steps, and the cache lends 10 a step.
  // Step 1 admits r0 (10 - 21 = -11 left), step 2 nothing (-1), step 3 r1 (9 - 21 = -12), and
  // so on: one every 2 steps, each admitted as soon as the plan has room (r3 at step 7: 3 blocks
  // are free and the four need 3 more at r0's last step). Unpaced, r0-r2 would start together
  // and end together.
  Fixture f(10, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  Driver d(f);
  for (int i = 0; i < 4; ++i) f.add(4, 10 * (i + 1), 9);
  d.run_to_end();
  CHECK(d.admitted_at == std::map<int64_t, int64_t>{{0, 1}, {1, 3}, {2, 5}, {3, 7}});
  CHECK(f.scheduler.num_preemptions() == 0);
  // 7 blocks: 21 block-steps are exactly 3 steps' worth. r0 at step 1 leaves -14, then -7, then
  // 0 at step 3: nothing is left to lend, so r1 waits for step 4.
  Fixture tight(7, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  Driver t(tight);
  for (int i = 0; i < 4; ++i) tight.add(4, 10 * (i + 1), 9);
  t.run_to_end();
  CHECK(t.admitted_at.at(0) == 1);
  CHECK(t.admitted_at.at(1) == 4);
  CHECK(tight.scheduler.num_preemptions() == 0);
  // When all four fit at their ends at once (12 blocks), nothing is paced: all start at step 1.
  Fixture roomy(12, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  Driver r(roomy);
  for (int i = 0; i < 4; ++i) roomy.add(4, 10 * (i + 1), 9);
  r.run_to_end();
  CHECK(r.admitted_at == std::map<int64_t, int64_t>{{0, 1}, {1, 1}, {2, 1}, {3, 1}});
}

}  // namespace nvllm
