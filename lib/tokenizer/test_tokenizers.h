// The three tokenizers of testdata/tokenizers, each loaded once per test process (parsing a
// tokenizer.json of 10 MB takes a moment). For tests only.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace nvllm {

inline const Tokenizer& test_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) slot = load_tokenizer(std::string(NVLLM_TESTDATA) + "/tokenizers/" + name);
  return *slot;
}

}  // namespace nvllm
