// The whole engine on the CPU runner with the tiny Qwen3 of testdata (dummy weights): what the
// scheduler and KV cache do must never change the tokens. The CPU runner computes each token
// in a fixed order whatever the batch holds, so greedy outputs must be identical, bit for bit,
// across cache layouts, chunking and preemption.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/config.h"
#include "model/weights.h"
#include "runtime/cpu_runner.h"

namespace nvllm {
namespace {

const ModelConfig& tiny_config() {
  static const ModelConfig config = load_model_config(NVLLM_TESTDATA "/tiny-qwen3");
  return config;
}

const ModelWeights& tiny_weights() {
  static const ModelWeights weights =
      load_weights(NVLLM_TESTDATA "/tiny-qwen3", tiny_config(), DType::kF32, LoadFormat::kDummy, 7);
  return weights;
}

struct Setup {
  int block_size = 16;
  int num_kv_blocks = 512;
  bool prefix_caching = true;
  bool chunked_prefill = true;
  int max_num_batched_tokens = 512;
  int max_num_seqs = 32;
  Admission admission = Admission::kPlanned;
};

struct RunResult {
  std::map<std::string, std::vector<int32_t>> tokens;  // id -> output tokens
  std::map<std::string, int> cached;
  int64_t preemptions = 0;
};

RunResult run(const Setup& s, const std::vector<EngineRequest>& requests) {
  CpuRunner runner(tiny_config(), copy_weights(tiny_weights()), s.block_size, s.num_kv_blocks, 2);
  EngineConfig config;
  config.block_size = s.block_size;
  config.prefix_caching = s.prefix_caching;
  config.chunked_prefill = s.chunked_prefill;
  config.max_num_batched_tokens = s.max_num_batched_tokens;
  config.max_num_seqs = s.max_num_seqs;
  config.admission = s.admission;
  config.max_model_len = 1024;
  config.eos_token_ids = tiny_config().eos_token_ids;
  Engine engine(config, runner, nullptr);
  for (const EngineRequest& r : requests) engine.add_request(r);
  RunResult out;
  while (engine.has_unfinished()) {
    for (const FinishedRequest& done : engine.step()) {
      REQUIRE(done.outputs.size() == 1);
      out.tokens[done.id] = done.outputs[0].token_ids;
      out.cached[done.id] = done.cached_tokens;
    }
  }
  out.preemptions = engine.stats().preemptions;
  return out;
}

// Requests sharing prefixes of several lengths (so that blocks are reused, partially filled
// blocks differ, and a full-prompt hit happens), greedy, fixed output lengths.
std::vector<EngineRequest> greedy_workload() {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, 20000);
  std::vector<int32_t> shared(300);
  for (int32_t& t : shared) t = token(rng);
  std::vector<EngineRequest> requests;
  const int prefix_lens[] = {0, 32, 40, 300, 300, 17, 256, 300};
  const int suffix_lens[] = {50, 9, 33, 0, 12, 70, 1, 45};
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    r.id = std::to_string(i);
    r.prompt_ids.assign(shared.begin(), shared.begin() + prefix_lens[i]);
    for (int k = 0; k < suffix_lens[i]; ++k) r.prompt_ids.push_back(token(rng));
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.max_tokens = 12 + i;
    requests.push_back(std::move(r));
  }
  return requests;
}

}  // namespace

TEST_CASE("greedy output on the CPU runner does not depend on caching, chunking, block size or preemption") {
  const std::vector<EngineRequest> requests = greedy_workload();
  const RunResult base = run({.prefix_caching = false, .chunked_prefill = false}, requests);
  REQUIRE(base.tokens.size() == requests.size());
  for (const auto& [id, tokens] : base.tokens) CHECK(tokens.size() == 12 + std::stoul(id));

  SUBCASE("prefix cache on") {
    const RunResult r = run({}, requests);
    CHECK(r.tokens == base.tokens);
    int cached = 0;
    for (const auto& [id, c] : r.cached) cached += c;
    CHECK(cached > 0);
  }
  SUBCASE("chunked prefill with a small token budget") {
    CHECK(run({.max_num_batched_tokens = 48}, requests).tokens == base.tokens);
  }
  SUBCASE("block size 256") {
    CHECK(run({.block_size = 256, .num_kv_blocks = 16}, requests).tokens == base.tokens);
  }
  SUBCASE("block size 1") {
    CHECK(run({.block_size = 1, .num_kv_blocks = 8192}, requests).tokens == base.tokens);
  }
  SUBCASE("a tiny KV cache forces preemption under greedy admission") {
    const RunResult r = run({.num_kv_blocks = 40, .admission = Admission::kGreedy}, requests);
    CHECK(r.preemptions > 0);
    CHECK(r.tokens == base.tokens);
  }
  SUBCASE("the same tiny KV cache under planned admission: no preemption, the same tokens") {
    const RunResult r = run({.num_kv_blocks = 40}, requests);
    CHECK(r.preemptions == 0);
    CHECK(r.tokens == base.tokens);
  }
}

TEST_CASE("a seeded sampled request gives the same tokens alone and inside a batch of 32") {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int32_t> token(0, 30000);
  std::vector<EngineRequest> batch;
  for (int i = 0; i < 32; ++i) {
    EngineRequest r;
    r.id = std::to_string(i);
    for (int k = 0; k < 5 + 7 * i; ++k) r.prompt_ids.push_back(token(rng));
    r.params.temperature = 1.5f;
    r.params.top_p = 0.95f;
    r.params.top_k = 100;
    r.params.seed = 1000 + i;
    r.params.ignore_eos = true;
    r.params.max_tokens = 10;
    batch.push_back(std::move(r));
  }
  const RunResult together = run({}, batch);
  for (int i : {0, 13, 31}) {
    const RunResult alone = run({}, {batch[i]});
    CHECK(alone.tokens.at(std::to_string(i)) == together.tokens.at(std::to_string(i)));
  }
  // Different seeds must be able to give different tokens, or the check above proves nothing.
  EngineRequest other = batch[0];
  other.params.seed = 4242;
  CHECK(run({}, {other}).tokens.at("0") != together.tokens.at("0"));
}

}  // namespace nvllm
