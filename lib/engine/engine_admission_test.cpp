// Planned admission (EngineConfig::admission) against greedy admission and the one-at-a-time
// reference of engine_test_util.h: same tokens, no preemption, the same steps when all fits.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "engine/engine_test_util.h"

namespace nvllm {

using namespace engine_test;

namespace {

// Requests whose lengths are all known up front (ignore_eos, no stop ids): 20..60 prompt
// tokens, a third of them behind one shared 32-token prefix, 20..60 outputs, every fifth with
// n = 2. At most 60 + 60 - 1 = 119 tokens a sequence: 8 blocks of 16.
std::vector<EngineRequest> known_length_workload(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prefix;
  for (int i = 0; i < 32; ++i) prefix.push_back(static_cast<int32_t>(rng() % 4000));
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < count; ++i) {
    EngineRequest r;
    r.id = "k" + std::to_string(i);
    const int len = 20 + static_cast<int>(rng() % 41);
    if (i % 3 == 0) r.prompt_ids = prefix;
    while (static_cast<int>(r.prompt_ids.size()) < len) r.prompt_ids.push_back(static_cast<int32_t>(rng() % 4000));
    r.params.max_tokens = 20 + static_cast<int>(rng() % 41);
    r.params.ignore_eos = true;
    r.params.temperature = rng() % 2 ? 0.0f : 0.7f;
    r.params.seed = 500 + i;
    r.params.n = i % 5 == 4 ? 2 : 1;
    r.priority = static_cast<int>(rng() % 3);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

}  // namespace

TEST_CASE("engine: planned admission runs a workload greedy preempts many times with no preemption, same tokens") {
  const std::vector<EngineRequest> reqs = known_length_workload(3, 40);
  struct Variant {
    const char* name;
    int num_blocks;
    void (*edit)(EngineConfig&);
  };
  const Variant variants[] = {
      {"default", 24, [](EngineConfig&) {}},
      {"prefix caching off", 24, [](EngineConfig& c) { c.prefix_caching = false; }},
      {"chunked prefill off", 24, [](EngineConfig& c) { c.chunked_prefill = false; }},
      {"small budget, chunks", 24, [](EngineConfig& c) { c.max_num_batched_tokens = 13; }},
      {"priority", 24, [](EngineConfig& c) { c.priority_scheduling = true; }},
      {"block size 4", 96, [](EngineConfig& c) { c.block_size = 4; }},
      {"max 3 seqs", 24, [](EngineConfig& c) { c.max_num_seqs = 3; }},
      // The smallest cache one sequence fits at its end (8 blocks): one at a time.
      {"one at a time", 8, [](EngineConfig&) {}},
  };
  for (const Variant& v : variants) {
    const std::string name = v.name;
    CAPTURE(name);
    EngineConfig c = base_config();
    v.edit(c);
    c.admission = Admission::kGreedy;
    FakeRunner greedy_runner(v.num_blocks, c.block_size, kVocab, kEos);
    const RunResult greedy = run(c, greedy_runner, reqs);
    check_against_reference(greedy, reqs, c);
    c.admission = Admission::kPlanned;
    FakeRunner planned_runner(v.num_blocks, c.block_size, kVocab, kEos);
    const RunResult planned = run(c, planned_runner, reqs);
    check_against_reference(planned, reqs, c);
    CHECK(planned.preemptions == 0);
    CHECK(planned.stats.recomputed_tokens == 0);
    if (name == "default") {
      CHECK(greedy.preemptions >= 10);
      CHECK(greedy.stats.recomputed_tokens > 0);
      CHECK(greedy.stats.computed_tokens > planned.stats.computed_tokens);
    }
    // Identical tokens, request by request (both also equal the reference above).
    for (const auto& [key, done] : planned.done) {
      const auto& id = key;  // clang 14 cannot capture a structured binding (CAPTURE is a lambda)
      CAPTURE(id);
      REQUIRE(greedy.done.at(id).outputs.size() == done.outputs.size());
      for (size_t i = 0; i < done.outputs.size(); ++i)
        CHECK(greedy.done.at(id).outputs[i].token_ids == done.outputs[i].token_ids);
    }
  }
}

TEST_CASE("engine: when every request fits at its end, planned and greedy admission schedule the same steps") {
  for (const bool known : {true, false}) {
    CAPTURE(known);
    const std::vector<EngineRequest> reqs = known ? known_length_workload(5, 30) : workload(5, 30);
    EngineConfig c = base_config();
    RunStats stats[2];
    int i = 0;
    for (const Admission admission : {Admission::kGreedy, Admission::kPlanned}) {
      c.admission = admission;
      FakeRunner runner(4096, c.block_size, kVocab, kEos, known ? 0 : 6);
      const RunResult r = run(c, runner, reqs);
      check_against_reference(r, reqs, c, known ? 0 : 6);
      stats[i++] = r.stats;
    }
    CHECK(stats[0].steps == stats[1].steps);
    CHECK(stats[0].scheduled_seqs == stats[1].scheduled_seqs);
    CHECK(stats[0].computed_tokens == stats[1].computed_tokens);
    CHECK(stats[0].peak_blocks_in_use == stats[1].peak_blocks_in_use);
    CHECK(stats[1].preemptions == 0);
  }
}

}  // namespace nvllm
