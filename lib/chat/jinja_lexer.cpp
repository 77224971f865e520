#include "chat/jinja_lexer.h"

#include <cstring>

#include "chat/jinja_text.h"
#include "core/error.h"

namespace nvllm::jinja {

namespace {

// jinja2 joins the source's lines with "\n" (so \r\n and \r become \n) and, without
// keep_trailing_newline, drops one final newline.
std::string normalize_newlines(const std::string& src, bool keep_trailing) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!keep_trailing && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}


size_t skip_ws(const std::string& s, size_t i) {
  while (i < s.size()) {
    size_t j = i;
    if (!text::is_space(text::next_cp(s, j))) break;
    i = j;
  }
  return i;
}

bool all_ws(std::string_view s) { return !s.empty() && text::strip(s, std::nullopt, true, true).empty(); }

const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "~", "(", ")", "[",
                            "]",  "{",  "}",  ",",  ".",  ":",  "|", "=", "<", ">", ";"};

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name, const LexOptions& opt) : src_(src), name_(name), opt_(opt) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t at = find_tag(pos_);
      if (at == std::string::npos) {
        emit(Tok::kData, src_.substr(pos_), pos_);
        break;
      }
      char kind = src_[at + 1];
      char sign = at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : 0;
      emit_text(src_.substr(pos_, at - pos_), pos_, sign, kind != '{');
      if (kind == '#') lex_comment(at, sign);
      else if (kind == '%' && lex_raw(at)) continue;
      else lex_tag(at, kind, sign);
    }
    tokens_.push_back({Tok::kEof, "", line_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(size_t at, const std::string& what) {
    fail("chat template ", name_, " line ", line_of(at), ": ", what);
  }

  int line_of(size_t at) {
    for (; line_pos_ < at && line_pos_ < src_.size(); ++line_pos_) line_ += src_[line_pos_] == '\n';
    return line_;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void emit(Tok type, std::string text, size_t at) {
    if (type == Tok::kData && text.empty()) return;
    tokens_.push_back({type, std::move(text), line_of(at)});
  }

  // The text before a tag, after `-` (strip all whitespace before it) or lstrip_blocks (strip the
  // spaces between the line start and a block or comment tag).
  void emit_text(std::string text, size_t at, char sign, bool block_or_comment) {
    if (sign == '-') {
      text.resize(text::strip(text, std::nullopt, false, true).size());
    } else if (sign != '+' && opt_.lstrip_blocks && block_or_comment) {
      size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
      if ((l_pos > 0 || line_starting_) && all_ws(std::string_view(text).substr(l_pos))) text.resize(l_pos);
    }
    emit(Tok::kData, std::move(text), at);
  }

  // After a tag's end delimiter at `end` (one past it): `-` strips following whitespace, trim_blocks
  // one newline.
  void finish_tag(size_t end, char end_sign, bool trims) {
    if (end_sign == '-') end = skip_ws(src_, end);
    else if (end_sign != '+' && trims && opt_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  void lex_comment(size_t at, char sign) {
    size_t close = src_.find("#}", at + 2 + (sign ? 1 : 0));
    if (close == std::string::npos) error(at, "comment is not closed with #}");
    char end_sign = close > at + 2 && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    finish_tag(close + 2, end_sign, true);
  }

  // `{% raw %}...{% endraw %}`: the body is data, untouched.
  bool lex_raw(size_t at) {
    size_t i = skip_ws(src_, at + 2 + (src_[at + 2] == '-' || src_[at + 2] == '+'));
    if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && (isalnum(src_[i + 3]) || src_[i + 3] == '_')))
      return false;
    i = skip_ws(src_, i + 3);
    bool strip_after = src_.compare(i, 3, "-%}") == 0;
    if (!strip_after && src_.compare(i, 2, "%}") != 0) error(at, "expected %} after raw");
    size_t body = strip_after ? skip_ws(src_, i + 3) : i + 2;  // raw's own %} does not trim_blocks
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (size_t j = src_.find("{%", body); j != std::string::npos; j = src_.find("{%", j + 1)) {
      char sign = j + 2 < src_.size() && (src_[j + 2] == '-' || src_[j + 2] == '+') ? src_[j + 2] : 0;
      size_t k = skip_ws(src_, j + 2 + (sign ? 1 : 0));
      if (src_.compare(k, 6, "endraw") != 0) continue;
      k = skip_ws(src_, k + 6);
      char end_sign = src_[k] == '-' || src_[k] == '+' ? src_[k] : 0;
      if (src_.compare(k + (end_sign ? 1 : 0), 2, "%}") != 0) continue;
      emit_text(src_.substr(body, j - body), body, sign, true);
      finish_tag(k + (end_sign ? 1 : 0) + 2, end_sign, true);
      return true;
    }
    error(at, "raw block is not closed with {% endraw %}");
  }

  void lex_tag(size_t at, char kind, char sign) {
    bool block = kind == '%';
    emit(block ? Tok::kBlockBegin : Tok::kVarBegin, "", at);
    size_t i = at + 2 + (sign ? 1 : 0);
    const char* close = block ? "%}" : "}}";
    int depth = 0;  // open brackets: as in jinja2, `}}` inside `{...}` does not end the tag
    for (;;) {
      i = skip_ws(src_, i);
      if (i >= src_.size()) error(at, std::string("tag is not closed with ") + close);
      char end_sign = src_[i] == '-' || (block && src_[i] == '+') ? src_[i] : 0;
      if (depth == 0 && src_.compare(i + (end_sign ? 1 : 0), 2, close) == 0) {
        emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "", i);
        finish_tag(i + (end_sign ? 1 : 0) + 2, end_sign, block);
        return;
      }
      i = lex_token(i);
      const Token& t = tokens_.back();
      if (t.type == Tok::kOp && (t.text == "(" || t.text == "[" || t.text == "{")) ++depth;
      if (t.type == Tok::kOp && (t.text == ")" || t.text == "]" || t.text == "}") && depth > 0) --depth;
    }
  }

  size_t lex_token(size_t i) {
    char c = src_[i];
    if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src_.size() && (isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
      emit(Tok::kName, src_.substr(i, j - i), i);
      return j;
    }
    if (isdigit(static_cast<unsigned char>(c))) return lex_number(i);
    if (c == '\'' || c == '"') return lex_string(i);
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (src_.compare(i, n, op) == 0) {
        emit(Tok::kOp, op, i);
        return i + n;
      }
    }
    error(i, std::string("unexpected character '") + c + "'");
  }

  size_t digits(size_t i) const {
    while (i < src_.size() && (isdigit(static_cast<unsigned char>(src_[i])) ||
                               (src_[i] == '_' && i + 1 < src_.size() && isdigit(static_cast<unsigned char>(src_[i + 1])))))
      ++i;
    return i;
  }

  size_t lex_number(size_t i) {
    size_t j = digits(i);
    bool is_float = false;
    if (j + 1 < src_.size() && src_[j] == '.' && isdigit(static_cast<unsigned char>(src_[j + 1]))) {
      j = digits(j + 1);
      is_float = true;
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && isdigit(static_cast<unsigned char>(src_[k]))) j = digits(k), is_float = true;
    }
    std::string t;
    for (size_t k = i; k < j; ++k) {
      if (src_[k] != '_') t += src_[k];
    }
    emit(is_float ? Tok::kFloat : Tok::kInt, t, i);
    return j;
  }

  size_t lex_string(size_t i);
  uint32_t hex_escape(size_t& k, int n, size_t at);

  const std::string& src_;
  const std::string& name_;
  LexOptions opt_;
  std::vector<Token> tokens_;
  size_t pos_ = 0, line_pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
};

uint32_t Lexer::hex_escape(size_t& k, int n, size_t at) {
  uint32_t v = 0;
  for (int d = 0; d < n; ++d, ++k) {
    if (k >= src_.size() || !isxdigit(static_cast<unsigned char>(src_[k]))) error(at, "bad \\x/\\u escape in string");
    char h = src_[k];
    v = v * 16 + static_cast<uint32_t>(isdigit(static_cast<unsigned char>(h)) ? h - '0' : (tolower(h) - 'a' + 10));
  }
  return v;
}

// A string literal decoded as Python's unicode-escape does (jinja2's rule): \n \t \xHH \uHHHH ...;
// an unknown escape keeps its backslash.
size_t Lexer::lex_string(size_t i) {
  char q = src_[i];
  std::string out;
  size_t k = i + 1;
  for (;;) {
    if (k >= src_.size()) error(i, "string literal is not closed");
    char c = src_[k];
    if (c == q) break;
    if (c != '\\' || k + 1 >= src_.size()) {
      out += c;
      ++k;
      continue;
    }
    char e = src_[k + 1];
    k += 2;
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // line continuation
      case 'x': append_utf8(out, hex_escape(k, 2, i)); break;
      case 'u': append_utf8(out, hex_escape(k, 4, i)); break;
      case 'U': append_utf8(out, hex_escape(k, 8, i)); break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int d = 0; d < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++d, ++k)
            v = v * 8 + static_cast<uint32_t>(src_[k] - '0');
          append_utf8(out, v);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  emit(Tok::kString, std::move(out), i);
  return k + 1;
}

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& name, const LexOptions& opt) {
  std::string src = normalize_newlines(source, opt.keep_trailing_newline);
  return Lexer(src, name, opt).run();
}

}  // namespace nvllm::jinja
