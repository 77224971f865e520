// Python's str operations over UTF-8 text, code point by code point as Python sees a str:
// strip/split with Python's whitespace set, case mapping (utf8proc), replace, find, count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"  // append_utf8, utf8_char_len

namespace nvllm::jinja::text {

// Decodes the code point at `s[i]` and advances `i` (invalid bytes decode as themselves).
uint32_t next_cp(std::string_view s, size_t& i);
size_t cp_count(std::string_view s);
std::vector<uint32_t> to_cps(std::string_view s);

// Python's str.isspace for one code point.
bool is_space(uint32_t cp);
// Python's regex \w for one code point: letters, digits, numerics and '_'.
bool is_word(uint32_t cp);
// Python's str.isprintable for one code point (repr escapes the others).
bool is_printable(uint32_t cp);

// str.strip/lstrip/rstrip: `chars` nullopt strips whitespace.
std::string_view strip(std::string_view s, const std::optional<std::string_view>& chars, bool left, bool right);
// str.split(sep, maxsplit) and str.split() (whitespace, when sep is nullopt); rsplit when `right`.
std::vector<std::string> split(std::string_view s, const std::optional<std::string_view>& sep, int64_t maxsplit,
                               bool right = false);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string jinja_title(std::string_view s);    // the `title` filter (word starts after - space ( { [ <)
std::string capitalize(std::string_view s);     // str.capitalize()
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
int64_t count(std::string_view s, std::string_view sub);
// Index in code points of the first (last when `reverse`) occurrence, or -1.
int64_t find(std::string_view s, std::string_view sub, bool reverse = false);
std::string html_escape(std::string_view s);
bool all_cased(std::string_view s, bool want_upper);  // str.isupper / str.islower

}  // namespace nvllm::jinja::text
