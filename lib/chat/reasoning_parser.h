// Reasoning parsers (vLLM's --reasoning-parser): split a reasoning model's output into the
// thinking between <think> and </think> and the answer after it, as vLLM's non-streaming
// chat answers do.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nvllm {

enum class ReasoningParserKind {
  kQwen3,       // "qwen3": reasoning only when the output closes a think block (</think>); a
                // <think> at its start is optional (Qwen3-Thinking templates write it in the prompt)
  kDeepSeekR1,  // "deepseek_r1": the template opened <think>, so all text before </think> is
                // reasoning, and an output that never closes it is all reasoning
};

// The parser a --reasoning-parser name selects; nullopt for a name nvllm does not know.
std::optional<ReasoningParserKind> reasoning_parser_from_name(std::string_view name);

struct ReasoningSplit {
  std::optional<std::string> reasoning_content;  // null when the output has no reasoning
  std::optional<std::string> content;            // null when nothing follows the reasoning
};

ReasoningSplit split_reasoning(ReasoningParserKind kind, std::string_view output);

}  // namespace nvllm
