#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace nvllm {

namespace {

using json = nlohmann::json;

const std::filesystem::path kTestdata = NVLLM_TESTDATA;

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  REQUIRE(in);
  return json::parse(in);
}

ModelConfig parse(const json& j, const std::string* gen = nullptr) {
  return parse_model_config(j.dump(), "some/dir/config.json", gen);
}

// The message of the Error that parsing `j` throws (empty when it does not throw).
std::string error_of(const json& j, const std::string* gen = nullptr) {
  try {
    parse(j, gen);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

json tiny() { return read_json(kTestdata / "tiny-qwen3/config.json"); }

}  // namespace

TEST_CASE("config: the tiny Qwen3 fixture with its generation config") {
  const ModelConfig c = load_model_config(kTestdata / "tiny-qwen3");
  CHECK(c.arch == Arch::kQwen3);
  CHECK(c.architecture_name == "Qwen3ForCausalLM");
  CHECK(c.vocab_size == 151936);
  CHECK(c.hidden_size == 64);
  CHECK(c.intermediate_size == 128);
  CHECK(c.num_layers == 2);
  CHECK(c.num_heads == 4);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.head_dim == 64);
  CHECK(c.q_size() == 256);
  CHECK(c.kv_size() == 128);
  CHECK(c.qkv_size() == 512);
  CHECK(c.max_position_embeddings == 4096);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rope_scaling.type == "none");
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.qk_norm);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.bos_token_id == 151643);
  // config.json's 151645 first, then generation_config.json's new id; the repeat is dropped.
  CHECK(c.eos_token_ids == std::vector<int>{151645, 151643});
}

TEST_CASE("config: Qwen3-0.6B") {
  const ModelConfig c = parse(read_json(kTestdata / "configs/qwen3-0.6b.json"));
  CHECK(c.arch == Arch::kQwen3);
  CHECK(c.num_layers == 28);
  CHECK(c.num_heads == 16);
  CHECK(c.num_kv_heads == 8);
  CHECK(c.head_dim == 128);  // given explicitly, not hidden / heads (= 64)
  CHECK(c.q_size() == 2048);
  CHECK(c.max_position_embeddings == 40960);
  CHECK(c.tie_word_embeddings);
  CHECK(c.qk_norm);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.eos_token_ids == std::vector<int>{151645});
}

TEST_CASE("config: Qwen2.5 always has q/k/v bias and no qk norm") {
  const ModelConfig c = parse(read_json(kTestdata / "configs/qwen2.5-0.5b-instruct.json"));
  CHECK(c.arch == Arch::kQwen2);
  CHECK(c.head_dim == 64);  // 896 / 14
  CHECK(c.num_kv_heads == 2);
  CHECK(c.attention_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.tie_word_embeddings);
  CHECK(c.rope_theta == 1e6);
  // use_sliding_window is false: the window field is ignored.
  CHECK(c.max_position_embeddings == 32768);
}

TEST_CASE("config: Llama 3.1 with llama3 rope scaling and a list of eos ids") {
  const ModelConfig c = parse(read_json(kTestdata / "configs/llama-3.1-8b-instruct.json"));
  CHECK(c.arch == Arch::kLlama);
  CHECK(c.head_dim == 128);
  CHECK(c.num_kv_heads == 8);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling.type == "llama3");
  CHECK(c.rope_scaling.factor == 8.0);
  CHECK(c.rope_scaling.low_freq_factor == 1.0);
  CHECK(c.rope_scaling.high_freq_factor == 4.0);
  CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.bos_token_id == 128000);
  CHECK(c.eos_token_ids == std::vector<int>{128001, 128008, 128009});
}

TEST_CASE("config: Llama 2 defaults (rope_theta 10000, no GQA)") {
  const ModelConfig c = parse(read_json(kTestdata / "configs/llama-2-7b.json"));
  CHECK(c.arch == Arch::kLlama);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.rope_scaling.type == "none");
  CHECK(c.num_kv_heads == 32);
  CHECK(c.head_dim == 128);
  CHECK(c.torch_dtype == "float16");
  CHECK(c.eos_token_ids == std::vector<int>{2});
}

TEST_CASE("config: Mistral") {
  const ModelConfig v3 = parse(read_json(kTestdata / "configs/mistral-7b-instruct-v0.3.json"));
  CHECK(v3.arch == Arch::kMistral);
  CHECK(v3.vocab_size == 32768);
  CHECK(v3.rope_theta == 1e6);
  CHECK(v3.max_position_embeddings == 32768);
  // v0.1 attends within a 4096-token window; we cap the context there so results stay exact.
  const ModelConfig v1 = parse(read_json(kTestdata / "configs/mistral-7b-v0.1.json"));
  CHECK(v1.max_position_embeddings == 4096);
  CHECK(v1.rope_theta == 10000.0);
}

TEST_CASE("config: defaults for absent optional fields") {
  json j = tiny();
  for (const char* f : {"head_dim", "num_key_value_heads", "rope_theta", "tie_word_embeddings", "torch_dtype",
                        "bos_token_id", "eos_token_id", "rope_scaling"}) {
    j.erase(f);
  }
  j["num_key_value_heads"] = nullptr;  // null reads as absent
  const ModelConfig c = parse(j);
  CHECK(c.head_dim == 16);  // 64 / 4
  CHECK(c.num_kv_heads == 4);
  CHECK(c.rope_theta == 10000.0);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK_FALSE(c.bos_token_id.has_value());
  CHECK(c.eos_token_ids.empty());
}

TEST_CASE("config: attention_bias for Llama and Qwen3 when set") {
  json j = read_json(kTestdata / "configs/llama-2-7b.json");
  j["attention_bias"] = true;
  CHECK(parse(j).attention_bias);
  json q = tiny();
  q["attention_bias"] = true;
  CHECK(parse(q).attention_bias);
}

TEST_CASE("config: transformers 5 spellings (dtype, rope_parameters)") {
  json j = read_json(kTestdata / "configs/llama-3.1-8b-instruct.json");
  j["dtype"] = j["torch_dtype"];
  j.erase("torch_dtype");
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = j["rope_theta"];
  j.erase("rope_scaling");
  j.erase("rope_theta");
  const ModelConfig c = parse(j);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling.type == "llama3");
  CHECK(c.rope_scaling.factor == 8.0);

  json q = tiny();
  q.erase("rope_theta");
  q["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  const ModelConfig qc = parse(q);
  CHECK(qc.rope_theta == 1e6);
  CHECK(qc.rope_scaling.type == "none");

  json legacy = tiny();  // the older "type" key
  legacy["rope_scaling"] = {{"type", "llama3"}, {"factor", 2.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1024}};
  CHECK(parse(legacy).rope_scaling.factor == 2.0);
}

TEST_CASE("config: eos ids from both files, int or list, deduplicated in order") {
  json j = tiny();
  j["eos_token_id"] = json::array({7, 3});
  const std::string gen = R"({"eos_token_id": [3, 9, 7, 11]})";
  CHECK(parse(j, &gen).eos_token_ids == std::vector<int>{7, 3, 9, 11});
  const std::string gen_int = R"({"eos_token_id": 5})";
  CHECK(parse(j, &gen_int).eos_token_ids == std::vector<int>{7, 3, 5});
  const std::string gen_none = R"({"temperature": 0.7})";
  CHECK(parse(j, &gen_none).eos_token_ids == std::vector<int>{7, 3});
}

TEST_CASE("config: every bad or missing field names the file and the field") {
  auto expect = [](const json& j, std::initializer_list<const char*> parts) {
    const std::string msg = error_of(j);
    CAPTURE(msg);
    REQUIRE_FALSE(msg.empty());
    CHECK(msg.find("some/dir/config.json") != std::string::npos);
    for (const char* p : parts) CHECK(msg.find(p) != std::string::npos);
  };
  for (const char* f : {"architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "max_position_embeddings"}) {
    json j = tiny();
    j.erase(f);
    expect(j, {f, "missing"});
  }
  {
    json j = tiny();
    j["architectures"] = {"GPT2LMHeadModel"};
    expect(j, {"architectures", "GPT2LMHeadModel", "Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM",
               "MistralForCausalLM"});
  }
  auto with = [](const char* field, json value) {
    json j = tiny();
    j[field] = std::move(value);
    return j;
  };
  expect(with("architectures", json::array()), {"architectures"});
  expect(with("architectures", "Qwen3ForCausalLM"), {"architectures"});
  expect(with("hidden_size", "64"), {"hidden_size", "integer"});
  expect(with("hidden_size", 64.5), {"hidden_size", "integer"});
  expect(with("num_hidden_layers", 0), {"num_hidden_layers", "positive"});
  expect(with("vocab_size", -3), {"vocab_size", "positive"});
  expect(with("num_key_value_heads", 3), {"num_key_value_heads", "multiple"});
  expect(with("head_dim", 15), {"head_dim", "even"});
  {  // Found by config_fuzz: the q/k/v width overflowed an int. Exactly at the limit it parses.
    json j = tiny();
    j["num_attention_heads"] = 32;
    j["num_key_value_heads"] = 8;
    j["head_dim"] = 133333328;
    expect(j, {"head_dim", "num_attention_heads", "num_key_value_heads", "at most 16777216"});
    j["num_attention_heads"] = 64;
    j["num_key_value_heads"] = 32;  // (64 + 2 x 32) x 131,072 = 2^24 exactly
    j["head_dim"] = 131072;
    CHECK(parse(j).qkv_size() == 16777216);
    j["head_dim"] = 131074;  // 2^24 + 256
    expect(j, {"head_dim", "at most"});
  }
  expect(with("rope_theta", "big"), {"rope_theta", "number"});
  expect(with("rope_theta", 0), {"rope_theta", "positive"});
  expect(with("rms_norm_eps", -1e-6), {"rms_norm_eps", "positive"});
  expect(with("tie_word_embeddings", "yes"), {"tie_word_embeddings"});
  expect(with("attention_bias", 1), {"attention_bias"});
  expect(with("hidden_act", "gelu"), {"hidden_act", "silu"});
  expect(with("mlp_bias", true), {"mlp_bias", "not supported"});
  expect(with("torch_dtype", 16), {"torch_dtype"});
  expect(with("bos_token_id", "<s>"), {"bos_token_id"});
  expect(with("bos_token_id", 200000), {"bos_token_id", "vocabulary"});
  expect(with("eos_token_id", json::array({1, "x"})), {"eos_token_id"});
  expect(with("eos_token_id", -1), {"eos_token_id"});
  expect(with("eos_token_id", 999999), {"eos token id", "vocabulary"});
  expect(with("rope_scaling", "llama3"), {"rope_scaling", "object"});
  expect(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), {"rope_scaling", "yarn", "llama3"});
  expect(with("rope_scaling", {{"type", "linear"}, {"factor", 4.0}}), {"rope_scaling", "linear"});
  expect(with("rope_parameters", {{"rope_type", "dynamic"}}), {"rope_parameters", "dynamic"});
  expect(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0}}),
         {"rope_scaling.original_max_position_embeddings", "missing"});
  expect(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", "8"}, {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}),
         {"rope_scaling.factor", "number"});
  {
    json j = tiny();
    j.erase("head_dim");
    j["hidden_size"] = 66;
    expect(j, {"hidden_size", "num_attention_heads", "head_dim"});
  }
}

TEST_CASE("config: bad JSON and bad generation_config.json name their file") {
  CHECK_THROWS_WITH_AS(parse_model_config("{\"vocab_size\": ", "x/config.json"),
                       doctest::Contains("x/config.json: not valid JSON"), Error);
  // Found by config_fuzz: a number past the range of a double threw out_of_range, not
  // parse_error, which escaped as an uncaught exception (abort).
  CHECK_THROWS_WITH_AS(parse_model_config("{\"rms_norm_eps\": 1e768}", "x/config.json"),
                       doctest::Contains("x/config.json: not valid JSON"), Error);
  CHECK_THROWS_WITH_AS(parse_model_config("[1, 2]", "x/config.json"),
                       doctest::Contains("x/config.json: expected a JSON object"), Error);
  const std::string bad_gen = R"({"eos_token_id": "</s>"})";
  const std::string msg = error_of(tiny(), &bad_gen);
  CHECK(msg.find("some/dir/generation_config.json") != std::string::npos);
  CHECK(msg.find("eos_token_id") != std::string::npos);
  const std::string broken_gen = "{";
  CHECK(error_of(tiny(), &broken_gen).find("some/dir/generation_config.json: not valid JSON") != std::string::npos);
}

TEST_CASE("config: load_model_config on a missing folder or file") {
  CHECK_THROWS_WITH_AS(load_model_config(kTestdata / "no-such-model"), doctest::Contains("no-such-model: not a folder"),
                       Error);
  CHECK_THROWS_WITH_AS(load_model_config(kTestdata / "configs"), doctest::Contains("configs/config.json: not found"),
                       Error);
}

}  // namespace nvllm
