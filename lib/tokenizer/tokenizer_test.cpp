// Golden tokenizations made by the Hugging Face tokenizers library (testdata/tokenizers/*/
// goldens.jsonl): ids must match exactly and decode must give the library's text.
#include "tokenizer/tokenizer.h"

#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/test_tokenizers.h"

namespace nvllm {
namespace {

void check_goldens(const std::string& name) {
  const Tokenizer& tok = test_tokenizer(name);
  std::ifstream in(std::string(NVLLM_TESTDATA) + "/tokenizers/" + name + "/goldens.jsonl");
  REQUIRE(in);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n;
    const auto g = nlohmann::json::parse(line);
    const std::string text = g["text"].get<std::string>();
    const auto expected = g["ids"].get<std::vector<int32_t>>();
    CAPTURE(name);
    CAPTURE(text);
    CHECK(tok.encode(text) == expected);
    CHECK(tok.decode(expected) == g["decoded"].get<std::string>());
  }
  CHECK(n >= 40);
}

}  // namespace

TEST_CASE("tokenizer goldens: qwen3") { check_goldens("qwen3"); }
TEST_CASE("tokenizer goldens: llama3") { check_goldens("llama3"); }
TEST_CASE("tokenizer goldens: llama2") { check_goldens("llama2"); }

}  // namespace nvllm
