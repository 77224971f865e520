#include "io/request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#define XXH_INLINE_ALL  // header-only, as block_manager.cpp uses it: no library to link
#include <xxhash.h>

#include "core/error.h"
#include "core/sampling_rng.h"
#include "io/chat_request.h"

namespace nvllm {

// Ordered, so that a conversation's keys reach the chat template in the request's order.
using json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxShownValueBytes = 60;
constexpr const char* kCompletionsUrl = "/v1/completions";
constexpr const char* kChatUrl = "/v1/chat/completions";

// A bad line; caught in parse_request_line and turned into ParsedLine::error.
struct LineError {
  std::string message;
};

// Where a value sits, for messages: the line and, in the OpenAI form, the "body." prefix.
struct Ctx {
  int64_t line;
  std::string_view prefix;
};

// The value as JSON text, cut short (at a UTF-8 character boundary) so a huge prompt does
// not flood the message.
std::string shown(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() <= kMaxShownValueBytes) return s;
  size_t cut = kMaxShownValueBytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

[[noreturn]] void bad_line(const Ctx& c, std::string_view message) {
  throw LineError{str_cat("line ", c.line, ": ", message)};
}

[[noreturn]] void bad_field(const Ctx& c, std::string_view name, std::string_view expected, const json& got) {
  throw LineError{str_cat("line ", c.line, ": field \"", c.prefix, name, "\": expected ", expected, ", got ",
                          shown(got))};
}

double number_field(const Ctx& c, std::string_view name, const json& v, std::string_view expected) {
  if (!v.is_number()) bad_field(c, name, expected, v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) bad_field(c, name, expected, v);
  return d;
}

// An integer in [lo, hi]. 3.0 counts as an integer (JSON writers often emit floats), 3.5 not.
int64_t int_field(const Ctx& c, std::string_view name, const json& v, int64_t lo, int64_t hi,
                  std::string_view expected) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) bad_field(c, name, expected, v);
    return static_cast<int64_t>(u);
  }
  int64_t i = 0;
  if (v.is_number_integer()) {
    i = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(std::floor(d) == d && std::fabs(d) < 9.0e15)) bad_field(c, name, expected, v);
    i = static_cast<int64_t>(d);
  } else {
    bad_field(c, name, expected, v);
  }
  if (i < lo || i > hi) bad_field(c, name, expected, v);
  return i;
}

bool bool_field(const Ctx& c, std::string_view name, const json& v) {
  if (!v.is_boolean()) bad_field(c, name, "true or false", v);
  return v.get<bool>();
}

std::vector<int32_t> token_ids_field(const Ctx& c, std::string_view name, const json& v) {
  if (!v.is_array()) bad_field(c, name, "an array of non-negative integer token ids", v);
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string element = str_cat(name, "[", i, "]");
    ids.push_back(static_cast<int32_t>(int_field(c, element, v[i], 0, std::numeric_limits<int32_t>::max(),
                                                 "a non-negative integer token id")));
  }
  return ids;
}

std::vector<std::string> stop_field(const Ctx& c, const json& v) {
  constexpr const char* kExpected = "a non-empty string or an array of non-empty strings";
  std::vector<std::string> stops;
  if (v.is_string()) {
    stops.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const json& s : v) {
      if (!s.is_string()) bad_field(c, "stop", kExpected, v);
      stops.push_back(s.get<std::string>());
    }
  } else {
    bad_field(c, "stop", kExpected, v);
  }
  for (const std::string& s : stops) {
    if (s.empty()) bad_field(c, "stop", kExpected, v);
  }
  return stops;
}

using FieldSetter = void (*)(const Ctx&, const json&, SamplingParams&);

struct SamplingField {
  std::string_view name;
  FieldSetter set;
};

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

// Every per-request sampling field, with its check. A null value means "not set" (OpenAI
// clients write null for fields they leave at the default), so setters never see null.
const SamplingField kSamplingFields[] = {
    {"max_tokens", [](const Ctx& c, const json& v, SamplingParams& p) {
       p.max_tokens = static_cast<int>(int_field(c, "max_tokens", v, 1, kMaxInt, "an integer >= 1"));
     }},
    {"temperature", [](const Ctx& c, const json& v, SamplingParams& p) {
       const double t = number_field(c, "temperature", v, "a number >= 0");
       if (t < 0) bad_field(c, "temperature", "a number >= 0", v);
       p.temperature = static_cast<float>(t);
     }},
    {"top_p", [](const Ctx& c, const json& v, SamplingParams& p) {
       const double x = number_field(c, "top_p", v, "a number in (0, 1]");
       if (!(x > 0 && x <= 1)) bad_field(c, "top_p", "a number in (0, 1]", v);
       p.top_p = static_cast<float>(x);
     }},
    {"top_k", [](const Ctx& c, const json& v, SamplingParams& p) {
       const int64_t k = int_field(c, "top_k", v, -1, kMaxInt, "an integer >= 1, or -1 or 0 for no limit");
       p.top_k = k < 0 ? 0 : static_cast<int>(k);
     }},
    {"min_p", [](const Ctx& c, const json& v, SamplingParams& p) {
       const double x = number_field(c, "min_p", v, "a number in [0, 1]");
       if (!(x >= 0 && x <= 1)) bad_field(c, "min_p", "a number in [0, 1]", v);
       p.min_p = static_cast<float>(x);
     }},
    {"seed", [](const Ctx& c, const json& v, SamplingParams& p) {
       if (v.is_number_unsigned()) {
         p.seed = v.get<uint64_t>();
       } else {
         p.seed = static_cast<uint64_t>(int_field(c, "seed", v, 0, std::numeric_limits<int64_t>::max(),
                                                  "a non-negative integer"));
       }
     }},
    {"stop", [](const Ctx& c, const json& v, SamplingParams& p) { p.stop = stop_field(c, v); }},
    {"stop_token_ids", [](const Ctx& c, const json& v, SamplingParams& p) {
       p.stop_token_ids = token_ids_field(c, "stop_token_ids", v);
     }},
    {"ignore_eos", [](const Ctx& c, const json& v, SamplingParams& p) { p.ignore_eos = bool_field(c, "ignore_eos", v); }},
    {"min_tokens", [](const Ctx& c, const json& v, SamplingParams& p) {
       p.min_tokens = static_cast<int>(int_field(c, "min_tokens", v, 0, kMaxInt, "an integer >= 0"));
     }},
    {"presence_penalty", [](const Ctx& c, const json& v, SamplingParams& p) {
       const double x = number_field(c, "presence_penalty", v, "a number in [-2, 2]");
       if (!(x >= -2 && x <= 2)) bad_field(c, "presence_penalty", "a number in [-2, 2]", v);
       p.presence_penalty = static_cast<float>(x);
     }},
    {"frequency_penalty", [](const Ctx& c, const json& v, SamplingParams& p) {
       const double x = number_field(c, "frequency_penalty", v, "a number in [-2, 2]");
       if (!(x >= -2 && x <= 2)) bad_field(c, "frequency_penalty", "a number in [-2, 2]", v);
       p.frequency_penalty = static_cast<float>(x);
     }},
    {"repetition_penalty", [](const Ctx& c, const json& v, SamplingParams& p) {
       const double x = number_field(c, "repetition_penalty", v, "a number > 0");
       if (!(x > 0)) bad_field(c, "repetition_penalty", "a number > 0", v);
       p.repetition_penalty = static_cast<float>(x);
     }},
    {"logprobs", [](const Ctx& c, const json& v, SamplingParams& p) {
       p.logprobs = static_cast<int>(int_field(c, "logprobs", v, 0, 20, "an integer from 0 to 20, or null"));
     }},
    {"n", [](const Ctx& c, const json& v, SamplingParams& p) {
       p.n = static_cast<int>(int_field(c, "n", v, 1, 16, "an integer from 1 to 16"));
     }},
    {"include_stop_str_in_output", [](const Ctx& c, const json& v, SamplingParams& p) {
       p.include_stop_str_in_output = bool_field(c, "include_stop_str_in_output", v);
     }},
    {"skip_special_tokens", [](const Ctx& c, const json& v, SamplingParams& p) {
       p.skip_special_tokens = bool_field(c, "skip_special_tokens", v);
     }},
};

const SamplingField* find_sampling_field(std::string_view name) {
  for (const SamplingField& f : kSamplingFields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// A string or number id, or null when the value is missing or of another type.
json readable_id(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !(it->is_string() || it->is_number())) return nullptr;
  return *it;
}

// `prompt`: a string or an array of token ids; a one-element array of either is unwrapped,
// since OpenAI clients often send a list of one prompt.
void read_prompt(const Ctx& c, const json& v, Request& r) {
  constexpr const char* kExpected = "a string or an array of token ids (one prompt per line)";
  const json& p = (v.is_array() && v.size() == 1 && (v[0].is_string() || v[0].is_array())) ? v[0] : v;
  if (p.is_array() && !p.empty() && !p[0].is_number()) bad_field(c, "prompt", kExpected, v);
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
    if (r.prompt->empty()) bad_field(c, "prompt", "a non-empty prompt", p);
  } else if (p.is_array()) {
    r.prompt_token_ids = token_ids_field(c, "prompt", p);
    if (r.prompt_token_ids.empty()) bad_field(c, "prompt", "a non-empty prompt", p);
  } else {
    bad_field(c, "prompt", kExpected, v);
  }
}

// Runs `read`, turning a ChatFieldError into this line's error.
template <typename F>
void read_chat_error_at(const Ctx& c, F read) {
  try {
    read();
  } catch (const ChatFieldError& e) {
    switch (e.kind) {
      case ChatFieldError::Kind::kBadValue: bad_field(c, e.field, e.expected, e.got);
      case ChatFieldError::Kind::kMissing:
        bad_line(c, str_cat("missing field \"", c.prefix, e.field, "\" (", e.expected, ")"));
      case ChatFieldError::Kind::kRule: bad_line(c, e.expected);
    }
  }
}

bool read_fixed_field_at(const Ctx& c, std::string_view key, const json& value) {
  bool fixed = false;
  read_chat_error_at(c, [&] { fixed = read_fixed_field(key, value); });
  return fixed;
}

void read_chat(const Ctx& c, const json& object, Request& r) {
  ChatInputs chat;
  read_chat_error_at(c, [&] { read_chat_fields(object, c.prefix, chat, r.params); });
  r.chat = std::move(chat);
}

[[noreturn]] void unknown_field(const Ctx& c, std::string_view name) {
  bad_line(c, str_cat("unknown field \"", c.prefix, name,
                      "\" (check its spelling, or pass --allow-unknown-fields to ignore such fields)"));
}

// The prompt and sampling fields, shared by our form and the OpenAI body. `passive` names the
// fields this object may hold that are read elsewhere or ignored.
void read_fields(const Ctx& c, const json& object, std::initializer_list<std::string_view> passive,
                 const ParseOptions& options, Request& r) {
  const bool chat = object.contains("messages") && !object["messages"].is_null();
  if (chat) read_chat(c, object, r);
  bool has_prompt = false, has_ids = false;
  for (const auto& [key, value] : object.items()) {
    if (value.is_null() || (chat && is_chat_field(key))) continue;
    if (key != "logprobs" && is_chat_field(key)) {
      bad_line(c, str_cat("field \"", c.prefix, key, "\" belongs to chat requests (with \"", c.prefix,
                          "messages\")"));
    }
    if (key == "logit_bias") {
      const json& bias = value;  // clang 14 cannot capture a structured binding
      read_chat_error_at(c, [&] { read_logit_bias(bias, r.params); });
    } else if (read_fixed_field_at(c, key, value)) {
      // accepted: its one value changes nothing
    } else if (key == "prompt") {
      read_prompt(c, value, r);
      has_prompt = true;
    } else if (key == "prompt_token_ids") {
      r.prompt_token_ids = token_ids_field(c, "prompt_token_ids", value);
      if (r.prompt_token_ids.empty()) bad_field(c, "prompt_token_ids", "a non-empty array of token ids", value);
      has_ids = true;
    } else if (key == "priority") {
      r.priority = static_cast<int>(int_field(c, "priority", value, std::numeric_limits<int32_t>::min(), kMaxInt,
                                              "an integer (lower runs first)"));
    } else if (const SamplingField* f = find_sampling_field(key)) {
      f->set(c, value, r.params);
    } else if (std::find(passive.begin(), passive.end(), key) == passive.end() && !options.allow_unknown_fields) {
      unknown_field(c, key);
    }
  }
  if (has_prompt && has_ids) {
    bad_line(c, str_cat("fields \"", c.prefix, "prompt\" and \"", c.prefix,
                        "prompt_token_ids\" are both set; give exactly one"));
  }
  if (chat && (has_prompt || has_ids)) {
    bad_line(c, str_cat("fields \"", c.prefix, "messages\" and \"", c.prefix,
                        has_prompt ? "prompt" : "prompt_token_ids",
                        "\" are both set; give a conversation or a prompt, not both"));
  }
  if (!chat && !has_prompt && !has_ids) {
    bad_line(c, str_cat("missing field \"", c.prefix, "prompt\" (or \"", c.prefix, "prompt_token_ids\")"));
  }
  const auto seed = object.find("seed");
  if (seed == object.end() || seed->is_null()) r.params.seed = derived_request_seed(options.defaults.seed, r.line);
  if (r.params.min_tokens > r.params.max_tokens) {
    bad_field(c, "min_tokens", str_cat("an integer <= max_tokens (", r.params.max_tokens, ")"),
              r.params.min_tokens);
  }
}

void read_our_form(const json& object, const ParseOptions& options, Request& r) {
  const Ctx c{r.line, ""};
  if (const auto it = object.find("id"); it != object.end() && !it->is_null()) {
    if (!it->is_string() && !it->is_number()) bad_field(c, "id", "a string or a number", *it);
    r.id = *it;
  }
  read_fields(c, object, {"id", "model", "user"}, options, r);
}

void read_openai_form(const json& object, const ParseOptions& options, Request& r) {
  const Ctx c{r.line, ""};
  for (const auto& [key, value] : object.items()) {
    if (key != "custom_id" && key != "method" && key != "url" && key != "body" && !options.allow_unknown_fields) {
      unknown_field(c, key);
    }
  }
  const auto id = object.find("custom_id");
  if (id == object.end() || id->is_null()) bad_line(c, "missing field \"custom_id\" (the OpenAI batch form needs one)");
  if (!id->is_string() && !id->is_number()) bad_field(c, "custom_id", "a string or a number", *id);
  r.id = *id;
  if (const auto m = object.find("method"); m != object.end() && *m != "POST") bad_field(c, "method", "\"POST\"", *m);
  const auto url = object.find("url");
  if (url == object.end()) bad_line(c, str_cat("missing field \"url\" (expected \"", kCompletionsUrl, "\")"));
  if (*url != kCompletionsUrl && *url != kChatUrl) {
    bad_field(c, "url", str_cat("\"", kCompletionsUrl, "\" or \"", kChatUrl, "\""), *url);
  }
  const auto body = object.find("body");
  if (body == object.end() || !body->is_object()) {
    if (body == object.end()) bad_line(c, "missing field \"body\" (an object with the prompt and sampling fields)");
    bad_field(c, "body", "an object with the prompt and sampling fields", *body);
  }
  const bool chat = body->contains("messages") && !(*body)["messages"].is_null();
  if (*url == kChatUrl && !chat) {
    bad_line(c, str_cat("missing field \"body.messages\" (", kChatUrl, " takes a conversation)"));
  }
  if (*url == kCompletionsUrl && chat) {
    bad_line(c, str_cat("field \"body.messages\" needs \"url\": \"", kChatUrl, "\" (", kCompletionsUrl,
                        " takes a prompt)"));
  }
  // `model` and `user` are accepted and ignored: the model is chosen on the command line.
  read_fields(Ctx{r.line, "body."}, *body, {"model", "user"}, options, r);
}

bool looks_like_openai_batch(const json& object) {
  return object.contains("custom_id") || object.contains("body") || object.contains("url") ||
         object.contains("method");
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the tag says nothing to a user.
// Its "at line 1, column 16" counts within the one line parsed, so only the column is kept.
std::string parser_message(const json::exception& e) {
  std::string what = e.what();
  const size_t close = what.find("] ");
  if (close != std::string::npos) what.erase(0, close + 2);
  constexpr std::string_view kLineOne = "at line 1, column ";
  if (const size_t at = what.find(kLineOne); at != std::string::npos) what.replace(at, kLineOne.size(), "at column ");
  return what;
}

}  // namespace

uint64_t derived_request_seed(uint64_t default_seed, int64_t line_no) {
  return splitmix64(default_seed ^ splitmix64(static_cast<uint64_t>(line_no)));
}

std::string id_to_string(const nlohmann::json& id) {
  if (id.is_string()) return id.get<std::string>();
  return id.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool json_nested_deeper_than(std::string_view text, int limit) {
  if (std::count(text.begin(), text.end(), '[') + std::count(text.begin(), text.end(), '{') <= limit) return false;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character, a quote included
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

ParsedLine parse_request_line(const std::string& text, int64_t line_no, const ParseOptions& options) {
  ParsedLine out;
  out.line = line_no;
  out.id = line_no;
  if (json_nested_deeper_than(text, kMaxJsonDepth)) {
    out.error = str_cat("line ", line_no, ": JSON nested more than ", kMaxJsonDepth, " deep (nvllm's limit)");
    out.not_json = true;
    return out;
  }
  json object;
  try {
    object = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    out.error = str_cat("line ", line_no, ": invalid JSON: ", parser_message(e));
    out.not_json = true;
    return out;
  }
  if (!object.is_object()) {
    out.error = str_cat("line ", line_no, ": expected a JSON object ({...}), got ", shown(object));
    out.not_json = true;
    return out;
  }
  out.openai_batch = looks_like_openai_batch(object);
  if (json id = readable_id(object, out.openai_batch ? "custom_id" : "id"); !id.is_null()) out.id = id;

  Request r;
  r.line = line_no;
  r.id = line_no;
  r.openai_batch = out.openai_batch;
  r.params = options.defaults;
  try {
    if (out.openai_batch) {
      read_openai_form(object, options, r);
    } else {
      read_our_form(object, options, r);
    }
  } catch (const LineError& e) {
    out.error = e.message;
    return out;
  }
  r.id_string = id_to_string(r.id);
  out.id = r.id;
  out.request = std::move(r);
  return out;
}

int64_t FirstLineOfId::find_or_add(std::string_view id, int64_t line) {
  if (2 * (entries_.size() + 1) > slots_.size()) grow();
  const uint64_t hash = XXH3_64bits(id.data(), id.size());
  const uint64_t tag = hash >> 32 << 32;
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint64_t slot = slots_[i];
    if (slot == 0) {
      entries_.push_back({text_.size(), line});
      text_.append(id);
      slots_[i] = tag | entries_.size();
      return 0;
    }
    const size_t k = (slot & 0xFFFFFFFFu) - 1;
    if ((slot >> 32 << 32) == tag && text_of(k) == id) return entries_[k].line;
  }
}

std::string_view FirstLineOfId::text_of(size_t k) const {
  const uint64_t end = k + 1 < entries_.size() ? entries_[k + 1].offset : text_.size();
  return std::string_view(text_).substr(entries_[k].offset, end - entries_[k].offset);
}

void FirstLineOfId::grow() {
  NVLLM_CHECK(entries_.size() < 0xFFFFFFFFu, "more than 4294967295 distinct ids");
  slots_.assign(std::max<size_t>(1024, 2 * slots_.size()), 0);
  const size_t mask = slots_.size() - 1;
  for (size_t k = 0; k < entries_.size(); ++k) {
    const std::string_view id = text_of(k);
    const uint64_t hash = XXH3_64bits(id.data(), id.size());
    size_t i = hash & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = (hash >> 32 << 32) | (k + 1);
  }
}

bool JsonlLines::next(std::string& text) {
  while (std::getline(in_, text)) {
    ++line_no_;
    if (line_no_ == 1 && text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t\r\f\v") != std::string::npos) return true;
  }
  return false;
}

RequestReader::RequestReader(std::istream& in, ParseOptions options) : lines_(in), options_(std::move(options)) {}

std::optional<ParsedLine> RequestReader::next() {
  std::string text;
  if (!lines_.next(text)) return std::nullopt;
  const int64_t line_no = lines_.line_no();
  ParsedLine parsed = parse_request_line(text, line_no, options_);
  // A bad line's id counts too: its error record is written under that id.
  const int64_t first = first_line_of_id_.find_or_add(id_to_string(parsed.id), line_no);
  if (first > 0 && parsed.request) {
    parsed.error = str_cat("line ", line_no, ": field \"", parsed.openai_batch ? "custom_id" : "id",
                           "\": duplicate id ", shown(parsed.id), " (first used on line ", first,
                           "); ids must be unique so that output lines can be matched to requests");
    parsed.request.reset();
    parsed.duplicate_of = first;
  }
  return parsed;
}

std::vector<ParsedLine> read_requests(std::istream& in, const ParseOptions& options) {
  RequestReader reader(in, options);
  std::vector<ParsedLine> lines;
  while (std::optional<ParsedLine> parsed = reader.next()) lines.push_back(std::move(*parsed));
  return lines;
}

}  // namespace nvllm
