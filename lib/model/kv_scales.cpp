#include "model/kv_scales.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "model/safetensors.h"

namespace nvllm {

namespace {

float element(const TensorView& t, int64_t i) {
  if (t.dtype == DType::kF32) {
    float f;
    std::memcpy(&f, t.data + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, t.data + 2 * i, 2);
  return t.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Fills out[0..heads) from `t`: one value for every head, or one per head.
void read_scale(const TensorView& t, int heads, float* out) {
  const std::string where = str_cat(t.file.string(), ": tensor \"", t.name, "\"");
  NVLLM_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16, where, " has dtype ",
              dtype_name(t.dtype), "; KV-cache scales must be F32, BF16 or F16");
  NVLLM_CHECK(t.numel() == 1 || t.numel() == heads, where, " has shape ", shape_string(t.shape),
              "; a KV-cache scale holds one value, or one per KV head (", heads, ")");
  for (int h = 0; h < heads; ++h) {
    out[h] = element(t, t.numel() == 1 ? 0 : h);
    NVLLM_CHECK(std::isfinite(out[h]) && out[h] > 0, where, " element ", h, " is ", out[h],
                "; KV-cache scales must be positive and finite");
  }
}

}  // namespace

KvScales default_kv_scales(const ModelConfig& c) {
  const size_t n = static_cast<size_t>(c.num_layers) * c.num_kv_heads;
  return KvScales{std::vector<float>(n, 1.0f), std::vector<float>(n, 1.0f), 0};
}

KvScales load_kv_scales(const std::filesystem::path& dir, const ModelConfig& c, LoadFormat format) {
  KvScales s = default_kv_scales(c);
  if (format == LoadFormat::kDummy) return s;
  const Checkpoint ckpt = Checkpoint::open(dir);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    const size_t at = static_cast<size_t>(l) * c.num_kv_heads;
    if (const TensorView* k = ckpt.find(p + "k_scale")) {
      read_scale(*k, c.num_kv_heads, &s.k[at]);
      ++s.num_found;
    }
    if (const TensorView* v = ckpt.find(p + "v_scale")) {
      read_scale(*v, c.num_kv_heads, &s.v[at]);
      ++s.num_found;
    }
  }
  return s;
}

}  // namespace nvllm
