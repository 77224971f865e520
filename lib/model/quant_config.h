// What config.json's quantization_config says about FP8 weights, for the schemes we load as
// published: quant_method "fp8" (block-scaled with weight_scale_inv, as Qwen3-*-FP8 and DeepSeek
// publish, or per-tensor weight_scale, as AutoFP8 wrote) and "compressed-tensors" with format
// "float-quantized" (per-tensor or per-channel weight_scale, as RedHatAI / neuralmagic publish).
// Anything else is refused at load, naming the scheme and the field.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nvllm {

enum class WeightScaling {
  kNone,     // not quantised: every weight BF16/F16/F32
  kBlock,    // "<w>_scale_inv" [ceil(out/bn), ceil(in/bk)]: weight = fp8 * scale_inv of its block
  kTensor,   // "<w>_scale" with one element: weight = fp8 * scale
  kChannel,  // "<w>_scale" [out, 1] or [out]: weight = fp8 * scale of its output row
};

struct QuantConfig {
  WeightScaling scaling = WeightScaling::kNone;
  std::string method;             // "fp8" or "compressed-tensors" (messages)
  int block_out = 128, block_in = 128;  // kBlock only
  // Activations: quantised on the fly per token ("dynamic") or with the checkpoint's per-tensor
  // input_scale ("static"); the CPU runner keeps them in float32 either way.
  std::string activation_scheme = "dynamic";
  std::vector<std::string> ignore;  // module names (or "re:" patterns) left unquantised

  bool quantized() const { return scaling != WeightScaling::kNone; }
  // Whether module `module` (a tensor name without ".weight") is left unquantised.
  bool ignores(const std::string& module) const;
};

// Parses config.json's "quantization_config" object; `source` names the file in errors.
QuantConfig parse_quant_config(const nlohmann::json& q, const std::string& source);

}  // namespace nvllm
