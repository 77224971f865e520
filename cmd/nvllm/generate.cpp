// nvllm generate: JSONL prompts in, JSONL completions out, one line per request as it finishes.
#include <algorithm>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <set>

#include <unistd.h>

#include "analysis/cache_trace.h"
#include "cmd/nvllm/chat_setup.h"
#include "cmd/nvllm/commands.h"
#include "cmd/nvllm/cli_checks.h"
#include "cmd/nvllm/generate_input.h"
#include "cmd/nvllm/generation_defaults.h"
#include "cmd/nvllm/model_source.h"
#include "cmd/nvllm/model_setup.h"
#include "cmd/nvllm/shard_flags.h"
#include "core/error.h"
#include "core/log.h"
#include "io/jsonl_writer.h"
#include "io/progress.h"
#include "io/request.h"
#include "io/request_feeder.h"
#include "io/response.h"
#include "io/resume.h"
#include "io/shard.h"

namespace nvllm {
namespace {

struct GenerateFlags {
  ModelFlags model;
  ShardFlags shard;
  ChatFlags chat;
  std::string input = "-";
  std::string output = "-";
  bool ordered = false;
  bool resume = false;
  std::string stats_json;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  int max_tokens = 256;
  bool allow_unknown_fields = false;
  bool no_progress = false;
  bool quiet = false;
  std::string schedule = "fcfs";
  std::string cache_trace;
  // The sampling flags as options: one given on the command line overrides generation_config.json.
  CLI::Option* temperature_flag = nullptr;
  CLI::Option* top_p_flag = nullptr;
  CLI::Option* top_k_flag = nullptr;
  CLI::Option* max_tokens_flag = nullptr;
  bool allow_empty = false;
  bool allow_duplicate_ids = false;
  double progress_interval_s = 30;
};

// The signal that interrupted the run (SIGINT or SIGTERM: both end it the same way), 0 if none.
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int signal) { g_interrupted = signal; }

CLI::App* add_generate(CLI::App& app, GenerateFlags& f) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate completions for a JSONL file of prompts");
  cmd->footer(
      "Input: one JSON object per line, {\"prompt\": \"...\"} or {\"prompt_token_ids\": [...]}, with optional\n"
      "\"id\" and sampling fields (max_tokens, temperature, top_p, top_k, min_p, seed, stop, stop_token_ids,\n"
      "ignore_eos, min_tokens, presence_penalty, frequency_penalty, repetition_penalty, logprobs, n), or the\n"
      "OpenAI batch form {\"custom_id\", \"method\", \"url\", \"body\"}. Output: one line per request with id,\n"
      "text, token_ids, finish_reason, usage and timing; a bad line becomes {\"id\", \"error\"} and the rest\n"
      "goes on. Exit status: 0 when every request completed, 3 when some lines were errors, 1 on a fatal\n"
      "error (before anything runs when a path or the input is wrong), 2 on a command-line error or an\n"
      "internal error, 130 when interrupted by SIGINT or SIGTERM (rerun with --resume to finish).");
  add_model_flags(*cmd, f.model);
  add_shard_flags(*cmd, f.shard);
  add_chat_flags(*cmd, f.chat, /*reasoning=*/true);
  cmd->add_option("--input", f.input, "Prompts, JSONL; - reads standard input")->capture_default_str();
  cmd->add_option("--output", f.output, "Completions, JSONL; - writes standard output")->capture_default_str();
  cmd->add_flag("--ordered", f.ordered, "Write output lines in input order (default: as requests finish)");
  cmd->add_flag("--resume", f.resume,
                "Continue an interrupted job: skip requests whose id already has a result in --output, run the "
                "rest and the ones that ended in an error record (fix their lines first), and append them");
  cmd->add_flag("--allow-empty", f.allow_empty, "Accept an input without requests (a warning and exit status 0)");
  cmd->add_flag("--allow-duplicate-ids", f.allow_duplicate_ids,
                "Run an input with a repeated id: the first runs, each repeat becomes an error record with "
                "\"duplicate_of\" (default: refuse the input)");
  cmd->add_option("--stats-json", f.stats_json, "Also write the run summary as JSON to this file");
  f.temperature_flag =
      cmd->add_option("--temperature", f.temperature,
                      "Default temperature for requests that set none (0: greedy); default: the model's "
                      "generation_config.json, else 1")
          ->check(number_at_least(0));
  f.top_p_flag =
      cmd->add_option("--top-p", f.top_p, "Default top_p, in (0, 1]; default: generation_config.json, else 1")
          ->check(number_in(0, 1, /*lo_exclusive=*/true));
  f.top_k_flag =
      cmd->add_option("--top-k", f.top_k, "Default top_k (0 or -1: off); default: generation_config.json, else 0")
          ->check(integer_at_least(-1));
  f.max_tokens_flag =
      cmd->add_option("--max-tokens", f.max_tokens,
                      "Default max_tokens; default: generation_config.json's max_new_tokens, else 256")
          ->check(integer_at_least(1));
  cmd->add_flag("--allow-unknown-fields", f.allow_unknown_fields, "Ignore unknown request fields instead of failing the line");
  cmd->add_flag("--no-progress", f.no_progress,
                "No progress (a bar when stderr is a terminal, else a plain line every --progress-interval)");
  cmd->add_option("--progress-interval", f.progress_interval_s,
                  "Seconds between progress lines when stderr is not a terminal (logs)")
      ->check(CLI::Range(0.0, 86400.0).description("a number of seconds from 0 to 86400"))
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", f.quiet, "Print only errors on stderr");
  cmd->add_option("--schedule", f.schedule,
                  "Admission order: fcfs (input order) or prefix-aware (requests sharing the longest prompt prefix "
                  "together, for more prefix-cache hits; output still keyed by id). The input is read a window of "
                  "requests at a time (1024, or 2 x --max-num-seqs x --data-parallel-size if more), so prefix-aware groups requests within "
                  "a window, not across the whole file")
      ->check(CLI::IsMember({"fcfs", "prefix-aware"}))
      ->capture_default_str();
  cmd->add_option("--cache-trace", f.cache_trace,
                  "Write one JSON line per engine step (KV blocks used, hits, evictions, preemptions, queues); "
                  "summarise it with nvllm inspect-cache --trace (one engine: not with --data-parallel-size > 1)");
  return cmd;
}

// What the engine gives back, in the output schema's terms.
RequestResult to_result(const Request& request, const FinishedRequest& done, const Tokenizer& tokenizer,
                        const std::string& model_name) {
  RequestResult r;
  r.id = request.id;
  r.line = request.line;
  r.openai_batch = request.openai_batch;
  r.prompt_tokens = done.prompt_tokens;
  r.cached_tokens = done.cached_tokens;
  r.ttft_s = done.first_token_s - done.arrival_s;
  r.e2e_s = done.finish_s - done.arrival_s;
  r.model = model_name;
  r.created_unix = static_cast<int64_t>(std::time(nullptr));
  const auto token_text = [&](int32_t id) { return tokenizer.decode(std::span<const int32_t>(&id, 1)); };
  for (const FinishedSequence& seq : done.outputs) {
    CompletionOutput out;
    out.text = seq.text;
    out.token_ids = seq.token_ids;
    out.finish_reason = seq.finish_reason;
    if (!seq.stop_string.empty()) out.stop_string = seq.stop_string;
    if (seq.stop_token_id >= 0) out.stop_token_id = seq.stop_token_id;
    if (request.params.logprobs) {
      std::vector<StepLogprobs> steps(seq.token_ids.size());
      for (size_t k = 0; k < seq.token_ids.size() && k < seq.logprobs.size(); ++k) {
        steps[k].chosen = {seq.token_ids[k], seq.logprobs[k], token_text(seq.token_ids[k])};
        if (k < seq.top_logprobs.size()) {
          for (const TokenLogprob& t : seq.top_logprobs[k]) {
            steps[k].top.push_back({t.token_id, t.logprob, token_text(t.token_id)});
          }
        }
      }
      out.logprobs = std::move(steps);
    }
    r.outputs.push_back(std::move(out));
  }
  return r;
}

// Step 1, read: every path this run writes is checked and the input read once for its checks
// and ids (not its requests, which step 2 reads again as the engine needs them); --resume
// reads what an earlier run finished.
struct Job {
  InputSource input;
  std::vector<InputLine> lines;  // every input line, in input order
  std::set<std::string> done;    // --resume: ids with a result in --output, not run again
  size_t failed = 0;             // --resume: ids whose record in --output is an error (run again)
  int64_t to_run = 0;            // lines this run writes a record for
  int64_t token_total = 0;       // output tokens their requests may produce (max_tokens * n)
  // The part of token_total asked by lines the run found bad (the checks do not parse requests):
  // the progress total is token_total - bad_line_tokens.
  int64_t bad_line_tokens = 0;

  int64_t output_tokens_of(int64_t line) const {  // InputLine::output_tokens of that line
    const auto it = std::lower_bound(lines.begin(), lines.end(), line,
                                     [](const InputLine& l, int64_t n) { return l.line < n; });
    return it != lines.end() && it->line == line ? it->output_tokens : 0;
  }

  std::vector<std::string> ids() const {  // every input id, in input order (--resume --ordered)
    std::vector<std::string> ids;
    ids.reserve(lines.size());
    for (const InputLine& l : lines) ids.push_back(l.id);
    return ids;
  }
};

// Whether this run writes the line's record: its shard's, not done by an earlier run. A repeated
// id's line is never "done": its error record is dropped by --resume and written again.
bool runs(const ShardSpec& shard, const std::set<std::string>& done, const std::string& id, int64_t line,
          int64_t duplicate_of) {
  if (shard.sharded() && shard_of(shard, id, line) != shard.index) return false;
  return duplicate_of > 0 || !done.contains(id);
}

void apply_resume(const GenerateFlags& f, const ShardSpec& shard, Job& job) {
  std::set<std::string> ids;  // every input id: another shard's ids in --output are named as such
  for (const InputLine& l : job.lines) ids.insert(l.id);
  ExistingOutput existing = read_existing_output(f.output, ids, f.input);
  check_resumed_ids(shard, existing.done, f.output);
  if (!existing.failed.empty()) drop_error_records(f.output);
  job.done = std::move(existing.done);
  job.failed = existing.failed.size();
}

Job read_job(const GenerateFlags& f, const ShardSpec& shard, const ParseOptions& options) {
  NVLLM_CHECK(!f.resume || f.output != "-", "--resume needs --output FILE (it reads what an earlier run wrote)");
  const std::pair<const std::string&, const char*> outputs[] = {
      {f.output, "--output"}, {f.stats_json, "--stats-json"}, {f.cache_trace, "--cache-trace"}};
  for (const auto& [path, flag] : outputs) {
    check_not_input(path, flag, f.input);
    check_output_path(path, flag);
  }
  const InputOptions input{.path = f.input, .parse = options, .allow_empty = f.allow_empty,
                           .allow_duplicate_ids = f.allow_duplicate_ids};
  Job job;
  job.input = open_input(input);
  job.lines = scan_input(job.input, input);
  if (f.resume) apply_resume(f, shard, job);
  int64_t in_shard = 0;
  for (const InputLine& l : job.lines) {
    in_shard += !shard.sharded() || shard_of(shard, l.id, l.line) == shard.index;
    if (!runs(shard, job.done, l.id, l.line, l.duplicate_of)) continue;
    ++job.to_run;
    job.token_total += l.output_tokens;
  }
  if (f.resume) {
    log_info("--resume: ", in_shard - job.to_run, " requests already done in ", f.output, "; ",
             job.failed, " that ended in an error run again; ",
             job.to_run, " to go");
  }
  return job;
}

// The engine request of a good line: a line that cannot run throws, and becomes its error record.
EngineRequest engine_request(const Request& request, const LoadedModel& model, const ChatSetup& chat) {
  EngineRequest er;
  er.params = request.params;
  er.priority = request.priority;
  check_request_support(request, model.config.vocab_size, model.device);
  if (request.chat) {
    er.prompt_ids = chat.prompt_ids(*request.chat, *model.tokenizer);
  } else if (request.prompt) {
    er.prompt_ids = model.tokenizer->encode(*request.prompt, /*add_special_tokens=*/true);
  } else {
    er.prompt_ids = request.prompt_token_ids;
    for (int32_t id : er.prompt_ids) {
      NVLLM_CHECK(id < model.config.vocab_size, "field \"prompt_token_ids\": id ", id,
                  " is outside the model's vocabulary (", model.config.vocab_size, " tokens)");
    }
  }
  return er;
}

// Step 2, feed and loop: the feeder reads, tokenizes and queues requests as the engine needs
// them (a line that cannot run becomes its error record right away); the engine is stepped
// until every request is out or a signal arrives, each finished request written as it comes.
// Returns the number of requests written.
int64_t run_loop(const GenerateFlags& f, DataParallelEngine& engine, RequestFeeder& feeder, const Job& job, JsonlWriter& writer,
                 const std::function<OrderedJson(const Request&, const FinishedRequest&)>& record) {
  std::unique_ptr<std::ofstream> trace;
  if (!f.cache_trace.empty()) {
    trace = std::make_unique<std::ofstream>(f.cache_trace);
    NVLLM_CHECK(*trace, "--cache-trace ", f.cache_trace, ": cannot write the file");
  }
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  const bool show = !f.no_progress && !f.quiet;
  ProgressBar bar(job.to_run, stderr, show && isatty(2));
  bar.set_token_total(job.token_total);
  ProgressLog log(job.to_run, job.token_total, f.progress_interval_s, stderr, show && !isatty(2) && job.to_run > 0);
  int64_t finished = 0;
  feeder.top_up();
  while (engine.has_unfinished() && !g_interrupted) {
    for (const FinishedRequest& done : engine.step()) {
      const RequestFeeder::InFlight r = feeder.take(done.id);
      writer.write(r.index, record(r.request, done));
      ++finished;
    }
    feeder.top_up();
    bar.set_token_total(job.token_total - job.bad_line_tokens);
    log.set_token_total(job.token_total - job.bad_line_tokens);
    if (trace) *trace << to_json(trace_row(*engine.single(), engine.stats().steps)).dump() << '\n';
    // Records written, error records included, so that the count ends at the total.
    bar.update(finished + feeder.errors(), engine.stats().output_tokens);
    log.update(finished + feeder.errors(), engine.stats().output_tokens);
  }
  bar.finish();
  log.finish(finished + feeder.errors(), engine.stats().output_tokens);
  writer.flush_held();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  return finished;
}

// Step 4, report: the summary, --stats-json, and the exit status.
int report(const GenerateFlags& f, const LoadedModel& model, const DataParallelEngine& engine, const Job& job, int64_t errors,
           int64_t finished) {
  const RunStats& stats = engine.stats();
  if (!f.quiet) std::fprintf(stderr, "%s\n", stats.summary().c_str());
  if (!f.stats_json.empty()) {
    nlohmann::json j = stats.to_json();
    j["device"] = model.device_name;
    j["model"] = f.model.model;
    j["admission"] = f.model.admission;
    j["errors"] = errors;
    j["interrupted"] = g_interrupted != 0;
    std::ofstream out(f.stats_json);
    NVLLM_CHECK(out, "--stats-json ", f.stats_json, ": cannot write the file");
    out << j.dump(2) << "\n";
  }
  if (g_interrupted) {
    std::fprintf(stderr, "nvllm: interrupted (%s): %lld of %lld requests written; rerun with --resume to finish\n",
                 g_interrupted == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<long long>(finished),
                 static_cast<long long>(job.to_run));
    return 130;
  }
  if (f.resume && f.ordered) sort_records(f.output, job.ids());
  if (errors > 0) {
    log_warn(errors, " of ", job.to_run, " requests failed; their lines in the output hold the error");
    return 3;
  }
  return 0;
}

// The request defaults: the flags' values, then generation_config.json's, then the flags given
// on the command line again (they win).
SamplingParams request_defaults(const GenerateFlags& f, const std::string& model_dir) {
  SamplingParams d;
  d.temperature = f.temperature;
  d.top_p = f.top_p;
  d.top_k = f.top_k < 0 ? 0 : f.top_k;
  d.max_tokens = f.max_tokens;
  d.seed = f.model.seed;
  const std::string said = apply_generation_config(f.model.generation_config, model_dir, d);
  if (f.temperature_flag->count()) d.temperature = f.temperature;
  if (f.top_p_flag->count()) d.top_p = f.top_p;
  if (f.top_k_flag->count()) d.top_k = f.top_k < 0 ? 0 : f.top_k;
  if (f.max_tokens_flag->count()) d.max_tokens = f.max_tokens;
  if (!said.empty()) log_info(said);
  return d;
}

int run_generate(const GenerateFlags& flags) {
  if (flags.quiet) log_threshold() = LogLevel::kError;
  check_model_flags(flags.model);
  GenerateFlags f = flags;
  f.model = resolve_model_paths(flags.model);
  const ShardSpec shard = resolve_shard(f.shard);
  for (std::string* path : {&f.output, &f.stats_json, &f.cache_trace}) *path = shard_output_path(*path, shard);
  ParseOptions options;
  options.allow_unknown_fields = f.allow_unknown_fields;
  options.defaults = request_defaults(f, f.model.model);
  const ChatSetup chat(f.chat, f.model.model);
  NVLLM_CHECK(f.cache_trace.empty() || f.model.data_parallel_size == 1, "--cache-trace: traces one engine's KV "
              "cache; not with --data-parallel-size ", f.model.data_parallel_size);
  Job job = read_job(f, shard, options);
  if (job.to_run == 0) {  // an allowed empty input, or a resume with nothing left
    { JsonlWriter writer(f.output, {.append = f.resume}); }
    if (f.resume && f.ordered) sort_records(f.output, job.ids());
    return 0;
  }

  LoadedModel model = load_model(f.model);
  DataParallelEngine engine(model.engine, model.runner_ptrs(), model.tokenizer.get());
  const std::string model_name = !f.model.served_model_name.empty()
                                     ? f.model.served_model_name
                                     : std::filesystem::path(flags.model.model).filename().string();
  int64_t finished = 0, errors = 0;
  {
    JsonlWriter writer(f.output, {.append = f.resume, .ordered = f.ordered});
    RequestReader reader(*job.input.stream, options);
    RequestFeeder feeder(reader, engine, writer,
                         {.window = std::max(1024, 2 * engine.size() * model.engine.max_num_seqs),
                          .prefix_aware = f.schedule == "prefix-aware",
                          .keep = [&](const ParsedLine& l) {
                            const bool run = runs(shard, job.done, id_to_string(l.id), l.line, l.duplicate_of);
                            if (run && !l.request) job.bad_line_tokens += job.output_tokens_of(l.line);
                            return run;
                          },
                          .prepare = [&](const Request& r, int64_t) { return engine_request(r, model, chat); }});
    finished = run_loop(f, engine, feeder, job, writer, [&](const Request& request, const FinishedRequest& done) {
      return result_record(chat.answer(request, to_result(request, done, *model.tokenizer, model_name)));
    });
    errors = feeder.errors();
  }  // the writer closes its file before report() may rewrite it (--resume --ordered)
  return report(f, model, engine, job, errors, finished);
}

}  // namespace

Command make_generate_command() {
  auto flags = std::make_shared<GenerateFlags>();
  Command c;
  c.add_fn = [flags](CLI::App& app) { return add_generate(app, *flags); };
  c.run = [flags] { return run_generate(*flags); };
  return c;
}

}  // namespace nvllm
