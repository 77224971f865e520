// Parsing of quantization_config. Each option we do not implement fails with the file, the field
// path and the value, rather than loading weights we would compute with wrongly.
#include "model/quant_config.h"

#include <regex>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace nvllm {

namespace {

using json = nlohmann::json;

bool has(const json& j, const char* f) { return j.contains(f) && !j.at(f).is_null(); }

std::string get_string(const json& j, const char* f, const std::string& source, const std::string& path) {
  NVLLM_CHECK(has(j, f), source, ": missing field \"", path, f, "\"");
  NVLLM_CHECK(j.at(f).is_string(), source, ": field \"", path, f, "\" must be a string, found ", j.at(f).dump());
  return j.at(f).get<std::string>();
}

std::vector<std::string> get_strings(const json& j, const char* f, const std::string& source,
                                     const std::string& path) {
  std::vector<std::string> out;
  if (!has(j, f)) return out;
  const json& v = j.at(f);
  NVLLM_CHECK(v.is_array(), source, ": field \"", path, f, "\" must be a list of strings, found ", v.dump());
  for (const json& e : v) {
    NVLLM_CHECK(e.is_string(), source, ": field \"", path, f, "\" must be a list of strings, found ", v.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// Requires j[f] == want when present (absent means the default, which is `want`).
void expect_value(const json& j, const char* f, const json& want, const std::string& source, const std::string& path,
                  const std::string& scheme) {
  if (!has(j, f) || j.at(f) == want) return;
  fail(source, ": field \"", path, f, "\" is ", j.at(f).dump(), "; ", scheme, " is supported only with ",
       want.dump());
}

QuantConfig parse_fp8(const json& q, const std::string& source) {
  const std::string p = "quantization_config.";
  QuantConfig c;
  c.method = "fp8";
  expect_value(q, "fmt", "e4m3", source, p, "quant_method \"fp8\"");
  if (has(q, "activation_scheme")) {
    c.activation_scheme = get_string(q, "activation_scheme", source, p);
    NVLLM_CHECK(c.activation_scheme == "dynamic" || c.activation_scheme == "static", source, ": field \"", p,
                "activation_scheme\" is \"", c.activation_scheme, "\"; supported: dynamic, static");
  }
  c.ignore = get_strings(q, "modules_to_not_convert", source, p);
  for (const std::string& m : get_strings(q, "ignored_layers", source, p)) c.ignore.push_back(m);
  if (!has(q, "weight_block_size")) {
    c.scaling = WeightScaling::kTensor;  // AutoFP8: one weight_scale per tensor
    return c;
  }
  const json& b = q.at("weight_block_size");
  NVLLM_CHECK(b == json::array({128, 128}), source, ": field \"", p, "weight_block_size\" is ", b.dump(),
              "; quant_method \"fp8\" is supported with [128, 128] blocks only");
  c.scaling = WeightScaling::kBlock;
  NVLLM_CHECK(c.activation_scheme == "dynamic", source, ": field \"", p,
              "activation_scheme\" is \"static\" with weight_block_size; block-scaled fp8 is supported with "
              "dynamic activations only");
  return c;
}

// One config group's "weights" and "input_activations".
void parse_group(const json& g, const std::string& source, const std::string& path, QuantConfig* c) {
  const std::string scheme = "compressed-tensors";
  const std::vector<std::string> targets = get_strings(g, "targets", source, path);
  NVLLM_CHECK(targets == std::vector<std::string>{"Linear"}, source, ": field \"", path, "targets\" is ",
              g.contains("targets") ? g.at("targets").dump() : "missing", "; supported: [\"Linear\"]");
  NVLLM_CHECK(has(g, "weights") && g.at("weights").is_object(), source, ": missing object \"", path, "weights\"");
  const json& w = g.at("weights");
  const std::string wp = path + "weights.";
  expect_value(w, "type", "float", source, wp, scheme + " (fp8 weights)");
  expect_value(w, "num_bits", 8, source, wp, scheme + " (fp8 weights)");
  expect_value(w, "symmetric", true, source, wp, scheme);
  expect_value(w, "dynamic", false, source, wp, scheme);
  expect_value(w, "group_size", nullptr, source, wp, scheme);
  const std::string strategy = get_string(w, "strategy", source, wp);
  NVLLM_CHECK(strategy == "tensor" || strategy == "channel", source, ": field \"", wp, "strategy\" is \"", strategy,
              "\"; ", scheme, " fp8 weights are supported with strategy tensor or channel");
  c->scaling = strategy == "tensor" ? WeightScaling::kTensor : WeightScaling::kChannel;
  if (!has(g, "input_activations")) return;  // weight-only
  const json& a = g.at("input_activations");
  const std::string ap = path + "input_activations.";
  expect_value(a, "type", "float", source, ap, scheme + " (fp8 activations)");
  expect_value(a, "num_bits", 8, source, ap, scheme + " (fp8 activations)");
  const bool dynamic = has(a, "dynamic") && a.at("dynamic") == true;
  const std::string as = get_string(a, "strategy", source, ap);
  NVLLM_CHECK(dynamic ? as == "token" : as == "tensor", source, ": field \"", ap, "strategy\" is \"", as,
              "\" with dynamic ", dynamic ? "true" : "false", "; supported: dynamic with strategy token, static "
              "with strategy tensor");
  c->activation_scheme = dynamic ? "dynamic" : "static";
}

QuantConfig parse_compressed_tensors(const json& q, const std::string& source) {
  const std::string p = "quantization_config.";
  QuantConfig c;
  c.method = "compressed-tensors";
  const std::string format = get_string(q, "format", source, p);
  NVLLM_CHECK(format == "float-quantized", source, ": field \"", p, "format\" is \"", format,
              "\"; compressed-tensors is supported with format \"float-quantized\" (fp8) only");
  expect_value(q, "quantization_status", "compressed", source, p, "compressed-tensors");
  NVLLM_CHECK(has(q, "config_groups") && q.at("config_groups").is_object() && q.at("config_groups").size() == 1,
              source, ": field \"", p, "config_groups\" must hold exactly one group, found ",
              q.contains("config_groups") ? q.at("config_groups").dump() : "none");
  const auto it = q.at("config_groups").begin();
  parse_group(it.value(), source, p + "config_groups." + it.key() + ".", &c);
  c.ignore = get_strings(q, "ignore", source, p);
  for (const std::string& m : c.ignore) {
    if (m.rfind("re:", 0) != 0) continue;
    try {
      std::regex re(m.substr(3));
    } catch (const std::regex_error&) {
      fail(source, ": field \"", p, "ignore\": \"", m, "\" is not a valid regular expression");
    }
  }
  return c;
}

}  // namespace

bool QuantConfig::ignores(const std::string& module) const {
  for (const std::string& m : ignore) {
    if (m == module) return true;
    if (m.rfind("re:", 0) == 0 && std::regex_match(module, std::regex(m.substr(3)))) return true;
  }
  return false;
}

QuantConfig parse_quant_config(const json& q, const std::string& source) {
  NVLLM_CHECK(q.is_object(), source, ": field \"quantization_config\" must be an object, found ", q.dump());
  const std::string method = get_string(q, "quant_method", source, "quantization_config.");
  if (method == "fp8") return parse_fp8(q, source);
  if (method == "compressed-tensors") return parse_compressed_tensors(q, source);
  fail(source, ": field \"quantization_config.quant_method\" is \"", method,
       "\"; supported: fp8 (block-scaled or per-tensor), compressed-tensors (float-quantized fp8). Use an FP8 or "
       "unquantised (bf16) checkpoint");
}

}  // namespace nvllm
