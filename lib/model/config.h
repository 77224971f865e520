// ModelConfig: what config.json (and generation_config.json) of a checkpoint folder says.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/kv_layout.h"
#include "model/quant_config.h"

namespace nvllm {

enum class Arch { kQwen3, kQwen2, kLlama, kMistral };

struct RopeScaling {
  // "none" or "llama3" (Llama 3.1+ frequency scaling). Other types are rejected at load.
  std::string type = "none";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Arch arch = Arch::kQwen3;
  std::string architecture_name;  // as in config.json, e.g. "Qwen3ForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // config's head_dim, else hidden_size / num_heads
  int max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections have a bias (Qwen2; Llama when set)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen3)
  std::string torch_dtype = "bfloat16";
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;  // union of config.json and generation_config.json
  QuantConfig quant;               // quantization_config; kNone when absent

  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  int qkv_size() const { return q_size() + 2 * kv_size(); }

  // Parameters of one decoder layer's matrices (qkv, o_proj, gate_up, down): 2 FLOPs each per token.
  double layer_matmul_params() const {
    const double h = hidden_size;
    return h * qkv_size() + static_cast<double>(q_size()) * h + 3.0 * h * intermediate_size;
  }
  // Parameters of the checkpoint as the memory plan counts them: the embedding, the LM head
  // unless tied, each layer's matrices and its two norms (biases and q/k norms left out).
  double num_parameters() const {
    const double h = hidden_size;
    return static_cast<double>(vocab_size) * h * (tie_word_embeddings ? 1 : 2) +
           num_layers * (layer_matmul_params() + 2 * h);
  }
  // The KV cache of this model in blocks of `block_size` tokens, `dtype_bytes` per element.
  KvLayout kv_layout(int block_size, int dtype_bytes) const {
    return {num_layers, num_kv_heads, head_dim, block_size, dtype_bytes};
  }
};

// The largest (num_attention_heads + 2 x num_key_value_heads) x head_dim a config may give.
inline constexpr int64_t kMaxQkvWidth = int64_t{1} << 24;

// Reads DIR/config.json and, when present, DIR/generation_config.json. Throws nvllm::Error
// naming the file and field for a missing folder, bad JSON, an unknown architecture or a
// missing or invalid field.
ModelConfig load_model_config(const std::filesystem::path& dir);

// Parses config.json text (and optional generation_config.json text) without touching the
// filesystem; `source` names the file in error messages.
ModelConfig parse_model_config(const std::string& config_json, const std::string& source,
                               const std::string* generation_config_json = nullptr);

}  // namespace nvllm
