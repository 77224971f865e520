#include <doctest/doctest.h>

#include <chrono>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/test_util.h"
#include "model/weights.h"

namespace nvllm {

namespace {

using nlohmann::json;
using testing::ScratchDir;

const std::filesystem::path kTestdata = NVLLM_TESTDATA;

// The tiny Qwen3 fixture with a small vocabulary so checkpoints stay a few kilobytes.
json tiny_json() {
  std::ifstream in(kTestdata / "tiny-qwen3/config.json");
  json j = json::parse(in);
  j["vocab_size"] = 96;
  j["bos_token_id"] = 1;
  j["eos_token_id"] = 2;
  return j;
}

ModelConfig config_of(const json& j) { return parse_model_config(j.dump(), "config.json"); }

// Hugging Face names and shapes written out by hand (independent of the architecture table).
std::vector<std::pair<std::string, std::vector<int64_t>>> hf_tensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, f = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {{"model.embed_tokens.weight", {c.vocab_size, h}},
                                                                   {"model.norm.weight", {h}}};
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.o_proj.weight", {h, q}});
    out.push_back({p + "mlp.gate_proj.weight", {f, h}});
    out.push_back({p + "mlp.up_proj.weight", {f, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, f}});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}});
      out.push_back({p + "self_attn.k_proj.bias", {kv}});
      out.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
  }
  return out;
}

// A checkpoint on disk with random values in `dtype`; `values` gets each tensor as float
// (exactly what the file holds, decoded).
struct WrittenCheckpoint {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::vector<float>> values;
};

WrittenCheckpoint make_tensors(const ModelConfig& c, DType dtype, uint32_t seed) {
  WrittenCheckpoint w;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (const auto& [name, shape] : hf_tensors(c)) {
    HostTensor t(dtype, shape);
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      const float x = dist(rng);
      if (dtype == DType::kF32) {
        t.as<float>()[i] = x;
        v[i] = x;
      } else if (dtype == DType::kBF16) {
        t.as<uint16_t>()[i] = f32_to_bf16(x);
        v[i] = bf16_to_f32(t.as<uint16_t>()[i]);
      } else {
        t.as<uint16_t>()[i] = f32_to_f16(x);
        v[i] = f16_to_f32(t.as<uint16_t>()[i]);
      }
    }
    w.values[name] = std::move(v);
    w.tensors.emplace(name, std::move(t));
  }
  return w;
}

void write_all(const std::filesystem::path& path, const WrittenCheckpoint& w, const std::set<std::string>& skip = {}) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, t] : w.tensors) {
    if (!skip.count(name)) entries.push_back({name, &t});
  }
  write_safetensors(path, entries);
}

// Element i of `t` as float, whatever its dtype.
float at(const HostTensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.as<float>()[i];
    case DType::kBF16: return bf16_to_f32(t.as<uint16_t>()[i]);
    default: return f16_to_f32(t.as<uint16_t>()[i]);
  }
}

// Checks rows [row0, row0 + rows) of `t` against `expected` (row-major, `cols` wide).
void check_rows(const HostTensor& t, int64_t row0, const std::vector<float>& expected, int64_t cols,
                const std::string& what) {
  CAPTURE(what);
  const int64_t rows = static_cast<int64_t>(expected.size()) / cols;
  int mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) mismatches += at(t, (row0 + r) * cols + k) != expected[r * cols + k];
  }
  CHECK(mismatches == 0);
}

// Every slot of `m` equals the written values, fused in the documented order.
void check_matches(const ModelWeights& m, const ModelConfig& c, const WrittenCheckpoint& w) {
  const int64_t h = c.hidden_size, f = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  CHECK(m.embed.shape() == std::vector<int64_t>{c.vocab_size, h});
  check_rows(m.embed, 0, w.values.at("model.embed_tokens.weight"), h, "embed");
  check_rows(m.final_norm, 0, w.values.at("model.norm.weight"), h, "final norm");
  if (c.tie_word_embeddings) {
    CHECK(m.lm_head.empty());
    CHECK(&m.lm_head_or_embed() == &m.embed);
  } else {
    check_rows(m.lm_head, 0, w.values.at("lm_head.weight"), h, "lm_head");
  }
  REQUIRE(m.layers.size() == static_cast<size_t>(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const LayerWeights& l = m.layers[i];
    CHECK(l.qkv.shape() == std::vector<int64_t>{q + 2 * kv, h});
    CHECK(l.gate_up.shape() == std::vector<int64_t>{2 * f, h});
    check_rows(l.input_norm, 0, w.values.at(p + "input_layernorm.weight"), h, p + "input norm");
    check_rows(l.post_norm, 0, w.values.at(p + "post_attention_layernorm.weight"), h, p + "post norm");
    check_rows(l.qkv, 0, w.values.at(p + "self_attn.q_proj.weight"), h, p + "q rows");
    check_rows(l.qkv, q, w.values.at(p + "self_attn.k_proj.weight"), h, p + "k rows");
    check_rows(l.qkv, q + kv, w.values.at(p + "self_attn.v_proj.weight"), h, p + "v rows");
    check_rows(l.o_proj, 0, w.values.at(p + "self_attn.o_proj.weight"), q, p + "o_proj");
    check_rows(l.gate_up, 0, w.values.at(p + "mlp.gate_proj.weight"), h, p + "gate rows");
    check_rows(l.gate_up, f, w.values.at(p + "mlp.up_proj.weight"), h, p + "up rows");
    check_rows(l.down, 0, w.values.at(p + "mlp.down_proj.weight"), f, p + "down");
    if (c.attention_bias) {
      check_rows(l.qkv_bias, 0, w.values.at(p + "self_attn.q_proj.bias"), 1, p + "q bias");
      check_rows(l.qkv_bias, q, w.values.at(p + "self_attn.k_proj.bias"), 1, p + "k bias");
      check_rows(l.qkv_bias, q + kv, w.values.at(p + "self_attn.v_proj.bias"), 1, p + "v bias");
    } else {
      CHECK(l.qkv_bias.empty());
    }
    if (c.qk_norm) {
      check_rows(l.q_norm, 0, w.values.at(p + "self_attn.q_norm.weight"), c.head_dim, p + "q norm");
      check_rows(l.k_norm, 0, w.values.at(p + "self_attn.k_norm.weight"), c.head_dim, p + "k norm");
    } else {
      CHECK(l.q_norm.empty());
      CHECK(l.k_norm.empty());
    }
  }
}

std::string load_error(const std::filesystem::path& dir, const ModelConfig& c) {
  try {
    load_weights(dir, c, DType::kF32, LoadFormat::kAuto);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("weights: BF16 checkpoint into F32 and BF16, fused in q,k,v and gate,up order") {
  const ModelConfig c = config_of(tiny_json());
  ScratchDir dir;
  const WrittenCheckpoint w = make_tensors(c, DType::kBF16, 11);
  write_all(dir / "model.safetensors", w);
  const ModelWeights f32 = load_weights(dir.path(), c, DType::kF32, LoadFormat::kAuto);
  CHECK(f32.embed.dtype() == DType::kF32);
  check_matches(f32, c, w);
  const ModelWeights bf16 = load_weights(dir.path(), c, DType::kBF16, LoadFormat::kAuto);
  CHECK(bf16.layers[1].qkv.dtype() == DType::kBF16);
  check_matches(bf16, c, w);
}

TEST_CASE("weights: bf16 to f32 conversion against hand-computed values") {
  ModelConfig c = config_of(tiny_json());
  ScratchDir dir;
  WrittenCheckpoint w = make_tensors(c, DType::kBF16, 12);
  // bf16 bit patterns and their values: sign | 8 exponent bits | 7 mantissa bits.
  uint16_t* norm = w.tensors.at("model.norm.weight").as<uint16_t>();
  norm[0] = 0x3f80;  // 1.0
  norm[1] = 0xc040;  // -(1 + 64/128) * 2^1 = -3.0
  norm[2] = 0x4049;  // (1 + 73/128) * 2^1 = 3.140625
  norm[3] = 0x0001;  // smallest subnormal: 2^-133
  norm[4] = 0x7f80;  // +inf
  norm[5] = 0x3c00;  // 2^-7 = 0.0078125
  write_all(dir / "model.safetensors", w);
  const ModelWeights m = load_weights(dir.path(), c, DType::kF32, LoadFormat::kAuto);
  const float* v = m.final_norm.as<float>();
  CHECK(v[0] == 1.0f);
  CHECK(v[1] == -3.0f);
  CHECK(v[2] == 3.140625f);
  CHECK(v[3] == std::ldexp(1.0f, -133));
  CHECK(std::isinf(v[4]));
  CHECK(v[5] == 0.0078125f);
}

TEST_CASE("weights: F16 and F32 checkpoints convert to BF16 with round to nearest even") {
  for (DType src : {DType::kF16, DType::kF32}) {
    CAPTURE(dtype_name(src));
    const ModelConfig c = config_of(tiny_json());
    ScratchDir dir;
    const WrittenCheckpoint w = make_tensors(c, src, 13);
    write_all(dir / "model.safetensors", w);
    const ModelWeights m = load_weights(dir.path(), c, DType::kBF16, LoadFormat::kAuto);
    const std::vector<float>& up = w.values.at("model.layers.1.mlp.up_proj.weight");
    const uint16_t* got = m.layers[1].gate_up.as<uint16_t>() + c.intermediate_size * c.hidden_size;
    int mismatches = 0;
    for (size_t i = 0; i < up.size(); ++i) mismatches += got[i] != f32_to_bf16(up[i]);
    CHECK(mismatches == 0);
    // And into F32 they are exact.
    check_matches(load_weights(dir.path(), c, DType::kF32, LoadFormat::kAuto), c, w);
  }
}

TEST_CASE("weights: Qwen2 (q/k/v bias) and Llama (untied lm_head) from a sharded checkpoint") {
  json q2 = tiny_json();
  q2["architectures"] = {"Qwen2ForCausalLM"};
  json llama = tiny_json();
  llama["architectures"] = {"LlamaForCausalLM"};
  llama["tie_word_embeddings"] = false;
  for (const json& j : {q2, llama}) {
    const ModelConfig c = config_of(j);
    CAPTURE(c.architecture_name);
    ScratchDir dir;
    const WrittenCheckpoint w = make_tensors(c, DType::kBF16, 14);
    // Layer 0 and the embedding in shard 1, the rest in shard 2.
    std::vector<SafetensorsEntry> s1, s2;
    json map = json::object();
    for (const auto& [name, t] : w.tensors) {
      const bool first = name.rfind("model.layers.0.", 0) == 0 || name == "model.embed_tokens.weight";
      (first ? s1 : s2).push_back({name, &t});
      map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    write_safetensors(dir / "model-00001-of-00002.safetensors", s1);
    write_safetensors(dir / "model-00002-of-00002.safetensors", s2);
    testing::write_bytes(dir / "model.safetensors.index.json", json{{"weight_map", map}}.dump());
    const ModelWeights m = load_weights(dir.path(), c, DType::kF32, LoadFormat::kAuto);
    check_matches(m, c, w);
    CHECK(m.layers[0].qkv_bias.empty() == !c.attention_bias);
    CHECK(m.lm_head.empty() == c.tie_word_embeddings);
  }
}

TEST_CASE("weights: missing, misshaped, fp8 and unsupported tensors give clear errors") {
  json llama_json = tiny_json();
  llama_json["architectures"] = {"LlamaForCausalLM"};
  llama_json["tie_word_embeddings"] = false;
  const ModelConfig c = config_of(tiny_json());
  const ModelConfig llama = config_of(llama_json);
  ScratchDir dir;
  const auto file = dir / "model.safetensors";
  {
    const WrittenCheckpoint w = make_tensors(c, DType::kBF16, 15);
    write_all(file, w, {"model.layers.1.mlp.up_proj.weight"});
    const std::string msg = load_error(dir.path(), c);
    CHECK(msg.find(dir.path().string()) != std::string::npos);
    CHECK(msg.find("no tensor \"model.layers.1.mlp.up_proj.weight\"") != std::string::npos);
  }
  {
    const WrittenCheckpoint w = make_tensors(llama, DType::kBF16, 16);
    write_all(file, w, {"lm_head.weight"});  // untied, so lm_head is required
    CHECK(load_error(dir.path(), llama).find("no tensor \"lm_head.weight\"") != std::string::npos);
  }
  {
    WrittenCheckpoint w = make_tensors(c, DType::kBF16, 17);
    w.tensors.insert_or_assign("model.layers.0.self_attn.k_proj.weight", HostTensor(DType::kBF16, {48, 64}));
    write_all(file, w);
    const std::string msg = load_error(dir.path(), c);
    CAPTURE(msg);
    CHECK(msg.find(file.string()) != std::string::npos);
    CHECK(msg.find("\"model.layers.0.self_attn.k_proj.weight\" has shape [48, 64], expected [128, 64]") !=
          std::string::npos);
  }
  {
    WrittenCheckpoint w = make_tensors(c, DType::kBF16, 18);
    HostTensor fp8(DType::kF8E4M3, {256, 64});  // q_proj of the tiny model: 4 heads x 64
    std::memset(fp8.data(), 0x38, fp8.nbytes());
    w.tensors.insert_or_assign("model.layers.0.self_attn.q_proj.weight", std::move(fp8));
    write_all(file, w);
    const std::string msg = load_error(dir.path(), c);
    CAPTURE(msg);
    CHECK(msg.find("\"model.layers.0.self_attn.q_proj.weight\" is F8_E4M3 but config.json has no "
                   "quantization_config") != std::string::npos);
  }
  {
    WrittenCheckpoint w = make_tensors(c, DType::kBF16, 19);
    w.tensors.insert_or_assign("model.norm.weight", HostTensor(DType::kI32, {64}));
    write_all(file, w);
    CHECK(load_error(dir.path(), c).find("\"model.norm.weight\" has dtype I32") != std::string::npos);
  }
  {
    json biased = llama_json;
    biased["attention_bias"] = true;
    const ModelConfig b = config_of(biased);
    WrittenCheckpoint w = make_tensors(b, DType::kBF16, 20);
    w.tensors.emplace("model.layers.0.self_attn.o_proj.bias", HostTensor(DType::kBF16, {64}));
    write_all(file, w);
    CHECK(load_error(dir.path(), b).find("\"model.layers.0.self_attn.o_proj.bias\" is a bias") != std::string::npos);
  }
  {
    ScratchDir empty;
    CHECK(load_error(empty.path(), c).find("--load-format dummy") != std::string::npos);
  }
}

TEST_CASE("weights: dummy format is deterministic, seed-dependent and reads no files") {
  const ModelConfig c = config_of(tiny_json());
  const auto nowhere = kTestdata / "no-such-folder";
  const ModelWeights a = load_weights(nowhere, c, DType::kF32, LoadFormat::kDummy, 7);
  const ModelWeights b = load_weights(nowhere, c, DType::kF32, LoadFormat::kDummy, 7);
  const ModelWeights other = load_weights(nowhere, c, DType::kF32, LoadFormat::kDummy, 8);
  auto same = [](const HostTensor& x, const HostTensor& y) {
    return x.nbytes() == y.nbytes() && std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
  };
  CHECK(same(a.embed, b.embed));
  CHECK(same(a.layers[1].qkv, b.layers[1].qkv));
  CHECK(same(a.layers[1].gate_up, b.layers[1].gate_up));
  CHECK_FALSE(same(a.embed, other.embed));
  CHECK_FALSE(same(a.layers[0].qkv, other.layers[0].qkv));
  CHECK(same(a.final_norm, other.final_norm));  // norms are 1 whatever the seed

  // Drawn per tensor name: q, k and v (and layers) differ from each other.
  const int64_t h = c.hidden_size;
  CHECK(std::memcmp(a.layers[0].qkv.data(), a.layers[1].qkv.data(), a.layers[0].qkv.nbytes()) != 0);
  CHECK(std::memcmp(a.layers[0].qkv.as<float>(), a.layers[0].qkv.as<float>() + c.q_size() * h,
                    c.kv_size() * h * sizeof(float)) != 0);

  // A deeper model with the same seed keeps the first layers: values depend on names only.
  json deeper = tiny_json();
  deeper["num_hidden_layers"] = 3;
  const ModelWeights d = load_weights(nowhere, config_of(deeper), DType::kF32, LoadFormat::kDummy, 7);
  CHECK(same(a.layers[1].down, d.layers[1].down));
  CHECK(same(a.embed, d.embed));

  // BF16 dummies are the F32 ones rounded.
  const ModelWeights h16 = load_weights(nowhere, c, DType::kBF16, LoadFormat::kDummy, 7);
  int mismatches = 0;
  for (int64_t i = 0; i < a.layers[0].gate_up.numel(); ++i) {
    mismatches += h16.layers[0].gate_up.as<uint16_t>()[i] != f32_to_bf16(a.layers[0].gate_up.as<float>()[i]);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("weights: dummy distributions (small embeddings, fan-in scaled linears, logit-scaling final norm)") {
  json j = tiny_json();
  j["vocab_size"] = 4096;  // enough samples for the moments below
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["tie_word_embeddings"] = false;
  const ModelConfig c = config_of(j);
  const ModelWeights m = load_weights("unused", c, DType::kF32, LoadFormat::kDummy, 1);
  // Uniform(-a, a): max |x| < a, mean 0, variance a^2 / 3. With n samples the sample variance
  // has relative standard error about sqrt(0.8 / n); the 5% tolerance is > 5 sigma for n >= 8192.
  auto check_uniform = [](const HostTensor& t, double a, const char* what) {
    CAPTURE(what);
    const auto v = t.f32();
    double sum = 0, sq = 0, max_abs = 0;
    for (float x : v) {
      sum += x;
      sq += double(x) * x;
      max_abs = std::max(max_abs, std::fabs(double(x)));
    }
    const double n = double(v.size()), mean = sum / n, var = sq / n - mean * mean;
    CHECK(max_abs < a);
    CHECK(max_abs > 0.99 * a);
    CHECK(std::fabs(mean) < 5 * a / std::sqrt(3 * n));
    CHECK(var == doctest::Approx(a * a / 3).epsilon(0.05));
  };
  check_uniform(m.embed, 0.1 * std::sqrt(3.0), "embed: standard deviation 0.1");
  check_uniform(m.lm_head, std::sqrt(3.0 / c.hidden_size), "lm_head");
  check_uniform(m.layers[0].qkv, std::sqrt(3.0 / c.hidden_size), "qkv");
  check_uniform(m.layers[0].gate_up, std::sqrt(3.0 / c.hidden_size), "gate_up");
  check_uniform(m.layers[0].down, std::sqrt(3.0 / c.intermediate_size), "down: fan-in = intermediate");
  for (float x : m.layers[1].qkv_bias.f32()) CHECK(std::fabs(x) < 0.02f);
  for (const HostTensor* t : {&m.layers[0].input_norm, &m.layers[1].post_norm}) {
    for (float x : t->f32()) CHECK(x == 1.0f);
  }
  for (float x : m.final_norm.f32()) CHECK(x == doctest::Approx(40.0 / std::sqrt(c.hidden_size)));
}

}  // namespace nvllm

namespace nvllm {

// Timing, not correctness: run with --no-skip -tc='*speed*'.
TEST_CASE("weights: dummy Qwen3-0.6B speed" * doctest::skip()) {
  std::ifstream in(kTestdata / "configs/qwen3-0.6b.json");
  const ModelConfig c = parse_model_config(std::string(std::istreambuf_iterator<char>(in), {}), "qwen3-0.6b.json");
  for (DType t : {DType::kBF16, DType::kF32}) {
    const auto start = std::chrono::steady_clock::now();
    const ModelWeights m = load_weights("unused", c, t, LoadFormat::kDummy, 0);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int64_t n = m.embed.numel() + m.final_norm.numel();
    for (const LayerWeights& l : m.layers) {
      for (const HostTensor* x : {&l.input_norm, &l.qkv, &l.q_norm, &l.k_norm, &l.o_proj, &l.post_norm, &l.gate_up, &l.down}) {
        n += x->numel();
      }
    }
    MESSAGE(dtype_name(t), ": ", n / 1e6, "M values in ", s, " s (", std::thread::hardware_concurrency(), " threads)");
  }
}

}  // namespace nvllm
