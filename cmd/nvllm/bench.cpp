// nvllm bench: throughput of a whole workload, or latency of fixed-size batches, with the
// roofline that says how close the run came to the card.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <utility>

#include "analysis/prefix_tree.h"
#include "analysis/workload.h"
#include "cmd/nvllm/bench_ceilings.h"
#include "cmd/nvllm/bench_run.h"
#include "cmd/nvllm/chat_setup.h"
#include "cmd/nvllm/cli_checks.h"
#include "cmd/nvllm/commands.h"
#include "cmd/nvllm/generate_input.h"
#include "cmd/nvllm/fp8_setup.h"
#include "cmd/nvllm/model_setup.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/data_parallel.h"
#include "io/request.h"

#include "git_rev.h"  // NVLLM_GIT_REV, written at build time

namespace nvllm {
namespace {

// The roofline on the GPU uses the card's own ceilings, measured at start (gpu_ceilings below);
// --peak-bandwidth / --peak-flops override them. On the CPU there is no default: the roofline is
// left out unless both are given.

struct BenchFlags {
  ModelFlags model;
  std::string preset;
  std::string schedule = "fcfs";
  std::string input;
  int num_prompts = 256;
  std::string input_len = "1024";
  std::string output_len = "128";
  int prefix_len = 0;
  float temperature = 0.0f;
  int batch_size = 1;
  int iterations = 3;
  std::string output_json;
  double peak_bandwidth = 0;  // 0: the H100's on the GPU, none on the CPU
  double peak_flops = 0;
  bool no_warmup = false;
  bool quiet = false;
  std::set<std::string> given;  // the workload flags given on the command line (bench throughput)
};

// The workload flags that --preset sets and that, given with it, replace its values.
constexpr const char* kWorkloadFlags[] = {"--num-prompts", "--input-len", "--output-len", "--prefix-len",
                                          "--temperature"};

// FP8 weights on the GPU: its GEMM rate is the measured bf16 rate times kFp8GemmRateFactor.
double fp8_flops_factor(const LoadedModel& m) {
  return m.fp8_weights && m.device == "cuda" ? kFp8GemmRateFactor : 1.0;
}

// One GPU's ceilings (bench_ceilings.h), resolved once a process: a run loads one model.
const Ceilings& gpu_ceilings(const BenchFlags& f, const LoadedModel& m) {
  static const Ceilings c = resolve_ceilings(f.peak_bandwidth, f.peak_flops, m.device);
  return c;
}

// The roofline's ceilings for this run, or {0, 0} when there are none (the CPU without flags):
// one GPU's times the GPUs it uses (data x tensor parallel), whose bandwidths and FLOP/s add up.
std::pair<double, double> peaks(const BenchFlags& f, const LoadedModel& m) {
  if (m.device != "cuda" && !(f.peak_bandwidth > 0 && f.peak_flops > 0)) return {0, 0};
  const Ceilings& c = gpu_ceilings(f, m);
  const double gpus = std::max(1, m.num_gpus());
  return {c.bandwidth * gpus, c.flops * gpus * fp8_flops_factor(m)};
}


nlohmann::json percentiles(const std::vector<double>& v) {
  return {{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)}};
}

// The workload of the flags, or of --preset with the workload flags given beside it replacing its
// values (--preset nano-vllm --num-prompts 128: the preset's lengths and temperature, 128 prompts).
WorkloadSpec spec_from_flags(const BenchFlags& f) {
  const bool preset = f.preset == "nano-vllm";
  NVLLM_CHECK(preset || f.preset.empty(), "--preset ", f.preset, ": unknown preset (known: nano-vllm)");
  WorkloadSpec spec = preset ? nano_vllm_preset() : WorkloadSpec{};
  const auto take = [&](const char* flag) { return !preset || f.given.count(flag) > 0; };
  if (take("--num-prompts")) spec.num_prompts = f.num_prompts;
  if (take("--input-len")) spec.input_len = parse_length_range(f.input_len, "--input-len");
  if (take("--output-len")) spec.output_len = parse_length_range(f.output_len, "--output-len");
  if (take("--prefix-len")) spec.prefix_len = f.prefix_len;
  if (take("--temperature")) spec.params.temperature = f.temperature;
  spec.params.ignore_eos = true;
  NVLLM_CHECK(spec.prefix_len < spec.input_len.min, "--prefix-len ", spec.prefix_len,
              ": must be shorter than the shortest prompt (", spec.input_len.min, " tokens)");
  if (preset && !f.given.empty()) {
    std::string replaced;
    for (const std::string& flag : f.given) replaced += (replaced.empty() ? "" : ", ") + flag;
    log_info("--preset ", f.preset, " with ", replaced, " as given");
  }
  spec.seed = f.model.seed;
  return spec;
}

// Random prompts for this model: token ids are drawn below 10,000 as nano-vLLM does, or below the
// vocabulary size where that is smaller (small test models).
std::vector<EngineRequest> random_requests(const LoadedModel& m, WorkloadSpec spec) {
  spec.token_id_limit = std::min(spec.token_id_limit, m.config.vocab_size);
  return make_workload(spec);
}

std::vector<EngineRequest> requests_from_file(const BenchFlags& f, const LoadedModel& m) {
  const Tokenizer& tokenizer = *m.tokenizer;
  std::ifstream in(f.input);
  NVLLM_CHECK(in, "--input ", f.input, ": cannot open the file");
  ParseOptions options;
  options.defaults.temperature = f.temperature;
  options.defaults.seed = f.model.seed;
  std::vector<EngineRequest> out;
  const ChatSetup chat(ChatFlags{}, f.model.model);  // conversations rendered by the model's template
  for (const ParsedLine& line : read_requests(in, options)) {
    NVLLM_CHECK(line.request, f.input, ": ", line.error);
    EngineRequest r;
    r.id = std::to_string(out.size());
    r.params = line.request->params;
    try {
      r.prompt_ids = request_prompt_ids(*line.request, tokenizer, chat);
      check_request_support(*line.request, m.config.vocab_size, m.device);
    } catch (const Error& e) {
      fail(f.input, ": line ", line.line, ": ", e.what());
    }
    out.push_back(std::move(r));
  }
  return out;
}

void warm_up(LoadedModel& m, const BenchFlags& f) {
  if (f.no_warmup) return;
  WorkloadSpec spec;
  spec.num_prompts = std::min(8, m.engine.max_num_seqs);
  spec.input_len = {64, 64};
  spec.output_len = {16, 16};
  spec.seed = f.model.seed + 12345;
  run_requests(m, random_requests(m, spec));
}

void emit(const BenchFlags& f, const nlohmann::json& report) {
  if (f.output_json.empty()) return;
  std::ofstream out(f.output_json);
  NVLLM_CHECK(out, "--output-json ", f.output_json, ": cannot write the file");
  out << report.dump(2) << "\n";
}

// Tokens the KV cache holds: twice as many in FP8 as in bf16 for the same memory.
int64_t kv_cache_tokens(const LoadedModel& m) { return int64_t{m.runner().num_kv_blocks()} * m.engine.block_size; }

// "(KV cache fp8_e4m3, 123456 tokens)": the device line of both reports.
void print_device(const BenchFlags& f, const LoadedModel& m) {
  std::printf("device            %s (KV cache %s, %lld tokens)\n", m.device_name.c_str(),
              kv_cache_dtype_name(f.model, m.device).c_str(), static_cast<long long>(kv_cache_tokens(m)));
  if (peaks(f, m).first <= 0) return;
  const Ceilings& c = gpu_ceilings(f, m);
  std::printf("ceilings          %.2f TB/s, %.0f TFLOP/s%s (%s)%s\n", c.bandwidth / 1e12, c.flops / 1e12,
              m.device == "cuda" ? " a GPU" : "", c.source.c_str(),
              fp8_flops_factor(m) > 1 ? "; FP8 weights: GEMMs at twice that" : "");
}

nlohmann::json header(const BenchFlags& f, const LoadedModel& m, const char* mode) {
  return {{"mode", mode},         {"command", command_line()}, {"device", m.device_name},
          {"git_revision", NVLLM_GIT_REV}, {"model", f.model.model},   {"load_format", f.model.load_format},
          {"block_size", m.engine.block_size}, {"max_num_seqs", m.engine.max_num_seqs},
          {"max_num_batched_tokens", m.engine.max_num_batched_tokens}, {"num_kv_blocks", m.runner().num_kv_blocks()},
          {"kv_cache_tokens", kv_cache_tokens(m)}, {"kv_cache_dtype", kv_cache_dtype_name(f.model, m.device)},
          {"admission", f.model.admission}, {"data_parallel_size", m.runners.size()},
          {"tensor_parallel_size", m.tensor_parallel_size},
          {"ceilings", peaks(f, m).first > 0 ? nlohmann::json{{"bandwidth_per_gpu", gpu_ceilings(f, m).bandwidth},
                                                              {"flops_per_gpu", gpu_ceilings(f, m).flops},
                                                              {"source", gpu_ceilings(f, m).source}}
                                             : nlohmann::json(nullptr)}};
}

// The requests of a throughput run: --input's, or random ones from the length flags; in
// prefix-aware order when --schedule asks for it.
std::vector<EngineRequest> throughput_requests(const BenchFlags& f, const LoadedModel& m) {
  std::vector<EngineRequest> requests =
      f.input.empty() ? random_requests(m, spec_from_flags(f)) : requests_from_file(f, m);
  if (f.schedule == "prefix-aware") {
    std::vector<std::span<const int32_t>> prompts;
    for (const EngineRequest& r : requests) prompts.emplace_back(r.prompt_ids);
    std::vector<EngineRequest> reordered;
    for (size_t i : prefix_aware_order(prompts)) reordered.push_back(requests[i]);
    requests = std::move(reordered);
  }
  NVLLM_CHECK(!requests.empty(), "the workload has no requests");
  return requests;
}

// FP8 weights (--quantization fp8): one byte a weight in the layers, the LM head bf16, on either
// runner (the CPU runner's float32 values stand for the codes the GPU reads).
WeightBytes weight_bytes_of(const LoadedModel& m) {
  if (m.fp8_weights) return {1.0, 2.0};
  return m.device == "cuda" ? 2 : 4;
}

// The least time the run (or its first `steps` steps, with `output_len` tokens a request) could
// have taken (lib/analysis/workload.h). Prefix-cache hits count as attended, not computed.
Roofline run_roofline(const BenchFlags& f, const LoadedModel& m, const RunResult& run, int64_t steps,
                      int output_len = 0) {
  std::vector<int> prompt_lens, output_lens, cached_lens;
  for (const FinishedRequest& r : run.finished) {
    prompt_lens.push_back(r.prompt_tokens);
    output_lens.push_back(output_len > 0 ? output_len : static_cast<int>(r.outputs.at(0).token_ids.size()));
    cached_lens.push_back(r.cached_tokens);
  }
  return roofline(m.config, prompt_lens, output_lens, steps, weight_bytes_of(m), kv_element_bytes(f.model, m.device),
                  cached_lens);
}

// What the report says of figures that beat their bound: WARNING lines on stderr and stdout,
// and the checks that failed in the JSON (an empty list when none did).
nlohmann::json report_roofline_warnings(const std::vector<RooflineCheck>& checks) {
  nlohmann::json warnings = nlohmann::json::array();
  for (const RooflineCheck& c : checks) {
    if (!c.exceeds_bound()) continue;
    std::printf("%s\n", c.warning().c_str());
    warnings.push_back(c.to_json());
  }
  return warnings;
}

// Likely causes of a figure faster than its bound, by what bounds it.
constexpr const char* kCeilingCause =
    "the ceilings (--peak-bandwidth, --peak-flops; by default measured on this GPU at start) may be below what it can do";
const std::string kTimingCause =
    std::string("a step may have been timed before its GPU work finished, or ") + kCeilingCause;

// Summed over the engines (each its own GPUs); 0 where the runner does not measure it (CPU).
double device_seconds(const RunResult& run) {
  double device_s = 0;
  for (const EngineLoad& e : run.engines) device_s += e.device_s;
  return device_s;
}

nlohmann::json throughput_report(const BenchFlags& f, const LoadedModel& m, const RunResult& run,
                                 const Roofline& roof) {
  const auto [peak_bandwidth, peak_flops] = peaks(f, m);
  const double bound_s = peak_bandwidth > 0 ? roof.min_time_s(peak_bandwidth, peak_flops) : 0.0;
  const RunStats& s = run.stats;
  nlohmann::json report = header(f, m, "throughput");
  report["requests"] = s.requests;
  report["prompt_tokens"] = s.prompt_tokens;
  report["output_tokens"] = s.output_tokens;
  report["elapsed_s"] = run.seconds;
  report["requests_per_s"] = s.requests / run.seconds;
  report["output_tokens_per_s"] = s.output_tokens / run.seconds;
  report["total_tokens_per_s"] = (s.prompt_tokens + s.output_tokens) / run.seconds;
  report["ttft_s"] = percentiles(s.ttft_s);
  report["tpot_s"] = percentiles(s.tpot_s);
  report["peak_kv_blocks"] = s.peak_blocks_in_use;
  report["peak_kv_fraction"] = s.num_kv_blocks ? double(s.peak_blocks_in_use) / s.num_kv_blocks : 0.0;
  report["prefix_cache_hit_rate"] = s.prefix_cache_hit_rate();
  report["preemptions"] = s.preemptions;
  report["recomputed_tokens"] = s.recomputed_tokens;
  report["mean_batch_size"] = s.mean_batch_size();
  report["schedule"] = f.schedule;
  report["steps"] = s.steps;
  report["device_busy_s"] = device_seconds(run);
  nlohmann::json engines = nlohmann::json::array();
  for (const EngineLoad& e : run.engines) {
    engines.push_back({{"requests", e.counts.requests},
                       {"output_tokens", e.counts.output_tokens},
                       {"output_tokens_per_s", e.counts.output_tokens / run.seconds},
                       {"total_tokens_per_s", (e.counts.prompt_tokens + e.counts.output_tokens) / run.seconds},
                       {"steps", e.counts.steps},
                       {"device_busy_s", e.device_s},
                       {"last_step_s", e.last_step_s}});
  }
  report["engines"] = std::move(engines);
  if (bound_s > 0) {
    report["roofline"] = {{"bytes", roof.bytes},
                          {"flops", roof.flops},
                          {"peak_bandwidth", peak_bandwidth},
                          {"peak_flops", peak_flops},
                          {"min_time_s", bound_s},
                          {"fraction_of_bound", bound_s / run.seconds},
                          {"achieved_bandwidth", roof.bytes / run.seconds},
                          {"output_tokens_per_s_bound", s.output_tokens / bound_s}};
  } else {
    report["roofline"] = nullptr;  // no ceilings for this CPU: a bound from the H100's would mislead
  }
  return report;
}

void print_throughput(const BenchFlags& f, const LoadedModel& m, const RunResult& run, const Roofline& roof) {
  const auto [peak_bandwidth, peak_flops] = peaks(f, m);
  const double bound_s = peak_bandwidth > 0 ? roof.min_time_s(peak_bandwidth, peak_flops) : 0.0;
  const double device_s = device_seconds(run);
  const RunStats& s = run.stats;
  print_device(f, m);
  std::printf("requests          %lld in %.2f s: %.2f req/s\n", static_cast<long long>(s.requests), run.seconds,
              s.requests / run.seconds);
  std::printf("output tokens     %lld: %.1f tok/s   (total %.1f tok/s with %lld prompt tokens)\n",
              static_cast<long long>(s.output_tokens), s.output_tokens / run.seconds,
              (s.prompt_tokens + s.output_tokens) / run.seconds, static_cast<long long>(s.prompt_tokens));
  std::printf("TTFT ms           p50 %.1f  p90 %.1f  p99 %.1f\n", 1e3 * percentile(s.ttft_s, 50),
              1e3 * percentile(s.ttft_s, 90), 1e3 * percentile(s.ttft_s, 99));
  std::printf("TPOT ms           p50 %.2f  p90 %.2f  p99 %.2f\n", 1e3 * percentile(s.tpot_s, 50),
              1e3 * percentile(s.tpot_s, 90), 1e3 * percentile(s.tpot_s, 99));
  if (run.engines.size() > 1) {
    for (size_t e = 0; e < run.engines.size(); ++e) {
      const EngineLoad& l = run.engines[e];
      std::printf("engine %-2zu         %lld requests, %lld output tokens: %.1f tok/s (total %.1f tok/s); last step at "
                  "%.2f s\n",
                  e, static_cast<long long>(l.counts.requests), static_cast<long long>(l.counts.output_tokens),
                  l.counts.output_tokens / run.seconds, (l.counts.prompt_tokens + l.counts.output_tokens) / run.seconds,
                  l.last_step_s);
    }
  }
  if (device_s > 0 && run.engines.size() == 1)
    std::printf("GPU busy          %.2f s of %.2f s (%.0f%%); the rest is host work between steps\n", device_s,
                run.seconds, 100 * device_s / run.seconds);
  else if (device_s > 0)
    std::printf("GPU busy          %.2f s of %zu engines x %.2f s (%.0f%%); the rest is host work between steps\n",
                device_s, run.engines.size(), run.seconds, 100 * device_s / (run.seconds * run.engines.size()));
  std::printf("KV cache          peak %d of %d blocks; prefix-cache hit rate %.1f%%\n", s.peak_blocks_in_use,
              s.num_kv_blocks, 100 * s.prefix_cache_hit_rate());
  std::printf("scheduling        %lld steps, mean batch %.1f (--admission %s); %lld preemptions, %lld tokens "
              "recomputed\n",
              static_cast<long long>(s.steps), s.mean_batch_size(), f.model.admission.c_str(),
              static_cast<long long>(s.preemptions), static_cast<long long>(s.recomputed_tokens));
  if (bound_s > 0) {
    std::printf("roofline          %.2f TB moved, %.1f TFLOP; bound %.2f s (%.0f output tok/s); achieved %.0f%% of "
                "bound, %.2f TB/s\n",
                roof.bytes / 1e12, roof.flops / 1e12, bound_s, s.output_tokens / bound_s,
                100 * bound_s / run.seconds, roof.bytes / run.seconds / 1e12);
  } else {
    std::printf("roofline          left out on the CPU (give --peak-bandwidth and --peak-flops of this machine)\n");
  }
}

// Read the workload, warm up, run it, report.
int run_throughput(const BenchFlags& f) {
  check_output_path(f.output_json, "--output-json");
  check_not_input(f.output_json, "--output-json", f.input.empty() ? "-" : f.input);
  LoadedModel m = load_model(f.model);
  const std::vector<EngineRequest> requests = throughput_requests(f, m);
  warm_up(m, f);
  log_info("bench throughput: ", requests.size(), " requests on ", m.device_name);
  const RunResult run = run_requests(m, requests, !f.quiet);
  const Roofline roof = run_roofline(f, m, run, run.stats.steps);
  nlohmann::json report = throughput_report(f, m, run, roof);
  print_throughput(f, m, run, roof);
  const auto [peak_bandwidth, peak_flops] = peaks(f, m);
  const double bound_s = peak_bandwidth > 0 ? roof.min_time_s(peak_bandwidth, peak_flops) : 0.0;
  report["roofline_warnings"] = report_roofline_warnings(
      {{"the run (output tok/s)", run.seconds, bound_s,
        std::string("the run may have been timed short of its GPU work, or ") + kCeilingCause}});
  emit(f, report);
  return 0;
}

// A latency run whose sequences cannot reach input + output tokens would time steps that never
// ran: refused up front, with the numbers.
void check_latency_fits(const BenchFlags& f, const LoadedModel& m, int input_len, int output_len) {
  const int64_t len = int64_t{input_len} + output_len;
  NVLLM_CHECK(len <= m.engine.max_model_len, "bench latency: --input-len ", input_len, " + --output-len ", output_len,
              " = ", len, " tokens exceeds the context of ", m.engine.max_model_len,
              " tokens (--max-model-len or the model's limit); shorten them or raise --max-model-len");
  const int64_t blocks = int64_t{f.batch_size} * blocks_for(static_cast<int>(len), m.engine.block_size);
  NVLLM_CHECK(blocks <= m.runner().num_kv_blocks(), "bench latency: --batch-size ", f.batch_size, " sequences of ",
              len, " tokens need ", blocks, " KV blocks but the cache has ", m.runner().num_kv_blocks(),
              " (they would be preempted and timed twice); lower --batch-size or the lengths, or raise the cache");
}

int run_latency(const BenchFlags& f) {
  check_output_path(f.output_json, "--output-json");
  NVLLM_CHECK(f.model.data_parallel_size == 1, "bench latency --data-parallel-size ", f.model.data_parallel_size,
              ": latency times the steps of one engine; data-parallel engines each take their own requests, so "
              "measure them with bench throughput");
  LoadedModel m = load_model(f.model);
  WorkloadSpec spec;
  spec.num_prompts = f.batch_size;
  spec.input_len = parse_length_range(f.input_len, "--input-len");
  spec.output_len = parse_length_range(f.output_len, "--output-len");
  NVLLM_CHECK(spec.input_len.min == spec.input_len.max && spec.output_len.min == spec.output_len.max,
              "bench latency takes fixed lengths: --input-len N --output-len N");
  spec.params.temperature = f.temperature;
  spec.params.ignore_eos = true;
  spec.seed = f.model.seed;
  NVLLM_CHECK(f.batch_size <= m.engine.max_num_seqs, "--batch-size ", f.batch_size, " exceeds --max-num-seqs ",
              m.engine.max_num_seqs);
  const int input_len = spec.input_len.min, output_len = spec.output_len.min;
  check_latency_fits(f, m, input_len, output_len);
  warm_up(m, f);
  LatencyTimes t;
  for (int it = 0; it < f.iterations; ++it) {
    spec.seed = f.model.seed + it;
    if (!f.quiet) log_info("bench latency: iteration ", it + 1, " of ", f.iterations);
    RunResult run = run_requests(m, random_requests(m, spec));
    NVLLM_CHECK(run.stats.output_tokens == int64_t{f.batch_size} * output_len && run.stats.preemptions == 0,
                "bench latency: iteration ", it + 1, " produced ", run.stats.output_tokens, " of ",
                int64_t{f.batch_size} * output_len, " tokens with ", run.stats.preemptions,
                " preemptions; its timings would not be of the asked batch");
    add_latency_run(t, std::move(run), f.batch_size);
  }
  NVLLM_CHECK(output_len <= 1 || !t.decode_s.empty(), "bench latency: no decode step ran the whole batch of ",
              f.batch_size, ": the first sequences finished their ", output_len,
              " tokens while the last prompts were still prefilled (", t.prefill_steps,
              " prefill steps); raise --output-len past that, or --max-num-batched-tokens");
  const auto [peak_bandwidth, peak_flops] = peaks(f, m);
  const bool bounded = peak_bandwidth > 0;
  // Prefill: the prompts' FLOPs (cached tokens attended, not computed) and a weights read a step.
  const Roofline prefill_roof = run_roofline(f, m, t.last, t.prefill_steps, /*output_len=*/1);
  const double prefill_bound_s = bounded ? prefill_roof.min_time_s(peak_bandwidth, peak_flops) : 0.0;
  // Decode: no step can beat the first, whose context is the shortest (the prompt and one token).
  const Roofline step_roof =
      decode_step_roofline(m.config, f.batch_size, input_len + 1, weight_bytes_of(m), kv_element_bytes(f.model, m.device));
  const double step_bound_s = bounded ? step_roof.min_time_s(peak_bandwidth, peak_flops) : 0.0;
  const double prefill_p50 = percentile(t.prefill_s, 50), decode_p50 = percentile(t.decode_s, 50);
  const double device_p50 = percentile(t.decode_device_s, 50);

  nlohmann::json report = header(f, m, "latency");
  report["batch_size"] = f.batch_size;
  report["input_len"] = input_len;
  report["output_len"] = output_len;
  report["iterations"] = f.iterations;
  report["prefill_s"] = percentiles(t.prefill_s);
  report["decode_step_s"] = percentiles(t.decode_s);
  report["decode_step_device_s"] = percentiles(t.decode_device_s);
  report["e2e_s"] = percentiles(t.e2e_s);
  report["decode_tokens_per_s"] = decode_p50 > 0 ? f.batch_size / decode_p50 : 0.0;
  report["prefill_flops"] = prefill_roof.flops;
  report["prefill_steps"] = t.prefill_steps;
  report["decode_steps"] = static_cast<int64_t>(t.decode_s.size());  // of the whole batch, all iterations
  const auto bound_json = [&](double b) { return bounded ? nlohmann::json(b) : nlohmann::json(); };
  report["prefill_bound_s"] = bound_json(prefill_bound_s);
  report["decode_step_bound_s"] = bound_json(step_bound_s);
  report["decode_step_weights_bound_s"] = bound_json(bounded ? step_roof.weight_bytes / peak_bandwidth : 0.0);

  print_device(f, m);
  std::printf("batch %d, input %d, output %d, %d iterations\n", f.batch_size, input_len, output_len, f.iterations);
  std::printf("prefill ms        p50 %.2f  p90 %.2f  p99 %.2f", 1e3 * prefill_p50, 1e3 * percentile(t.prefill_s, 90),
              1e3 * percentile(t.prefill_s, 99));
  if (bounded) {
    std::printf("   (bound %.2f: %.3g TFLOP in %lld steps; p50 %.3g TFLOP/s, %.0f%% of the bound)", 1e3 * prefill_bound_s,
                prefill_roof.flops / 1e12, static_cast<long long>(t.prefill_steps), prefill_roof.flops / prefill_p50 / 1e12,
                100 * prefill_bound_s / prefill_p50);
  }
  std::printf("\ndecode step ms    p50 %.3f  p90 %.3f  p99 %.3f", 1e3 * decode_p50, 1e3 * percentile(t.decode_s, 90),
              1e3 * percentile(t.decode_s, 99));
  if (bounded) {
    std::printf("   (bound %.3f: weights %.3f + K/V of %d tokens a sequence; p50 %.0f%% of the bound)",
                1e3 * step_bound_s, 1e3 * step_roof.weight_bytes / peak_bandwidth, input_len + 1,
                100 * step_bound_s / decode_p50);
  }
  std::printf("\n");
  if (device_p50 > 0)
    std::printf("  of which GPU    p50 %.3f (the rest is the host: scheduling, batch packing, launch)\n", 1e3 * device_p50);
  std::printf("decode            %.1f tok/s", decode_p50 > 0 ? f.batch_size / decode_p50 : 0.0);
  if (bounded) std::printf("   (bound %.1f tok/s)", f.batch_size / step_bound_s);
  std::printf("\n");
  const std::string prefill_cause =
      std::string("the prefill steps may have been timed before their GPU work finished (prefix-cache hits are "
                  "already left out of the FLOP count), or ") +
      kCeilingCause;
  report["roofline_warnings"] = report_roofline_warnings({
      {"prefill p50", prefill_p50, prefill_bound_s, prefill_cause},
      {"decode step p50", decode_p50, step_bound_s, kTimingCause},
      {"decode step GPU p50", device_p50, step_bound_s, std::string("the device timer may miss work, or ") + kCeilingCause},
  });
  emit(f, report);
  return 0;
}

void add_common(CLI::App& cmd, BenchFlags& f) {
  add_model_flags(cmd, f.model);
  cmd.add_option("--output-len", f.output_len, "Output tokens per request: N or MIN:MAX")->capture_default_str();
  cmd.add_option("--input-len", f.input_len, "Prompt tokens per request: N or MIN:MAX")->capture_default_str();
  cmd.add_option("--temperature", f.temperature, "Sampling temperature (0: greedy)")
      ->check(number_at_least(0))
      ->capture_default_str();
  cmd.add_option("--output-json", f.output_json, "Write every figure, the command, the GPU and git revision as JSON");
  cmd.add_option("--peak-bandwidth", f.peak_bandwidth,
                 "Memory bandwidth ceiling for the roofline, bytes/s a GPU (default on the GPU: this GPU's device-to-device "
                 "copy rate, measured at start; on the CPU none: no roofline)")
      ->check(number_at_least(0, /*exclusive=*/true));
  cmd.add_option("--peak-flops", f.peak_flops,
                 "Matrix FLOP/s ceiling for the roofline, a GPU (default on the GPU: this GPU's bf16 GEMM rate, measured "
                 "at start)")
      ->check(number_at_least(0, /*exclusive=*/true));
  cmd.add_flag("--no-warmup", f.no_warmup, "Skip the untimed warm-up run");
  cmd.add_flag("-q,--quiet", f.quiet, "Print only the results and errors (no progress, no info lines)");
  cmd.parse_complete_callback([&f] {
    if (f.quiet) log_threshold() = LogLevel::kError;
  });
}

}  // namespace

Command make_bench_command() {
  auto flags = std::make_shared<BenchFlags>();
  auto mode = std::make_shared<std::string>();
  Command c;
  c.add_fn = [flags, mode](CLI::App& app) {
    CLI::App* bench = app.add_subcommand("bench", "Measure throughput or latency (nvllm bench throughput|latency --help)");
    bench->require_subcommand(1);
    CLI::App* tp = bench->add_subcommand("throughput", "Run a whole workload and report tok/s, TTFT/TPOT and the roofline");
    add_common(*tp, *flags);
    tp->add_option("--preset", flags->preset,
                   "A published workload: nano-vllm (256 requests, input and output lengths 100..1024, temperature "
                   "0.6); --num-prompts, --input-len, --output-len, --prefix-len or --temperature given with it "
                   "replace its values");
    tp->add_option("--input", flags->input, "Workload from a JSONL file (as nvllm generate reads) instead of flags");
    tp->add_option("--num-prompts", flags->num_prompts, "Requests in the workload")
        ->check(integer_at_least(1))
        ->capture_default_str();
    tp->add_option("--prefix-len", flags->prefix_len, "Tokens shared by the start of every prompt")
        ->check(integer_at_least(0))
        ->capture_default_str();
    tp->add_option("--schedule", flags->schedule,
                   "Admission order: fcfs (workload order) or prefix-aware (longest shared prefixes together)")
        ->check(CLI::IsMember({"fcfs", "prefix-aware"}))
        ->capture_default_str();
    tp->callback([mode, tp, flags] {
      *mode = "throughput";
      for (const char* flag : kWorkloadFlags)
        if (tp->count(flag) > 0) flags->given.insert(flag);
    });
    CLI::App* lat = bench->add_subcommand("latency", "Time prefill and per-step decode of a fixed batch");
    add_common(*lat, *flags);
    lat->add_option("--batch-size", flags->batch_size, "Sequences decoded together")
        ->check(integer_at_least(1))
        ->capture_default_str();
    lat->add_option("--iterations", flags->iterations, "Timed repetitions")
        ->check(integer_at_least(1))
        ->capture_default_str();
    lat->callback([mode] { *mode = "latency"; });
    return bench;
  };
  c.run = [flags, mode] { return *mode == "latency" ? run_latency(*flags) : run_throughput(*flags); };
  return c;
}

}  // namespace nvllm
