// How many KV blocks fit on a GPU after the weights and an activation reserve, as the CUDA
// runner sizes its cache (it measures the reserve with a warm-up pass; this estimates it).
#pragma once

#include <string>

#include "model/config.h"

namespace nvllm {

struct MemoryPlanInput {
  double gpu_bytes = 0;
  std::string source;  // where gpu_bytes came from (a flag, a device name, an assumption)
  double gpu_memory_utilization = 0.9;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int dtype_bytes = 2;  // weights and KV cache
  // --quantization fp8: the layers' projections take one byte a weight, the rest (embedding,
  // norms, LM head) dtype_bytes.
  bool fp8_weights = false;
  double block_bytes = 0;  // one KV block over all layers
};

struct MemoryPlan {
  double gpu_bytes = 0;
  std::string source;
  double weight_bytes = 0;
  double reserve_bytes = 0;
  int blocks_fit = 0;
};

MemoryPlan plan_memory(const MemoryPlanInput& in, const ModelConfig& c);

}  // namespace nvllm
