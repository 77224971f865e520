#include "cmd/nvllm/fp8_setup.h"

#include "core/error.h"
#include "core/log.h"
#include "model/fp8_weights.h"

namespace nvllm {

namespace {

bool fp8_kv(const ModelFlags& f) { return f.kv_cache_dtype == "fp8" || f.kv_cache_dtype == "fp8_e4m3"; }

}  // namespace

bool quantize_at_load(const std::string& quantization, const ModelConfig& config) {
  return quantization == "fp8" && !config.quant.quantized();
}

void check_fp8(const ModelFlags& f, const ModelConfig& config, const std::string& device) {
  if (!f.quantization.empty() && config.quant.quantized()) {
    NVLLM_CHECK(config.quant.method == "fp8", "--quantization ", f.quantization, ": ", f.model,
                "/config.json already declares quantization_config with quant_method \"", config.quant.method,
                "\"; drop --quantization (the checkpoint's scheme is detected)");
  }
  if (device != "cuda") {
    NVLLM_CHECK(f.kv_cache_dtype != "bfloat16", "--kv-cache-dtype bfloat16: the CPU runner keeps its KV cache in "
                                                "float32; use --kv-cache-dtype auto or fp8");
    return;
  }
  if (config.quant.quantized() && !projections_fp8(config)) {
    log_warn(f.model, "/config.json: an FP8 checkpoint (quantization_config ", config.quant.method,
             ") whose ignore list keeps some layer projections in bf16: the GPU runner holds FP8 codes for every "
             "projection or none, so all are dequantised to bfloat16 at load (the quantised model's outputs at "
             "bfloat16 speed, with twice the FP8 weights' memory)");
  }
}

bool fp8_projections(const std::string& quantization, const ModelConfig& config, const std::string& device) {
  return quantize_at_load(quantization, config) || (device == "cuda" && projections_fp8(config));
}

std::string fp8_weights_note(const ModelFlags& f, const ModelConfig& config) {
  if (quantize_at_load(f.quantization, config))
    return "--quantization fp8: linear weights quantised to E4M3 on the GPU, one scale per output channel";
  const std::string head = str_cat(f.model, "/config.json: an FP8 checkpoint (", config.quant.method, ", ");
  switch (config.quant.scaling) {
    case WeightScaling::kChannel:
      return head + "one scale per output channel): projections held as its E4M3 codes, each row's scale "
                    "re-derived on the GPU from the dequantised bf16 weights (within bf16 rounding)";
    case WeightScaling::kBlock:
      return head + "128 x 128 block scales): projections re-quantised on the GPU to E4M3 with one scale per "
                    "output channel (the GPU's FP8 kernels take no block scales): a second rounding of each "
                    "weight; the CPU runner computes with the published values";
    default:
      return head + "one scale per tensor): projections re-quantised on the GPU to E4M3 with one scale per "
                    "output channel: rows whose largest code is under 448 are rounded a second time, more finely";
  }
}

void apply_quantization(const ModelFlags& f, const ModelConfig& config, ModelWeights& weights) {
  if (!quantize_at_load(f.quantization, config)) return;
  quantize_weights_fp8(weights);
  log_info("--quantization fp8: linear weights quantised to E4M3 with one scale per output channel");
}

std::optional<KvScales> fp8_kv_scales(const ModelFlags& f, const ModelConfig& config) {
  if (!fp8_kv(f)) return std::nullopt;
  const LoadFormat format = f.load_format == "dummy" ? LoadFormat::kDummy : LoadFormat::kAuto;
  KvScales s = load_kv_scales(f.model, config, format);
  if (s.num_found == 0) {
    log_warn("--kv-cache-dtype ", f.kv_cache_dtype, ": the checkpoint has no k_scale/v_scale; using scale 1.0 "
             "(vLLM's default): K and V beyond +-448 saturate");
  }
  return s;
}

std::string kv_cache_dtype_name(const ModelFlags& f, const std::string& device) {
  if (fp8_kv(f)) return "fp8_e4m3";
  return device == "cuda" ? "bfloat16" : "float32";
}

int kv_element_bytes(const ModelFlags& f, const std::string& device) {
  if (fp8_kv(f)) return 1;
  return device == "cuda" ? 2 : 4;
}

}  // namespace nvllm
