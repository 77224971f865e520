// The engine tests' harness: a hash "model" (FakeRunner) whose every completion a plain loop
// reproduces one sequence at a time (simulate), a letter tokenizer for stop strings, random
// workloads, and run(), which drives an Engine and checks the block manager after every step.
// Whatever the engine's batching, chunking, paging, prefix caching or preemption, every
// completion must equal the reference.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/sampling_rng.h"
#include "engine/engine.h"
#include "engine/fake_runner.h"

namespace nvllm::engine_test {
inline constexpr int kVocab = 5000;
inline const std::vector<int32_t> kEos = {4999};

// Token i decodes to one or two letters: a concatenative tokenizer, so stop strings can be
// placed by hand and the text of ids is the text of their pieces.
class LetterTokenizer : public Tokenizer {
 public:
  static std::string piece(int32_t id) {
    std::string s(1, static_cast<char>('a' + id % 7));
    if (id % 5 == 0) s += ' ';
    return s;
  }
  std::vector<int32_t> encode(std::string_view, bool) const override { return {}; }
  std::string decode(std::span<const int32_t> ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s += piece(id);
    return s;
  }
  int32_t vocab_size() const override { return kVocab; }
  bool is_special(int32_t) const override { return false; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
};

struct Expected {
  std::vector<int32_t> tokens;
  std::string reason;
  std::string text;
  std::string stop_string;     // vLLM's stop_reason: the stop string, or
  int32_t stop_token_id = -1;  // the stop_token_ids id (eos is none)
};

// The reference: one sequence alone, the stop rules in their stated order.
inline Expected simulate(const std::vector<int32_t>& prompt, const SamplingParams& p, int index, int max_model_len,
                  int eos_every, bool with_text) {
  Expected e;
  const int max_tokens = std::min<int>(p.max_tokens, max_model_len - static_cast<int>(prompt.size()));
  const uint64_t seed = sequence_seed(p.seed, static_cast<uint32_t>(index));
  std::vector<int32_t> hist = prompt;
  std::string text;
  for (;;) {
    const int step = static_cast<int>(e.tokens.size());
    const int32_t t = FakeRunner::next_token(hist, p, seed, step, step < p.min_tokens, kEos, eos_every, kVocab);
    hist.push_back(t);
    e.tokens.push_back(t);
    const int n = static_cast<int>(e.tokens.size());
    const bool may_stop = n >= p.min_tokens;
    const bool stop_id = may_stop && ((!p.ignore_eos && t == kEos[0]) ||
                                      std::count(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) > 0);
    const size_t before = text.size();
    if (with_text && (!stop_id || p.include_stop_str_in_output)) text += LetterTokenizer::piece(t);
    if (stop_id) {
      e.reason = "stop";
      if (p.ignore_eos || t != kEos[0]) e.stop_token_id = t;
      break;
    }
    if (with_text && may_stop) {
      size_t cut = std::string::npos, len = 0;
      // As vLLM: only text this token added (with the stop's length - 1 before it) is
      // searched, so a match inside the first min_tokens tokens never stops the request.
      for (const std::string& s : p.stop) {
        const size_t pos = text.find(s, before + 1 >= s.size() ? before + 1 - s.size() : 0);
        if (pos < cut) cut = pos, len = s.size(), e.stop_string = s;
      }
      if (cut != std::string::npos) {
        text.resize(cut + (p.include_stop_str_in_output ? len : 0));
        e.reason = "stop";
        break;
      }
    }
    if (n >= max_tokens || static_cast<int>(hist.size()) >= max_model_len) {
      e.reason = "length";
      break;
    }
  }
  e.text = with_text ? text : "";
  return e;
}

inline std::vector<EngineRequest> workload(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prefixes(3);
  for (auto& p : prefixes)
    for (int i = 0; i < 40; ++i) p.push_back(static_cast<int32_t>(rng() % 4000));
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < count; ++i) {
    EngineRequest r;
    r.id = "r";
    r.id += std::to_string(i);
    const auto& pre = prefixes[rng() % 3];
    r.prompt_ids.assign(pre.begin(), pre.begin() + rng() % (pre.size() + 1));
    const int tail = 1 + static_cast<int>(rng() % 30);
    for (int k = 0; k < tail; ++k) r.prompt_ids.push_back(static_cast<int32_t>(rng() % 4000));
    r.params.max_tokens = 1 + static_cast<int>(rng() % 30);
    r.params.temperature = rng() % 2 ? 0.0f : 0.8f;
    r.params.seed = 1000 + i;
    r.params.n = i % 5 == 4 ? 3 : 1;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

struct RunResult {
  std::map<std::string, FinishedRequest> done;
  RunStats stats;
  int64_t preemptions = 0;
  BlockManagerCounters counters;
};

// Runs `reqs` (half queued up front, the rest after two steps), checking the block manager
// after every step and that the cache is empty at the end.
inline RunResult run(const EngineConfig& config, FakeRunner& runner, const std::vector<EngineRequest>& reqs,
              const Tokenizer* tokenizer = nullptr) {
  Engine engine(config, runner, tokenizer);
  RunResult r;
  size_t next = 0;
  for (; next < reqs.size() / 2; ++next) engine.add_request(reqs[next]);
  for (int step = 0; engine.has_unfinished() || next < reqs.size(); ++step) {
    if (step == 2)
      for (; next < reqs.size(); ++next) engine.add_request(reqs[next]);
    for (FinishedRequest& f : engine.step()) {
      REQUIRE(!r.done.count(f.id));
      r.done.emplace(f.id, std::move(f));
    }
    engine.block_manager().check_invariants();
    REQUIRE(step < 100000);
  }
  CHECK(engine.block_manager().num_free_blocks() == engine.block_manager().num_blocks());
  CHECK(engine.block_manager().counters().blocks_in_use == 0);
  CHECK(engine.scheduler().num_running() == 0);
  CHECK(engine.scheduler().num_waiting() == 0);
  CHECK(runner.max_batch_tokens <= config.max_num_batched_tokens);
  CHECK(runner.max_batch_seqs <= config.max_num_seqs);
  CHECK(engine.stats().steps == runner.steps);
  CHECK(engine.stats().computed_tokens == runner.total_tokens);
  r.stats = engine.stats();
  r.preemptions = engine.scheduler().num_preemptions();
  r.counters = engine.block_manager().counters();
  return r;
}

inline void check_against_reference(const RunResult& r, const std::vector<EngineRequest>& reqs, const EngineConfig& config,
                             int eos_every = 0, bool with_text = false) {
  REQUIRE(r.done.size() == reqs.size());
  int64_t output_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  size_t multi_token_seqs = 0;
  for (const EngineRequest& req : reqs) {
    CAPTURE(req.id);
    const FinishedRequest& f = r.done.at(req.id);
    CHECK(f.prompt_tokens == static_cast<int>(req.prompt_ids.size()));
    REQUIRE(f.outputs.size() == static_cast<size_t>(req.params.n));
    CHECK(f.arrival_s <= f.first_token_s);
    CHECK(f.first_token_s <= f.finish_s);
    for (int i = 0; i < req.params.n; ++i) {
      const Expected e = simulate(req.prompt_ids, req.params, i, config.max_model_len, eos_every, with_text);
      CHECK(f.outputs[i].token_ids == e.tokens);
      CHECK(f.outputs[i].finish_reason == e.reason);
      CHECK(f.outputs[i].stop_string == e.stop_string);
      CHECK(f.outputs[i].stop_token_id == e.stop_token_id);
      CHECK(f.outputs[i].text == e.text);
      output_tokens += static_cast<int64_t>(e.tokens.size());
      multi_token_seqs += e.tokens.size() > 1;
    }
    prompt_tokens += static_cast<int64_t>(req.prompt_ids.size());
    cached_tokens += f.cached_tokens;
    CHECK(f.cached_tokens <= (f.prompt_tokens - 1) / config.block_size * config.block_size);
    if (!config.prefix_caching) CHECK(f.cached_tokens == 0);
  }
  // RunStats: one latency per request, one TPOT per sequence with more than one token.
  CHECK(r.stats.prompt_tokens == prompt_tokens);
  CHECK(r.stats.cached_tokens == cached_tokens);
  CHECK(r.stats.ttft_s.size() == reqs.size());
  CHECK(r.stats.e2e_s.size() == reqs.size());
  CHECK(r.stats.tpot_s.size() == multi_token_seqs);
  for (double v : r.stats.ttft_s) CHECK(v >= 0);
  CHECK(r.stats.steps > 0);
  CHECK(r.stats.elapsed_s > 0);
  CHECK(r.stats.peak_blocks_in_use == r.counters.peak_blocks_in_use);
  CHECK(r.stats.peak_blocks_in_use > 0);
  // Preemption recomputes but never resamples, so the sampled-token count is exact.
  CHECK(r.stats.output_tokens == output_tokens);
  CHECK(r.stats.requests == static_cast<int64_t>(reqs.size()));
}

inline EngineConfig base_config() {
  EngineConfig c;
  c.block_size = 16;
  c.max_model_len = 512;
  c.eos_token_ids = kEos;
  return c;
}

}  // namespace nvllm::engine_test
