// UTF-8 validation and lossy conversion follow the Unicode "maximal subpart" practice
// (Unicode 15, section 3.9), so our U+FFFD count matches the reference library's.
#include "tokenizer/unicode.h"

#include <cstdlib>
#include <utf8proc.h>

#include "core/error.h"

namespace nvllm::unicode {
namespace {

// Length of the valid UTF-8 character at s[i], or 0 when invalid; `consumed` gets the length
// of the maximal subpart to replace in that case (at least 1).
size_t valid_char_at(std::string_view s, size_t i, size_t& consumed) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  consumed = 1;
  if (b0 < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    consumed = k + 1;
  }
  return need;
}

}  // namespace

std::optional<size_t> first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t consumed;
    const size_t n = valid_char_at(s, i, consumed);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t consumed;
    const size_t n = valid_char_at(bytes, i, consumed);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += consumed;
    }
  }
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

namespace {

std::string nfc_utf8proc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalisation failed: ", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// True when every character of the run is below U+0300: such characters are NFC already and
// never combine (the combining marks start at U+0300).
bool below_combining_marks(std::string_view run) {
  for (char c : run) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0xCC) return false;  // a lead byte of U+0300 or above
  }
  return true;
}

}  // namespace

// ASCII characters are never decomposed, have canonical class 0 and are never the second half
// of a composition, so a run of non-ASCII text normalizes independently of everything except
// the one ASCII character before it (which may compose with it: "e" + U+0301). Only such runs
// go through utf8proc, and only when they hold a character that NFC could change.
std::string nfc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && static_cast<unsigned char>(s[j]) < 0x80) ++j;
    out.append(s.substr(i, j - i));
    i = j;
    while (j < s.size() && static_cast<unsigned char>(s[j]) >= 0x80) ++j;
    const std::string_view run = s.substr(i, j - i);
    if (below_combining_marks(run)) {
      out.append(run);
    } else if (i > 0) {
      out.pop_back();  // the ASCII character before the run, normalized with it
      out += nfc_utf8proc(s.substr(i - 1, j - i + 1));
    } else {
      out += nfc_utf8proc(run);
    }
    i = j;
  }
  return out;
}

ByteLevelTable::ByteLevelTable() {
  codepoint_to_byte_.fill(-1);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    append_utf8(byte_to_utf8_[b], cp);
    codepoint_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

std::optional<std::string> ByteLevelTable::decode(std::string_view s) const {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 >> 5) == 0x6 && i + 1 < s.size()) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are never in the table
    }
    if (cp >= codepoint_to_byte_.size() || codepoint_to_byte_[cp] < 0) return std::nullopt;
    out += static_cast<char>(codepoint_to_byte_[cp]);
  }
  return out;
}

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table;
  return table;
}

}  // namespace nvllm::unicode
