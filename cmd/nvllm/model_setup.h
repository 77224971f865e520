// The flags every engine-driving subcommand shares (model, device, cache, batching), and the
// one function that turns them into a loaded model: config, tokenizer, runner, EngineConfig.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/runner.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {

struct ModelFlags {
  std::string model;
  std::string device = "auto";       // auto | cpu | cuda
  std::string load_format = "auto";  // auto | dummy
  std::string dtype = "auto";        // auto | bfloat16 | float16 | float32
  int max_model_len = 0;             // 0: the model's max_position_embeddings
  int block_size = 16;
  std::string prefix_caching = "on";
  std::string chunked_prefill = "on";
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int num_kv_blocks = 0;  // 0: sized from memory
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  int threads = 0;  // CPU runner threads; 0: all cores
  int tensor_parallel_size = 1;  // CPU: simulated ranks; CUDA: one GPU only for now
  int data_parallel_size = 1;    // 1 only for now
  uint64_t seed = 0;
  std::string quantization;            // "" or fp8 (vLLM's --quantization)
  std::string kv_cache_dtype = "auto";  // auto | bfloat16 | fp8 | fp8_e4m3
};

// Adds the shared flags to `app`, with help text and defaults.
void add_model_flags(CLI::App& app, ModelFlags& flags);

// vLLM's short forms that CLI11 cannot declare (-tp, -dp): rewrites them in argv to the long
// names before parsing.
void expand_vllm_short_flags(int argc, char** argv);

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Runner> runner;
  EngineConfig engine;
  std::string device;  // "cpu" or "cuda", resolved
  std::string device_name;
};

// Validates the flags, loads config, tokenizer and weights, and builds the runner. Logs what it
// does (model, device, KV cache size) at info level. Throws nvllm::Error naming the flag or file.
LoadedModel load_model(const ModelFlags& flags);

}  // namespace nvllm
