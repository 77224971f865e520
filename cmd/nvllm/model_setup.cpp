#include "cmd/nvllm/cuda_tuning_env.h"
#include "cmd/nvllm/model_setup.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <thread>

#include <unistd.h>

#include "cmd/nvllm/cli_checks.h"
#include "cmd/nvllm/model_source.h"
#include "cmd/nvllm/fp8_setup.h"
#include "core/error.h"
#include "core/kv_layout.h"
#include "core/log.h"
#include "model/weights.h"
#include "runtime/cpu_runner.h"
#include "runtime/device.h"
#include "runtime/tp_split.h"
#ifdef NVLLM_HAVE_CUDA
#include "runtime/cuda/cuda_runner.h"
#endif

namespace nvllm {

namespace {

// vLLM's dtype spellings, mapped to ours.
std::string canonical_dtype(const std::string& d) {
  if (d == "bf16") return "bfloat16";
  if (d == "half" || d == "fp16") return "float16";
  if (d == "float" || d == "fp32") return "float32";
  return d;
}

// `--enable-NAME` / `--no-enable-NAME` (vLLM's spelling) beside our `--NAME on|off`.
void add_on_off_aliases(CLI::App& app, const std::string& name, std::string& value, const std::string& what) {
  app.add_flag_callback("--enable-" + name, [&value] { value = "on"; }, what + " on (vLLM's spelling of --" + name +
                                                                          " on)");
  app.add_flag_callback("--no-enable-" + name, [&value] { value = "off"; }, "Turn " + name + " off");
}

}  // namespace

void add_model_flags(CLI::App& app, ModelFlags& f) {
  app.add_option("--model", f.model,
                 "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer), or a hub id such as "
                 "Qwen/Qwen3-0.6B found in the local Hugging Face cache (offline; $HF_HUB_CACHE, $HF_HOME/hub, "
                 "~/.cache/huggingface/hub)")
      ->required();
  app.add_option("--tokenizer", f.tokenizer, "Tokenizer folder or hub id, if not the model's");
  app.add_option("--served-model-name", f.served_model_name,
                 "Model name written in the output records (default: the --model folder's name)");
  app.add_option("--device", f.device, "Where to run: cuda, cpu, or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--load-format", f.load_format,
                 "auto or safetensors read *.safetensors; dummy draws weights from a fixed seed (no weight files)")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}))
      ->capture_default_str();
  app.add_option("--dtype", f.dtype,
                 "Compute dtype: auto (bfloat16 on GPU, float32 on CPU), bfloat16 (bf16), float16 (half), "
                 "float32 (float)")
      ->transform([](std::string d) { return canonical_dtype(d); }, "", "dtype alias")
      ->check(CLI::IsMember({"auto", "bfloat16", "float16", "float32"}))
      ->capture_default_str();
  app.add_option("--generation-config", f.generation_config,
                 "Default sampling parameters: auto (the model's generation_config.json), vllm (neutral: "
                 "temperature 1, top_p 1, ...), or a folder holding a generation_config.json. Request fields "
                 "and the sampling flags override them")
      ->capture_default_str();
  app.add_option("--max-model-len", f.max_model_len,
                 "Longest sequence (prompt + output) in tokens; 0 uses the model's max_position_embeddings")
      ->check(integer_at_least(0))
      ->capture_default_str();
  app.add_option("--block-size", f.block_size, "Tokens per KV-cache block (power of two, 1..256)")
      ->check(integer_in(1, kMaxBlockSize))
      ->capture_default_str();
  app.add_option("--prefix-caching", f.prefix_caching, "Reuse KV blocks of shared prompt prefixes: on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  add_on_off_aliases(app, "prefix-caching", f.prefix_caching, "Turn prefix caching");
  app.add_option("--chunked-prefill", f.chunked_prefill,
                 "Split long prompts across steps so decodes keep running: on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  add_on_off_aliases(app, "chunked-prefill", f.chunked_prefill, "Turn chunked prefill");
  app.add_option("--max-num-seqs", f.max_num_seqs, "Most sequences in one step")
      ->check(integer_at_least(1))
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "Token budget of one step, shared by decodes and prefill chunks")
      ->check(integer_at_least(1))
      ->capture_default_str();
  app.add_option("--scheduling-policy", f.scheduling_policy,
                 "fcfs: requests run in arrival order; priority: by each request's \"priority\" field (lower "
                 "first, as in vLLM), then arrival; when the KV cache is full the lowest-priority sequence is "
                 "preempted first")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->capture_default_str();
  add_admission_flag(app, f.admission);
  app.add_option("--num-kv-blocks,--num-gpu-blocks-override", f.num_kv_blocks,
                 "KV-cache size in blocks, overriding the size computed from memory (0: computed)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "Fraction of GPU memory for weights, activations and KV cache")
      ->check(number_in(0.05, 1.0))
      ->capture_default_str();
  app.add_option("--cpu-kv-cache-space", f.cpu_kv_cache_gib,
                 "CPU runner: most host memory for the KV cache, GiB (it takes only what --max-num-seqs x "
                 "--max-model-len needs); vLLM's VLLM_CPU_KVCACHE_SPACE")
      ->check(number_at_least(0, /*exclusive=*/true))
      ->capture_default_str();
  app.add_flag("--enforce-eager", f.enforce_eager, "Do not capture CUDA graphs for decode steps");
  app.add_flag("--trust-remote-code", f.trust_remote_code,
               "Accepted for vLLM command lines; nvllm never runs code from a checkpoint");
  app.add_option("--threads", f.threads, str_cat("CPU runner threads (0: one per core; at most ", kMaxThreads, ")"))
      ->check(integer_in(0, kMaxThreads))
      ->capture_default_str();
  app.add_option("--tensor-parallel-size", f.tensor_parallel_size,
                 "Tensor-parallel ranks (vLLM's -tp): one GPU each, over NCCL, in one process. --device cpu runs N "
                 "simulated ranks, each with its slice of the weights (a check of the sharded math, not a speed-up)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--data-parallel-size", f.data_parallel_size,
                 "Engines in one process (vLLM's -dp), each on its own GPU (its own --tensor-parallel-size GPUs), "
                 "requests balanced by predicted tokens (prompt + max_tokens); --device cpu: the threads are split "
                 "among them")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--quantization", f.quantization,
                 "fp8: quantise linear weights to E4M3 at load, one scale per output channel. FP8 "
                 "checkpoints (quantization_config in config.json) are detected without it")
      ->check(CLI::IsMember({"fp8"}));
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                 "KV-cache dtype: auto (the compute dtype), bfloat16, or fp8 / fp8_e4m3 (E4M3 with the checkpoint's "
                 "k_scale/v_scale, else 1.0: one byte an element, twice the tokens of bf16)")
      ->transform([](std::string d) { return d == "bf16" ? std::string("bfloat16") : d; }, "", "dtype alias")
      ->check(CLI::IsMember({"auto", "bfloat16", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Base seed: requests without a seed get one derived from it and their line")
      ->check(unsigned_64())
      ->capture_default_str();
}

void add_admission_flag(CLI::App& app, std::string& admission) {
  app.add_option("--admission", admission,
                 "How waiting requests enter the KV cache. planned: admit a request only when the cache holds it "
                 "and every running request at every step until they end (prompt + max_tokens; a request that "
                 "may stop early at eos or a stop counts at the mean length of the finished ones), paced to the "
                 "rate the cache sustains when it is the limit: requests of known length are never preempted and "
                 "recomputed. greedy: vLLM's policy, admit while blocks are free now and preempt (recompute) the "
                 "newest requests when the cache runs out. nvllm inspect-cache compares both on a workload "
                 "without a GPU")
      ->check(CLI::IsMember({"planned", "greedy"}))
      ->capture_default_str();
}

Admission parse_admission(const std::string& admission) {
  return admission == "greedy" ? Admission::kGreedy : Admission::kPlanned;
}

void expand_vllm_short_flags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-tp") argv[i] = const_cast<char*>("--tensor-parallel-size");
    if (a == "-dp") argv[i] = const_cast<char*>("--data-parallel-size");
  }
}

namespace {

std::string resolve_device(const ModelFlags& f, GpuInfo* gpu) {
  *gpu = query_gpu();
  if (f.device == "cpu") return "cpu";
#ifndef NVLLM_HAVE_CUDA
  if (f.device == "cuda") fail("--device cuda: this nvllm was built without CUDA; use --device cpu");
  return "cpu";
#else
  if (f.device == "cuda") {
    NVLLM_CHECK(gpu->available, "--device cuda: no CUDA device is visible (check nvidia-smi and "
                                "CUDA_VISIBLE_DEVICES), or use --device cpu");
    return "cuda";
  }
  if (gpu->available) return "cuda";
  log_info("no GPU found; running on the CPU (float32 reference runner)");
  return "cpu";
#endif
}

}  // namespace

void check_model_flags(const ModelFlags& f) {
  NVLLM_CHECK(valid_block_size(f.block_size), "--block-size ", f.block_size, ": must be a power of two from 1 to ",
              kMaxBlockSize);
}

namespace {

// Each data-parallel engine takes its own GPUs, one per tensor-parallel rank: more than are
// visible is refused with the count, rather than sharing a GPU. (The CPU runner simulates its
// ranks, and its engines share the cores.)
void check_parallel(const ModelFlags& f, const std::string& device, const GpuInfo& gpu) {
  if (device != "cuda") return;
  const int dp = f.data_parallel_size, tp = f.tensor_parallel_size;
  const int64_t need = int64_t{dp} * tp;
  if (need <= gpu.device_count) return;
  const std::string visible = str_cat(gpu.device_count, " visible; CUDA_VISIBLE_DEVICES applies");
  if (tp == 1) {
    fail("--data-parallel-size ", dp, ": needs ", need, " GPUs (one per engine) but ", visible,
         "; lower it, or run one process per machine with --shard K/N");
  }
  if (dp == 1) {
    fail("--tensor-parallel-size ", tp, ": needs ", need, " GPUs (one per rank) but ", visible,
         "; lower it, or use --device cpu to check the sharded math");
  }
  fail("--data-parallel-size ", dp, " x --tensor-parallel-size ", tp, ": needs ", need,
       " GPUs (one per rank of each engine) but ", visible, "; lower them");
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The CPU runner's cache: what max_num_seqs sequences of max_model_len tokens need, within
// --cpu-kv-cache-space; said in one line, with what it means for the run.
// With data parallelism each engine has its own cache of that size, within 1/N of the space.
int cpu_kv_blocks(const ModelFlags& f, const ModelConfig& c, int max_model_len) {
  // Simulated tensor-parallel ranks hold a KV head each when there are fewer KV heads than ranks.
  KvLayout layout = c.kv_layout(f.block_size, kv_element_bytes(f, "cpu"));
  layout.num_kv_heads = std::max(c.num_kv_heads, f.tensor_parallel_size);
  const int64_t bytes_per_block = layout.bytes_per_block();
  if (f.num_kv_blocks > 0) {
    log_info("KV cache on the CPU: ", f.num_kv_blocks, " blocks (--num-kv-blocks), ",
             f.num_kv_blocks * bytes_per_block / kGiB, " GiB");
    return f.num_kv_blocks;
  }
  const int64_t wanted = int64_t{f.max_num_seqs} * ((max_model_len + f.block_size - 1) / f.block_size);
  const int64_t budget = static_cast<int64_t>(f.cpu_kv_cache_gib * kGiB / f.data_parallel_size) / bytes_per_block;
  NVLLM_CHECK(budget >= 1, "--cpu-kv-cache-space ", f.cpu_kv_cache_gib, " GiB holds no KV block of ",
              bytes_per_block, " bytes; raise it");
  const int64_t blocks = std::min({wanted, budget, int64_t{std::numeric_limits<int32_t>::max()}});
  const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  const double all_engines = static_cast<double>(blocks * bytes_per_block) * f.data_parallel_size;
  NVLLM_CHECK(physical <= 0 || all_engines < physical, "the CPU KV cache would take ", all_engines / kGiB,
              " GiB, more than this machine's ", physical / kGiB,
              " GiB of memory; lower --cpu-kv-cache-space (or --max-num-seqs, --max-model-len)");
  log_info("KV cache on the CPU: ", blocks, " blocks of ", f.block_size, " tokens (", blocks * bytes_per_block / kGiB,
           " GiB", f.data_parallel_size > 1 ? str_cat(" per engine, ", f.data_parallel_size, " engines") : "", "); ",
           blocks < wanted ? "limited by" : "within", " --cpu-kv-cache-space ", f.cpu_kv_cache_gib,
           " GiB; --max-num-seqs ", f.max_num_seqs, " x --max-model-len ", max_model_len, " would take ", wanted,
           " blocks");
  return static_cast<int>(blocks);
}

// Threads of each CPU runner: --threads (or every core) split among the data-parallel engines.
int cpu_threads(const ModelFlags& f) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = f.threads == 0 ? cores : f.threads;
  if (f.threads > cores) log_warn("--threads ", f.threads, " is more than this machine's ", cores, " cores");
  return std::max(1, threads / f.data_parallel_size);
}

}  // namespace

int fit_max_model_len(int max_model_len, int num_blocks, int block_size) {
  const int64_t capacity = int64_t{num_blocks} * block_size;
  if (capacity >= max_model_len) return max_model_len;
  log_warn("the KV cache holds ", capacity, " tokens (", num_blocks, " blocks of ", block_size, "), less than ",
           "--max-model-len ", max_model_len, ": one sequence could not grow to it, so --max-model-len is capped to ",
           capacity, " (raise --num-kv-blocks, --cpu-kv-cache-space or --gpu-memory-utilization for more)");
  return static_cast<int>(capacity);
}

std::vector<Runner*> LoadedModel::runner_ptrs() const {
  std::vector<Runner*> out;
  for (const auto& r : runners) out.push_back(r.get());
  return out;
}

int LoadedModel::num_gpus() const {
  return device == "cuda" ? static_cast<int>(runners.size()) * tensor_parallel_size : 0;
}

LoadedModel load_model(const ModelFlags& flags) {
  check_model_flags(flags);
  const ModelFlags f = resolve_model_paths(flags);
  LoadedModel m;
  m.config = load_model_config(f.model);
  GpuInfo gpu;
  m.device = resolve_device(f, &gpu);
  m.device_name = m.device == "cuda" ? gpu.name : "CPU";
  check_parallel(f, m.device, gpu);
  if (f.tensor_parallel_size > 1) (void)tp_rank(m.config, f.tensor_parallel_size, 0);  // divides? before loading
  check_fp8(f, m.config, m.device);

  int max_model_len = m.config.max_position_embeddings;
  if (f.max_model_len > 0) {
    NVLLM_CHECK(max_model_len <= 0 || f.max_model_len <= max_model_len, "--max-model-len ", f.max_model_len,
                " exceeds the model's max_position_embeddings (", max_model_len, ")");
    max_model_len = f.max_model_len;
  }
  NVLLM_CHECK(max_model_len > 0, "--max-model-len: the model's config.json has no max_position_embeddings; set it");

  m.tokenizer = load_tokenizer(f.tokenizer.empty() ? f.model : f.tokenizer);

  const auto start = std::chrono::steady_clock::now();
  const LoadFormat format = f.load_format == "dummy" ? LoadFormat::kDummy : LoadFormat::kAuto;
  const int engines = f.data_parallel_size;
  m.tensor_parallel_size = f.tensor_parallel_size;
  m.fp8_weights = fp8_projections(f.quantization, m.config, m.device);
  if (m.device == "cpu") {
    NVLLM_CHECK(f.dtype == "auto" || f.dtype == "float32",
                "--dtype ", f.dtype, ": the CPU runner computes in float32; use --dtype auto or float32");
    ModelWeights weights = load_weights(f.model, m.config, DType::kF32, format, f.seed);
    apply_quantization(f, m.config, weights);
    const std::optional<KvScales> kv_scales = fp8_kv_scales(f, m.config);
    const int blocks = cpu_kv_blocks(f, m.config, max_model_len);
    for (int e = 0; e < engines; ++e) {
      m.runners.push_back(std::make_unique<CpuRunner>(m.config, e + 1 < engines ? copy_weights(weights) : std::move(weights),
                                                      f.block_size, blocks, cpu_threads(f), f.tensor_parallel_size,
                                                      kv_scales ? &*kv_scales : nullptr));
    }
  } else {
#ifdef NVLLM_HAVE_CUDA
    NVLLM_CHECK(f.dtype == "auto" || f.dtype == "bfloat16",
                "--dtype ", f.dtype, ": the CUDA runner computes in bfloat16 (float16 checkpoints are "
                "converted on load); use --dtype auto or bfloat16");
    const ModelWeights weights = load_weights(f.model, m.config, DType::kBF16, format, f.seed);
    CudaRunnerOptions options;
    options.block_size = f.block_size;
    options.max_num_seqs = f.max_num_seqs;
    options.max_num_batched_tokens = f.max_num_batched_tokens;
    options.max_model_len = max_model_len;
    // Chaining on (no caller of this runner reads last_logits); NVLLM_* switches for A/B timing.
    options.tuning = cuda_tuning_from_env();
    options.gemv_max_batch = gemv_max_batch_from_env(options.gemv_max_batch);
    options.gpu_memory_utilization = f.gpu_memory_utilization;
    options.num_kv_blocks = f.num_kv_blocks;
    options.enforce_eager = f.enforce_eager;
    options.fp8_kv = fp8_kv_scales(f, m.config);
    options.fp8_weights = m.fp8_weights;
    if (options.fp8_weights) log_info(fp8_weights_note(f, m.config));
    options.tensor_parallel_size = f.tensor_parallel_size;
    for (int e = 0; e < engines; ++e) {  // engine e on GPUs e * tp ..
      options.device = e * f.tensor_parallel_size;
      m.runners.push_back(make_cuda_runner(m.config, weights, options));
    }
#endif
  }
  int blocks = m.runner().num_kv_blocks();
  for (const auto& r : m.runners) blocks = std::min(blocks, r->num_kv_blocks());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string layout =
      engines == 1 && f.tensor_parallel_size == 1 ? ""
      : str_cat(" x ", engines, engines == 1 ? " engine" : " engines",
                f.tensor_parallel_size > 1 ? str_cat(" of ", f.tensor_parallel_size, " tensor-parallel ranks") : "");
  log_info("loaded ", m.config.architecture_name, " (", m.config.num_layers, " layers, hidden ",
           m.config.hidden_size, ") on ", m.device_name, layout, " in ", seconds, " s; KV cache ", blocks,
           " blocks of ", f.block_size, " tokens", engines > 1 ? " per engine" : "", " (",
           kv_cache_dtype_name(f, m.device), ")");

  m.engine.block_size = f.block_size;
  m.engine.prefix_caching = f.prefix_caching == "on";
  m.engine.chunked_prefill = f.chunked_prefill == "on";
  m.engine.max_num_seqs = f.max_num_seqs;
  m.engine.max_num_batched_tokens = f.max_num_batched_tokens;
  m.engine.priority_scheduling = f.scheduling_policy == "priority";
  m.engine.admission = parse_admission(f.admission);
  m.engine.max_model_len = fit_max_model_len(max_model_len, blocks, f.block_size);
  m.engine.eos_token_ids.assign(m.config.eos_token_ids.begin(), m.config.eos_token_ids.end());
  return m;
}

}  // namespace nvllm
