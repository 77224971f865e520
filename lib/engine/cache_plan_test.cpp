// CachePlan's arithmetic on hand-built trajectories (blocks of 4 tokens), worked out in the
// comments: the need at each step, the peak, the fit at exactly the free blocks and one more.
#include <doctest/doctest.h>

#include <random>

#include "engine/cache_plan.h"

namespace nvllm {

TEST_CASE("cache plan: a sequence fits when its growth meets the others' peak at exactly the free blocks") {
  // a: 9 tokens in 3 blocks, ends at 12 tokens (3 blocks) after 4 steps: it never grows.
  const Trajectory a{.steps = 4, .tokens = 9, .end_tokens = 12, .held = 3, .own = 3};
  // b, admitted now: 25 prompt tokens in 7 new blocks, 10 outputs: ends at 34 tokens (9 blocks).
  const Trajectory b{.steps = 10, .tokens = 25, .end_tokens = 34, .held = 7, .own = 7};
  CachePlan plan(4, 7);
  plan.add(a);
  CHECK(plan.need_at(0) == 0);
  CHECK(plan.need_at(4) == -3);  // a gone: its 3 blocks are free again
  // b's need: its 7 blocks now, then blocks_for(25 + k). While a lives (k <= 3) that is at most
  // blocks_for(28) = 7; after, 9 - 3 = 6 at b's end. Peak 7 = the free blocks: it fits.
  CHECK(plan.fits(b, 7));
  // One token more of prompt: blocks_for(29) = 8 at a's last step: one block over.
  Trajectory b2 = b;
  b2.tokens = 26;
  b2.end_tokens = 35;
  CHECK_FALSE(plan.fits(b2, 7));
  // Summing the ends (3 + 9 = 12 of 10 blocks in all) would refuse b; the plan over time does not.
  plan.add(b, 7);
  CHECK(plan.need_at(0) == 7);
  CHECK(plan.need_at(3) == 7);
  CHECK(plan.need_at(4) == -3 + 8);
  CHECK(plan.need_at(9) == -3 + 9);
  CHECK(plan.need_at(10) == -3);
  CHECK(plan.peak_need() == 7);
}

TEST_CASE("cache plan: an unknown last step holds the end for good; blocks shared past their holder's end are kept") {
  // A prefilling sequence: 8 of 20 known tokens computed (2 blocks), 30 at its end (8 blocks).
  const Trajectory p{.tokens = 20, .end_tokens = 30, .held = 2, .own = 2};
  CachePlan plan(4, 6);
  plan.add(p);
  // Planned as if all 20 were in already and one more came each step: 5 blocks at once, 8 for good.
  CHECK(plan.need_at(0) == 3);
  CHECK(plan.need_at(10) == 6);
  CHECK(plan.need_at(Trajectory::kForever - 1) == 6);
  CHECK(plan.peak_need() == 6);

  // a holds 4 blocks, 3 of them a prefix that c, admitted now, shares; a ends after 4 steps.
  // c: 13 tokens (the 3 shared blocks and 1 new), 9 outputs: 21 tokens (6 blocks) at its end.
  // c outlives a, so the 3 shared blocks stay in use after a ends and are c's to free.
  const Trajectory a{.steps = 4, .tokens = 13, .end_tokens = 16, .held = 4, .own = 4};
  const Trajectory c{.steps = 9, .tokens = 13, .end_tokens = 21, .held = 4, .own = 1 + 3};
  const std::vector<KeptBlocks> kept = {{.from = 4, .count = 3}};
  CachePlan shared(4, 2);
  shared.add(a);
  // At c's last step (k = 8): a's 4 own blocks freed, 3 of them kept, c's 1 new block and its
  // growth blocks_for(21) - 4 = 2: -4 + 3 + 1 + 2 = 2 = the free blocks.
  CHECK(shared.fits(c, 1, kept));
  CachePlan tighter(4, 1);
  tighter.add(a);
  CHECK_FALSE(tighter.fits(c, 1, kept));
  // Without the kept blocks the plan would count the shared prefix free when a ends.
  CHECK(tighter.fits(Trajectory{.steps = 9, .tokens = 13, .end_tokens = 21, .held = 4, .own = 1}, 1));
  shared.add(c, 1, kept);
  CHECK(shared.need_at(8) == 2);
  CHECK(shared.need_at(9) == -4);  // both gone: a's 4 blocks free (c's new one went back too)
}

TEST_CASE("cache plan: block-steps of a trajectory equal its blocks summed step by step") {
  // 4 tokens in 1 block growing to 12 (3 blocks) over 9 steps: blocks 1,2,2,2,2,3,3,3,3 = 21.
  const Trajectory t{.steps = 9, .tokens = 4, .end_tokens = 12, .held = 1, .own = 1};
  CHECK(block_steps(t, 9, 4) == 21);
  // Past its end it holds 3 blocks a step: 21 + 3 x 3.
  CHECK(block_steps(t, 12, 4) == 30);
  // Against the plain sum, over many shapes: own blocks plus the growth at each step.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    const int bs = 1 << (rng() % 6);
    Trajectory r;
    r.tokens = 1 + static_cast<int>(rng() % 100);
    r.end_tokens = r.tokens + static_cast<int>(rng() % 100);
    r.held = static_cast<int>(rng() % ((r.tokens + bs - 1) / bs + 1));
    r.own = static_cast<int>(rng() % (r.held + 1));
    const int64_t lifetime = 1 + rng() % 150;
    int64_t sum = 0;
    for (int64_t k = 0; k < lifetime; ++k) sum += r.own + growth(r, k, bs);
    CAPTURE(trial);
    CHECK(block_steps(r, lifetime, bs) == sum);
  }
}

}  // namespace nvllm
