// SentencePiece's ModelProto (a tokenizer.model file) read from its protobuf wire format, for
// the fields that change how text is tokenized. Field numbers are those of the public
// sentencepiece_model.proto; defaults are the .proto's defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nvllm::sp {

enum class PieceType : uint8_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
enum class ModelType : uint8_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

struct Piece {
  std::string text;
  float score = 0.0f;
  PieceType type = PieceType::kNormal;
};

struct NormalizerSpec {
  std::string name;
  std::string precompiled_charsmap;  // empty: the identity normalizer
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

struct ModelProto {
  std::vector<Piece> pieces;  // the id of a piece is its index
  // trainer_spec
  ModelType model_type = ModelType::kUnigram;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  // The special ids as the trainer recorded them; only those written in the file (checked to
  // be -1 or a piece). The tokenizer finds <unk> by piece type and <s>/</s> by piece text.
  std::optional<int32_t> unk_id, bos_id, eos_id, pad_id;
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>";
  std::string unk_surface = " \xE2\x81\x87 ";  // what decode writes for <unk>: " ⁇ "
  NormalizerSpec normalizer;
  // denormalizer_spec with a non-empty charsmap (rules applied to decoded text).
  bool has_denormalizer_rules = false;
};

// Parses the bytes of a tokenizer.model. Malformed protobuf (a truncated varint, a length past
// the end, a field of the wrong wire type, an unknown enum value, a special id outside the
// pieces) is an nvllm::Error that names `source`.
ModelProto parse_model_proto(std::string_view bytes, const std::string& source);

}  // namespace nvllm::sp
