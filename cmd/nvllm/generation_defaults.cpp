#include "cmd/nvllm/generation_defaults.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace nvllm {

namespace fs = std::filesystem;

namespace {

// A number field of the file in [lo, hi], or nothing when the file does not set it (null counts as unset).
bool number(const nlohmann::json& j, const char* key, double lo, double hi, const fs::path& file, double* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  NVLLM_CHECK(it->is_number() && it->get<double>() >= lo && it->get<double>() <= hi, file.string(), ": \"", key,
              "\" is ", it->dump(), "; expected a number from ", lo, " to ", hi,
              " (fix the file, or pass --generation-config vllm)");
  *out = it->get<double>();
  return true;
}

}  // namespace

std::string apply_generation_config(const std::string& mode, const std::string& model_dir, SamplingParams& d) {
  if (mode == "vllm") return "";
  const fs::path file = (mode == "auto" ? fs::path(model_dir) : fs::path(mode)) / "generation_config.json";
  std::error_code ec;
  if (mode == "auto" && !fs::exists(file, ec)) return "";
  NVLLM_CHECK(fs::is_regular_file(file, ec), "--generation-config ", mode, ": ", file.string(),
              " does not exist (give auto, vllm, or a folder holding a generation_config.json)");
  std::ifstream in(file);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  NVLLM_CHECK(j.is_object(), file.string(), ": not a JSON object (pass --generation-config vllm to ignore it)");
  std::string taken;
  const auto took = [&](const char* name, double v) { taken += str_cat(taken.empty() ? "" : ", ", name, " ", v); };
  double v = 0;
  if (number(j, "temperature", 0, 1e6, file, &v)) took("temperature", d.temperature = static_cast<float>(v));
  if (number(j, "top_p", 1e-9, 1, file, &v)) took("top_p", d.top_p = static_cast<float>(v));
  if (number(j, "top_k", -1, 1e9, file, &v)) {
    d.top_k = v < 0 ? 0 : static_cast<int>(v);
    took("top_k", d.top_k);
  }
  if (number(j, "min_p", 0, 1, file, &v)) took("min_p", d.min_p = static_cast<float>(v));
  if (number(j, "repetition_penalty", 1e-9, 1e6, file, &v)) {
    took("repetition_penalty", d.repetition_penalty = static_cast<float>(v));
  }
  if (number(j, "max_new_tokens", 1, 2147483647.0, file, &v)) {
    d.max_tokens = static_cast<int>(v);
    took("max_tokens", d.max_tokens);
  }
  if (taken.empty()) return "";
  return str_cat("default sampling parameters from ", file.string(), ": ", taken,
                 " (flags and request fields override them; --generation-config vllm for neutral defaults)");
}

}  // namespace nvllm
