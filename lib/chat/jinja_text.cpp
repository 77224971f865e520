#include "chat/jinja_text.h"

#include <algorithm>

#include <utf8proc.h>

namespace nvllm::jinja::text {

uint32_t next_cp(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  const size_t len = utf8_char_len(b);
  if (len == 1 || i + len > s.size()) {
    ++i;
    return b;
  }
  uint32_t cp = len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<uint32_t> to_cps(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(next_cp(s, i));
  return out;
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_printable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
      return false;
    default:
      return true;
  }
}

bool is_word(uint32_t cp) {
  if (cp < 0x80) return isalnum(static_cast<int>(cp)) || cp == '_';
  auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

namespace {

bool in_set(uint32_t cp, const std::optional<std::string_view>& chars) {
  if (!chars) return is_space(cp);
  for (size_t i = 0; i < chars->size();) {
    if (next_cp(*chars, i) == cp) return true;
  }
  return false;
}

// Start offset of the code point that ends at byte `end`.
size_t prev_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

std::string_view strip(std::string_view s, const std::optional<std::string_view>& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t i = b;
      if (!in_set(next_cp(s, i), chars)) break;
      b = i;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = prev_start(s, e), i = start;
      if (!in_set(next_cp(s, i), chars)) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit, bool right) {
  std::vector<std::string> words;
  std::vector<std::pair<size_t, size_t>> spans;  // [start, end) of each word
  size_t i = 0, start = std::string::npos;
  while (i < s.size()) {
    size_t at = i;
    bool sp = is_space(next_cp(s, i));
    if (sp && start != std::string::npos) spans.push_back({start, at}), start = std::string::npos;
    if (!sp && start == std::string::npos) start = at;
  }
  if (start != std::string::npos) spans.push_back({start, s.size()});
  if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= spans.size()) {
    for (auto [b, e] : spans) words.emplace_back(s.substr(b, e - b));
    return words;
  }
  size_t keep = static_cast<size_t>(maxsplit);
  if (!right) {
    for (size_t k = 0; k < keep; ++k) words.emplace_back(s.substr(spans[k].first, spans[k].second - spans[k].first));
    words.emplace_back(strip(s.substr(spans[keep].first), std::nullopt, false, true));
  } else {
    size_t first = spans.size() - keep;
    words.emplace_back(strip(s.substr(0, spans[first - 1].second), std::nullopt, true, false));
    for (size_t k = first; k < spans.size(); ++k)
      words.emplace_back(s.substr(spans[k].first, spans[k].second - spans[k].first));
  }
  return words;
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::optional<std::string_view>& sep, int64_t maxsplit,
                               bool right) {
  if (!sep) return split_whitespace(s, maxsplit, right);
  std::vector<std::string> parts;
  if (!right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    parts.emplace_back(s.substr(pos));
    return parts;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string_view::npos) break;
    parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

namespace {

void append_upper(std::string& out, uint32_t cp) {
  if (cp == 0xDF) {  // Python's full case mapping: ß -> SS
    out += "SS";
    return;
  }
  append_utf8(out, static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))));
}

void append_lower(std::string& out, uint32_t cp) {
  append_utf8(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
}

bool is_cased(uint32_t cp) {
  auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, next_cp(s, i));
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_lower(out, next_cp(s, i));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_cp(s, i);
    if (prev_cased) append_lower(out, cp);
    else append_upper(out, cp);
    prev_cased = is_cased(cp);
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // Jinja splits on runs of [-\s({\[<] and upper-cases the first character of each piece.
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_cp(s, i);
    bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_space(cp);
    if (sep) {
      append_utf8(out, cp);
      word_start = true;
    } else if (word_start) {
      append_upper(out, cp);
      word_start = false;
    } else {
      append_lower(out, cp);
    }
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_cp(s, i);
    if (out.empty()) append_upper(out, cp);
    else append_lower(out, cp);
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` before every code point and at the end
    int64_t n = 0;
    for (size_t i = 0; i < s.size();) {
      if (count < 0 || n < count) out += repl, ++n;
      size_t at = i;
      next_cp(s, i);
      out.append(s.substr(at, i - at));
    }
    if (count < 0 || n < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(repl);
    pos = at + old.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(cp_count(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<int64_t>(cp_count(s.substr(0, at)));
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

bool all_cased(std::string_view s, bool want_upper) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    auto c = utf8proc_category(static_cast<utf8proc_int32_t>(next_cp(s, i)));
    if (c == UTF8PROC_CATEGORY_LT) return false;
    if (c == (want_upper ? UTF8PROC_CATEGORY_LL : UTF8PROC_CATEGORY_LU)) return false;
    any |= c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL;
  }
  return any;
}

}  // namespace nvllm::jinja::text
