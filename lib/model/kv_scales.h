// Scales of an FP8 KV cache: stored = e4m3(k / k_scale), read back as stored * k_scale (and
// the same for v), per layer and KV head. Read from the checkpoint's
// "model.layers.N.self_attn.k_scale" / "v_scale" (the names vLLM reads; one value per layer, or
// one per KV head), else 1.0, vLLM's default when a checkpoint has none.
#pragma once

#include <filesystem>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace nvllm {

struct KvScales {
  std::vector<float> k, v;  // [num_layers * num_kv_heads]
  int num_found = 0;        // scale tensors read from the checkpoint (0: all defaults)
};

// All 1.0 (vLLM's default without calibrated scales).
KvScales default_kv_scales(const ModelConfig& config);

// The checkpoint's k_scale / v_scale where present, 1.0 elsewhere; the dummy format reads no
// file. Throws nvllm::Error naming the file and tensor for a scale of the wrong size, or one not
// positive and finite.
KvScales load_kv_scales(const std::filesystem::path& dir, const ModelConfig& config, LoadFormat format);

}  // namespace nvllm
