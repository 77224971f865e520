// libFuzzer target: config.json and generation_config.json parsing. The input is config.json,
// optionally followed by "\n---\n" and generation_config.json. Anything may be rejected with
// nvllm::Error; nothing may crash, and an accepted config must be usable (positive sizes).
#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [config, generation] = nvllm::fuzz::split_at(data, size, "\n---\n");
  const std::string gen(generation);
  try {
    const nvllm::ModelConfig c = nvllm::parse_model_config(std::string(config), "fuzz/config.json",
                                                           generation.empty() ? nullptr : &gen);
    if (c.hidden_size <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.vocab_size <= 0 ||
        c.num_layers <= 0) {
      __builtin_trap();
    }
    (void)c.qkv_size();
  } catch (const nvllm::Error&) {
  }
  return 0;
}
