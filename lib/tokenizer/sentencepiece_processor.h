// A SentencePiece model run natively: the vocabulary of a ModelProto, the BPE and Unigram
// encoders, byte fallback, and decoding, each following what libsentencepiece (0.1.97) does,
// so that ids match it exactly.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/sentencepiece_normalizer.h"
#include "tokenizer/sentencepiece_trie.h"

namespace nvllm::sp {

class Processor {
 public:
  // Checks the vocabulary (no empty or repeated pieces, exactly one <unk>, the 256 <0xXX>
  // pieces when byte_fallback is on) and throws nvllm::Error naming `source` otherwise, or for
  // what is not supported (WORD and CHAR models, denormalizer rules).
  Processor(ModelProto model, std::string source);
  Processor(const Processor&) = delete;  // the lookup tables point into model_
  Processor& operator=(const Processor&) = delete;

  // Ids of valid UTF-8 `text` (no <s>/</s>).
  std::vector<int32_t> encode(std::string_view text) const;
  // Text of `ids`, each in [0, size()): control pieces decode to nothing, <unk> to
  // trainer_spec.unk_surface, the first dummy-prefix space is dropped, and runs of <0xXX>
  // pieces become their bytes (U+FFFD for each byte that is not part of valid UTF-8).
  std::string decode(std::span<const int32_t> ids) const;

  int32_t size() const { return static_cast<int32_t>(model_.pieces.size()); }
  // The id of `piece`; the <unk> id if there is none, as SentencePiece's PieceToId.
  int32_t piece_to_id(std::string_view piece) const;
  const std::string& id_to_piece(int32_t id) const { return model_.pieces[id].text; }
  PieceType type(int32_t id) const { return model_.pieces[id].type; }
  bool is_control(int32_t id) const { return type(id) == PieceType::kControl; }
  bool is_unknown(int32_t id) const { return type(id) == PieceType::kUnknown; }
  // trainer_spec.bos_piece / eos_piece if it is a control piece, else -1 (as SentencePiece).
  int32_t bos_id() const;
  int32_t eos_id() const;

 private:
  using Segment = std::pair<std::string_view, int32_t>;  // a piece of the normalized text
  void encode_bpe(std::string_view normalized, std::vector<Segment>& out) const;
  void encode_unigram(std::string_view normalized, std::vector<Segment>& out) const;
  // A piece BPE may merge into and Unigram may use (NORMAL, USER_DEFINED, UNUSED).
  bool mergeable(int32_t id) const {
    const PieceType t = type(id);
    return t == PieceType::kNormal || t == PieceType::kUserDefined || t == PieceType::kUnused;
  }

  ModelProto model_;
  std::string source_;
  std::unordered_map<std::string_view, int32_t> ids_;  // views of model_.pieces' text
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};
  bool has_unused_ = false;
  Trie user_defined_;
  Trie unigram_pieces_;
  float min_score_ = 0, max_score_ = 0;  // over NORMAL pieces, for Unigram
  std::unique_ptr<Normalizer> normalizer_;
};

}  // namespace nvllm::sp
