// Scheduler decisions step by step, on hand-built sequences: who runs, how many tokens, who
// is preempted and where it goes. The numbers are worked out by hand in the comments.
#include <doctest/doctest.h>

#include <deque>
#include <memory>

#include "engine/scheduler.h"

namespace nvllm {
namespace {

struct Fixture {
  Fixture(int num_blocks, int block_size, SchedulerConfig config, bool caching = true)
      : blocks(num_blocks, block_size, caching), scheduler(config, blocks) {}

  // A sequence of `prompt_len` tokens from `first_token` on, `max_tokens` long at most; one that
  // `may_stop_early` is planned at an estimate (see scheduler.h).
  Sequence* add(int prompt_len, int first_token = 1, int max_tokens = 256, bool may_stop_early = false) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<int64_t>(seqs.size());
    s->params = &params.emplace_back();
    params.back().max_tokens = max_tokens;
    s->may_stop_early = may_stop_early;
    for (int i = 0; i < prompt_len; ++i) s->token_ids.push_back(first_token + i);
    s->prompt_len = prompt_len;
    scheduler.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }

  // What the engine does after the runner: the K/V is in, sampled sequences get a token.
  void run(const SchedulerOutput& out) {
    for (const ScheduledSeq& s : out.scheduled) {
      s.seq->num_computed += s.num_new;
      if (s.sample) s.seq->token_ids.push_back(900 + static_cast<int>(s.seq->token_ids.size()));
    }
  }

  std::deque<SamplingParams> params;  // one per sequence, at stable addresses
  BlockManager blocks;
  Scheduler scheduler;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

std::vector<std::pair<int64_t, int>> summary(const SchedulerOutput& out) {
  std::vector<std::pair<int64_t, int>> v;
  for (const ScheduledSeq& s : out.scheduled) v.emplace_back(s.seq->id, s.num_new);
  return v;
}

using Plan = std::vector<std::pair<int64_t, int>>;
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

TEST_CASE("scheduler: planned admission admits a sequence whose end exactly fits, not one a block more") {
  // 10 blocks of 4. a: 4 prompt tokens + 9 outputs ends holding 4 + 9 - 1 = 12 tokens = 3
  // blocks. b: 8 + 21 outputs ends at 28 tokens = 7 blocks: 3 + 7 = 10, the whole cache.
  // With 22 outputs b ends at 29 tokens = 8 blocks: 11 > 10, it waits until a is done; greedy
  // admits it at once (it needs 2 blocks now).
  for (int b_max_tokens : {21, 22}) {
    for (Admission admission : {Admission::kPlanned, kGreedy}) {
      CAPTURE(b_max_tokens);
      CAPTURE(admission == kGreedy);
      Fixture f(10, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100, .admission = admission});
      Sequence* a = f.add(4, 10, 9);
      Sequence* b = f.add(8, 50, b_max_tokens);
      CHECK(f.scheduler.planned_tokens(*a) == 12);
      CHECK(f.scheduler.planned_tokens(*b) == 8 + b_max_tokens - 1);
      SchedulerOutput out = f.scheduler.schedule();
      const bool fits = b_max_tokens == 21 || admission == kGreedy;
      CHECK(summary(out) == (fits ? Plan{{0, 4}, {1, 8}} : Plan{{0, 4}}));
      // Run to the end as the engine would: a sequence finishes when its outputs reach max_tokens.
      int64_t b_admitted_step = fits ? 1 : -1;
      for (int64_t step = 1; !f.scheduler.empty(); ++step) {
        if (step > 1) out = f.scheduler.schedule();
        if (b_admitted_step < 0 && b->status == SequenceStatus::kRunning) b_admitted_step = step;
        f.run(out);
        for (Sequence* s : {a, b}) {
          if (s->status == SequenceStatus::kRunning && s->num_output() == s->params->max_tokens)
            s->status = SequenceStatus::kFinished;
        }
        f.scheduler.remove_finished();
        f.blocks.check_invariants();
        REQUIRE(step < 100);
      }
      if (admission == Admission::kPlanned) {
        CHECK(f.scheduler.num_preemptions() == 0);
        CHECK(f.blocks.counters().peak_blocks_in_use <= 10);
        // b waits for a's 9 steps when it does not fit, and is admitted in the step after.
        CHECK(b_admitted_step == (fits ? 1 : 10));
      }
      CHECK(a->num_output() == 9);
      CHECK(b->num_output() == b_max_tokens);
    }
  }
}

TEST_CASE("scheduler: planned admission counts blocks shared with a running sequence once") {
  // 8 blocks of 4. a: 12 prompt tokens (3 full blocks) + 5 outputs ends at 16 tokens = 4 blocks.
  // b starts with a's 12 tokens plus 1 of its own and 7 outputs: 19 tokens = 5 blocks at its
  // end, of which 3 are a's, cached: b takes 2 of its own. 4 + 2 = 6 <= 8 fits; counted twice
  // (4 + 5 = 9) it would not. c, like b with 12 outputs (24 tokens = 6 blocks, 3 own): 4 + 2 + 3
  // = 9 > 8 waits.
  Fixture f(8, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  f.add(12, 10, 5);
  SchedulerOutput out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{0, 12}});
  f.run(out);
  Sequence* b = f.add(12, 10, 7);
  b->token_ids.push_back(77);
  b->prompt_len = 13;
  Sequence* c = f.add(12, 10, 12);
  c->token_ids.push_back(78);
  c->prompt_len = 13;
  out = f.scheduler.schedule();
  // a decodes; b reuses a's 3 full blocks and computes its 13th token; c waits.
  CHECK(summary(out) == Plan{{0, 1}, {1, 1}});
  CHECK(b->num_computed == 12);
  CHECK(f.scheduler.num_waiting() == 1);
  (void)c;
}

TEST_CASE("scheduler: a sequence that may stop early is planned at the learned length and frees it when it stops") {
  // 10 blocks of 4. Nothing has finished yet: x (may stop early, max_tokens 100) is planned only
  // to its next token, as greedy would.
  Fixture f(10, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  Sequence* x = f.add(4, 10, 100, /*may_stop_early=*/true);
  CHECK(f.scheduler.planned_tokens(*x) == 4);  // 4 prompt tokens, 1 output, never fed back
  for (int step = 0; step < 12; ++step) f.run(f.scheduler.schedule());
  CHECK(x->num_output() == 12);
  CHECK(f.scheduler.planned_tokens(*x) == 16);  // what it holds plus the next token
  x->status = SequenceStatus::kFinished;  // it met its stop after 12 tokens
  f.scheduler.remove_finished();
  // The learned mean is 12 outputs: a may-stop sequence of 4 prompt tokens plans 4 + 12 - 1 =
  // 15 tokens = 4 blocks. b (max_tokens 26: 29 tokens = 8 blocks) does not fit beside it.
  Sequence* a = f.add(4, 20, 100, /*may_stop_early=*/true);
  Sequence* b = f.add(4, 30, 26);
  CHECK(f.scheduler.planned_tokens(*a) == 15);
  SchedulerOutput out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{1, 4}});
  CHECK(f.scheduler.num_waiting() == 1);
  f.run(out);
  out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{1, 1}});  // a decodes, b still waits
  f.run(out);
  // a stops after 2 of its planned 12 tokens: its reservation goes with it, and b is admitted.
  a->status = SequenceStatus::kFinished;
  f.scheduler.remove_finished();
  out = f.scheduler.schedule();
  CHECK(summary(out) == Plan{{2, 4}});
  CHECK(b->status == SequenceStatus::kRunning);
  // What a learned: the mean of {12, 2} beyond 0 is 7; beyond 2 only 12 is left.
  Sequence* d = f.add(4, 40, 100, /*may_stop_early=*/true);
  CHECK(f.scheduler.planned_tokens(*d) == 4 + 7 - 1);
  d->token_ids.insert(d->token_ids.end(), {1, 2, 3});  // as if it had 3 outputs (preempted)
  CHECK(f.scheduler.planned_tokens(*d) == 4 + 12 - 1);
  // min_tokens is a floor, max_tokens a ceiling.
  f.params[d->id].min_tokens = 20;
  CHECK(f.scheduler.planned_tokens(*d) == 4 + 20 - 1);
  f.params[d->id].max_tokens = 9;
  CHECK(f.scheduler.planned_tokens(*d) == 4 + 9 - 1);
}

}  // namespace nvllm
