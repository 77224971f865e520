#include "cmd/nvllm/chat_setup.h"

#include <string_view>

#include "core/error.h"
#include "core/log.h"

namespace nvllm {

void add_chat_flags(CLI::App& app, ChatFlags& f, bool reasoning) {
  app.footer(app.get_footer() +
             "\nChat: a line with \"messages\" ([{\"role\": \"user\", \"content\": \"...\"}], plus optional tools,\n"
             "documents, chat_template_kwargs, add_generation_prompt, continue_final_message), or the OpenAI batch\n"
             "form with \"url\": \"/v1/chat/completions\", is rendered by the model's chat template and tokenized\n"
             "without added special tokens (the template writes them).");
  app.add_option("--chat-template", f.chat_template,
                 "Jinja chat template file for requests with \"messages\", instead of the model folder's "
                 "(chat_template.jinja, or \"chat_template\" in tokenizer_config.json); default: the model's");
  app.add_option("--chat-template-content-format", f.content_format,
                 "How message content reaches the template: string (text parts joined with newlines), openai "
                 "(a list of {\"type\": \"text\"} parts), or auto (what the template reads)")
      ->check(CLI::IsMember({"auto", "string", "openai"}))
      ->capture_default_str();
  if (reasoning) {
    app.add_option("--reasoning-parser", f.reasoning_parser,
                   "Split chat answers' <think>...</think> into message.reasoning_content: qwen3 or deepseek_r1 "
                   "(vLLM's names); default: none")
        ->check(CLI::IsMember({"qwen3", "deepseek_r1"}));
  }
}

ChatSetup::Loaded ChatSetup::load(const std::filesystem::path& model_dir, bool tool_use,
                                  const std::string& content_format) {
  Loaded l;
  l.tmpl = ChatTemplate::from_model_dir(model_dir, tool_use);
  if (!l.tmpl) return l;
  if (content_format == "auto") {
    l.format = l.tmpl->detected_content_format();
    l.detected = true;
  } else {
    l.format = content_format == "openai" ? ContentFormat::kOpenai : ContentFormat::kString;
  }
  return l;
}

ChatSetup::ChatSetup(const ChatFlags& flags, const std::filesystem::path& model_dir) {
  if (!flags.reasoning_parser.empty()) {
    reasoning_ = reasoning_parser_from_name(flags.reasoning_parser);
    NVLLM_CHECK(reasoning_, "--reasoning-parser ", flags.reasoning_parser, ": expected qwen3 or deepseek_r1");
  }
  if (!flags.chat_template.empty()) {
    NVLLM_CHECK(std::filesystem::is_regular_file(flags.chat_template), "--chat-template ", flags.chat_template,
                ": no such file");
    try {
      default_.tmpl = ChatTemplate::from_file(flags.chat_template, model_dir);
    } catch (const Error& e) {
      fail("--chat-template ", flags.chat_template, ": ", e.what());
    }
    default_.detected = flags.content_format == "auto";
    default_.format = flags.content_format == "openai"   ? ContentFormat::kOpenai
                      : flags.content_format == "string" ? ContentFormat::kString
                                                         : default_.tmpl->detected_content_format();
    return;
  }
  try {
    default_ = load(model_dir, false, flags.content_format);
    tool_use_ = load(model_dir, true, flags.content_format);
  } catch (const Error& e) {
    missing_ = str_cat("the chat template of the model folder ", model_dir.string(), " cannot be used (", e.what(),
                       "); --chat-template FILE sets another");
    default_ = {};
    tool_use_ = {};
    return;
  }
  if (!default_.tmpl) {
    missing_ = str_cat("the model folder ", model_dir.string(),
                       " has no chat template (no chat_template.jinja, no \"chat_template\" in tokenizer_config.json); "
                       "--chat-template FILE sets one");
  }
}

namespace {

// vLLM hands a message without content (an assistant turn of tool calls) to the template as
// empty text ("" for string templates, no parts for openai ones), never as none.
std::optional<ChatInputs> with_empty_content(const ChatInputs& chat, ContentFormat format) {
  std::optional<ChatInputs> copy;
  for (size_t i = 0; i < chat.messages.size(); ++i) {
    if (!chat.messages[i]["content"].is_null()) continue;
    if (!copy) copy = chat;
    copy->messages[i]["content"] = format == ContentFormat::kOpenai ? ChatJson::array() : ChatJson("");
  }
  return copy;
}

}  // namespace

std::string ChatSetup::render(const ChatInputs& chat) const {
  const bool tools = chat.tools.is_array() && !chat.tools.empty();
  const Loaded& l = tools && tool_use_.tmpl ? tool_use_ : default_;
  NVLLM_CHECK(l.tmpl, missing_);
  if (!format_logged_) {
    log_info("chat template ", l.tmpl->name(), ": message content given as ",
             l.format == ContentFormat::kOpenai ? "a list of parts (openai)" : "a string", " (",
             l.detected ? "detected" : "--chat-template-content-format", ")");
    format_logged_ = true;
  }
  try {
    const std::optional<ChatInputs> filled = with_empty_content(chat, l.format);
    return l.tmpl->render(filled ? *filled : chat, l.format);
  } catch (const ChatTemplateError& e) {
    if (e.names_template()) throw Error(e.what());
    fail("chat template ", l.tmpl->name(), ": ", e.what());
  }
}

std::vector<int32_t> ChatSetup::prompt_ids(const ChatInputs& chat, const Tokenizer& tokenizer) const {
  return tokenizer.encode(render(chat), /*add_special_tokens=*/false);
}

RequestResult ChatSetup::answer(const Request& request, RequestResult result) const {
  if (!request.chat) return result;
  for (const CompletionOutput& out : result.outputs) {
    AssistantMessage m;
    if (reasoning_) {
      ReasoningSplit split = split_reasoning(*reasoning_, out.text);
      m.content = std::move(split.content);
      m.reasoning_content = std::move(split.reasoning_content);
      m.reasoning_parsed = true;
    } else {
      m.content = out.text;
    }
    result.messages.push_back(std::move(m));
  }
  return result;
}

std::vector<int32_t> request_prompt_ids(const Request& request, const Tokenizer& tokenizer, const ChatSetup& chat) {
  if (request.chat) return chat.prompt_ids(*request.chat, tokenizer);
  if (request.prompt) return tokenizer.encode(*request.prompt, /*add_special_tokens=*/true);
  return request.prompt_token_ids;
}

void check_request_support(const Request& request, int32_t vocab_size, const std::string& device) {
  const char* field = request.openai_batch ? "body.logit_bias" : "logit_bias";
  for (const auto& [id, bias] : request.params.logit_bias) {
    NVLLM_CHECK(id < vocab_size, "field \"", field, "\": token id ", id, " is outside the model's vocabulary (",
                vocab_size, " tokens)");
  }
  NVLLM_CHECK(request.params.logit_bias.empty() || device != "cuda", "field \"", field,
              "\": logit_bias is applied only by the CPU runner so far; run with --device cpu, or drop it");
}

}  // namespace nvllm
