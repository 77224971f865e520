// Engine: the loop schedule -> build the Batch -> run the model -> append tokens and check stops.
#include "engine/engine.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "core/error.h"
#include "core/sampling_rng.h"
#include "engine/sequence.h"

namespace nvllm {
namespace {

using Clock = std::chrono::steady_clock;

// What the engine keeps of a request until its last sequence finishes.
struct RequestState {
  std::string id;
  SamplingParams params;  // Sequence::params and Batch::params point here
  std::vector<std::unique_ptr<Sequence>> seqs;
  double arrival_s = 0;
  int num_finished = 0;
};

bool contains(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

SchedulerConfig scheduler_config(const EngineConfig& c) {
  return {.max_num_seqs = c.max_num_seqs, .max_num_batched_tokens = c.max_num_batched_tokens,
          .chunked_prefill = c.chunked_prefill, .priority = c.priority_scheduling, .admission = c.admission};
}

}  // namespace

struct Engine::Impl {
  Impl(const EngineConfig& c, Runner& r, const Tokenizer* t)
      : config(c), runner(r), tokenizer(t), blocks(r.num_kv_blocks(), c.block_size, c.prefix_caching),
        scheduler(scheduler_config(c), blocks), start(Clock::now()) {
    stats.num_kv_blocks = blocks.num_blocks();
  }

  double now_s() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
  void check_request(EngineRequest& request) const;
  void add_request(EngineRequest request);
  std::vector<FinishedRequest> step();
  void build_batch(const SchedulerOutput& so);
  std::string check_stop(Sequence& seq, int32_t token);
  void append_token(Sequence& seq, int32_t token, float logprob, std::vector<TokenLogprob> top, double t);
  void finish(Sequence& seq, const std::string& reason, double t, std::vector<FinishedRequest>& done);

  EngineConfig config;
  Runner& runner;
  const Tokenizer* tokenizer;
  BlockManager blocks;
  Scheduler scheduler;
  RunStats stats;
  Clock::time_point start;
  std::unordered_map<int64_t, std::unique_ptr<RequestState>> requests;
  // Requests finished this step: their sequences stay referenced by the scheduler until
  // remove_finished() frees their blocks.
  std::vector<std::unique_ptr<RequestState>> finished_requests;
  int64_t next_request = 0, next_seq = 0;
  Batch batch;
  StepOutput out;
};

void Engine::Impl::check_request(EngineRequest& request) const {
  const int prompt_len = static_cast<int>(request.prompt_ids.size());
  const std::string who = "request " + request.id;
  SamplingParams& p = request.params;
  NVLLM_CHECK(prompt_len > 0, who, ": the prompt is empty; give at least one token");
  NVLLM_CHECK(prompt_len + 1 <= config.max_model_len, who, ": prompt of ", prompt_len,
              " tokens does not fit --max-model-len ", config.max_model_len,
              " (the prompt and at least one generated token must fit); shorten the prompt or raise --max-model-len");
  const int need = blocks.blocks_for(prompt_len);
  NVLLM_CHECK(need <= blocks.num_blocks(), who, ": prompt of ", prompt_len, " tokens needs ", need, " KV blocks of ",
              blocks.block_size(), " tokens but the whole cache has ", blocks.num_blocks(),
              "; raise --num-kv-blocks (or GPU memory) or shorten the prompt");
  NVLLM_CHECK(config.chunked_prefill || prompt_len <= config.max_num_batched_tokens, who, ": prompt of ", prompt_len,
              " tokens exceeds --max-num-batched-tokens ", config.max_num_batched_tokens,
              " with --chunked-prefill off (a prompt must fit one step); raise the budget or turn chunked prefill on");
  NVLLM_CHECK(p.n >= 1, who, ": n = ", p.n, "; must be at least 1");
  NVLLM_CHECK(p.max_tokens >= 1, who, ": max_tokens = ", p.max_tokens, "; must be at least 1");
  // What the context leaves: the request then finishes with "length" at max_model_len.
  p.max_tokens = std::min(p.max_tokens, config.max_model_len - prompt_len);
}

void Engine::Impl::add_request(EngineRequest request) {
  check_request(request);
  const int prompt_len = static_cast<int>(request.prompt_ids.size());

  auto state = std::make_unique<RequestState>();
  state->id = std::move(request.id);
  state->params = std::move(request.params);
  state->arrival_s = now_s();
  const int64_t key = next_request++;
  // What else than max_tokens can end it, by the stop checks of check_stop (stop strings need
  // the text, so only with a tokenizer): the scheduler plans such sequences at an estimate.
  const SamplingParams& sp = state->params;
  const bool may_stop_early =
      (!sp.ignore_eos && !config.eos_token_ids.empty()) || !sp.stop_token_ids.empty() ||
      (tokenizer && std::any_of(sp.stop.begin(), sp.stop.end(), [](const std::string& s) { return !s.empty(); }));
  for (int i = 0; i < state->params.n; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->id = next_seq++;
    seq->request = key;
    seq->sample_index = i;
    seq->parent = i > 0 ? state->seqs[0].get() : nullptr;
    seq->params = &state->params;
    seq->seed = sequence_seed(state->params.seed, static_cast<uint32_t>(i));
    seq->priority = request.priority;
    seq->token_ids = request.prompt_ids;
    seq->prompt_len = prompt_len;
    seq->may_stop_early = may_stop_early;
    if (tokenizer) {
      seq->detokenizer =
          std::make_unique<IncrementalDetokenizer>(*tokenizer, seq->prompt(), state->params.skip_special_tokens);
    }
    state->seqs.push_back(std::move(seq));
  }
  for (auto& seq : state->seqs) scheduler.add(seq.get());
  requests.emplace(key, std::move(state));
}

void Engine::Impl::build_batch(const SchedulerOutput& so) {
  Batch& b = batch;
  const int bs = blocks.block_size();
  const size_t n = so.scheduled.size();
  b.token_ids.clear();
  b.positions.clear();
  b.slot_mapping.clear();
  b.query_start.assign(1, 0);
  b.context_lens.clear();
  b.sample.clear();
  b.params.clear();
  b.prompt_tokens.clear();
  b.output_tokens.clear();
  b.seeds.clear();
  b.sample_step.clear();
  b.suppress_eos.clear();
  b.max_blocks_per_seq = 0;
  for (const ScheduledSeq& s : so.scheduled) {
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, static_cast<int32_t>(s.seq->table.blocks.size()));
  }
  b.block_tables.assign(n * b.max_blocks_per_seq, -1);
  b.decode_only = true;
  for (size_t i = 0; i < n; ++i) {
    const Sequence& seq = *so.scheduled[i].seq;
    const int first = seq.num_computed, num_new = so.scheduled[i].num_new;
    for (int pos = first; pos < first + num_new; ++pos) {
      b.token_ids.push_back(seq.token_ids[pos]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(seq.table.blocks[pos / bs] * bs + pos % bs);
    }
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(first + num_new);
    std::copy(seq.table.blocks.begin(), seq.table.blocks.end(), b.block_tables.begin() + i * b.max_blocks_per_seq);
    b.sample.push_back(so.scheduled[i].sample ? 1 : 0);
    b.params.push_back(seq.params);
    b.prompt_tokens.push_back(seq.prompt());
    b.output_tokens.push_back(seq.output());
    b.seeds.push_back(seq.seed);
    b.sample_step.push_back(seq.num_output());
    b.suppress_eos.push_back(seq.num_output() < seq.params->min_tokens ? 1 : 0);
    b.decode_only = b.decode_only && num_new == 1;
  }
  b.eos_token_ids = config.eos_token_ids;
}

std::vector<FinishedRequest> Engine::Impl::step() {
  std::vector<FinishedRequest> done;
  if (scheduler.empty()) return done;
  const SchedulerOutput so = scheduler.schedule();
  for (Sequence* seq : so.out_of_cache) finish(*seq, "length", now_s(), done);
  if (so.scheduled.empty()) {
    if (so.out_of_cache.empty()) throw std::logic_error("Engine::step: unfinished sequences but nothing schedulable");
    finished_requests.clear();
    stats.elapsed_s = now_s();
    return done;
  }
  build_batch(so);
  runner.execute(batch, out);
  ++stats.steps;
  stats.computed_tokens += so.num_tokens;
  stats.scheduled_seqs += static_cast<int64_t>(so.scheduled.size());
  const double t = now_s();
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    Sequence& seq = *so.scheduled[i].seq;
    seq.num_computed += so.scheduled[i].num_new;
    seq.num_new = 0;
    if (!so.scheduled[i].sample) continue;
    const int32_t token = out.token_ids.at(i);
    if (token < 0) throw std::logic_error("Runner::execute returned no token for a sequence that asked for one");
    append_token(seq, token, i < out.logprobs.size() ? out.logprobs[i] : 0.0f,
                 i < out.top_logprobs.size() ? out.top_logprobs[i] : std::vector<TokenLogprob>{}, t);
    const std::string reason = check_stop(seq, token);
    if (!reason.empty()) finish(seq, reason, t, done);
  }
  scheduler.remove_finished();
  finished_requests.clear();
  stats.preemptions = scheduler.num_preemptions();
  stats.recomputed_tokens = scheduler.num_recomputed_tokens();
  stats.peak_blocks_in_use = blocks.counters().peak_blocks_in_use;
  stats.elapsed_s = now_s();
  return done;
}

// Appends the token's text and returns why the sequence stops now ("" if it goes on).
std::string Engine::Impl::check_stop(Sequence& seq, int32_t token) {
  // Stop checks, in vLLM's order; eos and stop ids only once min_tokens are out.
  const SamplingParams& p = *seq.params;
  const bool may_stop = seq.num_output() >= p.min_tokens;
  std::string reason;
  bool stop_id = false;
  const bool eos = !p.ignore_eos && contains(config.eos_token_ids, token);
  if (may_stop && (eos || contains(p.stop_token_ids, token))) {
    reason = "stop";
    stop_id = true;
    if (!eos) seq.stop_token_id = token;  // vLLM reports no stop reason for eos
  }
  // The text: a stop token's own text is left out unless asked for; stop strings are cut.
  if (seq.detokenizer && (!stop_id || p.include_stop_str_in_output)) {
    const size_t before = seq.text.size();
    seq.text += seq.detokenizer->push(token);
    if (reason.empty() && may_stop) {
      size_t cut = std::string::npos, cut_len = 0;
      const std::string* matched = nullptr;
      for (const std::string& stop : p.stop) {
        if (stop.empty()) continue;
        const size_t from = before >= stop.size() - 1 ? before - (stop.size() - 1) : 0;
        const size_t pos = seq.text.find(stop, from);
        if (pos < cut) {
          cut = pos;
          cut_len = stop.size();
          matched = &stop;
        }
      }
      if (cut != std::string::npos) {
        seq.text.resize(cut + (p.include_stop_str_in_output ? cut_len : 0));
        reason = "stop";
        seq.stop_string = *matched;
      }
    }
  }
  if (reason.empty() && seq.num_output() >= p.max_tokens) reason = "length";
  if (reason.empty() && seq.num_tokens() >= config.max_model_len) reason = "length";
  return reason;
}

void Engine::Impl::append_token(Sequence& seq, int32_t token, float logprob, std::vector<TokenLogprob> top,
                                double t) {
  seq.token_ids.push_back(token);
  ++stats.output_tokens;
  if (seq.first_token_s < 0) {
    seq.first_token_s = t;
    ++stats.started_seqs;
  }
  if (seq.params->logprobs) {
    seq.logprobs.push_back(logprob);
    seq.top_logprobs.push_back(std::move(top));
  }
}

void Engine::Impl::finish(Sequence& seq, const std::string& reason, double t, std::vector<FinishedRequest>& done) {
  seq.status = SequenceStatus::kFinished;
  seq.finish_reason = reason;
  seq.finish_s = t;
  const auto it = requests.find(seq.request);
  RequestState& req = *it->second;
  if (++req.num_finished < static_cast<int>(req.seqs.size())) return;

  FinishedRequest r;
  r.id = req.id;
  r.prompt_tokens = req.seqs[0]->prompt_len;
  r.cached_tokens = std::max(0, req.seqs[0]->num_cached);
  r.arrival_s = req.arrival_s;
  r.finish_s = t;
  r.first_token_s = t;
  for (auto& s : req.seqs) {
    if (s->first_token_s >= 0) r.first_token_s = std::min(r.first_token_s, s->first_token_s);
    const int n_out = s->num_output();
    if (n_out > 1) stats.tpot_s.push_back((s->finish_s - s->first_token_s) / (n_out - 1));
    FinishedSequence fs;
    fs.token_ids.assign(s->output().begin(), s->output().end());
    fs.text = std::move(s->text);
    fs.finish_reason = s->finish_reason;
    fs.stop_string = s->stop_string;
    fs.stop_token_id = s->stop_token_id;
    fs.logprobs = std::move(s->logprobs);
    fs.top_logprobs = std::move(s->top_logprobs);
    r.outputs.push_back(std::move(fs));
  }
  ++stats.requests;
  stats.prompt_tokens += r.prompt_tokens;
  stats.cached_tokens += r.cached_tokens;
  stats.ttft_s.push_back(r.first_token_s - r.arrival_s);
  stats.e2e_s.push_back(r.finish_s - r.arrival_s);
  done.push_back(std::move(r));
  // The sequences stay alive until the scheduler drops them (remove_finished) this step.
  finished_requests.push_back(std::move(it->second));
  requests.erase(it);
}

Engine::Engine(const EngineConfig& config, Runner& runner, const Tokenizer* tokenizer) {
  NVLLM_CHECK(config.max_num_seqs >= 1, "--max-num-seqs ", config.max_num_seqs, ": must be at least 1");
  NVLLM_CHECK(config.max_num_batched_tokens >= 1, "--max-num-batched-tokens ", config.max_num_batched_tokens,
              ": must be at least 1");
  NVLLM_CHECK(config.max_model_len >= 2, "--max-model-len ", config.max_model_len, ": must be at least 2");
  impl_ = std::make_unique<Impl>(config, runner, tokenizer);
}
Engine::~Engine() = default;

void Engine::check_request(EngineRequest& request) const { impl_->check_request(request); }
void Engine::add_request(EngineRequest request) { impl_->add_request(std::move(request)); }
std::vector<FinishedRequest> Engine::step() { return impl_->step(); }
bool Engine::has_unfinished() const { return !impl_->scheduler.empty(); }
const RunStats& Engine::stats() const { return impl_->stats; }
const BlockManager& Engine::block_manager() const { return impl_->blocks; }
const Scheduler& Engine::scheduler() const { return impl_->scheduler; }
double Engine::now_s() const { return impl_->now_s(); }

}  // namespace nvllm
