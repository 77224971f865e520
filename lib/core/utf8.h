// UTF-8 encoding helpers shared by the tokenizer and the chat-template engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nvllm {

// Byte length of the UTF-8 character that starts with `lead` (1 for invalid leads).
inline size_t utf8_char_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Appends `codepoint` to `out` as UTF-8 (1 to 4 bytes).
inline void append_utf8(std::string& out, uint32_t codepoint) {
  const uint32_t cp = codepoint;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace nvllm
