#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/quant_config.h"

namespace nvllm {

namespace {

using nlohmann::json;

// quantization_config as Qwen/Qwen3-8B-FP8 publishes it.
const char* kQwen3Fp8 = R"({"activation_scheme": "dynamic", "modules_to_not_convert": null,
    "quant_method": "fp8", "weight_block_size": [128, 128]})";

// As RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8 publishes it (compressed-tensors, static per-tensor).
const char* kRedHat = R"({"config_groups": {"group_0": {
      "input_activations": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null,
                            "num_bits": 8, "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor",
                            "symmetric": true, "type": "float"},
      "output_activations": null, "targets": ["Linear"],
      "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null, "num_bits": 8,
                  "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor", "symmetric": true,
                  "type": "float"}}},
    "format": "float-quantized", "global_compression_ratio": 1.24, "ignore": ["lm_head"],
    "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed"})";

std::string error_of(const json& q) {
  try {
    parse_quant_config(q, "m/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("quant config: the published Qwen3 FP8 and RedHat compressed-tensors forms") {
  const QuantConfig q = parse_quant_config(json::parse(kQwen3Fp8), "config.json");
  CHECK(q.scaling == WeightScaling::kBlock);
  CHECK(q.block_out == 128);
  CHECK(q.block_in == 128);
  CHECK(q.activation_scheme == "dynamic");

  const QuantConfig r = parse_quant_config(json::parse(kRedHat), "config.json");
  CHECK(r.scaling == WeightScaling::kTensor);
  CHECK(r.activation_scheme == "static");
  CHECK(r.ignores("lm_head"));
  CHECK_FALSE(r.ignores("model.layers.0.mlp.down_proj"));

  json channel = json::parse(kRedHat);
  auto& g = channel["config_groups"]["group_0"];
  g["weights"]["strategy"] = "channel";
  g["input_activations"] = {{"dynamic", true}, {"num_bits", 8}, {"strategy", "token"}, {"type", "float"}};
  channel["ignore"] = {"re:.*lm_head"};
  const QuantConfig ch = parse_quant_config(channel, "config.json");
  CHECK(ch.scaling == WeightScaling::kChannel);
  CHECK(ch.activation_scheme == "dynamic");
  CHECK(ch.ignores("lm_head"));

  const QuantConfig autofp8 = parse_quant_config(json{{"quant_method", "fp8"}, {"activation_scheme", "static"}}, "c");
  CHECK(autofp8.scaling == WeightScaling::kTensor);
}

TEST_CASE("quant config: other schemes and options are refused naming the scheme and field") {
  CHECK(error_of(json{{"quant_method", "awq"}, {"bits", 4}})
            .find("m/config.json: field \"quantization_config.quant_method\" is \"awq\"") != std::string::npos);
  CHECK(error_of(json{{"quant_method", "gptq"}}).find("\"gptq\"; supported: fp8") != std::string::npos);
  json q = json::parse(kQwen3Fp8);
  q["weight_block_size"] = {64, 128};
  CHECK(error_of(q).find("\"quantization_config.weight_block_size\" is [64,128]") != std::string::npos);
  q = json::parse(kQwen3Fp8);
  q["activation_scheme"] = "static";
  CHECK(error_of(q).find("activation_scheme\" is \"static\" with weight_block_size") != std::string::npos);
  q["activation_scheme"] = "per_token";
  CHECK(error_of(q).find("\"per_token\"; supported: dynamic, static") != std::string::npos);

  json c = json::parse(kRedHat);
  c["format"] = "int-quantized";
  CHECK(error_of(c).find("\"quantization_config.format\" is \"int-quantized\"") != std::string::npos);
  c = json::parse(kRedHat);
  c["config_groups"]["group_0"]["weights"]["type"] = "int";
  CHECK(error_of(c).find("\"quantization_config.config_groups.group_0.weights.type\" is \"int\"") !=
        std::string::npos);
  c = json::parse(kRedHat);
  c["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  CHECK(error_of(c).find("weights.num_bits\" is 4") != std::string::npos);
  c = json::parse(kRedHat);
  c["config_groups"]["group_0"]["weights"]["strategy"] = "block";
  CHECK(error_of(c).find("weights.strategy\" is \"block\"") != std::string::npos);
  c = json::parse(kRedHat);
  c["config_groups"]["group_0"]["input_activations"]["dynamic"] = true;  // dynamic per tensor
  CHECK(error_of(c).find("input_activations.strategy\" is \"tensor\" with dynamic true") != std::string::npos);
  c = json::parse(kRedHat);
  c["config_groups"]["group_1"] = c["config_groups"]["group_0"];
  CHECK(error_of(c).find("must hold exactly one group") != std::string::npos);
  c = json::parse(kRedHat);
  c["quantization_status"] = "frozen";
  CHECK(error_of(c).find("quantization_status\" is \"frozen\"") != std::string::npos);
}

}  // namespace nvllm
