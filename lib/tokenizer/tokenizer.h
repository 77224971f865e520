// Tokenizer: text to token ids and back, for every tokenizer format a checkpoint folder ships.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nvllm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Added/special tokens in `text` are matched first (as the Hugging Face tokenizers library
  // does), the rest goes through the model. With `add_special_tokens`, the post-processor's
  // prefix (e.g. Llama's <s> / <|begin_of_text|>) is prepended.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const = 0;

  // Text of `ids`; invalid UTF-8 at the end (an incomplete character) becomes U+FFFD, as in
  // the reference library.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const = 0;

  virtual int32_t vocab_size() const = 0;  // largest id + 1, added tokens included
  virtual bool is_special(int32_t id) const = 0;
  // The id of a token string (vocabulary or added token), if it exists.
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
};

// Loads DIR/tokenizer.json, or DIR/tokenizer.model through SentencePiece when there is no
// tokenizer.json. Throws nvllm::Error naming the file for a missing or unsupported tokenizer.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);

// Turns a growing list of token ids into text that only ever grows by complete UTF-8
// characters, the way the user sees a stream. Works for any Tokenizer (byte-level,
// metaspace, SentencePiece) by decoding a short window of recent ids, as vLLM does.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                         bool skip_special_tokens);
  // Appends one id and returns the text it completes (possibly empty).
  std::string push(int32_t id);
  // All text emitted so far.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string text_;
};

}  // namespace nvllm
