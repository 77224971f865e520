#include "cmd/nvllm/model_source.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace nvllm {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// org/name or name: no leading ./ or /, at most one slash, no "..".
bool looks_like_hub_id(const std::string& s) {
  if (s.empty() || s[0] == '/' || s[0] == '.' || s[0] == '~' || s.find("..") != std::string::npos) return false;
  return std::count(s.begin(), s.end(), '/') <= 1 && s.back() != '/';
}

std::string trimmed_first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::string hf_hub_cache_from_env() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;  // the older name
  if (std::string v = env("HF_HOME"); !v.empty()) return (fs::path(v) / "hub").string();
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return (fs::path(v) / "huggingface" / "hub").string();
  if (std::string v = env("HOME"); !v.empty()) return (fs::path(v) / ".cache" / "huggingface" / "hub").string();
  return "";
}

std::string resolve_model_path(const std::string& model, const std::string& hub_cache, const char* flag) {
  std::error_code ec;
  if (model.empty() || fs::is_directory(model, ec) || !looks_like_hub_id(model)) return model;
  const fs::path dir = fs::path(hub_cache) / ("models--" + (model.find('/') == std::string::npos
                                                                  ? model
                                                                  : model.substr(0, model.find('/')) + "--" +
                                                                        model.substr(model.find('/') + 1)));
  const std::string where = str_cat(flag, " ", model, ": no such folder, and not in the Hugging Face cache (",
                                     dir.string(), "); nvllm does not download: fetch it first (huggingface-cli "
                                     "download ", model, ") or give the folder");
  NVLLM_CHECK(!hub_cache.empty() && fs::is_directory(dir, ec), where);
  std::string ref;
  if (fs::exists(dir / "refs" / "main", ec)) ref = trimmed_first_line(dir / "refs" / "main");
  if (ref.empty()) {  // no refs/main: the only snapshot, if there is exactly one
    std::vector<std::string> snapshots;
    for (const auto& e : fs::directory_iterator(dir / "snapshots", ec)) {
      if (e.is_directory()) snapshots.push_back(e.path().filename().string());
    }
    NVLLM_CHECK(snapshots.size() == 1, flag, " ", model, ": ", dir.string(), " has no refs/main and ",
                snapshots.size(), " snapshots; give the snapshot folder itself");
    ref = snapshots[0];
  }
  const fs::path snapshot = dir / "snapshots" / ref;
  NVLLM_CHECK(fs::is_directory(snapshot, ec), flag, " ", model, ": refs/main names snapshot ", ref, " but ",
              snapshot.string(), " is missing; the cache is incomplete: download the model again");
  log_info(flag, " ", model, ": ", snapshot.string(), " (Hugging Face cache)");
  return snapshot.string();
}

ModelFlags resolve_model_paths(const ModelFlags& flags) {
  ModelFlags f = flags;
  const std::string cache = hf_hub_cache_from_env();
  f.model = resolve_model_path(flags.model, cache, "--model");
  if (!flags.tokenizer.empty()) f.tokenizer = resolve_model_path(flags.tokenizer, cache, "--tokenizer");
  return f;
}

}  // namespace nvllm
