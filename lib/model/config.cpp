// Parsing of config.json / generation_config.json into ModelConfig. Every field is read through
// one of the typed getters below so that a missing or mistyped field always produces a message
// naming the file and the field.
#include "model/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace nvllm {

namespace {

using json = nlohmann::json;

constexpr const char* kSupported =
    "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, MistralForCausalLM";

json parse_json_object(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    fail(source, ": not valid JSON (", e.what(), "); re-download the file");
  }
  NVLLM_CHECK(j.is_object(), source, ": expected a JSON object at the top level, found ", j.type_name());
  return j;
}

// A field is absent when missing or null (HF writes null for "use the default").
bool has(const json& j, const char* field) { return j.contains(field) && !j.at(field).is_null(); }

int64_t get_int(const json& j, const char* field, const std::string& source, const std::string& prefix = "") {
  NVLLM_CHECK(has(j, field), source, ": missing required field \"", prefix, field, "\"");
  const json& v = j.at(field);
  NVLLM_CHECK(v.is_number_integer(), source, ": field \"", prefix, field, "\" must be an integer, found ",
              v.dump());
  return v.get<int64_t>();
}

int get_positive_int(const json& j, const char* field, const std::string& source) {
  const int64_t v = get_int(j, field, source);
  NVLLM_CHECK(v > 0 && v <= (int64_t{1} << 31) - 1, source, ": field \"", field,
              "\" must be a positive integer, found ", v);
  return static_cast<int>(v);
}

double get_number(const json& j, const char* field, const std::string& source, const std::string& prefix = "") {
  NVLLM_CHECK(has(j, field), source, ": missing required field \"", prefix, field, "\"");
  const json& v = j.at(field);
  NVLLM_CHECK(v.is_number(), source, ": field \"", prefix, field, "\" must be a number, found ", v.dump());
  return v.get<double>();
}

double get_positive_number(const json& j, const char* field, const std::string& source,
                           const std::string& prefix = "") {
  const double v = get_number(j, field, source, prefix);
  NVLLM_CHECK(v > 0, source, ": field \"", prefix, field, "\" must be positive, found ", v);
  return v;
}

bool get_bool(const json& j, const char* field, const std::string& source, bool fallback) {
  if (!has(j, field)) return fallback;
  const json& v = j.at(field);
  NVLLM_CHECK(v.is_boolean(), source, ": field \"", field, "\" must be true or false, found ", v.dump());
  return v.get<bool>();
}

// eos_token_id is an int or a list of ints in both config.json and generation_config.json.
void append_token_ids(const json& j, const char* field, const std::string& source, std::vector<int>* out) {
  if (!has(j, field)) return;
  const json& v = j.at(field);
  auto add = [&](const json& e) {
    NVLLM_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < (int64_t{1} << 31), source,
                ": field \"", field, "\" must be a token id (non-negative integer) or a list of them, found ",
                v.dump());
    const int id = static_cast<int>(e.get<int64_t>());
    if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(id);
  };
  if (v.is_array()) {
    for (const json& e : v) add(e);
  } else {
    add(v);
  }
}

Arch parse_arch(const json& j, const std::string& source, std::string* name) {
  NVLLM_CHECK(has(j, "architectures"), source, ": missing required field \"architectures\" (expected one of ",
              kSupported, ")");
  const json& a = j.at("architectures");
  NVLLM_CHECK(a.is_array() && !a.empty() && a[0].is_string(), source,
              ": field \"architectures\" must be a non-empty list of strings, found ", a.dump());
  *name = a[0].get<std::string>();
  static constexpr struct { const char* name; Arch arch; } kArchs[] = {
      {"Qwen3ForCausalLM", Arch::kQwen3},
      {"Qwen2ForCausalLM", Arch::kQwen2},
      {"LlamaForCausalLM", Arch::kLlama},
      {"MistralForCausalLM", Arch::kMistral},
  };
  for (const auto& e : kArchs) {
    if (*name == e.name) return e.arch;
  }
  fail(source, ": field \"architectures\": architecture \"", *name, "\" is not supported; supported: ", kSupported);
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also carries
// rope_theta). "default" means plain RoPE; only llama3 frequency scaling is implemented.
void parse_rope(const json& j, const std::string& source, ModelConfig* c) {
  const json* params = nullptr;
  std::string field;
  for (const char* f : {"rope_scaling", "rope_parameters"}) {
    if (!has(j, f)) continue;
    NVLLM_CHECK(j.at(f).is_object(), source, ": field \"", f, "\" must be an object or null, found ",
                j.at(f).dump());
    params = &j.at(f);
    field = f;
    break;
  }
  if (has(j, "rope_theta")) {
    c->rope_theta = get_positive_number(j, "rope_theta", source);
  } else if (params && has(*params, "rope_theta")) {
    c->rope_theta = get_positive_number(*params, "rope_theta", source, field + ".");
  }
  if (!params) return;
  const json& p = *params;
  std::string type;
  for (const char* f : {"rope_type", "type"}) {
    if (!has(p, f)) continue;
    NVLLM_CHECK(p.at(f).is_string(), source, ": field \"", field, ".", f, "\" must be a string, found ",
                p.at(f).dump());
    type = p.at(f).get<std::string>();
    break;
  }
  if (type.empty() || type == "default") return;
  NVLLM_CHECK(type == "llama3", source, ": field \"", field, "\": rope type \"", type,
              "\" is not supported; supported: llama3 (or none/default)");
  const std::string prefix = field + ".";
  RopeScaling& s = c->rope_scaling;
  s.type = "llama3";
  s.factor = get_positive_number(p, "factor", source, prefix);
  s.low_freq_factor = get_positive_number(p, "low_freq_factor", source, prefix);
  s.high_freq_factor = get_positive_number(p, "high_freq_factor", source, prefix);
  const int64_t orig = get_int(p, "original_max_position_embeddings", source, prefix);
  NVLLM_CHECK(orig > 0 && orig < (int64_t{1} << 31), source, ": field \"", prefix,
              "original_max_position_embeddings\" must be a positive integer, found ", orig);
  s.original_max_position_embeddings = static_cast<int>(orig);
  NVLLM_CHECK(s.high_freq_factor > s.low_freq_factor, source, ": field \"", prefix,
              "high_freq_factor\" (", s.high_freq_factor, ") must be greater than low_freq_factor (",
              s.low_freq_factor, ")");
}

// We run full causal attention. A sliding window only changes results beyond its length, so
// the usable context is capped at the window: exact results, and a clear error for longer
// prompts instead of silently different ones.
void apply_sliding_window(const json& j, const std::string& source, ModelConfig* c) {
  if (!has(j, "sliding_window")) return;
  const bool qwen = c->arch == Arch::kQwen2 || c->arch == Arch::kQwen3;
  if (qwen && !get_bool(j, "use_sliding_window", source, false)) return;
  const int window = get_positive_int(j, "sliding_window", source);
  if (window >= c->max_position_embeddings) return;
  log_warn(source, ": sliding_window ", window, " is not implemented; limiting the context to ", window,
           " tokens (max_position_embeddings ", c->max_position_embeddings, ")");
  c->max_position_embeddings = window;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  NVLLM_CHECK(in, path.string(), ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

ModelConfig parse_model_config(const std::string& config_json, const std::string& source,
                               const std::string* generation_config_json) {
  const json j = parse_json_object(config_json, source);
  ModelConfig c;
  c.arch = parse_arch(j, source, &c.architecture_name);
  c.vocab_size = get_positive_int(j, "vocab_size", source);
  c.hidden_size = get_positive_int(j, "hidden_size", source);
  c.intermediate_size = get_positive_int(j, "intermediate_size", source);
  c.num_layers = get_positive_int(j, "num_hidden_layers", source);
  c.num_heads = get_positive_int(j, "num_attention_heads", source);
  c.num_kv_heads = has(j, "num_key_value_heads") ? get_positive_int(j, "num_key_value_heads", source) : c.num_heads;
  NVLLM_CHECK(c.num_heads % c.num_kv_heads == 0, source, ": field \"num_attention_heads\" (", c.num_heads,
              ") must be a multiple of \"num_key_value_heads\" (", c.num_kv_heads, ")");
  if (has(j, "head_dim")) {
    c.head_dim = get_positive_int(j, "head_dim", source);
  } else {
    NVLLM_CHECK(c.hidden_size % c.num_heads == 0, source, ": field \"hidden_size\" (", c.hidden_size,
                ") is not a multiple of \"num_attention_heads\" (", c.num_heads, ") and no \"head_dim\" is given");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  NVLLM_CHECK(c.head_dim % 2 == 0, source, ": field \"head_dim\" must be even for rotary embeddings, found ",
              c.head_dim);
  // The fused q/k/v width (num_attention_heads + 2 x num_key_value_heads) x head_dim is an int
  // everywhere below; 2^24 is 900x the largest model's (Llama 3 405B: 18,432). Found by
  // config_fuzz: head_dim 133,333,328 overflowed it.
  const int64_t qkv_width = (int64_t{c.num_heads} + 2 * int64_t{c.num_kv_heads}) * c.head_dim;
  NVLLM_CHECK(qkv_width <= kMaxQkvWidth, source, ": fields \"head_dim\" (", c.head_dim, ") x (\"num_attention_heads\" (",
              c.num_heads, ") + 2 x \"num_key_value_heads\" (", c.num_kv_heads, ")) = ", qkv_width,
              " is larger than any model's; at most ", kMaxQkvWidth);
  c.max_position_embeddings = get_positive_int(j, "max_position_embeddings", source);
  parse_rope(j, source, &c);
  if (has(j, "rms_norm_eps")) c.rms_norm_eps = get_positive_number(j, "rms_norm_eps", source);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, false);
  c.attention_bias = c.arch == Arch::kQwen2 || get_bool(j, "attention_bias", source, false);
  c.qk_norm = c.arch == Arch::kQwen3;
  NVLLM_CHECK(!get_bool(j, "mlp_bias", source, false), source,
              ": field \"mlp_bias\" is true; MLP biases are not supported");
  if (has(j, "hidden_act")) {
    const json& act = j.at("hidden_act");
    NVLLM_CHECK(act == "silu", source, ": field \"hidden_act\" is ", act.dump(),
                "; only \"silu\" (SwiGLU MLP) is supported");
  }
  for (const char* f : {"torch_dtype", "dtype"}) {
    if (!has(j, f)) continue;
    NVLLM_CHECK(j.at(f).is_string(), source, ": field \"", f, "\" must be a string, found ", j.at(f).dump());
    c.torch_dtype = j.at(f).get<std::string>();
    break;
  }
  if (has(j, "bos_token_id")) {
    const int64_t bos = get_int(j, "bos_token_id", source);
    NVLLM_CHECK(bos >= 0 && bos < c.vocab_size, source, ": field \"bos_token_id\" (", bos,
                ") is outside the vocabulary [0, ", c.vocab_size, ")");
    c.bos_token_id = static_cast<int>(bos);
  }
  append_token_ids(j, "eos_token_id", source, &c.eos_token_ids);
  if (generation_config_json) {
    const std::string gen_source =
        (std::filesystem::path(source).parent_path() / "generation_config.json").string();
    const json g = parse_json_object(*generation_config_json, gen_source);
    append_token_ids(g, "eos_token_id", gen_source, &c.eos_token_ids);
  }
  for (int id : c.eos_token_ids) {
    NVLLM_CHECK(id < c.vocab_size, source, ": eos token id ", id, " is outside the vocabulary [0, ",
                c.vocab_size, ")");
  }
  apply_sliding_window(j, source, &c);
  if (has(j, "quantization_config")) c.quant = parse_quant_config(j.at("quantization_config"), source);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  NVLLM_CHECK(std::filesystem::is_directory(dir), dir.string(),
              ": not a folder; pass a Hugging Face checkpoint folder (with config.json)");
  const std::filesystem::path config = dir / "config.json";
  NVLLM_CHECK(std::filesystem::is_regular_file(config), config.string(),
              ": not found; a checkpoint folder needs the config.json of the model");
  const std::string text = read_file(config);
  const std::filesystem::path gen = dir / "generation_config.json";
  if (std::filesystem::is_regular_file(gen)) {
    const std::string gen_text = read_file(gen);
    return parse_model_config(text, config.string(), &gen_text);
  }
  return parse_model_config(text, config.string());
}

}  // namespace nvllm
