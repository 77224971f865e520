// Test helpers for the scheduler: hand-built sequences over a real block manager, and the
// engine's part of a step (tokens in, sampled tokens appended) done by hand.
#pragma once

#include <doctest/doctest.h>

#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "engine/scheduler.h"

namespace nvllm::test {

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

inline std::vector<std::pair<int64_t, int>> summary(const SchedulerOutput& out) {
  std::vector<std::pair<int64_t, int>> v;
  for (const ScheduledSeq& s : out.scheduled) v.emplace_back(s.seq->id, s.num_new);
  return v;
}

using Plan = std::vector<std::pair<int64_t, int>>;


// Steps the scheduler as the engine would: after each step every sampled sequence has a new
// token, and one that reached its stop length (max_tokens unless stop_at says otherwise) is
// finished and removed. Records the step each sequence was first admitted in (1-based).
struct Driver {
  explicit Driver(Fixture& fixture) : f(fixture) {}

  SchedulerOutput step() {
    ++steps;
    SchedulerOutput out = f.scheduler.schedule();
    for (const ScheduledSeq& s : out.scheduled) admitted_at.emplace(s.seq->id, steps);
    f.run(out);
    for (const ScheduledSeq& s : out.scheduled) {
      Sequence* seq = s.seq;
      const auto stop = stop_at.find(seq->id);
      const int limit = stop == stop_at.end() ? seq->params->max_tokens : stop->second;
      if (s.sample && seq->num_output() >= limit) seq->status = SequenceStatus::kFinished;
    }
    f.scheduler.remove_finished();
    f.blocks.check_invariants();
    return out;
  }
  void run_to_end() {
    while (!f.scheduler.empty()) {
      step();
      REQUIRE(steps < 10000);
    }
  }

  Fixture& f;
  std::map<int64_t, int> stop_at;           // id -> output length at which it stops early
  std::map<int64_t, int64_t> admitted_at;   // id -> first step it was scheduled in
  int64_t steps = 0;
};

}  // namespace nvllm::test
