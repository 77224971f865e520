// The reasoning parsers against vLLM's rules for a finished (non-streamed) answer, case by case.
#include "chat/reasoning_parser.h"

#include <doctest/doctest.h>

namespace nvllm {

namespace {

using Kind = ReasoningParserKind;
using S = std::optional<std::string>;

void check_split(Kind kind, const std::string& output, const S& reasoning, const S& content) {
  INFO(output);
  const ReasoningSplit got = split_reasoning(kind, output);
  CHECK(got.reasoning_content == reasoning);
  CHECK(got.content == content);
}

}  // namespace

TEST_CASE("reasoning parser: names as vLLM spells them") {
  CHECK(reasoning_parser_from_name("qwen3") == Kind::kQwen3);
  CHECK(reasoning_parser_from_name("deepseek_r1") == Kind::kDeepSeekR1);
  CHECK_FALSE(reasoning_parser_from_name("deepseek-r1"));
  CHECK_FALSE(reasoning_parser_from_name(""));
}

TEST_CASE("reasoning parser: qwen3") {
  check_split(Kind::kQwen3, "<think>\nstep 1\n</think>\n\nThe answer is 4.", "\nstep 1\n", "\n\nThe answer is 4.");
  // The template wrote <think> into the prompt (thinking models): text before </think> is reasoning.
  check_split(Kind::kQwen3, "step 1</think>four", "step 1", "four");
  // No </think>: no reasoning at all, even with an opening <think> (an answer cut short).
  check_split(Kind::kQwen3, "<think>still thinking", std::nullopt, "<think>still thinking");
  check_split(Kind::kQwen3, "plain answer", std::nullopt, "plain answer");
  check_split(Kind::kQwen3, "", std::nullopt, "");
  // Nothing after </think>: content is null; an empty think block is an empty reasoning.
  check_split(Kind::kQwen3, "<think>r</think>", "r", std::nullopt);
  check_split(Kind::kQwen3, "<think></think>answer", "", "answer");
  // Only the first </think> closes; later tags are content.
  check_split(Kind::kQwen3, "<think>a</think>b</think>c", "a", "b</think>c");
  // Text before <think> is dropped, as vLLM's partition drops it.
  check_split(Kind::kQwen3, "x<think>a</think>b", "a", "b");
}

TEST_CASE("reasoning parser: deepseek_r1") {
  check_split(Kind::kDeepSeekR1, "Let me see.\n</think>\n\n42", "Let me see.\n", "\n\n42");
  check_split(Kind::kDeepSeekR1, "<think>a</think>b", "a", "b");
  // Never closed: everything is reasoning, content null.
  check_split(Kind::kDeepSeekR1, "thinking until max_tokens", "thinking until max_tokens", std::nullopt);
  check_split(Kind::kDeepSeekR1, "<think>cut", "cut", std::nullopt);
  check_split(Kind::kDeepSeekR1, "", "", std::nullopt);
  check_split(Kind::kDeepSeekR1, "r</think>", "r", std::nullopt);
}

}  // namespace nvllm
