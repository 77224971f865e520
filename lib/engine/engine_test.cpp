// Engine + Scheduler + BlockManager with the FakeRunner. The reference is a plain loop that
// generates each sequence alone, token by token, from the same hash "model" and applies the
// stop rules as written in the issue: whatever the engine's batching, chunking, paging,
// prefix caching or preemption, every completion must equal it.
// This file: the reference under every scheduling configuration, priorities, random workloads;
// engine_admission_test.cpp planned admission; engine_requests_test.cpp per-request features.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "engine/engine_test_util.h"

namespace nvllm {

using namespace engine_test;

TEST_CASE("engine: outputs equal the one-at-a-time reference under every scheduling configuration") {
  const std::vector<EngineRequest> reqs = workload(7, 30);
  struct Variant {
    const char* name;
    EngineConfig config;
    int num_blocks;
  };
  std::vector<Variant> variants;
  const auto add = [&](const char* name, int blocks, auto edit) {
    EngineConfig c = base_config();
    edit(c);
    variants.push_back({name, c, blocks});
  };
  add("default", 256, [](EngineConfig&) {});
  add("prefix caching off", 256, [](EngineConfig& c) { c.prefix_caching = false; });
  add("chunked prefill off", 256, [](EngineConfig& c) { c.chunked_prefill = false; });
  add("block size 1", 4096, [](EngineConfig& c) { c.block_size = 1; });
  add("block size 256", 16, [](EngineConfig& c) { c.block_size = 256; });
  add("small budget, chunks", 256, [](EngineConfig& c) { c.max_num_batched_tokens = 13; });
  add("max 3 seqs", 256, [](EngineConfig& c) { c.max_num_seqs = 3; });
  add("tiny cache", 8, [](EngineConfig&) {});
  add("tiny cache, caching off, no chunks", 8, [](EngineConfig& c) {
    c.prefix_caching = false;
    c.chunked_prefill = false;
  });
  add("tiny cache, block size 1", 100, [](EngineConfig& c) { c.block_size = 1; });
  for (const Admission admission : {Admission::kGreedy, Admission::kPlanned})
  for (Variant v : variants) {
    const std::string name = v.name;
    CAPTURE(name);
    CAPTURE(admission == Admission::kGreedy);
    v.config.admission = admission;
    FakeRunner runner(v.num_blocks, v.config.block_size, kVocab, kEos);
    const RunResult r = run(v.config, runner, reqs);
    check_against_reference(r, reqs, v.config);
    CHECK(r.stats.preemptions == r.preemptions);
    if (name.find("tiny cache") == 0 && admission == Admission::kGreedy) CHECK(r.preemptions > 0);
    if (!v.config.prefix_caching) CHECK(r.counters.query_tokens == 0);
    // Prompts are at most 70 tokens: with 256-token blocks there is no full block to share.
    if (v.config.prefix_caching && v.config.block_size <= 16) CHECK(r.counters.hit_tokens > 0);
    CHECK(r.stats.peak_blocks_in_use <= v.num_blocks);
  }
}

TEST_CASE("engine: the priority policy keeps every output equal to the reference, under preemption") {
  std::vector<EngineRequest> reqs = workload(11, 30);
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i].priority = static_cast<int>(i * 7 % 5) - 2;
  for (const Admission admission : {Admission::kGreedy, Admission::kPlanned}) {
    CAPTURE(admission == Admission::kGreedy);
    EngineConfig c = base_config();
    c.priority_scheduling = true;
    c.admission = admission;
    FakeRunner runner(8, c.block_size, kVocab, kEos);
    const RunResult r = run(c, runner, reqs);
    check_against_reference(r, reqs, c);
    if (admission == Admission::kGreedy) CHECK(r.preemptions > 0);
  }
}

// The order requests finish in, queued all at once, one step after another.
std::vector<std::string> finish_order(const EngineConfig& c, int num_blocks, const std::vector<EngineRequest>& reqs) {
  FakeRunner runner(num_blocks, c.block_size, kVocab, kEos);
  Engine engine(c, runner, nullptr);
  for (const EngineRequest& r : reqs) engine.add_request(r);
  std::vector<std::string> order;
  while (engine.has_unfinished()) {
    for (const FinishedRequest& f : engine.step()) order.push_back(f.id);
  }
  return order;
}

TEST_CASE("engine: under the priority policy high-priority requests finish first with a small cache") {
  // Eight requests of 8 prompt + 24 output tokens (2 blocks of 16 each at the end) in a cache of
  // 6 blocks: at most three run at once. The last three arrive last but have priority -1
  // (lower runs first, as in vLLM): they are admitted first and finish first. Under fcfs
  // they wait for the others.
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    r.id = "r" + std::to_string(i);
    r.prompt_ids.assign(8, 100 + i);
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    r.params.temperature = 0;
    r.priority = i >= 5 ? -1 : 0;
    reqs.push_back(r);
  }
  EngineConfig c = base_config();
  c.priority_scheduling = true;
  const std::vector<std::string> prio = finish_order(c, 6, reqs);
  REQUIRE(prio.size() == 8);
  const std::set<std::string> first3(prio.begin(), prio.begin() + 3);
  CHECK(first3 == std::set<std::string>{"r5", "r6", "r7"});
  // The rest in arrival order: equal priorities are served first come, first served.
  CHECK(std::vector<std::string>(prio.begin() + 3, prio.end()) == std::vector<std::string>{"r0", "r1", "r2", "r3", "r4"});

  c.priority_scheduling = false;
  const std::vector<std::string> fcfs = finish_order(c, 6, reqs);
  REQUIRE(fcfs.size() == 8);
  CHECK(std::set<std::string>(fcfs.end() - 3, fcfs.end()) == std::set<std::string>{"r5", "r6", "r7"});
}

TEST_CASE("engine: under the priority policy the lowest-priority running sequence is preempted first") {
  // Two requests fit the 4-block cache at admission (1 block each) but not at their full
  // length (2 blocks + 1 each): one must be preempted. The earlier one has the lower priority
  // (a larger value): it is the victim, so the later, higher-priority request never recomputes
  // and finishes first. Under fcfs the newest (the high-priority one) would be the victim.
  std::vector<EngineRequest> reqs(2);
  for (int i = 0; i < 2; ++i) {
    reqs[i].id = "r" + std::to_string(i);
    reqs[i].prompt_ids.assign(8, 200 + i);
    reqs[i].params.max_tokens = 30;
    reqs[i].params.ignore_eos = true;
    reqs[i].params.temperature = 0;
  }
  reqs[0].priority = 5;
  reqs[1].priority = 1;
  EngineConfig c = base_config();
  c.admission = Admission::kGreedy;  // planned admission would never run both at once
  c.priority_scheduling = true;
  CHECK(finish_order(c, 4, reqs) == std::vector<std::string>{"r1", "r0"});
  c.priority_scheduling = false;
  CHECK(finish_order(c, 4, reqs) == std::vector<std::string>{"r0", "r1"});
}

TEST_CASE("engine: random configurations and workloads with eos, min_tokens and stop ids match the reference") {
  std::mt19937 rng(12345);
  int64_t preemptions = 0, hits = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<EngineRequest> reqs = workload(100 + trial, 12 + static_cast<int>(rng() % 20));
    for (EngineRequest& r : reqs) {
      r.params.ignore_eos = rng() % 3 == 0;
      r.params.min_tokens = static_cast<int>(rng() % 6);
      if (rng() % 4 == 0) r.params.stop_token_ids = {static_cast<int32_t>(rng() % kVocab)};
      if (rng() % 3 == 0) r.params.n = 1 + static_cast<int>(rng() % 4);
    }
    EngineConfig c = base_config();
    c.block_size = 1 << (rng() % 9);  // 1..256
    c.prefix_caching = rng() % 2;
    c.chunked_prefill = rng() % 2;
    c.max_num_batched_tokens = (c.chunked_prefill ? 1 : 70) + static_cast<int>(rng() % 150);
    c.max_num_seqs = 1 + static_cast<int>(rng() % 12);
    c.max_model_len = 72 + static_cast<int>(rng() % 40);  // prompts are at most 70 tokens
    // At least one whole sequence (prompt <= 70, output <= 30) must fit, or it ends "length" early.
    const int num_blocks = (100 + c.block_size - 1) / c.block_size + static_cast<int>(rng() % 6);
    CAPTURE(trial);
    CAPTURE(c.block_size);
    CAPTURE(c.prefix_caching);
    CAPTURE(c.chunked_prefill);
    CAPTURE(c.max_num_batched_tokens);
    CAPTURE(c.max_num_seqs);
    CAPTURE(num_blocks);
    const int eos_every = 6;
    for (const Admission admission : {Admission::kGreedy, Admission::kPlanned}) {
      CAPTURE(admission == Admission::kGreedy);
      c.admission = admission;
      FakeRunner runner(num_blocks, c.block_size, kVocab, kEos, eos_every);
      const RunResult r = run(c, runner, reqs);
      check_against_reference(r, reqs, c, eos_every);
      if (admission == Admission::kGreedy) preemptions += r.preemptions;
      hits += r.counters.hit_tokens;
    }
  }
  // The trials did exercise preemption and the prefix cache.
  CHECK(preemptions > 0);
  CHECK(hits > 0);
}

}  // namespace nvllm
