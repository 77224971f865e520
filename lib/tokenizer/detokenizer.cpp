// IncrementalDetokenizer: decode a window of recent ids and emit only what has become final.
//
// Decoding one id at a time is wrong for two reasons: a character may span several byte
// tokens (its first tokens decode to U+FFFD), and some decoders change earlier text depending
// on what follows (metaspace strips a leading space only at the start). So, as vLLM does, we
// decode ids[prefix_offset:] and compare with ids[prefix_offset:read_offset]: the new suffix is
// emitted once it no longer ends in an incomplete character.
#include "tokenizer/tokenizer.h"

namespace nvllm {
namespace {

// Tokens of context kept before the first new one, so decoders see the same neighbourhood.
constexpr size_t kContextTokens = 5;

bool ends_with_replacement_char(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  const size_t keep = std::min(prompt_ids.size(), kContextTokens);
  ids_.assign(prompt_ids.end() - keep, prompt_ids.end());
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_.decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string new_text = tokenizer_.decode(all.subspan(prefix_offset_), skip_special_);
  if (new_text.size() <= prefix_text.size() || ends_with_replacement_char(new_text)) return {};
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Keep the window short: drop ids before prefix_offset_.
  if (prefix_offset_ > 4 * kContextTokens) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  text_ += delta;
  return delta;
}

}  // namespace nvllm
