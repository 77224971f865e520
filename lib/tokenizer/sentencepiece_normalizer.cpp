#include "tokenizer/sentencepiece_normalizer.h"

#include "core/error.h"

namespace nvllm::sp {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
// SentencePiece keeps at most this many matches of the charsmap at one position.
constexpr int kMaxRuleMatches = 32;

// darts-clone's 32-bit unit: a label byte (bit 31 set on value units), a has-leaf bit, and the
// XOR offset to the node's children (bit 9 scales it by 256).
bool unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
uint32_t unit_value(uint32_t u) { return u & 0x7FFFFFFFu; }
uint32_t unit_label(uint32_t u) { return u & 0x800000FFu; }
uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

}  // namespace

size_t valid_utf8_char_len(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return 1;
  const auto trail = [&](size_t i) { return (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  const auto bits = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i]) & 0x3F); };
  uint32_t cp = 0;
  size_t n = 0;
  if ((b0 & 0xE0) == 0xC0 && s.size() >= 2 && trail(1)) {
    cp = (b0 & 0x1Fu) << 6 | bits(1);
    n = cp >= 0x80 ? 2 : 0;
  } else if ((b0 & 0xF0) == 0xE0 && s.size() >= 3 && trail(1) && trail(2)) {
    cp = (b0 & 0x0Fu) << 12 | bits(1) << 6 | bits(2);
    n = cp >= 0x800 ? 3 : 0;
  } else if ((b0 & 0xF8) == 0xF0 && s.size() >= 4 && trail(1) && trail(2) && trail(3)) {
    cp = (b0 & 0x07u) << 18 | bits(1) << 12 | bits(2) << 6 | bits(3);
    n = cp >= 0x10000 ? 4 : 0;
  }
  if (n == 0 || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return 0;
  return n;
}

Normalizer::Normalizer(const NormalizerSpec& spec, bool treat_whitespace_as_suffix, const Trie* user_defined,
                       const std::string& source)
    : add_dummy_prefix_(spec.add_dummy_prefix),
      remove_extra_whitespaces_(spec.remove_extra_whitespaces),
      escape_whitespaces_(spec.escape_whitespaces),
      treat_whitespace_as_suffix_(treat_whitespace_as_suffix),
      user_defined_(user_defined && !user_defined->empty() ? user_defined : nullptr),
      source_(source) {
  const std::string& blob = spec.precompiled_charsmap;
  if (blob.empty()) return;
  // A little-endian uint32 size, the double array, then the replacement strings.
  NVLLM_CHECK(blob.size() > 4, source_, ": normalizer_spec.precompiled_charsmap is too short (", blob.size(),
              " bytes)");
  uint32_t trie_size = 0;
  for (int i = 0; i < 4; ++i) trie_size |= static_cast<uint32_t>(static_cast<uint8_t>(blob[i])) << (8 * i);
  NVLLM_CHECK(trie_size <= blob.size() - 4, source_,
              ": normalizer_spec.precompiled_charsmap: its trie size ", trie_size, " runs past its ", blob.size(),
              " bytes");
  units_.resize(trie_size / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= static_cast<uint32_t>(static_cast<uint8_t>(blob[4 + 4 * i + k])) << (8 * k);
    units_[i] = u;
  }
  replacements_ = blob.substr(4 + trie_size);
}

void Normalizer::damaged() const {
  fail(source_, ": normalizer_spec.precompiled_charsmap is damaged (an index points outside it)");
}

std::pair<std::string_view, size_t> Normalizer::normalize_prefix(std::string_view input) const {
  if (user_defined_) {
    if (const size_t n = user_defined_->longest_prefix(input)) return {input.substr(0, n), n};
  }
  size_t longest = 0;
  uint32_t value = 0;
  if (!units_.empty()) {
    // darts-clone's common-prefix search: the rules that are prefixes of `input`.
    const size_t size = units_.size();
    size_t node = unit_offset(units_[0]);
    int matches = 0;
    for (size_t i = 0; i < input.size(); ++i) {
      const auto b = static_cast<uint8_t>(input[i]);
      node ^= b;
      if (node >= size) damaged();
      const uint32_t unit = units_[node];
      if (unit_label(unit) != b) break;
      node ^= unit_offset(unit);
      if (unit_has_leaf(unit)) {
        if (node >= size) damaged();
        if (matches++ < kMaxRuleMatches) {
          longest = i + 1;
          value = unit_value(units_[node]);
        }
      }
    }
  }
  if (longest == 0) {
    const size_t n = valid_utf8_char_len(input);
    if (n == 0) return {kReplacementChar, 1};  // one stray byte
    return {input.substr(0, n), n};
  }
  if (value >= replacements_.size()) damaged();
  std::string_view out(replacements_);
  out.remove_prefix(value);
  return {out.substr(0, out.find('\0')), longest};
}

std::string Normalizer::normalize(std::string_view input) const {
  std::string out;
  if (input.empty()) return out;
  if (remove_extra_whitespaces_) {  // leading spaces
    while (!input.empty()) {
      const auto [rep, consumed] = normalize_prefix(input);
      if (rep != " ") break;
      input.remove_prefix(consumed);
    }
    if (input.empty()) return out;
  }
  out.reserve(input.size() * 3);
  const std::string_view space = escape_whitespaces_ ? kSpaceSymbol : " ";
  if (!treat_whitespace_as_suffix_ && add_dummy_prefix_) out += space;

  bool prev_space = remove_extra_whitespaces_;
  while (!input.empty()) {
    auto [rep, consumed] = normalize_prefix(input);
    while (prev_space && !rep.empty() && rep.front() == ' ') rep.remove_prefix(1);
    if (!rep.empty()) {
      for (const char c : rep) {
        if (escape_whitespaces_ && c == ' ') {
          out += kSpaceSymbol;
        } else {
          out += c;
        }
      }
      prev_space = rep.back() == ' ';
    }
    input.remove_prefix(consumed);
    if (!remove_extra_whitespaces_) prev_space = false;
  }
  if (remove_extra_whitespaces_) {  // trailing spaces
    while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space) {
      out.resize(out.size() - space.size());
    }
  }
  if (treat_whitespace_as_suffix_ && add_dummy_prefix_) out += space;
  return out;
}

}  // namespace nvllm::sp
