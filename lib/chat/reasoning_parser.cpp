#include "chat/reasoning_parser.h"

namespace nvllm {

namespace {

constexpr std::string_view kStart = "<think>";
constexpr std::string_view kEnd = "</think>";

std::optional<std::string> non_empty(std::string_view s) {
  if (s.empty()) return std::nullopt;
  return std::string(s);
}

// The text after the first <think>, or all of it when there is none (as Python's partition).
std::string_view after_start(std::string_view output) {
  const size_t at = output.find(kStart);
  return at == std::string_view::npos ? output : output.substr(at + kStart.size());
}

}  // namespace

std::optional<ReasoningParserKind> reasoning_parser_from_name(std::string_view name) {
  if (name == "qwen3") return ReasoningParserKind::kQwen3;
  if (name == "deepseek_r1") return ReasoningParserKind::kDeepSeekR1;
  return std::nullopt;
}

ReasoningSplit split_reasoning(ReasoningParserKind kind, std::string_view output) {
  if (kind == ReasoningParserKind::kQwen3 && output.find(kEnd) == std::string_view::npos) {
    return {std::nullopt, std::string(output)};
  }
  const std::string_view rest = after_start(output);
  const size_t end = rest.find(kEnd);
  if (end == std::string_view::npos) return {std::string(rest), std::nullopt};  // deepseek_r1 only
  // The reasoning is kept even when empty ("<think></think>answer" gives ""), as vLLM does.
  return {std::string(rest.substr(0, end)), non_empty(rest.substr(end + kEnd.size()))};
}

}  // namespace nvllm
