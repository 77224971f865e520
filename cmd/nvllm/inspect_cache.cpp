// nvllm inspect-cache: what the paged KV cache and its prefix cache will do with a workload
// (a replay of the real scheduler and block manager, no model run), or did (a --trace file).
#include <algorithm>
#include <fstream>
#include <iostream>

#include "analysis/cache_trace.h"
#include "analysis/memory_plan.h"
#include "analysis/prefix_tree.h"
#include "analysis/replay.h"
#include "analysis/workload.h"
#include "cmd/nvllm/chat_setup.h"
#include "cmd/nvllm/cli_checks.h"
#include "cmd/nvllm/commands.h"
#include "cmd/nvllm/fp8_setup.h"
#include "cmd/nvllm/generate_input.h"
#include "cmd/nvllm/model_setup.h"
#include "cmd/nvllm/model_source.h"
#include "core/error.h"
#include "core/kv_layout.h"
#include "core/log.h"
#include "engine/engine.h"
#include "io/request.h"
#include "model/config.h"
#include "runtime/device.h"
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
  std::string quantization;            // "" or fp8: projection weights of one byte
  std::string order = "both";
  bool json = false;
  bool all_requests = false;
  bool allow_unknown_fields = false;
  std::string scheduling_policy = "fcfs";
  std::string admission = "planned";
  double peak_bandwidth = kH100Bandwidth;  // the roofline time's ceilings
  double peak_flops = kH100Flops;
};

struct Workload {
  std::vector<EngineRequest> requests;  // input order, prompts tokenized
  std::vector<int64_t> lines;
  int64_t bad_lines = 0;
};

Workload read_workload(const InspectFlags& f, const std::string& model_dir, const Tokenizer& tokenizer,
                       const ModelConfig& config) {
  ParseOptions options;
  options.allow_unknown_fields = f.allow_unknown_fields;
  Workload w;
  const ChatSetup chat(ChatFlags{}, model_dir);  // conversations rendered by the model's template
  // A repeated id matters to generate's output, not to a replay of the cache.
  for (const ParsedLine& line : read_input({.path = f.input, .parse = options, .allow_duplicate_ids = true})) {
    if (!line.request) {
      log_warn(f.input, ": ", line.error, " (left out of the replay)");
      ++w.bad_lines;
      continue;
    }
    EngineRequest r;
    r.id = std::to_string(w.requests.size());
    r.params = line.request->params;
    r.priority = line.request->priority;
    if (f.assume_output_len > 0) r.params.max_tokens = f.assume_output_len;
    try {
      r.prompt_ids = request_prompt_ids(*line.request, tokenizer, chat);
    } catch (const Error& e) {
      log_warn(f.input, ": line ", line.line, ": ", e.what(), " (left out of the replay)");
      ++w.bad_lines;
      continue;
    }
    w.requests.push_back(std::move(r));
    w.lines.push_back(line.line);
  }
  NVLLM_CHECK(!w.requests.empty(), "--input ", f.input, ": no request to replay");
  return w;
}

// The GPU memory to plan for: --gpu-memory, else the local GPU's, else an assumed 80 GiB.
MemoryPlanInput memory_input(const InspectFlags& f, bool fp8_weights, double block_bytes, int dtype_bytes) {
  MemoryPlanInput in;
  if (f.gpu_memory_gib > 0) {
    in.gpu_bytes = f.gpu_memory_gib * double(1 << 30);
    in.source = "--gpu-memory";
  } else if (const GpuInfo gpu = query_gpu(); gpu.available) {
    in.gpu_bytes = static_cast<double>(gpu.total_bytes);
    in.source = gpu.name;
  } else {
    in.gpu_bytes = 80.0 * double(1 << 30);
    in.source = "assumed 80 GiB (no local GPU; set --gpu-memory)";
  }
  in.gpu_memory_utilization = f.gpu_memory_utilization;
  in.max_num_seqs = f.max_num_seqs;
  in.max_num_batched_tokens = f.max_num_batched_tokens;
  in.dtype_bytes = dtype_bytes;
  in.fp8_weights = fp8_weights;
  in.block_bytes = block_bytes;
  return in;
}

nlohmann::json request_rows(const Workload& w, const ReplayResult& r, int block_size) {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const FinishedRequest& done = r.finished[i];
    rows.push_back({{"line", w.lines[i]},
                    {"prompt_tokens", done.prompt_tokens},
                    {"blocks", (done.prompt_tokens + block_size - 1) / block_size},
                    {"cached_tokens", done.cached_tokens},
                    {"finish_step", r.finish_step[i]}});
  }
  return rows;
}

nlohmann::json replay_json(const ReplayResult& r) {
  const CacheTraceSummary s = summarize(r.trace);
  return {{"prompt_tokens", r.prompt_tokens},
          {"cached_tokens", r.cached_tokens},
          {"hit_rate", r.hit_rate()},
          {"peak_blocks", s.peak_blocks},
          {"preemptions", s.preemptions},
          {"recomputed_tokens", r.stats.recomputed_tokens},
          {"mean_batch_size", r.stats.mean_batch_size()},
          {"evictions", s.evictions},
          {"steps", s.steps},
          {"roofline_s", r.modeled_s}};
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
                                {"preemptions", s.preemptions},
                                {"recomputed_tokens", s.recomputed_tokens},
                                {"mean_batch_size", s.mean_batch}}
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
  std::printf("preemptions       %lld (%lld tokens recomputed); mean batch %.1f sequences a step\n\n%s",
              static_cast<long long>(s.preemptions), static_cast<long long>(s.recomputed_tokens), s.mean_batch,
              blocks_chart_text(rows).c_str());
  return 0;
}

// The KV cache's element type: --kv-cache-dtype, or --dtype for auto; fp8 is E4M3, one byte.
std::string kv_dtype_of(const InspectFlags& f) {
  if (f.kv_cache_dtype.starts_with("fp8")) return "fp8_e4m3";
  return f.kv_cache_dtype == "auto" ? f.dtype : f.kv_cache_dtype;
}

int kv_bytes_of(const std::string& kv_dtype) { return kv_dtype == "fp8_e4m3" ? 1 : kv_dtype == "float32" ? 4 : 2; }

// What a replay found: the workload, the cache it was replayed in, and both orders' results.
struct Inspection {
  ModelConfig config;
  // The CUDA runner's projections are E4M3 (fp8_projections: --quantization fp8 over a bf16
  // checkpoint, or an FP8 checkpoint with every projection FP8): one byte a weight in the plan.
  bool fp8_weights = false;
  Workload workload;
  KvLayout kv;
  MemoryPlan memory;
  int num_blocks = 0;
  ReplayResult in_order, aware;
  const ReplayResult* chosen = nullptr;  // the order --order shows
  ReplayResult other_admission;          // the chosen order under the admission policy not chosen
  PrefixNode tree;
};

EngineConfig replay_engine_config(const InspectFlags& f, const ModelConfig& config, int num_blocks) {
  EngineConfig engine;
  engine.block_size = f.block_size;
  engine.max_num_seqs = f.max_num_seqs;
  engine.max_num_batched_tokens = f.max_num_batched_tokens;
  engine.max_model_len =
      fit_max_model_len(f.max_model_len > 0 ? f.max_model_len : config.max_position_embeddings, num_blocks, f.block_size);
  engine.eos_token_ids.assign(config.eos_token_ids.begin(), config.eos_token_ids.end());
  engine.priority_scheduling = f.scheduling_policy == "priority";
  engine.admission = parse_admission(f.admission);
  return engine;
}

// Read the workload, plan the cache, replay it in input order and in prefix-aware order.
void inspect(const InspectFlags& f, Inspection& r) {
  const std::string model = resolve_model_path(f.model, hf_hub_cache_from_env(), "--model");
  r.config = load_model_config(model);
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model);
  r.workload = read_workload(f, model, *tokenizer, r.config);
  const int dtype_bytes = f.dtype == "float32" ? 4 : 2;
  r.fp8_weights = fp8_projections(f.quantization, r.config, "cuda");
  r.kv = r.config.kv_layout(f.block_size, kv_bytes_of(kv_dtype_of(f)));
  r.memory =
      plan_memory(memory_input(f, r.fp8_weights, static_cast<double>(r.kv.bytes_per_block()), dtype_bytes), r.config);
  r.num_blocks = f.num_kv_blocks > 0 ? f.num_kv_blocks : r.memory.blocks_fit;
  NVLLM_CHECK(r.num_blocks > 0, "the weights and activations leave no room for a KV cache in ", r.memory.source,
              "; give more --gpu-memory");

  const EngineConfig engine = replay_engine_config(f, r.config, r.num_blocks);
  const std::vector<EngineRequest>& requests = r.workload.requests;
  const int32_t token = neutral_token(requests, r.config);
  // What each step would take at best on the card: the admission policies compared in time.
  // FP8 weights: one byte a projection weight, GEMMs at kFp8GemmRateFactor times (as bench's roofline).
  const bool fp8 = r.fp8_weights;
  const StepCostModel cost{.config = &r.config,
                           .weight_dtype_bytes = fp8 ? WeightBytes(1.0, dtype_bytes) : WeightBytes(dtype_bytes),
                           .kv_dtype_bytes = kv_bytes_of(kv_dtype_of(f)), .bandwidth = f.peak_bandwidth,
                           .flops = f.peak_flops * (fp8 ? kFp8GemmRateFactor : 1.0)};
  std::vector<std::span<const int32_t>> prompts;
  for (const EngineRequest& q : requests) prompts.emplace_back(q.prompt_ids);
  std::vector<size_t> input_order(requests.size());
  for (size_t i = 0; i < input_order.size(); ++i) input_order[i] = i;
  const std::vector<size_t> aware_order = prefix_aware_order(prompts);
  r.in_order = replay(requests, input_order, engine, r.num_blocks, token, &cost);
  r.aware = replay(requests, aware_order, engine, r.num_blocks, token, &cost);
  const bool show_aware = f.order == "prefix-aware";
  r.chosen = show_aware ? &r.aware : &r.in_order;
  EngineConfig other = engine;
  other.admission = engine.admission == Admission::kPlanned ? Admission::kGreedy : Admission::kPlanned;
  r.other_admission = replay(requests, show_aware ? aware_order : input_order, other, r.num_blocks, token, &cost);
  r.tree = build_prefix_tree(prompts, f.block_size);
}

void write_artifacts(const InspectFlags& f, const Inspection& r) {
  if (!f.cache_trace.empty()) {
    std::string text;
    for (const CacheTraceRow& row : r.chosen->trace) text += to_json(row).dump() + "\n";
    write_file(f.cache_trace, "--cache-trace", text);
  }
  if (!f.plot.empty()) write_file(f.plot, "--plot", blocks_chart_svg(r.chosen->trace));
}

const char* other_admission_name(const InspectFlags& f) { return f.admission == "planned" ? "greedy" : "planned"; }

nlohmann::json inspect_json(const InspectFlags& f, const Inspection& r) {
  const CacheTraceSummary s = summarize(r.chosen->trace);
  const ReplayResult& chosen = *r.chosen;
  const MemoryPlan& memory = r.memory;
  return {{"kv_cache_dtype", kv_dtype_of(f)},
          {"weights", r.fp8_weights ? "fp8 projections" : f.dtype},
          {"kv_bytes_per_token", static_cast<double>(r.kv.bytes_per_token())},
          {"kv_bytes_per_block", static_cast<double>(r.kv.bytes_per_block())},
          {"block_size", f.block_size},
          {"blocks_fit", memory.blocks_fit},
          {"tokens_fit", int64_t{memory.blocks_fit} * f.block_size},
          {"num_kv_blocks", r.num_blocks},
          {"order", f.order == "prefix-aware" ? "prefix-aware" : "input"},
          {"requests", r.workload.requests.size()},
          {"bad_lines", r.workload.bad_lines},
          {"prompt_tokens", chosen.prompt_tokens},
          {"cached_tokens", chosen.cached_tokens},
          {"hit_rate", chosen.hit_rate()},
          {"ideal_cached_tokens", ideal_hit_tokens(r.tree, f.block_size)},
          {"peak_blocks", s.peak_blocks},
          {"admission", f.admission},
          {"steps", s.steps},
          {"mean_batch_size", chosen.stats.mean_batch_size()},
          {"preemptions", s.preemptions},
          {"recomputed_tokens", chosen.stats.recomputed_tokens},
          {"roofline_s", chosen.modeled_s},
          {"roofline_ceilings", {{"bandwidth", f.peak_bandwidth}, {"flops", f.peak_flops}}},
          {"admission_comparison", {{f.admission, replay_json(chosen)}, {other_admission_name(f), replay_json(r.other_admission)}}},
          {"memory", {{"gpu_bytes", memory.gpu_bytes}, {"source", memory.source},
                      {"weight_bytes", memory.weight_bytes}, {"reserve_bytes", memory.reserve_bytes},
                      {"gpu_memory_utilization", f.gpu_memory_utilization}}},
          {"input_order", replay_json(r.in_order)},
          {"prefix_aware_order", replay_json(r.aware)},
          {"per_request", request_rows(r.workload, chosen, f.block_size)},
          {"prefix_tree", prefix_tree_json(r.tree, f.block_size)}};
}

void print_summary(const InspectFlags& f, const Inspection& r) {
  const ModelConfig& config = r.config;
  const MemoryPlan& memory = r.memory;
  const Workload& w = r.workload;
  std::printf("model             %s: %d layers x %d KV heads x %d dims, %s KV\n", config.architecture_name.c_str(),
              config.num_layers, config.num_kv_heads, config.head_dim, kv_dtype_of(f).c_str());
  std::printf("KV cache          %.0f bytes per token, %.0f KiB per block of %d tokens\n",
              static_cast<double>(r.kv.bytes_per_token()), static_cast<double>(r.kv.bytes_per_block()) / 1024,
              f.block_size);
  std::printf("memory            %.1f GiB (%s) x %.2f - %.2f GiB weights%s - %.2f GiB activations = %d blocks "
              "(%lld tokens)%s\n",
              memory.gpu_bytes / double(1 << 30), memory.source.c_str(), f.gpu_memory_utilization,
              memory.weight_bytes / double(1 << 30), r.fp8_weights ? " (FP8 projections)" : "",
              memory.reserve_bytes / double(1 << 30), memory.blocks_fit,
              static_cast<long long>(memory.blocks_fit) * f.block_size,
              f.num_kv_blocks > 0 ? (", replaying " + std::to_string(r.num_blocks) + " (--num-kv-blocks)").c_str()
                                  : "");
  std::printf("workload          %zu requests, %lld prompt tokens%s\n\n", w.requests.size(),
              static_cast<long long>(r.in_order.prompt_tokens),
              w.bad_lines ? (", " + std::to_string(w.bad_lines) + " bad lines left out").c_str() : "");
  std::printf("%-14s %12s %14s %9s %12s %12s\n", "order", "prompt tok", "cached tok", "hit rate", "peak blocks",
              "preemptions");
  using Order = std::pair<const char*, const ReplayResult*>;
  for (const auto& [name, o] : {Order{"input", &r.in_order}, Order{"prefix-aware", &r.aware}}) {
    const CacheTraceSummary rs = summarize(o->trace);
    std::printf("%-14s %12lld %14lld %8.1f%% %12d %12lld\n", name, static_cast<long long>(o->prompt_tokens),
                static_cast<long long>(o->cached_tokens), 100 * o->hit_rate(), rs.peak_blocks,
                static_cast<long long>(rs.preemptions));
  }
  std::printf("(an unbounded cache would serve %lld tokens)\n\n", static_cast<long long>(ideal_hit_tokens(r.tree, f.block_size)));
  // The admission policy's effect on the order shown: the batch it keeps and what it recomputes.
  std::printf("%-16s %10s %11s %12s %15s %12s %11s   (%s order)\n", "admission", "steps", "mean batch",
              "preemptions", "recomputed tok", "peak blocks", "roofline s",
              f.order == "prefix-aware" ? "prefix-aware" : "input");
  using Admitted = std::pair<std::string, const ReplayResult*>;
  for (const auto& [name, o] : {Admitted{f.admission + " (used)", r.chosen}, Admitted{other_admission_name(f), &r.other_admission}}) {
    const CacheTraceSummary rs = summarize(o->trace);
    std::printf("%-16s %10lld %11.1f %12lld %15lld %12d %11.2f\n", name.c_str(), static_cast<long long>(o->stats.steps),
                o->stats.mean_batch_size(), static_cast<long long>(o->stats.preemptions),
                static_cast<long long>(o->stats.recomputed_tokens), rs.peak_blocks, o->modeled_s);
  }
  std::printf("(roofline s: the least time the steps take at %.3g TB/s and %.0f TFLOP/s, --peak-bandwidth and "
              "--peak-flops: a model, not a measurement)\n",
              f.peak_bandwidth / 1e12, f.peak_flops / 1e12);
  std::printf("\nshared prefixes (full blocks of %d tokens):\n%s", f.block_size, prefix_tree_text(r.tree, f.block_size).c_str());
}

void print_requests(const InspectFlags& f, const Inspection& r) {
  const Workload& w = r.workload;
  const size_t shown = f.all_requests ? w.requests.size() : std::min<size_t>(w.requests.size(), 20);
  std::printf("\n%-8s %12s %8s %14s   (%s order)\n", "line", "prompt tok", "blocks", "cached tok",
              f.order == "prefix-aware" ? "prefix-aware" : "input");
  for (size_t i = 0; i < shown; ++i) {
    const FinishedRequest& done = r.chosen->finished[i];
    std::printf("%-8lld %12d %8d %14d\n", static_cast<long long>(w.lines[i]), done.prompt_tokens,
                (done.prompt_tokens + f.block_size - 1) / f.block_size, done.cached_tokens);
  }
  if (shown < w.requests.size()) std::printf("... %zu more (--all shows every request)\n", w.requests.size() - shown);
}

// Check the flags, replay, write the trace and plot, report.
int run_inspect(const InspectFlags& f) {
  if (!f.trace.empty()) return run_trace_summary(f);
  NVLLM_CHECK(!f.model.empty() && !f.input.empty(), "inspect-cache needs --model DIR --input FILE, or --trace FILE");
  NVLLM_CHECK(valid_block_size(f.block_size), "--block-size ", f.block_size, ": must be a power of two from 1 to ",
              kMaxBlockSize);
  for (const auto& [path, flag] : {std::pair{f.plot, "--plot"}, std::pair{f.cache_trace, "--cache-trace"}}) {
    check_not_input(path, flag, f.input);
    check_output_path(path, flag);
  }
  Inspection r;
  inspect(f, r);
  write_artifacts(f, r);
  if (f.json) {
    std::cout << inspect_json(f, r).dump(2) << "\n";
    return 0;
  }
  print_summary(f, r);
  print_requests(f, r);
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
        "order (nvllm generate --schedule prefix-aware), and the --admission policy against the other one (steps,\n"
        "mean batch, preemptions, recomputed tokens). With --trace FILE it summarises a run's --cache-trace.");
    cmd->add_option("--model", f->model, "Checkpoint folder (config.json and tokenizer; no weights are read)");
    cmd->add_option("--input", f->input, "Prompts, JSONL as nvllm generate reads");
    cmd->add_option("--trace", f->trace, "Summarise this --cache-trace file instead of replaying");
    cmd->add_option("--plot", f->plot, "Also draw the blocks-in-use curve as SVG to this file");
    cmd->add_option("--cache-trace", f->cache_trace, "Write the replay's per-step trace (JSONL) to this file");
    cmd->add_option("--assume-output-len", f->assume_output_len, "Output tokens per request (0: each request's max_tokens)")
        ->check(integer_at_least(0))
        ->capture_default_str();
    cmd->add_option("--block-size", f->block_size, "Tokens per KV block (power of two, 1..256)")
        ->check(integer_in(1, kMaxBlockSize))
        ->capture_default_str();
    cmd->add_option("--max-num-seqs", f->max_num_seqs, "Most sequences in one step")
        ->check(integer_at_least(1))
        ->capture_default_str();
    cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "Token budget of one step")
        ->check(integer_at_least(1))
        ->capture_default_str();
    cmd->add_option("--max-model-len", f->max_model_len, "Longest sequence (0: the model's)")
        ->check(integer_at_least(0))
        ->capture_default_str();
    cmd->add_option("--gpu-memory", f->gpu_memory_gib, "GPU memory in GiB (default: the local GPU's, else 80)")
        ->check(number_at_least(0, /*exclusive=*/true));
    cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization, "Fraction of it nvllm may use")
        ->check(number_in(0.05, 1.0))
        ->capture_default_str();
    cmd->add_option("--num-kv-blocks,--num-gpu-blocks-override", f->num_kv_blocks,
                    "Replay with exactly this many blocks (0: what fits)")
        ->check(integer_at_least(0))
        ->capture_default_str();
    cmd->add_option("--scheduling-policy", f->scheduling_policy,
                    "Replay with fcfs or priority scheduling (requests' \"priority\" field, as nvllm generate)")
        ->check(CLI::IsMember({"fcfs", "priority"}))
        ->capture_default_str();
    add_admission_flag(*cmd, f->admission);
    cmd->add_option("--peak-bandwidth", f->peak_bandwidth,
                    "Memory bandwidth of the card, bytes/s, for the replays' roofline time (default: the H100's measured)")
        ->check(number_at_least(0, /*exclusive=*/true))
        ->capture_default_str();
    cmd->add_option("--peak-flops", f->peak_flops,
                    "Matrix FLOP/s of the card for the replays' roofline time (default: the H100's bf16 measured)")
        ->check(number_at_least(0, /*exclusive=*/true))
        ->capture_default_str();
    cmd->add_option("--dtype", f->dtype, "KV-cache dtype: bfloat16 or float32 (the CPU runner's)")
        ->check(CLI::IsMember({"bfloat16", "float16", "float32"}))
        ->capture_default_str();
    cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                    "KV-cache dtype: auto (--dtype), bfloat16, fp8 or fp8_e4m3 (one byte: twice the tokens of bf16)")
        ->check(CLI::IsMember({"auto", "bfloat16", "fp8", "fp8_e4m3"}))
        ->capture_default_str();
    cmd->add_option("--quantization", f->quantization,
                    "fp8: plan for projection weights of one byte (E4M3, as generate --quantization fp8); "
                    "embedding, norms and LM head at --dtype")
        ->check(CLI::IsMember({"fp8"}));
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
