#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/arch_table.h"
#include "model/config.h"
#include "model/fp8_weights.h"
#include "model/safetensors.h"
#include "model/test_util.h"
#include "model/weights.h"

namespace nvllm {

namespace {

using nlohmann::json;
using testing::ScratchDir;

// E4M3 decoded from the definition (independent of f8e4m3_to_f32): sign, 4 exponent bits with
// bias 7, 3 mantissa bits, subnormals m * 2^-9.
double e4m3(uint8_t v) {
  const int e = (v >> 3) & 0xf, m = v & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return v & 0x80 ? -mag : mag;
}

// A weight code that varies along both axes and never hits NaN (0x7f / 0xff).
uint8_t code_at(int64_t r, int64_t c) {
  return static_cast<uint8_t>((r * 7 + c * 3) % 0x7e | ((r + c) % 2 ? 0x80 : 0));
}

HostTensor fp8_weight(int64_t rows, int64_t cols) {
  HostTensor t(DType::kF8E4M3, {rows, cols});
  auto* d = reinterpret_cast<uint8_t*>(t.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) d[r * cols + c] = code_at(r, c);
  return t;
}

HostTensor bf16_tensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  HostTensor t(DType::kBF16, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.as<uint16_t>()[i] = f32_to_bf16(v[i]);
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

QuantConfig block_config() {
  return parse_quant_config(json::parse(R"({"activation_scheme": "dynamic", "modules_to_not_convert": null,
      "quant_method": "fp8", "weight_block_size": [128, 128]})"), "config.json");
}

}  // namespace

TEST_CASE("fp8 block scales: each 128 x 128 block its scale_inv, partial blocks by ceil-division") {
  ScratchDir dir;
  const HostTensor w = fp8_weight(130, 260);  // blocks: rows 0..127, 128..129; cols 0..127, 128..255, 256..259
  const std::vector<float> s = {0.5f, 2.0f, 0.25f, 4.0f, 0.125f, 8.0f};  // [2, 3]
  const HostTensor scale = bf16_tensor({2, 3}, s);
  write_safetensors(dir / "model.safetensors", {{"w.weight", &w}, {"w.weight_scale_inv", &scale}});
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  std::vector<float> out(130 * 260);
  dequantize_fp8_weight(ckpt, ckpt.get("w.weight"), block_config(), out.data());
  int mismatches = 0;
  for (int r = 0; r < 130; ++r) {
    for (int c = 0; c < 260; ++c) {
      const int block = (r >= 128 ? 3 : 0) + (c >= 256 ? 2 : c >= 128 ? 1 : 0);
      mismatches += out[r * 260 + c] != static_cast<float>(e4m3(code_at(r, c)) * s[block]);
    }
  }
  CHECK(mismatches == 0);
  // The block edges by hand: [127, 127] block 0, [128, 256] block 5.
  CHECK(out[127 * 260 + 127] == static_cast<float>(e4m3(code_at(127, 127)) * 0.5));
  CHECK(out[128 * 260 + 256] == static_cast<float>(e4m3(code_at(128, 256)) * 8.0));

  // A scale shaped by floor division ([1, 2]) is refused, naming the scale and the shape wanted.
  const HostTensor floor_scale = bf16_tensor({1, 2}, {1.0f, 1.0f});
  write_safetensors(dir / "model.safetensors", {{"w.weight", &w}, {"w.weight_scale_inv", &floor_scale}});
  const Checkpoint bad = Checkpoint::open(dir.path());
  const std::string msg =
      error_of([&] { dequantize_fp8_weight(bad, bad.get("w.weight"), block_config(), out.data()); });
  CHECK(msg.find("\"w.weight_scale_inv\" has shape [1, 2]; the scales of \"w.weight\" should be [2, 3]") !=
        std::string::npos);
  write_safetensors(dir / "model.safetensors", {{"w.weight", &w}});
  const Checkpoint missing = Checkpoint::open(dir.path());
  CHECK(error_of([&] { dequantize_fp8_weight(missing, missing.get("w.weight"), block_config(), out.data()); })
            .find("its scale \"w.weight_scale_inv\" is not in the checkpoint") != std::string::npos);
}

TEST_CASE("fp8 tensor and channel scales (compressed-tensors), and NaN codes refused") {
  ScratchDir dir;
  const HostTensor w = fp8_weight(3, 4);
  const HostTensor per_tensor = bf16_tensor({1}, {0.375f});
  const HostTensor per_channel = bf16_tensor({3, 1}, {0.5f, 3.0f, 0.0625f});
  write_safetensors(dir / "a.safetensors", {{"t.weight", &w}, {"t.weight_scale", &per_tensor}});
  write_safetensors(dir / "b.safetensors", {{"c.weight", &w}, {"c.weight_scale", &per_channel}});
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  QuantConfig q;
  q.method = "compressed-tensors";
  q.scaling = WeightScaling::kTensor;
  std::vector<float> out(12);
  dequantize_fp8_weight(ckpt, ckpt.get("t.weight"), q, out.data());
  for (int i = 0; i < 12; ++i) CHECK(out[i] == static_cast<float>(e4m3(code_at(i / 4, i % 4)) * 0.375));
  q.scaling = WeightScaling::kChannel;
  dequantize_fp8_weight(ckpt, ckpt.get("c.weight"), q, out.data());
  const double row_scale[3] = {0.5, 3.0, 0.0625};
  for (int i = 0; i < 12; ++i) CHECK(out[i] == static_cast<float>(e4m3(code_at(i / 4, i % 4)) * row_scale[i / 4]));
  // Per-tensor scale where per-channel is declared: [1] is not [3].
  q.scaling = WeightScaling::kChannel;
  CHECK(error_of([&] { dequantize_fp8_weight(ckpt, ckpt.get("t.weight"), q, out.data()); })
            .find("should be [3]") != std::string::npos);

  HostTensor nan = fp8_weight(3, 4);
  reinterpret_cast<uint8_t*>(nan.data())[5] = 0xff;
  ScratchDir dir2;
  write_safetensors(dir2 / "model.safetensors", {{"t.weight", &nan}, {"t.weight_scale", &per_tensor}});
  const Checkpoint bad = Checkpoint::open(dir2.path());
  q.scaling = WeightScaling::kTensor;
  CHECK(error_of([&] { dequantize_fp8_weight(bad, bad.get("t.weight"), q, out.data()); })
            .find("holds NaN (code 0xff) at [1, 1]") != std::string::npos);
}

TEST_CASE("fp8 checkpoint loads through load_weights: linear layers dequantised, the rest as stored") {
  std::ifstream in(std::filesystem::path(NVLLM_TESTDATA) / "tiny-qwen3/config.json");
  json j = json::parse(in);
  j["vocab_size"] = 96;
  j["bos_token_id"] = 1;
  j["eos_token_id"] = 2;
  j["intermediate_size"] = 200;  // gate/up [200, 64]: two row blocks; down [64, 200]: two column blocks
  j["quantization_config"] = {{"activation_scheme", "dynamic"}, {"quant_method", "fp8"},
                              {"weight_block_size", {128, 128}}};
  ScratchDir dir;
  std::ofstream(dir / "config.json") << j.dump();
  const ModelConfig c = load_model_config(dir.path());
  std::map<std::string, HostTensor> tensors;
  // Each weight's block scales: first * (1 + block index), stored in bf16. 0.3 is not a short
  // binary fraction (bf16: 0.30078125), so code * scale needs more than bf16's 8 bits.
  std::map<std::string, float> first_scale;
  float next = 0.3f;
  for (const CheckpointTensor& s : checkpoint_tensors(c)) {
    if (!is_layer_projection(s.slot)) {
      HostTensor t(DType::kF32, s.shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = 0.5f;
      tensors.emplace(s.name, std::move(t));
      continue;
    }
    tensors.emplace(s.name, fp8_weight(s.shape[0], s.shape[1]));
    const int64_t br = (s.shape[0] + 127) / 128, bc = (s.shape[1] + 127) / 128;
    std::vector<float> sc(static_cast<size_t>(br * bc));
    for (size_t i = 0; i < sc.size(); ++i) sc[i] = next * static_cast<float>(i + 1);
    first_scale[s.name] = bf16_to_f32(f32_to_bf16(next));
    next *= 2;
    tensors.emplace(s.name + "_scale_inv", bf16_tensor({br, bc}, sc));
  }
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, &t});
  write_safetensors(dir / "model.safetensors", entries);
  const ModelWeights w = load_weights(dir.path(), c, DType::kF32, LoadFormat::kAuto);
  // up_proj of layer 1: rows 200..399 of gate_up; its row 130 (block row 1), column 5 (block col 0).
  const float up_scale = first_scale.at("model.layers.1.mlp.up_proj.weight");
  CHECK(w.layers[1].gate_up.as<float>()[(200 + 130) * 64 + 5] ==
        static_cast<float>(e4m3(code_at(130, 5)) * up_scale * 2));
  // down_proj of layer 0: [64, 200], element [3, 150] in block column 1.
  const float down_scale = first_scale.at("model.layers.0.mlp.down_proj.weight");
  CHECK(w.layers[0].down.as<float>()[3 * 200 + 150] == static_cast<float>(e4m3(code_at(3, 150)) * down_scale * 2));
  // v_proj of layer 0: rows 256 + 128.. of qkv; one block row (128 rows), one block column.
  const float v_scale = first_scale.at("model.layers.0.self_attn.v_proj.weight");
  CHECK(w.layers[0].qkv.as<float>()[(384 + 127) * 64 + 63] == static_cast<float>(e4m3(code_at(127, 63)) * v_scale));
  CHECK(w.embed.as<float>()[17] == 0.5f);
  // The GPU runner's dtype: the same dequantised values, each rounded once to bf16.
  const ModelWeights b = load_weights(dir.path(), c, DType::kBF16, LoadFormat::kAuto);
  int rounded = 0;
  const auto same_rounded = [&](const HostTensor& f32, const HostTensor& bf16) {
    REQUIRE(bf16.dtype() == DType::kBF16);
    REQUIRE(f32.numel() == bf16.numel());
    for (int64_t i = 0; i < f32.numel(); ++i) {
      const float v = f32.as<float>()[i];
      REQUIRE(bf16.as<uint16_t>()[i] == f32_to_bf16(v));
      rounded += bf16_to_f32(f32_to_bf16(v)) != v;
    }
  };
  for (int l = 0; l < c.num_layers; ++l) {
    same_rounded(w.layers[l].qkv, b.layers[l].qkv);
    same_rounded(w.layers[l].o_proj, b.layers[l].o_proj);
    same_rounded(w.layers[l].gate_up, b.layers[l].gate_up);
    same_rounded(w.layers[l].down, b.layers[l].down);
  }
  same_rounded(w.embed, b.embed);
  CHECK(rounded > 0);  // the rounding itself was exercised
}

TEST_CASE("projections_fp8: every layer projection FP8 unless the ignore list keeps one in bf16") {
  std::ifstream in(std::filesystem::path(NVLLM_TESTDATA) / "tiny-qwen3/config.json");
  const json base = json::parse(in);
  const auto config_with = [&](const json& quant) {
    json j = base;
    if (!quant.is_null()) j["quantization_config"] = quant;
    ScratchDir dir;
    std::ofstream(dir / "config.json") << j.dump();
    return load_model_config(dir.path());
  };
  const json weights = {{"num_bits", 8},     {"type", "float"},       {"strategy", "channel"},
                        {"symmetric", true}, {"dynamic", false},      {"group_size", nullptr}};
  const json ct = {{"quant_method", "compressed-tensors"},
                   {"format", "float-quantized"},
                   {"quantization_status", "compressed"},
                   {"ignore", json::array()},
                   {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}}};
  CHECK_FALSE(projections_fp8(config_with(json())));
  CHECK(projections_fp8(config_with({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}})));
  json head_only = ct;
  head_only["ignore"] = {"lm_head"};
  CHECK(projections_fp8(config_with(head_only)));
  json one_layer = ct;
  one_layer["ignore"] = {"lm_head", "model.layers.1.mlp.down_proj"};  // the last layer's down stays bf16
  CHECK_FALSE(projections_fp8(config_with(one_layer)));
  json pattern = ct;
  pattern["ignore"] = {"re:.*self_attn\\.k_proj"};
  CHECK_FALSE(projections_fp8(config_with(pattern)));
}

// The CUDA runner holds an FP8 checkpoint's projections as E4M3 with one scale a row, quantised on
// the GPU (bit for bit fp8_quantize_rows) from the weights dequantised and rounded to bf16. Per
// channel, where each row's largest code is +-448 (scale = amax / 448, as such checkpoints are
// made), that gives back the published codes, with the scale within bf16's rounding; with one
// scale for the tensor, rows whose largest code is smaller are quantised anew (a second rounding).
TEST_CASE("fp8 per-channel codes survive bf16 dequantisation and per-row re-quantisation; per-tensor ones need not") {
  constexpr int kRows = 64, kCols = 96;
  const auto codes_of = [](int r, int c, bool full_range) -> uint8_t {
    if (c == r % kCols && (full_range || r % 2 == 0)) return r % 3 ? 0x7e : 0xfe;  // +-448
    return code_at(r, c) % 0x70 | (code_at(r, c) & 0x80);                         // below 448
  };
  for (const bool per_channel : {true, false}) {
    CAPTURE(per_channel);
    std::vector<float> w(kRows * kCols), published_scale(kRows);
    for (int r = 0; r < kRows; ++r) {
      published_scale[r] = per_channel ? std::ldexp(0.3f + 0.01f * r, -(r % 9)) : 0.0123f;
      for (int c = 0; c < kCols; ++c) {
        const double v = e4m3(codes_of(r, c, per_channel)) * published_scale[r];
        w[r * kCols + c] = bf16_to_f32(f32_to_bf16(static_cast<float>(v)));  // the upload's bf16
      }
    }
    std::vector<float> requantised = w;
    fp8_quantize_rows(requantised.data(), kRows, kCols);
    int rows_changed = 0;
    for (int r = 0; r < kRows; ++r) {
      float amax = 0;
      for (int c = 0; c < kCols; ++c) amax = std::max(amax, std::fabs(w[r * kCols + c]));
      const float scale = amax / 448.0f;
      if (per_channel) CHECK(std::fabs(scale / published_scale[r] - 1) <= std::ldexp(1.0, -8));
      bool same = true;
      for (int c = 0; c < kCols; ++c)
        same &= requantised[r * kCols + c] == static_cast<float>(e4m3(codes_of(r, c, per_channel)) * scale);
      rows_changed += !same;
    }
    if (per_channel) {
      CHECK(rows_changed == 0);
    } else {
      CHECK(rows_changed > 0);  // the odd rows (largest code under 448) were quantised anew
    }
  }
}

TEST_CASE("--quantization fp8: per-row scale amax / 448, round to nearest even, zero rows stay zero") {
  const float s1 = 1.0f / 448.0f;  // row amax 1
  std::vector<float> w = {
      0, 0, 0, 0,                                                   // amax 0
      448, -448, std::ldexp(1.0f, -9), std::ldexp(1.0f, -11),       // scale 1: exact, subnormal, flushed
      1.0f, 0.5f, -0.26f, 1e-6f,                                    // scale 1/448
      -2.0f, 1.0f, 0.0f, 0.01f,                                     // scale 2/448
  };
  fp8_quantize_rows(w.data(), 4, 4);
  for (int i = 0; i < 4; ++i) CHECK(w[i] == 0.0f);
  CHECK(w[4] == 448.0f);
  CHECK(w[5] == -448.0f);
  CHECK(w[6] == std::ldexp(1.0f, -9));  // the smallest subnormal survives
  CHECK(w[7] == 0.0f);                  // half of it ties to even: zero
  // 1 / s1 rounds to 448 (grid step 32 there); 0.5 / s1 = 224 exactly on the grid (step 16).
  CHECK(w[8] == 448.0f * s1);
  CHECK(w[9] == 224.0f * s1);
  // 0.26 * 448 = 116.48: grid step 8 in [64, 128): 112 or 120 -> 120.
  CHECK(w[10] == -120.0f * s1);
  // 1e-6 * 448 = 4.48e-4 is below half the smallest subnormal (2^-10 = 9.8e-4): zero.
  CHECK(w[11] == 0.0f);
  const float s3 = 2.0f / 448.0f;
  CHECK(w[12] == -448.0f * s3);
  CHECK(w[13] == 224.0f * s3);
  CHECK(w[14] == 0.0f);
  // 0.01 * 224 = 2.24: grid step 0.25 in [2, 4): 2.25.
  CHECK(w[15] == 2.25f * s3);
}

}  // namespace nvllm
