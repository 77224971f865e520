// The flags every engine-driving subcommand shares (model, device, cache, batching), and the
// one function that turns them into a loaded model: config, tokenizer, runner, EngineConfig.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/runner.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {

// Most CPU runner threads: a mistyped --threads must not start a million threads.
constexpr int kMaxThreads = 1024;

struct ModelFlags {
  std::string model;                 // a folder, or a hub id resolved in the Hugging Face cache
  std::string tokenizer;             // "": the model's
  std::string served_model_name;     // "": the model folder's name
  std::string device = "auto";       // auto | cpu | cuda
  std::string load_format = "auto";  // auto | safetensors | dummy
  std::string dtype = "auto";        // auto | bfloat16 | float16 | float32 (vLLM's aliases mapped)
  std::string generation_config = "auto";  // auto | vllm | DIR
  int max_model_len = 0;             // 0: the model's max_position_embeddings
  int block_size = 16;
  std::string prefix_caching = "on";
  std::string chunked_prefill = "on";
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  std::string scheduling_policy = "fcfs";  // fcfs | priority (requests' "priority" field)
  std::string admission = "planned";       // planned | greedy (see Scheduler)
  int num_kv_blocks = 0;  // 0: sized from memory
  double gpu_memory_utilization = 0.9;
  double cpu_kv_cache_gib = 4;  // CPU runner: KV-cache memory limit (vLLM's default)
  bool enforce_eager = false;
  bool trust_remote_code = false;  // accepted, no effect
  int threads = 0;  // CPU runner threads; 0: all cores
  int tensor_parallel_size = 1;  // CPU: simulated ranks; CUDA: one GPU per rank (NCCL)
  int data_parallel_size = 1;    // engines: one GPU (or tensor-parallel group) each; CPU: threads split
  uint64_t seed = 0;
  std::string quantization;            // "" or fp8 (vLLM's --quantization)
  std::string kv_cache_dtype = "auto";  // auto | bfloat16 | fp8 | fp8_e4m3
};

// Adds the shared flags to `app`, with help text and defaults.
void add_model_flags(CLI::App& app, ModelFlags& flags);

// --admission planned|greedy, with the help text generate, bench and inspect-cache share.
void add_admission_flag(CLI::App& app, std::string& admission);
Admission parse_admission(const std::string& admission);

// vLLM's short forms that CLI11 cannot declare (-tp, -dp): rewrites them in argv to the long
// names before parsing.
void expand_vllm_short_flags(int argc, char** argv);
// The checks of the flags alone (no file read), for a command to fail before it reads its input.
void check_model_flags(const ModelFlags& flags);

// One sequence must be able to reach max_model_len, or it would end as "length" early with no
// word: a cache of fewer tokens caps max_model_len to what it holds, with a warning that gives
// the numbers. Returns the length to use.
int fit_max_model_len(int max_model_len, int num_blocks, int block_size);

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::unique_ptr<Runner>> runners;  // one per data-parallel engine
  EngineConfig engine;
  std::string device;  // "cpu" or "cuda", resolved
  std::string device_name;
  int tensor_parallel_size = 1;
  bool fp8_weights = false;  // fp8_projections: the layers' projections hold one byte a weight

  Runner& runner() const { return *runners.at(0); }
  std::vector<Runner*> runner_ptrs() const;
  int num_gpus() const;  // GPUs the run uses (data x tensor parallel); 0 on the CPU
};

// Validates the flags, loads config, tokenizer and weights, and builds the runner. Logs what it
// does (model, device, KV cache size) at info level. Throws nvllm::Error naming the flag or file.
LoadedModel load_model(const ModelFlags& flags);

}  // namespace nvllm
