// FP8 (E4M3) weights: dequantisation of checkpoints published in FP8 (with the scales their
// quantization_config names) and vLLM's --quantization fp8 (per-output-channel E4M3 quantised at
// load). Both give the float32 values the quantised model computes with: the CPU runner's logits
// are those of the quantised model.
#pragma once

#include <cstdint>

#include "model/quant_config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace nvllm {

// The name of the scale tensor of weight `weight_name` ("...q_proj.weight"): "..._scale_inv"
// for block scaling, "..._scale" for tensor and channel scaling.
std::string fp8_scale_name(const std::string& weight_name, WeightScaling scaling);

// Dequantises `w` (F8_E4M3, [out, in]) with its scale tensor from `ckpt` into out[out * in]:
// out[r, c] = fp8(w[r, c]) * scale, the scale of its 128 x 128 block (the last blocks partial:
// ceil-division), of its row, or of the tensor. Throws nvllm::Error naming the file and tensor
// for a missing or misshaped scale, or a NaN code in the weight.
void dequantize_fp8_weight(const Checkpoint& ckpt, const TensorView& w, const QuantConfig& q, float* out);

// Quantises each row of w [rows, cols] to E4M3 with scale amax(row) / 448 and writes back the
// dequantised values fp8(w / scale) * scale (an all-zero row stays zero).
void fp8_quantize_rows(float* w, int64_t rows, int64_t cols);

// Whether every layer projection (q, k, v, o, gate, up, down) of `config`'s checkpoint is FP8: a
// quantization_config whose ignore list leaves none of them in bf16. A runner that keeps E4M3
// codes with one scale per output channel may then hold every projection that way.
bool projections_fp8(const ModelConfig& config);

// --quantization fp8: fp8_quantize_rows on every linear layer's weight (qkv, o, gate/up, down;
// rows are output channels, so fusion does not matter). Embedding and LM head stay as loaded,
// as vLLM leaves them. Weights must be F32.
void quantize_weights_fp8(ModelWeights& w);

}  // namespace nvllm
