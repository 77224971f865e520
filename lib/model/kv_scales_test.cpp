#include "model/kv_scales.h"

#include <doctest/doctest.h>

#include "core/error.h"
#include "model/safetensors.h"
#include "model/test_util.h"

namespace nvllm {
namespace {

ModelConfig three_layers() {
  ModelConfig c;
  c.num_layers = 3;
  c.num_kv_heads = 2;
  return c;
}

HostTensor f32(std::vector<int64_t> shape, std::vector<float> v) {
  HostTensor t(DType::kF32, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.as<float>()[i] = v[i];
  return t;
}

std::string error_of(const std::filesystem::path& dir, const ModelConfig& c) {
  try {
    load_kv_scales(dir, c, LoadFormat::kAuto);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("kv scales: per-layer scalars broadcast over heads, per-head vectors, 1.0 where absent") {
  testing::ScratchDir dir;
  const HostTensor k0 = f32({}, {0.5f});         // layer 0: one value (shape [])
  const HostTensor v0 = f32({1}, {0.25f});       // one value (shape [1])
  const HostTensor k2 = f32({2}, {2.0f, 4.0f});  // layer 2: one per KV head
  HostTensor v2(DType::kBF16, {2});
  v2.as<uint16_t>()[0] = f32_to_bf16(0.125f);
  v2.as<uint16_t>()[1] = f32_to_bf16(3.0f);
  write_safetensors(dir / "model.safetensors", {{"model.layers.0.self_attn.k_scale", &k0},
                                                {"model.layers.0.self_attn.v_scale", &v0},
                                                {"model.layers.2.self_attn.k_scale", &k2},
                                                {"model.layers.2.self_attn.v_scale", &v2}});
  const KvScales s = load_kv_scales(dir.path(), three_layers(), LoadFormat::kAuto);
  CHECK(s.num_found == 4);
  CHECK(s.k == std::vector<float>{0.5f, 0.5f, 1.0f, 1.0f, 2.0f, 4.0f});
  CHECK(s.v == std::vector<float>{0.25f, 0.25f, 1.0f, 1.0f, 0.125f, 3.0f});
  const KvScales dummy = load_kv_scales(dir.path(), three_layers(), LoadFormat::kDummy);
  CHECK(dummy.num_found == 0);
  CHECK(dummy.k == std::vector<float>(6, 1.0f));
}

TEST_CASE("kv scales: wrong sizes, zero and non-float scales are refused naming the tensor") {
  testing::ScratchDir dir;
  const HostTensor three = f32({3}, {1, 1, 1});
  write_safetensors(dir / "model.safetensors", {{"model.layers.1.self_attn.k_scale", &three}});
  CHECK(error_of(dir.path(), three_layers())
            .find("\"model.layers.1.self_attn.k_scale\" has shape [3]; a KV-cache scale holds one value, or one per "
                  "KV head (2)") != std::string::npos);
  const HostTensor zero = f32({1}, {0.0f});
  write_safetensors(dir / "model.safetensors", {{"model.layers.0.self_attn.v_scale", &zero}});
  CHECK(error_of(dir.path(), three_layers()).find("must be positive and finite") != std::string::npos);
  HostTensor i32(DType::kI32, {1});
  write_safetensors(dir / "model.safetensors", {{"model.layers.0.self_attn.v_scale", &i32}});
  CHECK(error_of(dir.path(), three_layers()).find("has dtype I32") != std::string::npos);
}

}  // namespace nvllm
