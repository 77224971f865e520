// UTF-8 and byte-level helpers shared by the tokenizers: validation, the lossy conversion the
// reference library applies when decoding, NFC, and GPT-2's byte <-> unicode table.
#pragma once

#include "core/utf8.h"  // utf8_char_len, append_utf8

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nvllm::unicode {

using nvllm::append_utf8;
using nvllm::utf8_char_len;

// Offset of the first byte that does not start a valid UTF-8 sequence, or nullopt if `s` is
// valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
std::optional<size_t> first_invalid_utf8(std::string_view s);

// `bytes` as valid UTF-8: each maximal invalid subpart becomes one U+FFFD, which is what
// Rust's String::from_utf8_lossy (and Python's errors="replace") do.
std::string utf8_lossy(std::string_view bytes);

// Unicode NFC of valid UTF-8 `s` (utf8proc); text without combining-range characters skips
// utf8proc.
std::string nfc(std::string_view s);

bool is_ascii(std::string_view s);

// GPT-2's reversible map between bytes and printable code points: printable Latin-1 bytes map
// to themselves, the other 68 bytes to U+0100 onwards, in byte order.
class ByteLevelTable {
 public:
  ByteLevelTable();
  // The UTF-8 of the code point standing for byte `b`.
  const std::string& encode(uint8_t b) const { return byte_to_utf8_[b]; }
  // The bytes that byte-level text `s` stands for; nullopt if a character of `s` is not in the
  // table (such tokens are taken as plain UTF-8 by the reference decoder).
  std::optional<std::string> decode(std::string_view s) const;

 private:
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 512> codepoint_to_byte_;  // every mapped code point is below U+0144
};

const ByteLevelTable& byte_level_table();

}  // namespace nvllm::unicode
