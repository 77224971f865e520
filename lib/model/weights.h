// ModelWeights: every tensor of one model in host memory, already fused the way both runners
// use them (q/k/v rows stacked into qkv, gate/up rows stacked into gate_up).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace nvllm {

enum class LoadFormat { kAuto, kDummy };

struct LayerWeights {
  HostTensor input_norm;  // [hidden]
  HostTensor qkv;         // [q_size + 2*kv_size, hidden]: q rows, then k rows, then v rows
  HostTensor qkv_bias;    // [q_size + 2*kv_size] or empty when the architecture has no bias
  HostTensor q_norm;      // [head_dim] or empty (Qwen3 only)
  HostTensor k_norm;      // [head_dim] or empty
  HostTensor o_proj;      // [hidden, q_size]
  HostTensor post_norm;   // [hidden]
  HostTensor gate_up;     // [2*intermediate, hidden]: gate rows, then up rows
  HostTensor down;        // [hidden, intermediate]
};

struct ModelWeights {
  HostTensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  HostTensor final_norm;  // [hidden]
  HostTensor lm_head;     // [vocab, hidden]; empty when tie_word_embeddings (use embed)

  const HostTensor& lm_head_or_embed() const { return lm_head.empty() ? embed : lm_head; }
};

// A deep copy of every tensor (data-parallel CPU runners each own theirs).
ModelWeights copy_weights(const ModelWeights& weights);

// Loads the checkpoint in `dir` into `dtype` (F32 for the CPU runner, BF16 or F16 for the
// GPU), converting element types as needed. kDummy draws every tensor from a fixed seed for
// the shapes in `config` and reads no weight file. Throws nvllm::Error naming the file and
// tensor for a missing, misshaped or corrupt weight.
ModelWeights load_weights(const std::filesystem::path& dir, const ModelConfig& config, DType dtype,
                          LoadFormat format, uint64_t dummy_seed = 0);

}  // namespace nvllm
