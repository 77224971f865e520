// DataParallelEngine and its balancing rule. The balancer is checked on hand-made requests
// (assignments worked out by hand, ties to the lowest index, finished work leaving); the group
// with FakeRunners against a plain Engine: the same outputs per request id, every id once, the
// counts summed, and an engine's failure surfacing in step().
#include "engine/data_parallel.h"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>

#include "core/error.h"
#include "engine/fake_runner.h"

namespace nvllm {
namespace {

EngineRequest request(const std::string& id, int prompt_len, int max_tokens, int n = 1) {
  EngineRequest r;
  r.id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt_ids.push_back(100 + (i * 7 + static_cast<int>(id.size())) % 900);
  r.params.max_tokens = max_tokens;
  r.params.n = n;
  r.params.temperature = 0.0f;
  r.params.ignore_eos = true;
  return r;
}

EngineConfig config() {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 256;
  return c;
}

}  // namespace

TEST_CASE("data parallel: predicted work is prompt tokens plus max_tokens times n") {
  CHECK(predicted_work(request("a", 7, 10)) == 17);
  CHECK(predicted_work(request("a", 7, 10, 3)) == 37);
}

TEST_CASE("data parallel: each request goes to the engine with the least outstanding work") {
  WorkBalancer b(3);
  // Outstanding after each: [100 0 0] [100 50 0] [100 50 30] [100 50 60] [100 250 60] [100 250 70]
  CHECK(b.assign(100) == 0);  // all equal: the lowest index
  CHECK(b.assign(50) == 1);
  CHECK(b.assign(30) == 2);
  CHECK(b.assign(30) == 2);   // 30 < 50
  CHECK(b.assign(200) == 1);  // 50 < 60 < 100
  CHECK(b.assign(10) == 2);   // 60
  CHECK(b.outstanding(0) == 100);
  CHECK(b.outstanding(1) == 250);
  CHECK(b.outstanding(2) == 70);
  b.finish(0, 100);  // engine 0's request finished: it is the least loaded again
  CHECK(b.assign(5) == 0);
  // Exactly equal loads go to the lower index; one token less goes to the other.
  WorkBalancer t(2);
  CHECK(t.assign(40) == 0);
  CHECK(t.assign(40) == 1);
  CHECK(t.assign(1) == 0);   // 40 == 40: engine 0
  CHECK(t.assign(1) == 1);   // 41 > 40: engine 1
  t.finish(1, 1);            // [41 40]
  CHECK(t.assign(1) == 1);
}

TEST_CASE("data parallel: requests queued before any step are placed by predicted work") {
  FakeRunner r0(64, 16), r1(64, 16);
  std::vector<Runner*> runners{&r0, &r1};
  DataParallelEngine dp(config(), runners, nullptr);
  dp.add_request(request("big", 60, 40));  // 100 -> engine 0
  dp.add_request(request("s1", 5, 5));     // 10  -> engine 1
  dp.add_request(request("s2", 5, 5));     // 20 on engine 1 < 100
  dp.add_request(request("s3", 5, 5));     // 30 < 100
  dp.add_request(request("s4", 40, 41));   // engine 1 at 30 + 81 = 111 > 100 ...
  dp.add_request(request("s5", 5, 5));     // ... so this one goes to engine 0 (100 < 111)
  std::map<std::string, int> seen;
  while (dp.has_unfinished())
    for (const FinishedRequest& done : dp.step()) ++seen[done.id];
  CHECK(seen.size() == 6);
  for (const auto& [id, count] : seen) CHECK(count == 1);
  const std::vector<EngineLoad> loads = dp.loads();
  REQUIRE(loads.size() == 2);
  CHECK(loads[0].counts.requests == 2);  // big, s5
  CHECK(loads[1].counts.requests == 4);  // s1..s4
  CHECK(loads[0].counts.output_tokens == 40 + 5);
  CHECK(loads[1].counts.output_tokens == 5 + 5 + 5 + 41);
  CHECK(dp.stats().output_tokens == 40 + 5 + 5 + 5 + 5 + 41);
  CHECK(dp.stats().requests == 6);
  CHECK(dp.stats().ttft_s.size() == 6);
  CHECK(dp.stats().num_kv_blocks == 128);
}

TEST_CASE("data parallel: 2 and 3 engines give every request the outputs of one engine, once") {
  // Mixed greedy and seeded sampling, n > 1, eos, prompts sharing prefixes: the FakeRunner's
  // tokens depend only on a sequence's history and seed, so any engine must produce the same.
  std::mt19937 rng(7);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 60; ++i) {
    EngineRequest r = request("q" + std::to_string(i), 1 + static_cast<int>(rng() % 50), 1 + static_cast<int>(rng() % 40),
                              i % 7 == 3 ? 2 : 1);
    r.params.temperature = i % 2 ? 0.0f : 0.7f;
    r.params.seed = 500 + i;
    r.params.ignore_eos = i % 3 == 0;
    reqs.push_back(std::move(r));
  }
  const auto run = [&](int engines) {
    std::vector<std::unique_ptr<FakeRunner>> owned;
    std::vector<Runner*> runners;
    for (int e = 0; e < engines; ++e) {
      owned.push_back(std::make_unique<FakeRunner>(40, 16, 5000, std::vector<int32_t>{4999}, 9));
      runners.push_back(owned.back().get());
    }
    EngineConfig c = config();
    c.eos_token_ids = {4999};
    DataParallelEngine dp(c, runners, nullptr);
    std::map<std::string, std::vector<std::vector<int32_t>>> out;
    size_t next = 0;
    int64_t finished = 0;
    while (next < reqs.size() || dp.has_unfinished()) {
      // Fed a few at a time, as the request feeder does, so balancing sees finished work.
      for (int k = 0; k < 5 && next < reqs.size(); ++k) dp.add_request(reqs[next++]);
      for (const FinishedRequest& done : dp.step()) {
        REQUIRE_MESSAGE(!out.contains(done.id), "id returned twice: ", done.id);
        for (const FinishedSequence& s : done.outputs) out[done.id].push_back(s.token_ids);
        ++finished;
      }
    }
    CHECK(finished == static_cast<int64_t>(reqs.size()));
    CHECK(dp.stats().requests == static_cast<int64_t>(reqs.size()));
    // Every count of the merged stats is the engines' sum (bench prints them for -dp runs).
    RunStats sum;
    for (const EngineLoad& l : dp.loads()) {
      const RunStats& e = l.counts;
      sum.requests += e.requests;
      sum.prompt_tokens += e.prompt_tokens;
      sum.cached_tokens += e.cached_tokens;
      sum.output_tokens += e.output_tokens;
      sum.started_seqs += e.started_seqs;
      sum.steps += e.steps;
      sum.computed_tokens += e.computed_tokens;
      sum.preemptions += e.preemptions;
      sum.recomputed_tokens += e.recomputed_tokens;
      sum.scheduled_seqs += e.scheduled_seqs;
      sum.peak_blocks_in_use += e.peak_blocks_in_use;
      sum.num_kv_blocks += e.num_kv_blocks;
    }
    const RunStats& m = dp.stats();
    CHECK(m.requests == sum.requests);
    CHECK(m.prompt_tokens == sum.prompt_tokens);
    CHECK(m.cached_tokens == sum.cached_tokens);
    CHECK(m.output_tokens == sum.output_tokens);
    CHECK(m.started_seqs == sum.started_seqs);
    CHECK(m.steps == sum.steps);
    CHECK(m.computed_tokens == sum.computed_tokens);
    CHECK(m.preemptions == sum.preemptions);
    CHECK(m.recomputed_tokens == sum.recomputed_tokens);
    CHECK(m.scheduled_seqs == sum.scheduled_seqs);
    CHECK(m.peak_blocks_in_use == sum.peak_blocks_in_use);
    CHECK(m.num_kv_blocks == sum.num_kv_blocks);
    CHECK(m.scheduled_seqs > 0);
    CHECK(m.mean_batch_size() > 1.0);
    return out;
  };
  const auto one = run(1);
  CHECK(one.size() == reqs.size());
  for (int engines : {2, 3}) {
    INFO(engines, " engines");
    CHECK(run(engines) == one);
  }
}

namespace {
class FailingRunner : public Runner {
 public:
  void execute(const Batch&, StepOutput&) override { fail("the device fell off the bus"); }
  int num_kv_blocks() const override { return 64; }
  const char* name() const override { return "failing"; }
};
}  // namespace

TEST_CASE("data parallel: an engine's failure is rethrown by step(); a group stops mid-run") {
  {
    FakeRunner good(64, 16);
    FailingRunner bad;
    std::vector<Runner*> runners{&good, &bad};
    DataParallelEngine dp(config(), runners, nullptr);
    dp.add_request(request("a", 10, 50));
    dp.add_request(request("b", 10, 5));  // engine 1: fails at its first step
    CHECK_THROWS_WITH_AS(
        [&] {
          while (dp.has_unfinished()) (void)dp.step();
        }(),
        doctest::Contains("fell off the bus"), Error);
  }
  {  // Destroyed with work left (an interrupted run): the threads stop after their step.
    FakeRunner r0(64, 16), r1(64, 16);
    std::vector<Runner*> runners{&r0, &r1};
    DataParallelEngine dp(config(), runners, nullptr);
    for (int i = 0; i < 8; ++i) dp.add_request(request("r" + std::to_string(i), 20, 200));
    (void)dp.step();
    CHECK(dp.has_unfinished());
  }
  {  // A request no engine can run is refused at once, in the caller's thread.
    FakeRunner r0(64, 16), r1(64, 16);
    std::vector<Runner*> runners{&r0, &r1};
    DataParallelEngine dp(config(), runners, nullptr);
    CHECK_THROWS_WITH_AS(dp.add_request(request("long", 300, 5)), doctest::Contains("--max-model-len"), Error);
    CHECK_FALSE(dp.has_unfinished());
  }
}

}  // namespace nvllm
