// --generation-config: default sampling parameters from the model's generation_config.json, as
// vLLM's --generation-config auto takes them (temperature, top_p, top_k, min_p,
// repetition_penalty, and max_new_tokens as max_tokens). Flags given on the command line
// override them, and request fields override both.
#pragma once

#include <string>

#include "engine/sampling_params.h"

namespace nvllm {

// `mode`: auto (generation_config.json in `model_dir`, if there is one), vllm (none: the neutral
// defaults), or a folder holding a generation_config.json. Sets the fields the file gives in
// `defaults` and returns what it took and from where, for the one start-up line ("" if nothing).
// Throws nvllm::Error naming the file and field for a value out of range, or a folder without the file.
std::string apply_generation_config(const std::string& mode, const std::string& model_dir, SamplingParams& defaults);

}  // namespace nvllm
