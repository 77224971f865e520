#include "model/fp8_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/arch_table.h"

namespace nvllm {

namespace {

// The scale tensor as float32 values, checked against the shape the scheme requires.
std::vector<float> read_scales(const TensorView& s, const std::vector<int64_t>& want, const std::string& weight) {
  const std::string where = str_cat(s.file.string(), ": tensor \"", s.name, "\"");
  NVLLM_CHECK(s.dtype == DType::kF32 || s.dtype == DType::kBF16 || s.dtype == DType::kF16, where, " has dtype ",
              dtype_name(s.dtype), "; scales must be F32, BF16 or F16");
  int64_t n = 1;
  for (int64_t d : want) n *= d;
  std::vector<int64_t> squeezed = s.shape;  // [out, 1] and [out] alike; [] and [1] alike
  if (squeezed.size() == 2 && squeezed[1] == 1 && want.size() == 1) squeezed.pop_back();
  const bool ok = squeezed == want || (n == 1 && s.numel() == 1);
  NVLLM_CHECK(ok, where, " has shape ", shape_string(s.shape), "; the scales of \"", weight, "\" should be ",
              shape_string(want));
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (s.dtype == DType::kF32) {
      std::memcpy(&v[i], s.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, s.data + 2 * i, 2);
      v[i] = s.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    NVLLM_CHECK(std::isfinite(v[i]) && v[i] > 0, where, " element ", i, " is ", v[i],
                "; scales must be positive and finite");
  }
  return v;
}

}  // namespace

std::string fp8_scale_name(const std::string& weight_name, WeightScaling scaling) {
  return weight_name + (scaling == WeightScaling::kBlock ? "_scale_inv" : "_scale");
}

void dequantize_fp8_weight(const Checkpoint& ckpt, const TensorView& w, const QuantConfig& q, float* out) {
  const std::string where = str_cat(w.file.string(), ": tensor \"", w.name, "\"");
  NVLLM_CHECK(w.dtype == DType::kF8E4M3 && w.shape.size() == 2, where, " must be a 2-D F8_E4M3 weight");
  NVLLM_CHECK(q.quantized(), where, " is F8_E4M3 but config.json has no quantization_config");
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const std::string scale_name = fp8_scale_name(w.name, q.scaling);
  const TensorView* s = ckpt.find(scale_name);
  NVLLM_CHECK(s != nullptr, where, " is F8_E4M3 but its scale \"", scale_name, "\" is not in the checkpoint (",
              q.method, " quantization)");
  std::vector<int64_t> want;
  switch (q.scaling) {
    case WeightScaling::kBlock:
      want = {(rows + q.block_out - 1) / q.block_out, (cols + q.block_in - 1) / q.block_in};
      break;
    case WeightScaling::kChannel: want = {rows}; break;
    default: want = {1}; break;
  }
  const std::vector<float> scales = read_scales(*s, want, w.name);
  const auto* codes = reinterpret_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = codes[r * cols + c];
      NVLLM_CHECK((code & 0x7f) != 0x7f, where, " holds NaN (code 0x", std::hex, int{code}, std::dec, ") at [", r,
                  ", ", c, "]; the file is corrupt");
      float scale = scales[0];
      if (q.scaling == WeightScaling::kBlock) {
        scale = scales[(r / q.block_out) * want[1] + c / q.block_in];
      } else if (q.scaling == WeightScaling::kChannel) {
        scale = scales[r];
      }
      out[r * cols + c] = f8e4m3_to_f32(code) * scale;
    }
  }
}

void fp8_quantize_rows(float* w, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = w + r * cols;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    if (amax == 0) continue;
    const float scale = amax / kF8E4M3Max;
    for (int64_t c = 0; c < cols; ++c) row[c] = f8e4m3_to_f32(f32_to_f8e4m3(row[c] / scale)) * scale;
  }
}

bool projections_fp8(const ModelConfig& config) {
  if (!config.quant.quantized()) return false;
  for (const CheckpointTensor& t : checkpoint_tensors(config)) {
    const std::string suffix = ".weight";
    if (is_layer_projection(t.slot) && t.name.ends_with(suffix) &&
        config.quant.ignores(t.name.substr(0, t.name.size() - suffix.size())))
      return false;
  }
  return true;
}

void quantize_weights_fp8(ModelWeights& w) {
  for (LayerWeights& l : w.layers) {
    for (HostTensor* t : {&l.qkv, &l.o_proj, &l.gate_up, &l.down}) {
      NVLLM_CHECK(t->dtype() == DType::kF32, "--quantization fp8: weights must be loaded as F32 (CPU runner)");
      fp8_quantize_rows(t->as<float>(), t->dim(0), t->numel() / t->dim(0));
    }
  }
}

}  // namespace nvllm
