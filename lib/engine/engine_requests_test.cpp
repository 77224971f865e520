// Per-request features through the engine, against the reference of engine_test_util.h or values
// worked out by hand: n > 1, prefix caching, stop rules, limits at add_request, run stats.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "engine/engine_test_util.h"

namespace nvllm {

using namespace engine_test;

TEST_CASE("engine: n > 1 samples differ, follow their seeds, and share the prompt's full blocks") {
  EngineRequest req;
  req.id = "fork";
  for (int i = 0; i < 65; ++i) req.prompt_ids.push_back(100 + i);  // 4 full blocks + 1 token
  req.params.n = 4;
  req.params.temperature = 1.0f;
  req.params.seed = 99;
  req.params.max_tokens = 10;
  req.params.ignore_eos = true;
  for (bool caching : {true, false}) {
    CAPTURE(caching);
    EngineConfig c = base_config();
    c.prefix_caching = caching;
    FakeRunner runner(64, 16, kVocab, kEos);
    const RunResult r = run(c, runner, {req});
    check_against_reference(r, {req}, c);
    const FinishedRequest& f = r.done.at("fork");
    CHECK(f.outputs[0].token_ids != f.outputs[1].token_ids);
    // 4 shared prompt blocks + one private block each for positions 64..74.
    CHECK(r.stats.peak_blocks_in_use == 4 + 4);
    CHECK(f.cached_tokens == 0);
  }
}

TEST_CASE("engine: requests sharing a prefix hit the cache, in the same step and later") {
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    r.id = std::to_string(i);
    for (int k = 0; k < 64; ++k) r.prompt_ids.push_back(7 + k);   // 4 shared blocks of 16
    for (int k = 0; k < 5; ++k) r.prompt_ids.push_back(1000 + 10 * i + k);
    r.params.max_tokens = 3;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  EngineConfig c = base_config();
  FakeRunner runner(256, 16, kVocab, kEos);
  Engine engine(c, runner, nullptr);
  for (const auto& r : reqs) engine.add_request(r);
  std::vector<FinishedRequest> done;
  while (engine.has_unfinished())
    for (auto& f : engine.step()) done.push_back(std::move(f));
  // All 8 are admitted in the first step; the first computes the prefix, 7 hit it.
  CHECK(engine.block_manager().counters().query_tokens == 8 * 69);
  CHECK(engine.block_manager().counters().hit_tokens == 7 * 64);
  CHECK(engine.stats().cached_tokens == 7 * 64);
  CHECK(engine.stats().prompt_tokens == 8 * 69);
  CHECK(engine.stats().prefix_cache_hit_rate() == doctest::Approx(7.0 * 64 / (8 * 69)));
  // Computed: the prefix once, 8 x 5 own tokens, then 2 decode steps of 8 (max_tokens 3).
  CHECK(engine.stats().computed_tokens == 64 + 8 * 5 + 2 * 8);
  CHECK(engine.stats().steps == 3);
  // A second wave finds the (freed but still cached) prefix, and the whole earlier prompt
  // of request 0 except the last token, rounded down to a block: 64 of 69.
  for (auto& r : reqs) r.id += "b";
  for (const auto& r : reqs) engine.add_request(r);
  while (engine.has_unfinished())
    for (auto& f : engine.step()) done.push_back(std::move(f));
  CHECK(engine.block_manager().counters().hit_tokens == 7 * 64 + 8 * 64);
  CHECK(engine.block_manager().counters().evictions == 0);
  // A full-prompt hit still computes the last token: 64-token prompt, hit capped at 48.
  EngineRequest whole = reqs[0];
  whole.id = "whole";
  whole.prompt_ids.resize(64);
  engine.add_request(whole);
  while (engine.has_unfinished())
    for (auto& f : engine.step()) done.push_back(std::move(f));
  CHECK(done.back().id == "whole");
  CHECK(done.back().cached_tokens == 48);
  CHECK(done.back().outputs[0].token_ids ==
        simulate(whole.prompt_ids, whole.params, 0, c.max_model_len, 0, false).tokens);
}

TEST_CASE("engine: stop token ids, max_tokens, min_tokens against eos, max_model_len") {
  EngineConfig c = base_config();
  c.max_model_len = 60;
  const int eos_every = 4;  // the fake model proposes eos often
  std::vector<EngineRequest> reqs;
  const auto make = [&](std::string id, int prompt_len, auto edit) {
    EngineRequest r;
    r.id = std::move(id);
    for (int k = 0; k < prompt_len; ++k) r.prompt_ids.push_back(31 * k % 4000 + static_cast<int>(r.id.size()));
    r.params.temperature = 0;
    r.params.max_tokens = 20;
    edit(r);
    reqs.push_back(r);
  };
  make("plain", 10, [](EngineRequest&) {});
  make("min_tokens", 10, [](EngineRequest& r) { r.params.min_tokens = 12; });
  make("ignore_eos", 10, [](EngineRequest& r) { r.params.ignore_eos = true; });
  make("max_tokens", 10, [](EngineRequest& r) { r.params.ignore_eos = true, r.params.max_tokens = 7; });
  make("context", 50, [](EngineRequest& r) { r.params.ignore_eos = true, r.params.max_tokens = 100; });
  // A stop id: the third token the model would produce.
  EngineRequest probe = reqs[2];
  const Expected free_run = simulate(probe.prompt_ids, probe.params, 0, c.max_model_len, eos_every, false);
  REQUIRE(free_run.tokens.size() >= 5);
  make("stop_id", 10, [&](EngineRequest& r) {
    r.prompt_ids = probe.prompt_ids;
    r.params.ignore_eos = true;
    r.params.stop_token_ids = {free_run.tokens[2]};
  });
  FakeRunner runner(64, 16, kVocab, kEos, eos_every);
  const RunResult r = run(c, runner, reqs);
  check_against_reference(r, reqs, c, eos_every);
  // The reference agrees; these say the cases exercise what they are named for.
  const auto& d = r.done;
  CHECK(d.at("plain").outputs[0].finish_reason == "stop");
  CHECK(d.at("plain").outputs[0].token_ids.back() == kEos[0]);
  CHECK(d.at("plain").outputs[0].token_ids.size() < 12);
  CHECK(d.at("min_tokens").outputs[0].token_ids.size() >= 12);
  CHECK(d.at("ignore_eos").outputs[0].finish_reason == "length");
  CHECK(d.at("ignore_eos").outputs[0].token_ids.size() == 20);
  CHECK(d.at("max_tokens").outputs[0].token_ids.size() == 7);
  CHECK(d.at("context").outputs[0].token_ids.size() == 10);  // 50 + 10 = max_model_len
  CHECK(d.at("context").outputs[0].finish_reason == "length");
  CHECK(d.at("stop_id").outputs[0].token_ids.size() <= 3);
  CHECK(d.at("stop_id").outputs[0].token_ids.back() == free_run.tokens[2]);
  CHECK(d.at("stop_id").outputs[0].finish_reason == "stop");
  // stop_reason as vLLM reports it: the stop id; none for eos or "length".
  CHECK(d.at("stop_id").outputs[0].stop_token_id == d.at("stop_id").outputs[0].token_ids.back());
  CHECK(d.at("plain").outputs[0].stop_token_id == -1);
  CHECK(d.at("ignore_eos").outputs[0].stop_token_id == -1);
}

TEST_CASE("engine: stop strings cut the text; logprobs are kept per token") {
  LetterTokenizer tok;
  EngineConfig c = base_config();
  EngineRequest base;
  for (int k = 0; k < 20; ++k) base.prompt_ids.push_back(3 * k + 1);
  base.params.temperature = 0;
  base.params.ignore_eos = true;
  base.params.max_tokens = 30;
  const Expected free_run = simulate(base.prompt_ids, base.params, 0, c.max_model_len, 0, true);
  REQUIRE(free_run.text.size() > 12);
  // A stop string spanning the pieces around position 6 of the text.
  const std::string stop = free_run.text.substr(6, 3);
  std::vector<EngineRequest> reqs;
  for (bool include : {false, true}) {
    EngineRequest r = base;
    r.id = include ? "include" : "cut";
    r.params.stop = {stop, "nevermatches"};
    r.params.include_stop_str_in_output = include;
    r.params.logprobs = 2;
    reqs.push_back(r);
  }
  reqs.push_back(base);
  reqs.back().id = "plain";
  FakeRunner runner(64, 16, kVocab, kEos);
  const RunResult r = run(c, runner, reqs, &tok);
  check_against_reference(r, reqs, c, 0, true);
  const FinishedSequence& cut = r.done.at("cut").outputs[0];
  CHECK(cut.finish_reason == "stop");
  CHECK(cut.stop_string == stop);  // vLLM's stop_reason
  CHECK(cut.text.find(stop) == std::string::npos);
  CHECK(r.done.at("include").outputs[0].text.size() == cut.text.size() + stop.size());
  CHECK(cut.logprobs.size() == cut.token_ids.size());
  REQUIRE(cut.top_logprobs.size() == cut.token_ids.size());
  CHECK(cut.top_logprobs[0].size() == 2);
  CHECK(cut.logprobs[0] == -static_cast<float>(cut.token_ids[0] % 97) / 10.0f);
  CHECK(r.done.at("plain").outputs[0].logprobs.empty());
  CHECK(r.done.at("plain").outputs[0].text == free_run.text);
}

TEST_CASE("engine: add_request rejects what can never run, naming the limit") {
  EngineConfig c = base_config();
  c.max_model_len = 40;
  c.max_num_batched_tokens = 32;
  c.chunked_prefill = false;
  FakeRunner runner(2, 16, kVocab, kEos);
  Engine engine(c, runner, nullptr);
  const auto req = [](int len) {
    EngineRequest r;
    r.id = "x";
    r.prompt_ids.assign(len, 5);
    return r;
  };
  const auto message = [&](EngineRequest r) -> std::string {
    try {
      engine.add_request(std::move(r));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(message(req(0)).find("empty") != std::string::npos);
  CHECK(message(req(40)).find("prompt of 40 tokens does not fit --max-model-len 40") != std::string::npos);
  CHECK(message(req(33)).find("needs 3 KV blocks of 16 tokens but the whole cache has 2") != std::string::npos);
  CHECK(message(req(32)) == "");
  // With the cache grown, the budget is the limit when prompts cannot be chunked.
  FakeRunner big(8, 16, kVocab, kEos);
  Engine engine2(c, big, nullptr);
  try {
    engine2.add_request(req(33));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("exceeds --max-num-batched-tokens 32 with --chunked-prefill off") !=
          std::string::npos);
  }
}

TEST_CASE("engine: a sequence that outgrows the whole cache finishes with length") {
  EngineConfig c = base_config();
  EngineRequest r;
  r.id = "big";
  r.prompt_ids.assign(30, 9);
  r.params.ignore_eos = true;
  r.params.max_tokens = 100;
  FakeRunner runner(2, 16, kVocab, kEos);  // 32 tokens of cache
  const RunResult res = run(c, runner, {r});
  const FinishedSequence& s = res.done.at("big").outputs[0];
  CHECK(s.finish_reason == "length");
  CHECK(s.token_ids.size() == 3);  // tokens 30, 31 fit; the 33rd position does not
}

TEST_CASE("run stats: percentiles interpolate linearly; summary and JSON carry every field") {
  CHECK(percentile({}, 50) == 0);
  CHECK(percentile({3, 1, 2}, 50) == 2);
  CHECK(percentile({1, 2, 3, 4}, 50) == doctest::Approx(2.5));
  CHECK(percentile({0, 10}, 90) == doctest::Approx(9));
  CHECK(percentile({5}, 99) == 5);
  RunStats s;
  s.requests = 2;
  s.prompt_tokens = 100;
  s.cached_tokens = 25;
  s.output_tokens = 40;
  s.steps = 21;
  s.elapsed_s = 2;
  s.ttft_s = {0.1, 0.3};
  s.tpot_s = {0.01};
  s.e2e_s = {1, 2};
  const nlohmann::json j = s.to_json();
  CHECK(j["prefix_cache_hit_rate"] == doctest::Approx(0.25));
  CHECK(j["output_tokens_per_s"] == doctest::Approx(20));
  CHECK(j["ttft_s"]["p50"] == doctest::Approx(0.2));
  CHECK(j["e2e_s"]["p99"] == doctest::Approx(1.99));
  for (const char* k : {"requests", "prompt_tokens", "cached_tokens", "output_tokens", "steps", "computed_tokens", "preemptions",
                        "recomputed_tokens", "mean_batch_size", "peak_blocks_in_use", "num_kv_blocks", "elapsed_s", "tpot_s"})
    CHECK(j.contains(k));
  CHECK(s.summary().find("25.0% hit") != std::string::npos);
  s.preemptions = 3;
  s.recomputed_tokens = 1234;
  s.scheduled_seqs = 84;  // over 21 steps: 4 a step
  CHECK(s.to_json()["recomputed_tokens"] == 1234);
  CHECK(s.to_json()["mean_batch_size"] == doctest::Approx(4.0));
  CHECK(s.summary().find("mean batch 4.0") != std::string::npos);
  CHECK(s.summary().find("3 (1234 tokens recomputed)") != std::string::npos);
}

TEST_CASE("engine: a stop string in the text before min_tokens are out does not stop the request") {
  // The first output token's text is the stop string: with min_tokens 4 it must be passed over
  // (vLLM checks stop strings only once min_tokens are out), so the request runs to a later
  // match or to max_tokens, as the reference says.
  LetterTokenizer tok;
  EngineConfig c = base_config();
  EngineRequest base;
  for (int k = 0; k < 12; ++k) base.prompt_ids.push_back(7 * k + 2);
  base.params.temperature = 0;
  base.params.ignore_eos = true;
  base.params.max_tokens = 10;
  const Expected free_run = simulate(base.prompt_ids, base.params, 0, c.max_model_len, 0, true);
  REQUIRE(free_run.tokens.size() == 10);
  std::vector<EngineRequest> reqs;
  for (int min_tokens : {0, 1, 4}) {
    EngineRequest r = base;
    r.id = "min" + std::to_string(min_tokens);
    r.params.min_tokens = min_tokens;
    r.params.stop = {LetterTokenizer::piece(free_run.tokens[0]).substr(0, 1)};
    reqs.push_back(r);
  }
  FakeRunner runner(64, 16, kVocab, kEos);
  const RunResult r = run(c, runner, reqs, &tok);
  check_against_reference(r, reqs, c, 0, true);
  CHECK(r.done.at("min0").outputs[0].token_ids.size() == 1);  // stops at once without min_tokens
  CHECK(r.done.at("min1").outputs[0].token_ids.size() == 1);  // and with 1: the first token may stop
  CHECK(r.done.at("min4").outputs[0].token_ids.size() >= 4);
}

}  // namespace nvllm
