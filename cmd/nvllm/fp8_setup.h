// FP8 in model setup: --quantization fp8 and --kv-cache-dtype (vLLM's names), FP8 checkpoints
// detected from config.json (the CUDA runner holds their projections as E4M3, one scale a row).
#pragma once

#include <optional>
#include <string>

#include "cmd/nvllm/model_setup.h"
#include "model/kv_scales.h"
#include "model/weights.h"

namespace nvllm {

// Throws nvllm::Error for --quantization fp8 over a checkpoint quantised otherwise and for
// --kv-cache-dtype bfloat16 on the CPU; warns when the CUDA runner must load an FP8 checkpoint
// dequantised to bf16 (its ignore list keeps some projection in bf16).
void check_fp8(const ModelFlags& f, const ModelConfig& config, const std::string& device);

// Whether --quantization fp8 (`quantization`: the flag's value) quantises the weights at load:
// the flag, over a checkpoint that is not FP8 already (whose own scales then rule).
bool quantize_at_load(const std::string& quantization, const ModelConfig& config);

// Whether the layers' projections run as E4M3 codes with one scale per output channel
// (CudaRunnerOptions::fp8_weights): --quantization fp8, or on the CUDA runner an FP8 checkpoint
// whose every projection is FP8 (projections_fp8). The CUDA runner quantises each row on the GPU
// from the dequantised bf16 weights: per-channel checkpoints get their published codes back, with
// each scale within bf16's rounding; block- and tensor-scaled ones are rounded to E4M3 a second
// time (its FP8 kernels take a scale per row, not per block). The CPU runner computes with the
// published values in float32.
// inspect-cache plans with the same rule on "cuda".
bool fp8_projections(const std::string& quantization, const ModelConfig& config, const std::string& device);

// The log line that says how fp8_projections' weights were made.
std::string fp8_weights_note(const ModelFlags& f, const ModelConfig& config);

// --quantization fp8 on the CPU runner's float32 weights (a no-op for a checkpoint already FP8);
// the CUDA runner quantises on the GPU (CudaRunnerOptions::fp8_weights), to the same codes.
void apply_quantization(const ModelFlags& f, const ModelConfig& config, ModelWeights& weights);

// The FP8 KV scales for --kv-cache-dtype fp8 / fp8_e4m3 (either runner); nullopt otherwise.
std::optional<KvScales> fp8_kv_scales(const ModelFlags& f, const ModelConfig& config);

// The KV cache's element type as bench and logs report it: "float32" (CPU), "bfloat16" (CUDA)
// or "fp8_e4m3".
std::string kv_cache_dtype_name(const ModelFlags& f, const std::string& device);

// Bytes per cached K or V element on `device`: 1 for fp8 (E4M3 codes, CPU and CUDA alike), else
// 2 (bfloat16, CUDA) or 4 (float32, CPU).
int kv_element_bytes(const ModelFlags& f, const std::string& device);

}  // namespace nvllm
