// nvllm inspect-cache: what the paged KV cache and its prefix cache will do with a workload
// (a replay of the real scheduler and block manager, no model run), or did (a --trace file).
#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>

#include "cmd/nvllm/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/cache_trace.h"
#include "engine/engine.h"
#include "engine/prefix_tree.h"
#include "io/request.h"
#include "model/config.h"
#include "runtime/device.h"
#include "runtime/replay_runner.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {
namespace {

struct InspectFlags {
  std::string model;
  std::string input;
  std::string trace;
  std::string plot;
  std::string cache_trace;
  int assume_output_len = 0;
  int block_size = 16;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int max_model_len = 0;
  double gpu_memory_gib = 0;
  double gpu_memory_utilization = 0.9;
  int num_kv_blocks = 0;
  std::string dtype = "bfloat16";
  std::string kv_cache_dtype = "auto";  // auto (= dtype) | bfloat16 | fp8 | fp8_e4m3
  std::string order = "both";
  bool json = false;
  bool all_requests = false;
  bool allow_unknown_fields = false;
};

struct Workload {
  std::vector<EngineRequest> requests;  // input order, prompts tokenized
  std::vector<int64_t> lines;
  int64_t bad_lines = 0;
};

struct ReplayResult {
  std::vector<FinishedRequest> finished;  // input order
  std::vector<CacheTraceRow> trace;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  double hit_rate() const { return prompt_tokens ? double(cached_tokens) / prompt_tokens : 0.0; }
};

Workload read_workload(const InspectFlags& f, const Tokenizer& tokenizer, const ModelConfig& config) {
  std::ifstream in(f.input);
  NVLLM_CHECK(in, "--input ", f.input, ": cannot open the file");
  ParseOptions options;
  options.allow_unknown_fields = f.allow_unknown_fields;
  Workload w;
  for (const ParsedLine& line : read_requests(in, options)) {
    if (!line.request) {
      log_warn(f.input, ": ", line.error, " (left out of the replay)");
      ++w.bad_lines;
      continue;
    }
    EngineRequest r;
    r.id = std::to_string(w.requests.size());
    r.params = line.request->params;
    if (f.assume_output_len > 0) r.params.max_tokens = f.assume_output_len;
    r.prompt_ids = line.request->prompt ? tokenizer.encode(*line.request->prompt, true) : line.request->prompt_token_ids;
    w.requests.push_back(std::move(r));
    w.lines.push_back(line.line);
  }
  NVLLM_CHECK(!w.requests.empty(), "--input ", f.input, ": no request to replay");
  return w;
}

// An ordinary token that ends no request, so that every replayed request runs to max_tokens.
int32_t neutral_token(const Workload& w, const ModelConfig& config) {
  std::set<int32_t> avoid(config.eos_token_ids.begin(), config.eos_token_ids.end());
  for (const EngineRequest& r : w.requests) avoid.insert(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end());
  int32_t token = 0;
  while (avoid.count(token)) ++token;
  return token;
}

ReplayResult replay(const Workload& w, const std::vector<size_t>& order, const EngineConfig& config, int num_blocks,
                    int32_t token) {
  ReplayRunner runner(num_blocks, token);
  Engine engine(config, runner, nullptr);
  for (size_t i : order) {
    EngineRequest r = w.requests[i];
    r.params.stop.clear();  // no text in a replay; lengths come from max_tokens
    r.params.min_tokens = 0;
    engine.add_request(std::move(r));
  }
  ReplayResult result;
  result.finished.resize(w.requests.size());
  for (int64_t step = 1; engine.has_unfinished(); ++step) {
    for (FinishedRequest& done : engine.step()) {
      const size_t i = std::stoul(done.id);
      result.prompt_tokens += done.prompt_tokens;
      result.cached_tokens += done.cached_tokens;
      result.finished[i] = std::move(done);
    }
    result.trace.push_back(trace_row(engine, step));
  }
  return result;
}

// KV blocks that fit in the GPU after weights and an activation reserve, as the CUDA runner sizes
// its cache (it measures the reserve with a warm-up pass; this estimates it).
struct MemoryPlan {
  double gpu_bytes = 0;
  std::string source;
  double weight_bytes = 0;
  double reserve_bytes = 0;
  int blocks_fit = 0;
};

MemoryPlan plan_memory(const InspectFlags& f, const ModelConfig& c, double block_bytes, int dtype_bytes) {
  MemoryPlan p;
  if (f.gpu_memory_gib > 0) {
    p.gpu_bytes = f.gpu_memory_gib * double(1 << 30);
    p.source = "--gpu-memory";
  } else if (const GpuInfo gpu = query_gpu(); gpu.available) {
    p.gpu_bytes = static_cast<double>(gpu.total_bytes);
    p.source = gpu.name;
  } else {
    p.gpu_bytes = 80.0 * double(1 << 30);
    p.source = "assumed 80 GiB (no local GPU; set --gpu-memory)";
  }
  const double h = c.hidden_size;
  const double params = double(c.vocab_size) * h * (c.tie_word_embeddings ? 1 : 2) +
                        c.num_layers * (h * c.qkv_size() + double(c.q_size()) * h + 3.0 * h * c.intermediate_size + 2 * h);
  p.weight_bytes = params * dtype_bytes;
  // Activations of the largest step: a few hidden-sized buffers per token, the MLP's wide one,
  // and fp32 logits for every sequence that samples.
  p.reserve_bytes = double(f.max_num_batched_tokens) * (6 * h + 2 * c.intermediate_size + c.qkv_size()) * 4 +
                    double(f.max_num_seqs) * c.vocab_size * 4;
  const double usable = p.gpu_bytes * f.gpu_memory_utilization - p.weight_bytes - p.reserve_bytes;
  p.blocks_fit = usable > 0 ? static_cast<int>(usable / block_bytes) : 0;
  return p;
}

nlohmann::json request_rows(const Workload& w, const ReplayResult& r, int block_size) {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const FinishedRequest& done = r.finished[i];
    rows.push_back({{"line", w.lines[i]},
                    {"prompt_tokens", done.prompt_tokens},
                    {"blocks", (done.prompt_tokens + block_size - 1) / block_size},
                    {"cached_tokens", done.cached_tokens}});
  }
  return rows;
}

nlohmann::json replay_json(const ReplayResult& r) {
  const CacheTraceSummary s = summarize(r.trace);
  return {{"prompt_tokens", r.prompt_tokens}, {"cached_tokens", r.cached_tokens}, {"hit_rate", r.hit_rate()},
          {"peak_blocks", s.peak_blocks},     {"preemptions", s.preemptions},      {"evictions", s.evictions},
          {"steps", s.steps}};
}

void write_file(const std::string& path, const std::string& flag, const std::string& text) {
  std::ofstream out(path);
  NVLLM_CHECK(out, flag, " ", path, ": cannot write the file");
  out << text;
}

int run_trace_summary(const InspectFlags& f) {
  const std::vector<CacheTraceRow> rows = read_cache_trace(f.trace);
  const CacheTraceSummary s = summarize(rows);
  if (!f.plot.empty()) write_file(f.plot, "--plot", blocks_chart_svg(rows));
  if (f.json) {
    std::cout << nlohmann::json{{"steps", s.steps},
                                {"num_blocks", s.num_blocks},
                                {"peak_blocks", s.peak_blocks},
                                {"peak_step", s.peak_step},
                                {"mean_blocks", s.mean_blocks},
                                {"query_tokens", s.query_tokens},
                                {"hit_tokens", s.hit_tokens},
                                {"hit_rate", s.hit_rate()},
                                {"evictions", s.evictions},
                                {"preemptions", s.preemptions}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("trace %s: %lld steps, %d KV blocks\n", f.trace.c_str(), static_cast<long long>(s.steps), s.num_blocks);
  std::printf("blocks in use     peak %d (step %lld), mean %.1f\n", s.peak_blocks, static_cast<long long>(s.peak_step),
              s.mean_blocks);
  std::printf("prefix cache      %lld of %lld looked-up tokens hit (%.1f%%), %lld evictions\n",
              static_cast<long long>(s.hit_tokens), static_cast<long long>(s.query_tokens), 100 * s.hit_rate(),
              static_cast<long long>(s.evictions));
  std::printf("preemptions       %lld\n\n%s", static_cast<long long>(s.preemptions), blocks_chart_text(rows).c_str());
  return 0;
}

int run_inspect(const InspectFlags& f) {
  if (!f.trace.empty()) return run_trace_summary(f);
  NVLLM_CHECK(!f.model.empty() && !f.input.empty(), "inspect-cache needs --model DIR --input FILE, or --trace FILE");
  NVLLM_CHECK(f.block_size >= 1 && f.block_size <= 256 && (f.block_size & (f.block_size - 1)) == 0, "--block-size ",
              f.block_size, ": must be a power of two from 1 to 256");
  const ModelConfig config = load_model_config(f.model);
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(f.model);
  const Workload w = read_workload(f, *tokenizer, config);

  const int dtype_bytes = f.dtype == "float32" ? 4 : 2;
  const bool fp8_kv = f.kv_cache_dtype.starts_with("fp8");
  const std::string kv_dtype = fp8_kv ? "fp8_e4m3" : f.kv_cache_dtype == "auto" ? f.dtype : f.kv_cache_dtype;
  const int kv_bytes = fp8_kv ? 1 : kv_dtype == "float32" ? 4 : 2;
  const double kv_bytes_per_token = 2.0 * config.num_layers * config.kv_size() * kv_bytes;
  const double block_bytes = kv_bytes_per_token * f.block_size;
  const MemoryPlan memory = plan_memory(f, config, block_bytes, dtype_bytes);
  const int num_blocks = f.num_kv_blocks > 0 ? f.num_kv_blocks : memory.blocks_fit;
  NVLLM_CHECK(num_blocks > 0, "the weights and activations leave no room for a KV cache in ", memory.source,
              "; give more --gpu-memory");

  EngineConfig engine;
  engine.block_size = f.block_size;
  engine.max_num_seqs = f.max_num_seqs;
  engine.max_num_batched_tokens = f.max_num_batched_tokens;
  engine.max_model_len = f.max_model_len > 0 ? f.max_model_len : config.max_position_embeddings;
  engine.eos_token_ids.assign(config.eos_token_ids.begin(), config.eos_token_ids.end());
  const int32_t token = neutral_token(w, config);

  std::vector<std::span<const int32_t>> prompts;
  for (const EngineRequest& r : w.requests) prompts.emplace_back(r.prompt_ids);
  std::vector<size_t> input_order(w.requests.size());
  for (size_t i = 0; i < input_order.size(); ++i) input_order[i] = i;
  const ReplayResult in_order = replay(w, input_order, engine, num_blocks, token);
  const ReplayResult aware = replay(w, prefix_aware_order(prompts), engine, num_blocks, token);
  const ReplayResult& chosen = f.order == "prefix-aware" ? aware : in_order;
  if (!f.cache_trace.empty()) {
    std::string text;
    for (const CacheTraceRow& row : chosen.trace) text += to_json(row).dump() + "\n";
    write_file(f.cache_trace, "--cache-trace", text);
  }
  if (!f.plot.empty()) write_file(f.plot, "--plot", blocks_chart_svg(chosen.trace));
  const PrefixNode tree = build_prefix_tree(prompts, f.block_size);
  const CacheTraceSummary s = summarize(chosen.trace);

  if (f.json) {
    nlohmann::json j = {{"kv_cache_dtype", kv_dtype},
                        {"kv_bytes_per_token", kv_bytes_per_token},
                        {"kv_bytes_per_block", block_bytes},
                        {"block_size", f.block_size},
                        {"blocks_fit", memory.blocks_fit},
                        {"tokens_fit", int64_t{memory.blocks_fit} * f.block_size},
                        {"num_kv_blocks", num_blocks},
                        {"order", f.order == "prefix-aware" ? "prefix-aware" : "input"},
                        {"requests", w.requests.size()},
                        {"bad_lines", w.bad_lines},
                        {"prompt_tokens", chosen.prompt_tokens},
                        {"cached_tokens", chosen.cached_tokens},
                        {"hit_rate", chosen.hit_rate()},
                        {"ideal_cached_tokens", ideal_hit_tokens(tree, f.block_size)},
                        {"peak_blocks", s.peak_blocks},
                        {"preemptions", s.preemptions},
                        {"memory", {{"gpu_bytes", memory.gpu_bytes}, {"source", memory.source},
                                    {"weight_bytes", memory.weight_bytes}, {"reserve_bytes", memory.reserve_bytes},
                                    {"gpu_memory_utilization", f.gpu_memory_utilization}}},
                        {"input_order", replay_json(in_order)},
                        {"prefix_aware_order", replay_json(aware)},
                        {"per_request", request_rows(w, chosen, f.block_size)},
                        {"prefix_tree", prefix_tree_json(tree, f.block_size)}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::printf("model             %s: %d layers x %d KV heads x %d dims, %s KV\n", config.architecture_name.c_str(),
              config.num_layers, config.num_kv_heads, config.head_dim, kv_dtype.c_str());
  std::printf("KV cache          %.0f bytes per token, %.0f KiB per block of %d tokens\n", kv_bytes_per_token,
              block_bytes / 1024, f.block_size);
  std::printf("memory            %.1f GiB (%s) x %.2f - %.2f GiB weights - %.2f GiB activations = %d blocks "
              "(%lld tokens)%s\n",
              memory.gpu_bytes / double(1 << 30), memory.source.c_str(), f.gpu_memory_utilization,
              memory.weight_bytes / double(1 << 30), memory.reserve_bytes / double(1 << 30), memory.blocks_fit,
              static_cast<long long>(memory.blocks_fit) * f.block_size,
              f.num_kv_blocks > 0 ? (", replaying " + std::to_string(num_blocks) + " (--num-kv-blocks)").c_str() : "");
  std::printf("workload          %zu requests, %lld prompt tokens%s\n\n", w.requests.size(),
              static_cast<long long>(in_order.prompt_tokens),
              w.bad_lines ? (", " + std::to_string(w.bad_lines) + " bad lines left out").c_str() : "");
  std::printf("%-14s %12s %14s %9s %12s %12s\n", "order", "prompt tok", "cached tok", "hit rate", "peak blocks",
              "preemptions");
  for (const auto& [name, r] : {std::pair<const char*, const ReplayResult*>{"input", &in_order}, {"prefix-aware", &aware}}) {
    const CacheTraceSummary rs = summarize(r->trace);
    std::printf("%-14s %12lld %14lld %8.1f%% %12d %12lld\n", name, static_cast<long long>(r->prompt_tokens),
                static_cast<long long>(r->cached_tokens), 100 * r->hit_rate(), rs.peak_blocks,
                static_cast<long long>(rs.preemptions));
  }
  std::printf("(an unbounded cache would serve %lld tokens)\n\nshared prefixes (full blocks of %d tokens):\n%s",
              static_cast<long long>(ideal_hit_tokens(tree, f.block_size)), f.block_size,
              prefix_tree_text(tree, f.block_size).c_str());
  const size_t shown = f.all_requests ? w.requests.size() : std::min<size_t>(w.requests.size(), 20);
  std::printf("\n%-8s %12s %8s %14s   (%s order)\n", "line", "prompt tok", "blocks", "cached tok", f.order == "prefix-aware" ? "prefix-aware" : "input");
  for (size_t i = 0; i < shown; ++i) {
    const FinishedRequest& done = chosen.finished[i];
    std::printf("%-8lld %12d %8d %14d\n", static_cast<long long>(w.lines[i]), done.prompt_tokens,
                (done.prompt_tokens + f.block_size - 1) / f.block_size, done.cached_tokens);
  }
  if (shown < w.requests.size()) std::printf("... %zu more (--all shows every request)\n", w.requests.size() - shown);
  return 0;
}

}  // namespace

Command make_inspect_cache_command() {
  auto f = std::make_shared<InspectFlags>();
  Command c;
  c.add_fn = [f](CLI::App& app) {
    CLI::App* cmd = app.add_subcommand(
        "inspect-cache", "Replay a workload through the scheduler and KV cache (no GPU), or summarise a --cache-trace");
    cmd->footer(
        "Replays the real scheduler and block manager without running the model: output lengths come from each\n"
        "request's max_tokens (or --assume-output-len). Reports KV bytes per token and block, the blocks that fit in\n"
        "--gpu-memory, per-request cached tokens, the shared-prefix tree, and input order against prefix-aware\n"
        "order (nvllm generate --schedule prefix-aware). With --trace FILE it summarises a run's --cache-trace.");
    cmd->add_option("--model", f->model, "Checkpoint folder (config.json and tokenizer; no weights are read)");
    cmd->add_option("--input", f->input, "Prompts, JSONL as nvllm generate reads");
    cmd->add_option("--trace", f->trace, "Summarise this --cache-trace file instead of replaying");
    cmd->add_option("--plot", f->plot, "Also draw the blocks-in-use curve as SVG to this file");
    cmd->add_option("--cache-trace", f->cache_trace, "Write the replay's per-step trace (JSONL) to this file");
    cmd->add_option("--assume-output-len", f->assume_output_len, "Output tokens per request (0: each request's max_tokens)")
        ->capture_default_str();
    cmd->add_option("--block-size", f->block_size, "Tokens per KV block")->capture_default_str();
    cmd->add_option("--max-num-seqs", f->max_num_seqs, "Most sequences in one step")->capture_default_str();
    cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "Token budget of one step")->capture_default_str();
    cmd->add_option("--max-model-len", f->max_model_len, "Longest sequence (0: the model's)")->capture_default_str();
    cmd->add_option("--gpu-memory", f->gpu_memory_gib, "GPU memory in GiB (default: the local GPU's, else 80)");
    cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization, "Fraction of it nvllm may use")
        ->capture_default_str();
    cmd->add_option("--num-kv-blocks", f->num_kv_blocks, "Replay with exactly this many blocks (0: what fits)")
        ->capture_default_str();
    cmd->add_option("--dtype", f->dtype, "KV-cache dtype: bfloat16 or float32 (the CPU runner's)")
        ->check(CLI::IsMember({"bfloat16", "float16", "float32"}))
        ->capture_default_str();
    cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                    "KV-cache dtype: auto (--dtype), bfloat16, fp8 or fp8_e4m3 (one byte: twice the tokens of bf16)")
        ->check(CLI::IsMember({"auto", "bfloat16", "fp8", "fp8_e4m3"}))
        ->capture_default_str();
    cmd->add_option("--order", f->order, "Order whose details are shown: input, prefix-aware (both are compared)")
        ->check(CLI::IsMember({"both", "input", "prefix-aware"}))
        ->capture_default_str();
    cmd->add_flag("--json", f->json, "Print one JSON object instead of tables");
    cmd->add_flag("--all", f->all_requests, "List every request, not the first 20");
    cmd->add_flag("--allow-unknown-fields", f->allow_unknown_fields, "Ignore unknown request fields");
    return cmd;
  };
  c.run = [f] { return run_inspect(*f); };
  return c;
}

}  // namespace nvllm
