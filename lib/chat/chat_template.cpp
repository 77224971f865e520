#include "chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "chat/content_format.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_text.h"

namespace nvllm {

namespace {

constexpr const char* kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail(p.string(), ": cannot read the file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// bos_token / eos_token of tokenizer_config.json: a string, {"content": ...}, or absent/null ("").
std::string special_token(const ChatJson& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return "";
}

// The tokenizer's other named special tokens, which transformers also hands every template
// (its special_tokens_map: the ones that are set).
ChatJson other_special_tokens(const ChatJson& config) {
  ChatJson out = ChatJson::object();
  for (const char* key : {"unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    std::string v = special_token(config, key);
    if (!v.empty()) out[key] = v;
  }
  auto it = config.find("additional_special_tokens");
  if (it != config.end() && it->is_array() && !it->empty()) {
    ChatJson list = ChatJson::array();
    for (const auto& t : *it) {
      if (t.is_string()) list.push_back(t);
      else if (t.is_object() && t.contains("content")) list.push_back(t["content"]);
    }
    out["additional_special_tokens"] = std::move(list);
  }
  return out;
}

ChatJson read_config(const std::filesystem::path& dir) {
  auto path = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return ChatJson::object();
  try {
    return ChatJson::parse(read_file(path));
  } catch (const ChatJson::parse_error& e) {
    fail(path.string(), ": not valid JSON (", e.what(), ")");
  }
}

// Message content in the form the template expects, as vLLM hands it over: string templates get
// the text parts joined with "\n"; OpenAI-style templates get a list of {"type": "text"} parts.
ChatJson convert_content(const ChatJson& content, ContentFormat format, size_t index) {
  if (format == ContentFormat::kOpenai) {
    if (content.is_string()) return ChatJson::array({{{"type", "text"}, {"text", content}}});
    return content;
  }
  if (!content.is_array()) return content;
  std::string joined;
  bool first = true;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
      throw ChatTemplateError(str_cat("messages[", index, "].content: only {\"type\": \"text\", \"text\": ...} parts are supported"));
    }
    if (!first) joined += '\n';
    first = false;
    joined += part["text"].get<std::string>();
  }
  return joined;
}

bool needs_conversion(const ChatJson& messages, ContentFormat format) {
  for (const auto& m : messages) {
    if (!m.is_object()) continue;
    auto it = m.find("content");
    if (it == m.end()) continue;
    if (format == ContentFormat::kOpenai ? it->is_string() : it->is_array()) return true;
  }
  return false;
}

// transformers' continue_final_message: mark the end of the final message's text with a tag,
// render, then cut the prompt at the tag. Returns the final message's original text.
std::string mark_final_message(ChatJson& messages, const std::string& source) {
  if (messages.empty() || !messages.back().is_object()) throw ChatTemplateError("continue_final_message needs a final message");
  ChatJson& last = messages.back();
  if (!last.contains("content") || last["content"].is_null()) {
    throw ChatTemplateError("continue_final_message is set but the final message has no \"content\" to continue!");
  }
  if (source.find("content") == std::string::npos) {
    throw ChatTemplateError("continue_final_message is set to \"content\" but this is not an accepted field in the chat_template");
  }
  ChatJson& content = last["content"];
  if (content.is_array()) {
    for (auto it = content.rbegin(); it != content.rend(); ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        std::string text = (*it)["text"].get<std::string>();
        (*it)["text"] = text + kContinueTag;
        return text;
      }
    }
    throw ChatTemplateError("continue_final_message is set but we could not find any text to continue in the final message!");
  }
  if (!content.is_string()) throw ChatTemplateError("continue_final_message: the final message's content is not text");
  std::string text = content.get<std::string>();
  content = text + kContinueTag;
  return text;
}

std::string cut_at_tag(const std::string& rendered, const std::string& final_text) {
  std::string tag = kContinueTag;
  std::string tag_stripped(jinja::text::strip(tag, std::nullopt, true, true));
  std::string final_stripped(jinja::text::strip(final_text, std::nullopt, true, true));
  if (rendered.find(final_stripped) == std::string::npos || rendered.find(tag_stripped) == std::string::npos) {
    throw ChatTemplateError(
        "continue_final_message is set but the final message does not appear in the chat after applying the chat "
        "template! This can happen if the chat template deletes portions of the final message.");
  }
  size_t loc = rendered.rfind(tag_stripped);
  if (rendered.compare(loc, tag.size(), tag) == 0) return rendered.substr(0, loc);
  return std::string(jinja::text::strip(std::string_view(rendered).substr(0, loc), std::nullopt, false, true));
}

}  // namespace

struct ChatTemplate::Impl {
  std::string source, name, bos, eos;
  jinja::Template tmpl;
  ContentFormat format = ContentFormat::kString;
  ChatJson other_tokens = ChatJson::object();  // unk/pad/... from tokenizer_config.json
};

ChatTemplate::ChatTemplate(std::string source, std::string name, std::string bos_token, std::string eos_token)
    : impl_(std::make_unique<Impl>()) {
  impl_->tmpl = jinja::parse_template(source, name);
  impl_->format = jinja::detect_content_format(impl_->tmpl.body);
  impl_->source = std::move(source);
  impl_->name = std::move(name);
  impl_->bos = std::move(bos_token);
  impl_->eos = std::move(eos_token);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::name() const { return impl_->name; }
ContentFormat ChatTemplate::detected_content_format() const { return impl_->format; }

std::string ChatTemplate::render(const ChatInputs& inputs, ContentFormat format) const {
  if (!inputs.messages.is_array()) throw ChatTemplateError("messages must be a list");
  if (inputs.continue_final_message && inputs.add_generation_prompt) {
    throw ChatTemplateError(
        "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you "
        "want the model to continue the final message, and add_generation_prompt when you want to add a header "
        "that will prompt it to start a new assistant message instead.");
  }
  // Borrow the request's messages unless their content must change form (or be marked).
  ChatJson converted;
  const ChatJson* messages = &inputs.messages;
  if (inputs.continue_final_message || needs_conversion(inputs.messages, format)) {
    converted = inputs.messages;
    for (size_t i = 0; i < converted.size(); ++i) {
      if (converted[i].is_object() && converted[i].contains("content")) {
        converted[i]["content"] = convert_content(converted[i]["content"], format, i);
      }
    }
    messages = &converted;
  }
  std::string final_text;
  if (inputs.continue_final_message) final_text = mark_final_message(converted, impl_->source);

  jinja::Interpreter in(impl_->name);
  in.set_global("messages", jinja::Value::borrow(*messages));
  in.set_global("tools", jinja::Value::borrow(inputs.tools));
  in.set_global("documents", jinja::Value::borrow(inputs.documents));
  in.set_global("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
  // transformers passes the tokenizer's special tokens that are set; a null bos_token stays undefined.
  if (!impl_->bos.empty()) in.set_global("bos_token", jinja::Value(impl_->bos));
  if (!impl_->eos.empty()) in.set_global("eos_token", jinja::Value(impl_->eos));
  for (auto it = impl_->other_tokens.begin(); it != impl_->other_tokens.end(); ++it) {
    in.set_global(it.key(), jinja::Value::borrow(it.value()));
  }
  if (inputs.kwargs.is_object()) {
    for (auto it = inputs.kwargs.begin(); it != inputs.kwargs.end(); ++it) {
      in.set_global(it.key(), jinja::Value::borrow(it.value()));
    }
  }
  std::string out = in.render(impl_->tmpl);
  return inputs.continue_final_message ? cut_at_tag(out, final_text) : out;
}

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::filesystem::path& dir, bool prefer_tool_use) {
  ChatJson config = read_config(dir);
  std::string bos = special_token(config, "bos_token"), eos = special_token(config, "eos_token");
  auto with_tokens = [&](ChatTemplate t) {
    t.impl_->other_tokens = other_special_tokens(config);
    return t;
  };
  auto jinja_file = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_file)) {
    return with_tokens(ChatTemplate(read_file(jinja_file), jinja_file.string(), bos, eos));
  }
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  std::string where = (dir / "tokenizer_config.json").string() + ": chat_template";
  if (it->is_string()) return with_tokens(ChatTemplate(it->get<std::string>(), where, bos, eos));
  if (!it->is_array()) fail(where, ": expected a string or a list of {\"name\", \"template\"}");
  const ChatJson* chosen = nullptr;
  for (const auto& t : *it) {
    if (!t.is_object() || !t.contains("name") || !t.contains("template") || !t["template"].is_string()) {
      fail(where, ": expected a list of {\"name\", \"template\"}");
    }
    std::string n = t["name"].get<std::string>();
    if (n == "tool_use" && prefer_tool_use) chosen = &t;
    if (n == "default" && (!chosen || !prefer_tool_use)) chosen = &t;
  }
  if (!chosen) fail(where, ": no template named \"default\"");
  where += "[" + (*chosen)["name"].get<std::string>() + "]";
  return with_tokens(ChatTemplate((*chosen)["template"].get<std::string>(), where, bos, eos));
}

ChatTemplate ChatTemplate::from_file(const std::filesystem::path& file, const std::filesystem::path& dir) {
  ChatJson config = read_config(dir);
  ChatTemplate t(read_file(file), file.string(), special_token(config, "bos_token"), special_token(config, "eos_token"));
  t.impl_->other_tokens = other_special_tokens(config);
  return t;
}

}  // namespace nvllm
