#include "cmd/nvllm/cuda_tuning_env.h"
#include "cmd/nvllm/model_setup.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "cmd/nvllm/fp8_setup.h"
#include "core/error.h"
#include "core/log.h"
#include "model/weights.h"
#include "runtime/cpu_runner.h"
#include "runtime/device.h"
#ifdef NVLLM_HAVE_CUDA
#include "runtime/cuda/cuda_runner.h"
#endif

namespace nvllm {

void add_model_flags(CLI::App& app, ModelFlags& f) {
  app.add_option("--model", f.model, "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer)")
      ->required();
  app.add_option("--device", f.device, "Where to run: cuda, cpu, or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--load-format", f.load_format,
                 "auto reads *.safetensors; dummy draws weights from a fixed seed (no weight files needed)")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  app.add_option("--dtype", f.dtype, "Compute dtype: auto (bfloat16 on GPU, float32 on CPU), bfloat16, float16, float32")
      ->check(CLI::IsMember({"auto", "bfloat16", "float16", "float32"}))
      ->capture_default_str();
  app.add_option("--max-model-len", f.max_model_len,
                 "Longest sequence (prompt + output) in tokens; 0 uses the model's max_position_embeddings")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--block-size", f.block_size, "Tokens per KV-cache block (power of two, 1..256)")
      ->capture_default_str();
  app.add_option("--prefix-caching", f.prefix_caching, "Reuse KV blocks of shared prompt prefixes: on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--chunked-prefill", f.chunked_prefill,
                 "Split long prompts across steps so decodes keep running: on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--max-num-seqs", f.max_num_seqs, "Most sequences in one step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "Token budget of one step, shared by decodes and prefill chunks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--num-kv-blocks", f.num_kv_blocks,
                 "KV-cache size in blocks, overriding the size computed from memory (0: computed)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "Fraction of GPU memory for weights, activations and KV cache")
      ->check(CLI::Range(0.05, 1.0))
      ->capture_default_str();
  app.add_flag("--enforce-eager", f.enforce_eager, "Do not capture CUDA graphs for decode steps");
  app.add_option("--threads", f.threads, "CPU runner threads (0: one per core)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--tensor-parallel-size", f.tensor_parallel_size,
                 "Tensor-parallel ranks (vLLM's -tp). --device cpu runs N simulated ranks, each with its slice of "
                 "the weights (a check of the sharded math, not a speed-up); CUDA: 1 for now")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--data-parallel-size", f.data_parallel_size,
                 "Engines on separate GPUs (vLLM's -dp); 1 for now: spread requests with --shard instead")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--quantization", f.quantization,
                 "fp8: quantise linear weights to E4M3 at load, one scale per output channel (CPU runner). FP8 "
                 "checkpoints (quantization_config in config.json) are detected without it")
      ->check(CLI::IsMember({"fp8"}));
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                 "KV-cache dtype: auto (the compute dtype), bfloat16, or fp8 / fp8_e4m3 (E4M3 with the checkpoint's "
                 "k_scale/v_scale, else 1.0; CPU runner)")
      ->check(CLI::IsMember({"auto", "bfloat16", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Base seed: requests without a seed get one derived from it and their line")
      ->capture_default_str();
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

void check_flags(const ModelFlags& f) {
  NVLLM_CHECK(f.block_size >= 1 && f.block_size <= 256 && (f.block_size & (f.block_size - 1)) == 0,
              "--block-size ", f.block_size, ": must be a power of two from 1 to 256");
}

// Several GPUs per process (NCCL) is not built yet: say so, with the GPU count, rather than
// silently using one.
void check_parallel(const ModelFlags& f, const std::string& device, const GpuInfo& gpu) {
  NVLLM_CHECK(f.data_parallel_size == 1, "--data-parallel-size ", f.data_parallel_size,
              ": not yet supported (one engine per process; ", gpu.device_count, " GPUs visible); run one "
              "process per GPU with --shard K/N and CUDA_VISIBLE_DEVICES, then nvllm merge");
  NVLLM_CHECK(device == "cpu" || f.tensor_parallel_size == 1, "--tensor-parallel-size ", f.tensor_parallel_size,
              ": the CUDA runner uses one GPU for now (", gpu.device_count, " visible); multi-GPU tensor "
              "parallelism over NCCL is not yet implemented. Use --tensor-parallel-size 1, or --device cpu "
              "to check the sharded math");
}

int cpu_kv_blocks(const ModelFlags& f, const ModelConfig& c, int max_model_len) {
  if (f.num_kv_blocks > 0) return f.num_kv_blocks;
  // Simulated tensor-parallel ranks hold a KV head each when there are fewer KV heads than ranks.
  KvLayout layout = c.kv_layout(f.block_size, kv_element_bytes(f, "cpu"));
  layout.num_kv_heads = std::max(c.num_kv_heads, f.tensor_parallel_size);
  const int64_t bytes_per_block = layout.bytes_per_block();
  const int64_t wanted = (int64_t{f.max_num_seqs} * max_model_len + f.block_size - 1) / f.block_size;
  const int64_t budget = (int64_t{2} << 30) / bytes_per_block;  // 2 GiB of host memory at most
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, budget)));
}

}  // namespace

LoadedModel load_model(const ModelFlags& f) {
  check_flags(f);
  LoadedModel m;
  m.config = load_model_config(f.model);
  GpuInfo gpu;
  m.device = resolve_device(f, &gpu);
  m.device_name = m.device == "cuda" ? gpu.name : "CPU";
  check_parallel(f, m.device, gpu);
  check_fp8(f, m.config, m.device);

  int max_model_len = m.config.max_position_embeddings;
  if (f.max_model_len > 0) {
    NVLLM_CHECK(max_model_len <= 0 || f.max_model_len <= max_model_len, "--max-model-len ", f.max_model_len,
                " exceeds the model's max_position_embeddings (", max_model_len, ")");
    max_model_len = f.max_model_len;
  }
  NVLLM_CHECK(max_model_len > 0, "--max-model-len: the model's config.json has no max_position_embeddings; set it");

  m.tokenizer = load_tokenizer(f.model);

  const auto start = std::chrono::steady_clock::now();
  const LoadFormat format = f.load_format == "dummy" ? LoadFormat::kDummy : LoadFormat::kAuto;
  if (m.device == "cpu") {
    NVLLM_CHECK(f.dtype == "auto" || f.dtype == "float32",
                "--dtype ", f.dtype, ": the CPU runner computes in float32; use --dtype auto or float32");
    ModelWeights weights = load_weights(f.model, m.config, DType::kF32, format, f.seed);
    apply_quantization(f, m.config, weights);
    const std::optional<KvScales> kv_scales = cpu_fp8_kv_scales(f, m.config);
    const int threads = f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int blocks = cpu_kv_blocks(f, m.config, max_model_len);
    m.runner = std::make_unique<CpuRunner>(m.config, std::move(weights), f.block_size, blocks, threads,
                                           f.tensor_parallel_size, kv_scales ? &*kv_scales : nullptr);
  } else {
#ifdef NVLLM_HAVE_CUDA
    NVLLM_CHECK(f.dtype == "auto" || f.dtype == "bfloat16",
                "--dtype ", f.dtype, ": the CUDA runner computes in bfloat16 (float16 checkpoints are "
                "converted on load); use --dtype auto or bfloat16");
    ModelWeights weights = load_weights(f.model, m.config, DType::kBF16, format, f.seed);
    CudaRunnerOptions options;
    options.block_size = f.block_size;
    options.max_num_seqs = f.max_num_seqs;
    options.max_num_batched_tokens = f.max_num_batched_tokens;
    options.max_model_len = max_model_len;
    // Chaining on (no caller of this runner reads last_logits); NVLLM_* switches for A/B timing.
    options.tuning = cuda_tuning_from_env();
    options.gpu_memory_utilization = f.gpu_memory_utilization;
    options.num_kv_blocks = f.num_kv_blocks;
    options.enforce_eager = f.enforce_eager;
    m.runner = make_cuda_runner(m.config, weights, options);
#endif
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log_info("loaded ", m.config.architecture_name, " (", m.config.num_layers, " layers, hidden ",
           m.config.hidden_size, ") on ", m.device_name, " in ", seconds, " s; KV cache ",
           m.runner->num_kv_blocks(), " blocks of ", f.block_size, " tokens (", kv_cache_dtype_name(f, m.device), ")");

  m.engine.block_size = f.block_size;
  m.engine.prefix_caching = f.prefix_caching == "on";
  m.engine.chunked_prefill = f.chunked_prefill == "on";
  m.engine.max_num_seqs = f.max_num_seqs;
  m.engine.max_num_batched_tokens = f.max_num_batched_tokens;
  m.engine.max_model_len = max_model_len;
  m.engine.eos_token_ids.assign(m.config.eos_token_ids.begin(), m.config.eos_token_ids.end());
  return m;
}

}  // namespace nvllm
