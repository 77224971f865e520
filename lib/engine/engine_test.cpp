// Engine + Scheduler + BlockManager with the FakeRunner. The reference is a plain loop that
// generates each sequence alone, token by token, from the same hash "model" and applies the
// stop rules as written in the issue: whatever the engine's batching, chunking, paging,
// prefix caching or preemption, every completion must equal it.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "core/sampling_rng.h"
#include "engine/engine.h"
#include "engine/fake_runner.h"

namespace nvllm {
namespace {

constexpr int kVocab = 5000;
const std::vector<int32_t> kEos = {4999};

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
Expected simulate(const std::vector<int32_t>& prompt, const SamplingParams& p, int index, int max_model_len,
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

std::vector<EngineRequest> workload(uint32_t seed, int count) {
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
RunResult run(const EngineConfig& config, FakeRunner& runner, const std::vector<EngineRequest>& reqs,
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

void check_against_reference(const RunResult& r, const std::vector<EngineRequest>& reqs, const EngineConfig& config,
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

EngineConfig base_config() {
  EngineConfig c;
  c.block_size = 16;
  c.max_model_len = 512;
  c.eos_token_ids = kEos;
  return c;
}

}  // namespace

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
