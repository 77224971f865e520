#include "io/request_scan.h"

#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

namespace nvllm {

namespace {

// parse_request_line parses with nlohmann::ordered_json; the event parser of the same type
// accepts exactly the same lines (the same lexer and grammar, 1e999 refused alike).
using Json = nlohmann::ordered_json;

// The top-level fields (and body fields, in the OpenAI batch form) that the summary reads.
enum class Field : uint8_t { kOther, kId, kCustomId, kBody, kMaxTokens, kMaxCompletionTokens, kN };

Field field_of(std::string_view key) {
  if (key == "id") return Field::kId;
  if (key == "custom_id") return Field::kCustomId;
  if (key == "body") return Field::kBody;
  if (key == "max_tokens") return Field::kMaxTokens;
  if (key == "max_completion_tokens") return Field::kMaxCompletionTokens;
  if (key == "n") return Field::kN;
  return Field::kOther;
}

// As looks_like_openai_batch in request.cpp: any of these keys, whatever its value.
bool is_openai_key(std::string_view key) {
  return key == "custom_id" || key == "body" || key == "url" || key == "method";
}

struct TokenFields {
  nlohmann::json max_tokens, max_completion_tokens, n;  // null: not given (or not a scalar)
};

// Receives the parser's events for one line. Depth 1 is the line's object, depth 2 the inside of
// a top-level value (the body object, in the OpenAI form). A repeated key's last value counts,
// as in the document the parser would build.
class LineEvents {
 public:
  bool object = false;  // the line's value is an object
  bool openai = false;
  nlohmann::json id, custom_id;  // readable (string or number) values, else null
  TokenFields top, body;

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(Json::number_integer_t v) { return value(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return value(v); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return value(v); }
  bool string(Json::string_t& v) { return value(v); }
  bool binary(Json::binary_t&) { return value(nullptr); }  // not produced by JSON text
  bool start_object(std::size_t) {
    if (depth_ == 0) object = true;
    if (depth_ == 1 && slot_ == Field::kBody) in_body_ = true;
    return open();
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return depth_ > 0 && open(); }  // a line that is an array: not an object, stop
  bool end_array() { return close(); }
  bool key(Json::string_t& k) {
    if (depth_ == 1) {
      slot_ = field_of(k);
      openai = openai || is_openai_key(k);
      if (slot_ == Field::kBody) body = {};  // a repeated body: only the last one counts
    } else if (depth_ == 2 && in_body_) {
      body_slot_ = field_of(k);
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  // The field the next value at this depth fills, if any.
  nlohmann::json* target() {
    if (depth_ == 1) {
      switch (slot_) {
        case Field::kId: return &id;
        case Field::kCustomId: return &custom_id;
        default: return token_field(slot_, top);
      }
    }
    return depth_ == 2 && in_body_ ? token_field(body_slot_, body) : nullptr;
  }
  static nlohmann::json* token_field(Field f, TokenFields& fields) {
    switch (f) {
      case Field::kMaxTokens: return &fields.max_tokens;
      case Field::kMaxCompletionTokens: return &fields.max_completion_tokens;
      case Field::kN: return &fields.n;
      default: return nullptr;
    }
  }
  // A scalar: the line is not an object if it comes first; else it fills its field, if any.
  template <typename T>
  bool value(T&& v) {
    if (depth_ == 0) return false;
    if (nlohmann::json* field = target()) *field = std::forward<T>(v);
    return true;
  }
  // An object or array value: it leaves its field null (not readable as an id or a count).
  bool open() {
    if (nlohmann::json* field = target()) *field = nullptr;
    ++depth_;
    return true;
  }
  bool close() {
    if (--depth_ == 1) in_body_ = false;
    return true;
  }

  int depth_ = 0;
  Field slot_ = Field::kOther;       // the top-level key whose value comes next
  Field body_slot_ = Field::kOther;  // the body key whose value comes next
  bool in_body_ = false;             // inside the top-level body object
};

// A count as int_field reads it (an integer, or a float with an integer value) if it is in
// [1, 2^31 - 1]; else nothing. A good line's counts are all in range.
std::optional<int64_t> count_of(const nlohmann::json& v) {
  int64_t i = 0;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) return std::nullopt;
    i = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    i = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(std::floor(d) == d && std::fabs(d) < 9.0e15)) return std::nullopt;
    i = static_cast<int64_t>(d);
  } else {
    return std::nullopt;
  }
  if (i < 1 || i > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return i;
}

}  // namespace

LineSummary summarize_request_line(const std::string& text, int64_t line_no, const ParseOptions& options) {
  LineEvents events;
  LineSummary out;
  out.id = line_no;
  if (json_nested_deeper_than(text, kMaxJsonDepth) || !Json::sax_parse(text, &events) || !events.object) {
    out.not_json = true;
    return out;
  }
  out.openai_batch = events.openai;
  // As readable_id in request.cpp: a string or a number, else the line number.
  const nlohmann::json& id = events.openai ? events.custom_id : events.id;
  if (id.is_string() || id.is_number()) out.id = id;
  // A good request's max_tokens: max_completion_tokens (chat) when given, which must then equal
  // max_tokens if both are; else max_tokens; else the default. Its n: n, else the default.
  const TokenFields& f = events.openai ? events.body : events.top;
  const int64_t max_tokens =
      count_of(f.max_completion_tokens).value_or(count_of(f.max_tokens).value_or(options.defaults.max_tokens));
  out.output_tokens = max_tokens * count_of(f.n).value_or(options.defaults.n);
  return out;
}

RequestScanner::RequestScanner(std::istream& in, ParseOptions options) : lines_(in), options_(std::move(options)) {}

std::optional<ScannedLine> RequestScanner::next() {
  std::string& text = text_;  // reused: its capacity serves every line
  if (!lines_.next(text)) return std::nullopt;
  ScannedLine out;
  out.line = lines_.line_no();
  LineSummary s = summarize_request_line(text, out.line, options_);
  out.id = id_to_string(s.id);
  out.not_json = s.not_json;
  if (s.not_json) {
    out.error = parse_request_line(text, out.line, options_).error;
  } else {
    out.output_tokens = s.output_tokens;
  }
  // As RequestReader: every line's id is recorded; a later good line with it is the duplicate.
  const int64_t first = first_line_of_id_.find_or_add(out.id, out.line);
  if (first > 0 && !s.not_json && parse_request_line(text, out.line, options_).request) {
    out.duplicate_of = first;
    out.output_tokens = 0;
  }
  return out;
}

}  // namespace nvllm
