// ChatTemplate: a model's chat template (Jinja, as Hugging Face publishes it) loaded once and
// rendered per request: `messages` (+ tools, documents, per-request kwargs) -> prompt text,
// byte for byte as transformers' apply_chat_template renders it.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace nvllm {

// A template that raises (raise_exception) or fails while rendering one request; the caller turns
// it into that request's error record. The message is the template's own words (raise_exception),
// a check of the inputs, or, when names_template(), the engine's error already naming the
// template and its line (so the caller does not name the template again).
class ChatTemplateError : public Error {
 public:
  explicit ChatTemplateError(const std::string& message, bool names_template = false)
      : Error(message), names_template_(names_template) {}
  bool names_template() const { return names_template_; }

 private:
  bool names_template_;
};
// In a ChatTemplateError's message where the engine, not the template, was at fault (a library
// exception it should have prevented): the request fails, the process does not.
inline constexpr const char* kEngineBug = "internal error in nvllm's template engine, please report the template";

// How message `content` is handed to the template (vLLM's --chat-template-content-format).
enum class ContentFormat {
  kString,  // content is a string; text parts of a list are joined with "\n"
  kOpenai,  // content is a list of {"type": "text", "text": ...} parts
};

// Request JSON keeps its keys in the order the request wrote them (ordered_json): `tojson` in a
// template prints them in that order, as Python's json.dumps does. Parse requests with
// nlohmann::ordered_json::parse; a plain nlohmann::json converts, but its keys come sorted.
using ChatJson = nlohmann::ordered_json;

struct ChatInputs {
  ChatJson messages = ChatJson::array();  // [{"role", "content", ...}]
  ChatJson tools;       // null when the request has none (the template sees none, as transformers passes tools=None)
  ChatJson documents;   // null when none
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // render the last (assistant) message open-ended
  ChatJson kwargs = ChatJson::object();  // chat_template_kwargs (enable_thinking, ...)
};

class ChatTemplate {
 public:
  // Parses `source` (the template text). `name` names it in messages (a file path or
  // "tokenizer_config.json: chat_template"). Throws nvllm::Error naming the template line for
  // a syntax error or a construct the engine does not support.
  ChatTemplate(std::string source, std::string name, std::string bos_token, std::string eos_token);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The model folder's template: chat_template.jinja beside the tokenizer, else
  // tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"} from which
  // "default" is taken, or "tool_use" when `prefer_tool_use` and it exists). bos/eos tokens come
  // from tokenizer_config.json (string or {"content": ...}). nullopt when the folder has none.
  static std::optional<ChatTemplate> from_model_dir(const std::filesystem::path& dir, bool prefer_tool_use = false);
  // A template file given with --chat-template; bos/eos as from_model_dir would read them from `dir`.
  static ChatTemplate from_file(const std::filesystem::path& file, const std::filesystem::path& dir);

  // The content form the template expects, detected from its source as vLLM's "auto" does
  // (a template that iterates over message content, or reads content[...]["type"], wants kOpenai).
  ContentFormat detected_content_format() const;

  // Renders one conversation. Content in `inputs.messages` is converted to `format` first.
  // Throws ChatTemplateError for raise_exception or a runtime error inside the template.
  // Parsing happened once in the constructor; render is const and safe to call from several threads.
  std::string render(const ChatInputs& inputs, ContentFormat format) const;

  const std::string& name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvllm
