// The CPU runner under the real engine with a random Llama-style model whose greedy choices
// vary from token to token (a separate LM head, so it does not merely copy its input): the
// tokens must equal a runner-only reference that recomputes each whole sequence from scratch
// every step, whatever the scheduler does (prefix cache, chunking, block size, preemption).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "runtime/cpu_runner.h"
#include "runtime/cpu_runner_test_util.h"

namespace nvllm {
namespace {

constexpr uint32_t kWeightSeed = 21;

struct Variant {
  int block_size = 16;
  int num_kv_blocks = 256;
  bool prefix_caching = true;
  bool chunked_prefill = true;
  int max_num_batched_tokens = 512;
  Admission admission = Admission::kPlanned;
};

std::vector<EngineRequest> workload(const ModelConfig& c) {
  std::vector<int32_t> shared;
  for (int i = 0; i < 70; ++i) shared.push_back((i * 53 + 11) % c.vocab_size);
  const int prefix[] = {0, 70, 35, 70, 16, 70};
  const int suffix[] = {21, 0, 9, 30, 3, 1};
  std::vector<EngineRequest> reqs;
  for (int r = 0; r < 6; ++r) {
    EngineRequest q;
    q.id = std::to_string(r);
    q.prompt_ids.assign(shared.begin(), shared.begin() + prefix[r]);
    for (int i = 0; i < suffix[r]; ++i) q.prompt_ids.push_back((r * 31 + i * 17 + 5) % c.vocab_size);
    q.params.temperature = 0;
    q.params.ignore_eos = true;
    q.params.max_tokens = 8 + 2 * r;
    reqs.push_back(std::move(q));
  }
  return reqs;
}

std::map<std::string, std::vector<int32_t>> run_engine(const ModelConfig& c, const Variant& v, int64_t* preemptions,
                                                      std::vector<EngineRequest> requests = {}) {
  CpuRunner runner(c, test::random_weights(c, kWeightSeed), v.block_size, v.num_kv_blocks, 2);
  EngineConfig ec;
  ec.block_size = v.block_size;
  ec.prefix_caching = v.prefix_caching;
  ec.chunked_prefill = v.chunked_prefill;
  ec.max_num_batched_tokens = v.max_num_batched_tokens;
  ec.admission = v.admission;
  ec.max_num_seqs = 8;
  ec.max_model_len = 256;
  ec.eos_token_ids = c.eos_token_ids;
  Engine engine(ec, runner, nullptr);
  if (requests.empty()) requests = workload(c);
  for (EngineRequest& r : requests) engine.add_request(std::move(r));
  std::map<std::string, std::vector<int32_t>> out;
  while (engine.has_unfinished()) {
    for (const FinishedRequest& f : engine.step()) out[f.id] = f.outputs.at(0).token_ids;
  }
  if (preemptions) *preemptions = engine.stats().preemptions;
  return out;
}

// Greedy decoding by recomputing the whole sequence each step in a fresh cache: no prefix
// reuse, no chunking, no other sequences.
std::vector<int32_t> reference_greedy(const ModelConfig& c, std::vector<int32_t> seq, int max_tokens) {
  const int prompt = static_cast<int>(seq.size());
  for (int step = 0; step < max_tokens; ++step) {
    const int n = static_cast<int>(seq.size());
    CpuRunner runner(c, test::random_weights(c, kWeightSeed), 256, 1, 1);
    const auto logits = runner.forward_logits(test::make_batch({{seq, 0, {0}}}, 256));
    const float* last = &logits[static_cast<size_t>(n - 1) * c.vocab_size];
    seq.push_back(static_cast<int32_t>(std::max_element(last, last + c.vocab_size) - last));
  }
  return {seq.begin() + prompt, seq.end()};
}

}  // namespace

TEST_CASE("cpu_runner + engine: greedy tokens equal a from-scratch reference under every schedule") {
  const ModelConfig c = test::tiny_config(Arch::kLlama, 2);
  std::map<std::string, std::vector<int32_t>> expected;
  std::set<int32_t> distinct;
  for (const EngineRequest& r : workload(c)) {
    expected[r.id] = reference_greedy(c, r.prompt_ids, r.params.max_tokens);
    distinct.insert(expected[r.id].begin(), expected[r.id].end());
  }
  // The check has teeth only if the model's choices vary.
  REQUIRE(distinct.size() >= 8);

  CHECK(run_engine(c, {.prefix_caching = false, .chunked_prefill = false}, nullptr) == expected);
  CHECK(run_engine(c, {}, nullptr) == expected);
  CHECK(run_engine(c, {.max_num_batched_tokens = 24}, nullptr) == expected);
  CHECK(run_engine(c, {.block_size = 256, .num_kv_blocks = 8}, nullptr) == expected);
  CHECK(run_engine(c, {.block_size = 1, .num_kv_blocks = 1024}, nullptr) == expected);
  // A cache too small for all six at their ends: greedy admission preempts and recomputes,
  // planned admission waits instead; the tokens are the reference's either way.
  int64_t preemptions = 0;
  CHECK(run_engine(c, {.block_size = 4, .num_kv_blocks = 40, .max_num_batched_tokens = 64,
                       .admission = Admission::kGreedy}, &preemptions) == expected);
  CHECK(preemptions > 0);
  CHECK(run_engine(c, {.block_size = 4, .num_kv_blocks = 40, .max_num_batched_tokens = 64}, &preemptions) == expected);
  CHECK(preemptions == 0);
}

TEST_CASE("cpu_runner + engine: seeded sampling gives the same tokens alone and in a batch of 32") {
  const ModelConfig c = test::tiny_config(Arch::kLlama, 2);
  std::vector<EngineRequest> batch;
  for (int r = 0; r < 32; ++r) {
    EngineRequest q;
    q.id = std::to_string(r);
    for (int i = 0; i < 3 + (r * 7) % 40; ++i) q.prompt_ids.push_back((r * 13 + i * 29 + 1) % c.vocab_size);
    q.params.temperature = 0.9f;
    q.params.top_p = 0.9f;
    q.params.seed = 500 + r;
    q.params.ignore_eos = true;
    q.params.max_tokens = 10;
    batch.push_back(std::move(q));
  }
  const auto together = run_engine(c, {.max_num_batched_tokens = 96}, nullptr, batch);
  REQUIRE(together.size() == 32);
  for (int r : {0, 9, 31}) {
    CHECK(run_engine(c, {}, nullptr, {batch[r]}).at(std::to_string(r)) == together.at(std::to_string(r)));
  }
  // Another seed changes the draw, or the equality above would prove nothing.
  EngineRequest other = batch[9];
  other.params.seed = 77;
  CHECK(run_engine(c, {}, nullptr, {other}).at("9") != together.at("9"));
}

}  // namespace nvllm
