// nvllm generate: JSONL prompts in, JSONL completions out, one line per request as it finishes.
#include <csignal>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <set>

#include <unistd.h>

#include "cmd/nvllm/commands.h"
#include "cmd/nvllm/model_setup.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/cache_trace.h"
#include "engine/prefix_tree.h"
#include "io/jsonl_writer.h"
#include "io/progress.h"
#include "io/request.h"
#include "io/request_feeder.h"
#include "io/response.h"

namespace nvllm {
namespace {

struct GenerateFlags {
  ModelFlags model;
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
};

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) { g_interrupted = 1; }

CLI::App* add_generate(CLI::App& app, GenerateFlags& f) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate completions for a JSONL file of prompts");
  cmd->footer(
      "Input: one JSON object per line, {\"prompt\": \"...\"} or {\"prompt_token_ids\": [...]}, with optional\n"
      "\"id\" and sampling fields (max_tokens, temperature, top_p, top_k, min_p, seed, stop, stop_token_ids,\n"
      "ignore_eos, min_tokens, presence_penalty, frequency_penalty, repetition_penalty, logprobs, n), or the\n"
      "OpenAI batch form {\"custom_id\", \"method\", \"url\", \"body\"}. Output: one line per request with id,\n"
      "text, token_ids, finish_reason, usage and timing; a bad line becomes {\"id\", \"error\"} and the rest\n"
      "goes on. Exit status: 0 when every request completed, 3 when some lines were errors, 1 on a fatal\n"
      "error, 130 when interrupted (rerun with --resume to finish).");
  add_model_flags(*cmd, f.model);
  cmd->add_option("--input", f.input, "Prompts, JSONL; - reads standard input")->capture_default_str();
  cmd->add_option("--output", f.output, "Completions, JSONL; - writes standard output")->capture_default_str();
  cmd->add_flag("--ordered", f.ordered, "Write output lines in input order (default: as requests finish)");
  cmd->add_flag("--resume", f.resume,
                "Skip requests whose id is already in --output and append the rest (continues an interrupted job)");
  cmd->add_option("--stats-json", f.stats_json, "Also write the run summary as JSON to this file");
  cmd->add_option("--temperature", f.temperature, "Default temperature for requests that set none (0: greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-p", f.top_p, "Default top_p")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--top-k", f.top_k, "Default top_k (0: off)")->capture_default_str();
  cmd->add_option("--max-tokens", f.max_tokens, "Default max_tokens")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--allow-unknown-fields", f.allow_unknown_fields, "Ignore unknown request fields instead of failing the line");
  cmd->add_flag("--no-progress", f.no_progress, "No progress bar (it is shown only when stderr is a terminal)");
  cmd->add_flag("-q,--quiet", f.quiet, "Print only errors on stderr");
  cmd->add_option("--schedule", f.schedule,
                  "Admission order: fcfs (input order) or prefix-aware (requests sharing the longest prompt prefix "
                  "together, for more prefix-cache hits; output still keyed by id)")
      ->check(CLI::IsMember({"fcfs", "prefix-aware"}))
      ->capture_default_str();
  cmd->add_option("--cache-trace", f.cache_trace,
                  "Write one JSON line per engine step (KV blocks used, hits, evictions, preemptions, queues); "
                  "summarise it with nvllm inspect-cache --trace");
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

int run_generate(const GenerateFlags& f) {
  if (f.quiet) log_threshold() = LogLevel::kError;
  NVLLM_CHECK(!f.resume || f.output != "-", "--resume needs --output FILE (it reads what an earlier run wrote)");

  ParseOptions options;
  options.allow_unknown_fields = f.allow_unknown_fields;
  options.defaults.temperature = f.temperature;
  options.defaults.top_p = f.top_p;
  options.defaults.top_k = f.top_k;
  options.defaults.max_tokens = f.max_tokens;
  options.defaults.seed = f.model.seed;
  std::set<std::string> done_ids;
  if (f.resume) done_ids = read_existing_ids(f.output);

  LoadedModel model = load_model(f.model);
  Engine engine(model.engine, *model.runner, model.tokenizer.get());
  JsonlWriter writer(f.output, {.append = f.resume, .ordered = f.ordered});
  const std::string model_name = std::filesystem::path(f.model.model).filename().string();

  // Requests stream in as the scheduler needs them (io/request_feeder.h): bounded memory on
  // any input size. Bad lines become error records as they are read.
  std::ifstream file_in;
  if (f.input != "-") {
    file_in.open(f.input);
    NVLLM_CHECK(file_in, "--input ", f.input, ": cannot open the file");
  }
  RequestReader reader(f.input == "-" ? std::cin : file_in, options);
  RequestFeeder feeder(reader, *model.tokenizer, engine, writer,
                       {.window = std::max(1024, 2 * model.engine.max_num_seqs),
                        .prefix_aware = f.schedule == "prefix-aware",
                        .vocab_size = model.config.vocab_size,
                        .skip_ids = f.resume ? &done_ids : nullptr});
  feeder.top_up();
  std::unique_ptr<std::ofstream> trace;
  if (!f.cache_trace.empty()) {
    trace = std::make_unique<std::ofstream>(f.cache_trace);
    NVLLM_CHECK(*trace, "--cache-trace ", f.cache_trace, ": cannot write the file");
  }

  std::signal(SIGINT, on_sigint);
  ProgressBar progress(0, stderr, !f.no_progress && !f.quiet && isatty(2));
  int64_t finished = 0;
  while (engine.has_unfinished() && !g_interrupted) {
    for (const FinishedRequest& done : engine.step()) {
      const RequestFeeder::InFlight r = feeder.take(done.id);
      writer.write(r.index, result_record(to_result(r.request, done, *model.tokenizer, model_name)));
      ++finished;
    }
    feeder.top_up();
    if (feeder.exhausted()) progress.set_total(feeder.queued());
    if (trace) *trace << to_json(trace_row(engine, engine.stats().steps)).dump() << '\n';
    progress.update(finished, engine.stats().output_tokens);
  }
  progress.finish();
  writer.flush_held();
  std::signal(SIGINT, SIG_DFL);

  const RunStats& stats = engine.stats();
  if (!f.quiet) std::fprintf(stderr, "%s\n", stats.summary().c_str());
  if (!f.stats_json.empty()) {
    nlohmann::json j = stats.to_json();
    j["device"] = model.device_name;
    j["model"] = f.model.model;
    j["errors"] = feeder.errors();
    j["interrupted"] = static_cast<bool>(g_interrupted);
    std::ofstream out(f.stats_json);
    NVLLM_CHECK(out, "--stats-json ", f.stats_json, ": cannot write the file");
    out << j.dump(2) << "\n";
  }
  if (f.resume) log_info("--resume: ", feeder.skipped(), " requests were already in ", f.output);
  if (g_interrupted) {
    std::fprintf(stderr, "nvllm: interrupted: %lld of %lld requests written; rerun with --resume to finish\n",
                 static_cast<long long>(finished), static_cast<long long>(feeder.queued()));
    return 130;
  }
  if (const int64_t errors = feeder.errors(); errors > 0) {
    log_warn(errors, " of ", feeder.records(), " requests failed; their lines in the output hold the error");
    return 3;
  }
  return 0;
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
