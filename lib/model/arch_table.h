// The architecture table: which tensors a Qwen3 / Qwen2 / Llama / Mistral checkpoint holds
// (Hugging Face names and shapes, derived from ModelConfig), where each one lands in
// ModelWeights (q/k/v rows fused into qkv, gate/up rows into gate_up), and how the dummy load
// format draws it. The one place that knows tensor names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace nvllm {

// A tensor of ModelWeights (per layer or global).
enum class WeightSlot {
  kEmbed, kInputNorm, kQkv, kQkvBias, kQNorm, kKNorm, kOProj, kPostNorm, kGateUp, kDown, kFinalNorm, kLmHead,
};

// Whether a slot holds a layer's projection weight (qkv, o_proj, gate_up, down): the linear layers
// that FP8 schemes quantise.
inline bool is_layer_projection(WeightSlot s) {
  return s == WeightSlot::kQkv || s == WeightSlot::kOProj || s == WeightSlot::kGateUp || s == WeightSlot::kDown;
}

// How --load-format dummy draws a tensor (see weights.cpp for the distributions).
enum class DummyInit { kOnes, kEmbedding, kLinear, kBias, kFinalNorm };

struct CheckpointTensor {
  std::string name;            // e.g. "model.layers.3.self_attn.k_proj.weight"
  std::vector<int64_t> shape;  // as stored in the checkpoint: [out, in] for linear layers
  int layer = -1;              // -1 for embed, final norm and lm_head
  WeightSlot slot = WeightSlot::kEmbed;
  int64_t row_offset = 0;      // first row of this tensor inside its (fused) slot
  DummyInit init = DummyInit::kOnes;
};

// Every tensor the checkpoint of `config` must hold, in a fixed order.
std::vector<CheckpointTensor> checkpoint_tensors(const ModelConfig& config);

// Shape of a slot in ModelWeights.
std::vector<int64_t> slot_shape(const ModelConfig& config, WeightSlot slot);

// The tensor of `w` a slot names (`layer` ignored for global slots).
HostTensor& slot_tensor(ModelWeights& w, WeightSlot slot, int layer);

}  // namespace nvllm
