// HfTokenizer: a Hugging Face tokenizer.json pipeline — added tokens, normalizer,
// pre-tokenizer, BPE model, post-processor, decoder — restricted to the components that the
// published BPE tokenizers we serve use (Qwen3, Llama 3, Llama 2). Anything else is refused at
// load time with an error naming the file and the component, never silently mis-tokenized.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {

struct NormalizerStep {
  enum class Kind { kNfc, kPrepend, kReplace };
  Kind kind;
  std::string text;         // kPrepend: what is prepended; kReplace: the pattern
  std::string replacement;  // kReplace
};

struct DecoderStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind;
  // kReplace: pattern -> content; kStrip: content (one character); kMetaspace: content is the
  // replacement character.
  std::string pattern, content;
  size_t start = 0, stop = 0;  // kStrip: how many leading / trailing `content` chars to drop
  bool prepend = false;        // kMetaspace: prepend_scheme is not "never"
};

// The Metaspace pre-tokenizer: spaces become `replacement`, which is prepended to a segment
// that does not start with it (every segment for "always", only the text's first for
// "first"); with `split`, every replacement character starts a new word.
struct MetaspaceSpec {
  std::string replacement;
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

// Everything parsed from tokenizer.json; HfTokenizer only runs it.
struct HfTokenizerSpec {
  std::string source;  // the file, for messages
  std::vector<NormalizerStep> normalizer;
  std::vector<std::string> split_patterns;  // Split(Isolated) pre-tokenizers, applied in order
  bool byte_level = false;                  // a ByteLevel pre-tokenizer is present
  std::optional<MetaspaceSpec> metaspace;   // a Metaspace pre-tokenizer (then nothing else)
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added;
  std::vector<int32_t> prefix_ids, suffix_ids;  // the post-processor's single-sequence template
  std::optional<std::vector<DecoderStep>> decoder;  // nullopt: no decoder (tokens joined by " ")
  // Every id's token string as written in the file (model vocab and added tokens).
  std::unordered_map<int32_t, std::string> id_to_token;
};

HfTokenizerSpec parse_tokenizer_json(const std::filesystem::path& file);

class HfTokenizer : public Tokenizer {
 public:
  explicit HfTokenizer(HfTokenizerSpec spec);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;

 private:
  struct Match {
    size_t start = std::string_view::npos;
    size_t length = 0;
    int32_t id = -1;
  };
  Match find_added(std::string_view text, size_t from) const;
  // `at_text_start`: the segment begins the text (no added token before it).
  void encode_segment(std::string_view segment, bool at_text_start, std::vector<int32_t>& ids) const;
  void encode_words(std::string_view s, std::vector<int32_t>& ids) const;
  std::string normalize(std::string_view segment) const;
  std::string run_decoder(std::vector<std::string> tokens) const;

  HfTokenizerSpec spec_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
  std::vector<std::string> tokens_;        // id -> token as in the file ("" where no token)
  std::vector<std::string> token_bytes_;   // byte-level decoders: id -> the bytes it stands for
  std::vector<uint8_t> present_, special_;  // per id
  bool byte_level_decoder_only_ = false;   // decoder is exactly [ByteLevel]: decode by bytes
  // Metaspace vocabularies (Llama 2) have no pre-tokenizer, so a whole line is one BPE word.
  // When no token has this marker ("▁") after other text, no token can span the point before
  // a marker that follows other text: words split there give the same ids, and short words
  // hit the cache. Empty when the vocabulary does not allow it.
  std::string word_marker_;
  // Added tokens by first byte, longest first, for leftmost-longest matching.
  std::array<std::vector<uint32_t>, 256> added_by_first_byte_;
  std::unordered_map<std::string, int32_t> added_ids_;
};

}  // namespace nvllm
