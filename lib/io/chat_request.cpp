#include "io/chat_request.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "io/request.h"

namespace nvllm {

using json = ChatJson;

namespace {

using Kind = ChatFieldError::Kind;

constexpr std::array<std::string_view, 10> kChatKeys = {"messages",
                                                        "tools",
                                                        "documents",
                                                        "chat_template_kwargs",
                                                        "add_generation_prompt",
                                                        "continue_final_message",
                                                        "max_completion_tokens",
                                                        "logprobs",
                                                        "top_logprobs",
                                                        "tool_choice"};

constexpr int kMaxTopLogprobs = 20;

[[noreturn]] void bad(const std::string& field, std::string_view expected, const json& got) {
  throw ChatFieldError{Kind::kBadValue, field, std::string(expected), got};
}

[[noreturn]] void missing(const std::string& field, std::string_view expected) {
  throw ChatFieldError{Kind::kMissing, field, std::string(expected), nullptr};
}

// Content: a string, or a list of {"type": "text", "text": "..."} parts.
void check_content(const json& content, const std::string& field) {
  constexpr const char* kExpected = "a string or a list of {\"type\": \"text\", \"text\": ...} parts";
  if (content.is_string()) return;
  if (!content.is_array()) bad(field, kExpected, content);
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string at = str_cat(field, "[", k, "]");
    if (!part.is_object()) bad(at, "an object {\"type\": \"text\", \"text\": ...}", part);
    const auto type = part.find("type");
    if (type == part.end()) missing(at + ".type", "\"text\"");
    if (*type != "text")
      bad(at + ".type", "\"text\" (nvllm runs text-only models; images and audio are not supported)", *type);
    const auto text = part.find("text");
    if (text == part.end()) missing(at + ".text", "a string");
    if (!text->is_string()) bad(at + ".text", "a string", *text);
  }
}

// vLLM hands templates the arguments of a tool call as an object: JSON text is parsed, and
// missing or empty arguments become {}.
void normalise_tool_calls(json& message, const std::string& field) {
  json& calls = message["tool_calls"];
  if (!calls.is_array()) bad(field, "an array of tool calls", calls);
  for (size_t k = 0; k < calls.size(); ++k) {
    json& call = calls[k];
    const std::string at = str_cat(field, "[", k, "]");
    if (!call.is_object()) bad(at, "an object {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", call);
    const auto function = call.find("function");
    if (function == call.end() || !function->is_object()) continue;  // the template decides
    json& args = (*function)["arguments"];
    if (args.is_null() || (args.is_string() && args.get<std::string>().empty())) {
      args = json::object();
    } else if (args.is_string()) {
      // JSON text inside a string escapes the line's own depth check (request.h): the same limit.
      if (json_nested_deeper_than(args.get_ref<const std::string&>(), kMaxJsonDepth)) {
        bad(at + ".function.arguments", str_cat("JSON text nested at most ", kMaxJsonDepth, " deep"), args);
      }
      json parsed = json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) bad(at + ".function.arguments", "a JSON object or its JSON text", args);
      args = std::move(parsed);
    }
  }
}

json read_messages(const json& v) {
  if (!v.is_array() || v.empty()) bad("messages", "a non-empty array of messages {\"role\", \"content\"}", v);
  json messages = v;
  for (size_t i = 0; i < messages.size(); ++i) {
    json& m = messages[i];
    const std::string at = str_cat("messages[", i, "]");
    if (!m.is_object()) bad(at, "an object {\"role\": ..., \"content\": ...}", m);
    const auto role = m.find("role");
    if (role == m.end()) missing(at + ".role", "a string: system, user, assistant or tool");
    if (!role->is_string()) bad(at + ".role", "a string: system, user, assistant or tool", *role);
    const auto content = m.find("content");
    const bool assistant = *role == "assistant";
    if (content == m.end() || content->is_null()) {
      // An assistant turn may be only tool calls (or an empty turn to continue).
      if (!assistant) missing(at + ".content", "a string or a list of {\"type\": \"text\", \"text\": ...} parts");
      m["content"] = nullptr;
    } else {
      check_content(*content, at + ".content");
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) normalise_tool_calls(m, at + ".tool_calls");
  }
  return messages;
}

json array_or_null(const json& v, const std::string& field, std::string_view expected) {
  if (v.is_null()) return nullptr;
  if (!v.is_array()) bad(field, expected, v);
  return v;
}

bool bool_value(const json& v, const std::string& field) {
  if (!v.is_boolean()) bad(field, "true or false", v);
  return v.get<bool>();
}

int int_value(const json& v, const std::string& field, int lo, int hi, std::string_view expected) {
  if (!v.is_number()) bad(field, expected, v);
  const double d = v.get<double>();
  if (!(std::floor(d) == d && d >= lo && d <= hi)) bad(field, expected, v);
  return static_cast<int>(d);
}

void read_logprobs(const json& object, SamplingParams& params) {
  const auto get = [&](const char* key) { return object.contains(key) ? object[key] : json(nullptr); };
  const json logprobs = get("logprobs"), top = get("top_logprobs");
  const bool on = !logprobs.is_null() && bool_value(logprobs, "logprobs");
  int count = 0;
  if (!top.is_null()) {
    count = int_value(top, "top_logprobs", 0, kMaxTopLogprobs, "an integer from 0 to 20");
    if (!on && count > 0) bad("top_logprobs", "no value unless \"logprobs\" is true (as OpenAI requires)", top);
  }
  if (on) params.logprobs = count;
}

void read_max_tokens(const json& object, SamplingParams& params) {
  const auto it = object.find("max_completion_tokens");
  if (it == object.end() || it->is_null()) return;
  params.max_tokens = int_value(*it, "max_completion_tokens", 1, std::numeric_limits<int>::max(), "an integer >= 1");
  // Some clients send both spellings; equal values are one limit, different ones a mistake.
  if (object.contains("max_tokens") && !object["max_tokens"].is_null() && object["max_tokens"] != *it) {
    bad("max_completion_tokens",
        str_cat("the same value as \"max_tokens\" (", object["max_tokens"].dump(), ") or no \"max_tokens\""), *it);
  }
}

}  // namespace

bool is_chat_field(std::string_view key) {
  return std::find(kChatKeys.begin(), kChatKeys.end(), key) != kChatKeys.end();
}

void read_chat_fields(const json& object, std::string_view prefix, ChatInputs& chat, SamplingParams& params) {
  chat = ChatInputs{};
  chat.messages = read_messages(object.at("messages"));
  const auto field = [&](const char* key) { return object.contains(key) ? object[key] : json(nullptr); };
  chat.tools = array_or_null(field("tools"), "tools", "an array of tool definitions");
  chat.documents = array_or_null(field("documents"), "documents", "an array of documents");
  if (const json kwargs = field("chat_template_kwargs"); !kwargs.is_null()) {
    if (!kwargs.is_object()) bad("chat_template_kwargs", "an object, e.g. {\"enable_thinking\": false}", kwargs);
    chat.kwargs = kwargs;
  }
  if (const json v = field("add_generation_prompt"); !v.is_null()) {
    chat.add_generation_prompt = bool_value(v, "add_generation_prompt");
  }
  if (const json v = field("continue_final_message"); !v.is_null()) {
    chat.continue_final_message = bool_value(v, "continue_final_message");
  }
  if (chat.continue_final_message && chat.add_generation_prompt) {
    throw ChatFieldError{Kind::kRule, "",
                         str_cat("fields \"", prefix, "continue_final_message\" and \"", prefix,
                                 "add_generation_prompt\" are both true; set \"add_generation_prompt\": false to "
                                 "continue the final message"),
                         nullptr};
  }
  if (const json v = field("tool_choice"); !v.is_null() && v != "auto" && v != "none") {
    bad("tool_choice", "\"auto\" or \"none\" (nvllm does not force tool calls)", v);
  }
  read_logprobs(object, params);
  read_max_tokens(object, params);
}

void read_logit_bias(const json& value, SamplingParams& params) {
  if (!value.is_object()) bad("logit_bias", "an object {\"token id\": bias from -100 to 100}", value);
  params.logit_bias.clear();
  for (const auto& [key, bias] : value.items()) {
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
      bad("logit_bias", str_cat("token ids as keys (\"", key, "\" is not a non-negative integer)"), value);
    }
    const std::string at = str_cat("logit_bias.", key);
    if (!bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100)) {
      bad(at, "a number from -100 to 100", bias);
    }
    if (!params.logit_bias.emplace(id, static_cast<float>(bias.get<double>())).second) {
      bad("logit_bias", str_cat("each token id once (", id, " is given twice)"), value);
    }
  }
}

bool read_fixed_field(std::string_view key, const json& value) {
  if (key == "stream") {
    if (value != false) bad("stream", "false (nvllm writes each answer to the output file when it is done)", value);
    return true;
  }
  if (key == "response_format") {
    if (!(value.is_object() && value.size() == 1 && value.value("type", "") == "text")) {
      bad("response_format", "{\"type\": \"text\"}: structured output is not supported yet", value);
    }
    return true;
  }
  return false;
}

}  // namespace nvllm
