// SentencePiece's text normalization before encoding: the precompiled_charsmap rules (the
// longest rule at each position wins; no rules is the identity), then whitespace: leading,
// trailing and repeated spaces removed (remove_extra_whitespaces), the dummy-prefix space
// (add_dummy_prefix) and every space written as U+2581 (escape_whitespaces).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/sentencepiece_trie.h"

namespace nvllm::sp {

inline constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581

// Byte length of the UTF-8 character at the start of `s` as SentencePiece counts it (from the
// lead byte alone: 1 for ASCII and stray continuation bytes, 2, 3, or 4), at most s.size().
inline size_t one_char_len(std::string_view s) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  const size_t n = kLen[static_cast<uint8_t>(s[0]) >> 4];
  return n < s.size() ? n : s.size();
}

// The length of the valid UTF-8 character at the start of `s` (no overlongs, surrogates or code
// points past U+10FFFF), or 0 if it does not start with one.
size_t valid_utf8_char_len(std::string_view s);

class Normalizer {
 public:
  // `user_defined` (may be null) holds the user-defined pieces, which pass through
  // normalization unchanged. It must outlive the normalizer.
  Normalizer(const NormalizerSpec& spec, bool treat_whitespace_as_suffix, const Trie* user_defined,
             const std::string& source);

  std::string normalize(std::string_view text) const;

 private:
  // The replacement for the start of `input` and how many input bytes it replaces.
  std::pair<std::string_view, size_t> normalize_prefix(std::string_view input) const;
  [[noreturn]] void damaged() const;

  bool add_dummy_prefix_, remove_extra_whitespaces_, escape_whitespaces_, treat_whitespace_as_suffix_;
  const Trie* user_defined_;
  std::string source_;
  // precompiled_charsmap: a darts-clone double array whose values index `replacements_`, a
  // run of NUL-terminated strings.
  std::vector<uint32_t> units_;
  std::string replacements_;
};

}  // namespace nvllm::sp
