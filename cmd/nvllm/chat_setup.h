// Chat requests in the subcommands that know the model folder (generate, tokenize): the chat
// flags, the model's chat template loaded once, each conversation rendered and tokenized, and
// each answer turned into an assistant message (split by --reasoning-parser).
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/reasoning_parser.h"
#include "io/request.h"
#include "io/response.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {

struct ChatFlags {
  std::string chat_template;            // --chat-template FILE; empty: the model folder's
  std::string content_format = "auto";  // --chat-template-content-format auto|string|openai
  std::string reasoning_parser;         // --reasoning-parser qwen3|deepseek_r1; empty: none
};

// Adds --chat-template and --chat-template-content-format, and with `reasoning` --reasoning-parser.
void add_chat_flags(CLI::App& app, ChatFlags& flags, bool reasoning);

class ChatSetup {
 public:
  // Loads the template(s) once. A bad --chat-template FILE (or an unknown --reasoning-parser)
  // throws nvllm::Error; a model folder without a template, or with one nvllm cannot parse, is
  // reported per chat request instead, so prompt requests in the same file still run.
  ChatSetup(const ChatFlags& flags, const std::filesystem::path& model_dir);

  // The conversation rendered by the template (the tool-use template when the request has
  // tools and the model names one). Throws nvllm::Error with the template's own message.
  std::string render(const ChatInputs& chat) const;
  // render(), tokenized without adding special tokens: the template writes the BOS itself.
  std::vector<int32_t> prompt_ids(const ChatInputs& chat, const Tokenizer& tokenizer) const;

  // Marks a chat request's result as such and fills each output's assistant message.
  RequestResult answer(const Request& request, RequestResult result) const;

 private:
  struct Loaded {
    std::optional<ChatTemplate> tmpl;
    ContentFormat format = ContentFormat::kString;
    bool detected = false;  // format read from the template (auto), not forced by the flag
  };
  Loaded load(const std::filesystem::path& model_dir, bool tool_use, const std::string& content_format);

  Loaded default_, tool_use_;
  std::string missing_;  // why there is no template (no file, or the model's failed to parse)
  std::optional<ReasoningParserKind> reasoning_;
  mutable bool format_logged_ = false;  // the content format is logged at the first conversation
};

// A request line's prompt as token ids, as generate computes it: a conversation rendered and
// tokenized without special tokens, a text prompt with them, or the ids given. Throws nvllm::Error.
std::vector<int32_t> request_prompt_ids(const Request& request, const Tokenizer& tokenizer, const ChatSetup& chat);

// A request a runner cannot serve (logit_bias ids outside the vocabulary; logit_bias on the
// CUDA runner, whose sampler does not apply it yet). Throws nvllm::Error naming the field.
void check_request_support(const Request& request, int32_t vocab_size, const std::string& device);

}  // namespace nvllm
