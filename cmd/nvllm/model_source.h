// Where --model and --tokenizer point: a folder as given, or a Hugging Face hub id (org/name)
// found in the local Hugging Face cache, offline, as vLLM does with HF_HUB_OFFLINE=1. The cache
// folder comes from the environment (read here, in cmd/, and nowhere below).
#pragma once

#include <string>

#include "cmd/nvllm/model_setup.h"

namespace nvllm {

// The hub cache folder, in huggingface_hub's order: $HF_HUB_CACHE, $HF_HOME/hub,
// $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
std::string hf_hub_cache_from_env();

// `model` itself when it is a folder; else, for a hub id, its snapshot in `hub_cache`
// (models--ORG--NAME/refs/main names the snapshot under snapshots/; with no refs/main, the only
// snapshot). Throws nvllm::Error naming `flag` and the folder it looked in when neither exists.
std::string resolve_model_path(const std::string& model, const std::string& hub_cache, const char* flag);

// `flags` with --model and --tokenizer resolved (idempotent: a resolved path is a folder).
ModelFlags resolve_model_paths(const ModelFlags& flags);

}  // namespace nvllm
