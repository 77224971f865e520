// The protobuf wire format, just enough of it for ModelProto: varints, length-delimited fields
// (strings, bytes, nested messages) and fixed32 floats. Fields this reader does not use are
// skipped by wire type, as protobuf itself does; a field it uses must have its declared wire
// type. Every read is bounds-checked against the message it is in.
#include "tokenizer/sentencepiece_model.h"

#include <cstring>

#include "core/error.h"

namespace nvllm::sp {
namespace {

enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class WireReader {
 public:
  // `offset` is where `data` starts in the file, for messages.
  WireReader(std::string_view data, size_t offset, const std::string& source)
      : data_(data), offset_(offset), source_(source) {}

  bool done() const { return pos_ == data_.size(); }

  // The next field's number and wire type.
  std::pair<uint32_t, uint32_t> key() {
    const size_t at = pos_;
    const uint64_t k = varint();
    const uint64_t number = k >> 3;
    const auto wire = static_cast<uint32_t>(k & 7);
    if (number == 0 || number > 536870911) bad(at, "field number ", number);
    if (wire != kVarint && wire != kFixed64 && wire != kLengthDelimited && wire != kFixed32) {
      bad(at, "wire type ", wire, " (groups and unknown types are not protobuf 3 / SentencePiece)");
    }
    return {static_cast<uint32_t>(number), wire};
  }

  uint64_t varint() {
    const size_t at = pos_;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == data_.size()) bad(at, "a varint runs past the end of its message");
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad(at, "a varint longer than 10 bytes");
  }

  std::string_view length_delimited(size_t* start = nullptr) {
    const size_t at = pos_;
    const uint64_t n = varint();
    if (n > data_.size() - pos_) bad(at, "a length of ", n, " runs past the end of its message");
    if (start) *start = offset_ + pos_;
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  float fixed32_float() {
    if (data_.size() - pos_ < 4) bad(pos_, "a 4-byte value runs past the end of its message");
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += 4;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

  void skip(uint32_t wire) {
    switch (wire) {
      case kVarint: (void)varint(); break;
      case kFixed64:
        if (data_.size() - pos_ < 8) bad(pos_, "an 8-byte value runs past the end of its message");
        pos_ += 8;
        break;
      case kLengthDelimited: (void)length_delimited(); break;
      default: (void)fixed32_float(); break;
    }
  }

  // A field this reader uses must have the wire type its .proto type gives it.
  void expect(uint32_t wire, uint32_t want, const char* field) {
    if (wire != want) bad(pos_, field, " has wire type ", wire, ", expected ", want);
  }

  template <typename... Args>
  [[noreturn]] void bad(size_t at, Args&&... what) const {
    fail(source_, ": not a valid SentencePiece model (byte ", offset_ + at, "): ", std::forward<Args>(what)...);
  }

  size_t offset() const { return offset_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  size_t offset_;
  const std::string& source_;
};

int32_t as_int32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

Piece parse_piece(std::string_view data, size_t offset, const std::string& source, size_t index) {
  WireReader r(data, offset, source);
  Piece p;
  while (!r.done()) {
    const auto [number, wire] = r.key();
    switch (number) {
      case 1: r.expect(wire, kLengthDelimited, "pieces.piece"); p.text = std::string(r.length_delimited()); break;
      case 2: r.expect(wire, kFixed32, "pieces.score"); p.score = r.fixed32_float(); break;
      case 3: {
        r.expect(wire, kVarint, "pieces.type");
        const uint64_t t = r.varint();
        if (t < 1 || t > 6) r.bad(0, "piece ", index, " has type ", t, "; SentencePiece's types are 1 to 6");
        p.type = static_cast<PieceType>(t);
        break;
      }
      default: r.skip(wire);
    }
  }
  return p;
}

void parse_trainer_spec(std::string_view data, size_t offset, const std::string& source, ModelProto& m) {
  WireReader r(data, offset, source);
  while (!r.done()) {
    const auto [number, wire] = r.key();
    switch (number) {
      case 3: {
        r.expect(wire, kVarint, "trainer_spec.model_type");
        const uint64_t t = r.varint();
        if (t < 1 || t > 4) r.bad(0, "trainer_spec.model_type is ", t, "; SentencePiece's types are 1 to 4");
        m.model_type = static_cast<ModelType>(t);
        break;
      }
      case 24: r.expect(wire, kVarint, "trainer_spec.treat_whitespace_as_suffix"); m.treat_whitespace_as_suffix = r.varint() != 0; break;
      case 35: r.expect(wire, kVarint, "trainer_spec.byte_fallback"); m.byte_fallback = r.varint() != 0; break;
      case 40: r.expect(wire, kVarint, "trainer_spec.unk_id"); m.unk_id = as_int32(r.varint()); break;
      case 41: r.expect(wire, kVarint, "trainer_spec.bos_id"); m.bos_id = as_int32(r.varint()); break;
      case 42: r.expect(wire, kVarint, "trainer_spec.eos_id"); m.eos_id = as_int32(r.varint()); break;
      case 43: r.expect(wire, kVarint, "trainer_spec.pad_id"); m.pad_id = as_int32(r.varint()); break;
      case 44: r.expect(wire, kLengthDelimited, "trainer_spec.unk_surface"); m.unk_surface = std::string(r.length_delimited()); break;
      case 45: r.expect(wire, kLengthDelimited, "trainer_spec.unk_piece"); m.unk_piece = std::string(r.length_delimited()); break;
      case 46: r.expect(wire, kLengthDelimited, "trainer_spec.bos_piece"); m.bos_piece = std::string(r.length_delimited()); break;
      case 47: r.expect(wire, kLengthDelimited, "trainer_spec.eos_piece"); m.eos_piece = std::string(r.length_delimited()); break;
      default: r.skip(wire);
    }
  }
}

void parse_normalizer_spec(std::string_view data, size_t offset, const std::string& source, NormalizerSpec& n,
                           const char* which) {
  WireReader r(data, offset, source);
  const std::string w(which);
  while (!r.done()) {
    const auto [number, wire] = r.key();
    switch (number) {
      case 1: r.expect(wire, kLengthDelimited, (w + ".name").c_str()); n.name = std::string(r.length_delimited()); break;
      case 2:
        r.expect(wire, kLengthDelimited, (w + ".precompiled_charsmap").c_str());
        n.precompiled_charsmap = std::string(r.length_delimited());
        break;
      case 3: r.expect(wire, kVarint, (w + ".add_dummy_prefix").c_str()); n.add_dummy_prefix = r.varint() != 0; break;
      case 4: r.expect(wire, kVarint, (w + ".remove_extra_whitespaces").c_str()); n.remove_extra_whitespaces = r.varint() != 0; break;
      case 5: r.expect(wire, kVarint, (w + ".escape_whitespaces").c_str()); n.escape_whitespaces = r.varint() != 0; break;
      default: r.skip(wire);
    }
  }
}

}  // namespace

ModelProto parse_model_proto(std::string_view bytes, const std::string& source) {
  ModelProto m;
  WireReader r(bytes, 0, source);
  // Protobuf merges a message field that appears more than once; parsing every occurrence into
  // the same struct does the same.
  NormalizerSpec denormalizer;
  while (!r.done()) {
    const auto [number, wire] = r.key();
    size_t start = 0;
    switch (number) {
      case 1: {
        r.expect(wire, kLengthDelimited, "pieces");
        const std::string_view body = r.length_delimited(&start);
        m.pieces.push_back(parse_piece(body, start, source, m.pieces.size()));
        break;
      }
      case 2: {
        r.expect(wire, kLengthDelimited, "trainer_spec");
        const std::string_view body = r.length_delimited(&start);
        parse_trainer_spec(body, start, source, m);
        break;
      }
      case 3: {
        r.expect(wire, kLengthDelimited, "normalizer_spec");
        const std::string_view body = r.length_delimited(&start);
        parse_normalizer_spec(body, start, source, m.normalizer, "normalizer_spec");
        break;
      }
      case 5: {
        r.expect(wire, kLengthDelimited, "denormalizer_spec");
        const std::string_view body = r.length_delimited(&start);
        parse_normalizer_spec(body, start, source, denormalizer, "denormalizer_spec");
        break;
      }
      default: r.skip(wire);
    }
  }
  m.has_denormalizer_rules = !denormalizer.precompiled_charsmap.empty();

  const auto n = static_cast<int64_t>(m.pieces.size());
  const auto check_id = [&](const std::optional<int32_t>& id, const char* field) {
    if (id && (*id < -1 || *id >= n)) {
      fail(source, ": trainer_spec.", field, " is ", *id, " but the model has ", n, " pieces");
    }
  };
  check_id(m.unk_id, "unk_id");
  check_id(m.bos_id, "bos_id");
  check_id(m.eos_id, "eos_id");
  check_id(m.pad_id, "pad_id");
  return m;
}

}  // namespace nvllm::sp
