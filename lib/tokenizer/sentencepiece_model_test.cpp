// The native tokenizer.model reader on small models written here, byte by byte: the protobuf
// errors (each names the file), and the encoder's boundaries worked out by hand from the piece
// scores: BPE ties, Unigram's Viterbi and its ties, user-defined pieces, <unk> runs, byte
// fallback, whitespace handling and the precompiled_charsmap rules.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {
namespace {

// --- a protobuf writer for ModelProto (field numbers of sentencepiece_model.proto) ---
std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>(0x80 | (v & 0x7f));
    v >>= 7;
  }
  return out + static_cast<char>(v);
}
std::string key(uint32_t field, uint32_t wire) { return varint(uint64_t{field} << 3 | wire); }
std::string vfield(uint32_t field, int64_t v) { return key(field, 0) + varint(static_cast<uint64_t>(v)); }
std::string sfield(uint32_t field, std::string_view s) { return key(field, 2) + varint(s.size()) + std::string(s); }
std::string piece(std::string_view text, float score, int type = 1) {
  std::string score_bytes(4, '\0');
  std::memcpy(score_bytes.data(), &score, 4);  // little-endian hosts only, as the tests run
  std::string body = sfield(1, text) + key(2, 5) + score_bytes;
  if (type != 1) body += vfield(3, type);
  return sfield(1, body);
}
enum { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
std::string specials() { return piece("<unk>", 0, kUnknown) + piece("<s>", 0, kControl) + piece("</s>", 0, kControl); }
std::string trainer(int model_type, bool byte_fallback = false) {
  return sfield(2, vfield(3, model_type) + (byte_fallback ? vfield(35, 1) : ""));
}
std::string normalizer(bool dummy_prefix, bool remove_extra, std::string_view charsmap = {}) {
  return sfield(3, sfield(1, charsmap.empty() ? "identity" : "rules") + sfield(2, charsmap) + vfield(3, dummy_prefix) +
                       vfield(4, remove_extra) + vfield(5, 1));
}
const std::string kSpace = "\xE2\x96\x81";  // U+2581

// A scratch folder for this process, removed when the tests end.
const std::filesystem::path& scratch() {
  struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("nvllm_sp_" + std::to_string(::getpid()));
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Writes `bytes` as a tokenizer.model in a fresh folder and returns its path.
std::filesystem::path write_model(const std::string& name, const std::string& bytes) {
  const auto dir = scratch() / name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.model", std::ios::binary) << bytes;
  return dir / "tokenizer.model";
}
std::unique_ptr<Tokenizer> load(const std::string& name, const std::string& bytes) {
  return load_tokenizer(write_model(name, bytes));
}

void check_rejected(const std::string& name, const std::string& bytes, const char* why) {
  CAPTURE(name);
  const auto path = write_model(name, bytes);
  CHECK_THROWS_WITH_AS(load_tokenizer(path), doctest::Contains(path.string().c_str()), Error);
  CHECK_THROWS_WITH_AS(load_tokenizer(path), doctest::Contains(why), Error);
}

using Ids = std::vector<int32_t>;

}  // namespace

TEST_CASE("sentencepiece model: malformed protobuf is an error naming the file") {
  const std::string good = specials() + piece("a", -1) + trainer(2) + normalizer(true, true);
  REQUIRE(load("good", good)->vocab_size() == 4);
  // Fields the reader does not use, of every wire type, are skipped.
  const std::string fixed64 = key(60, 1) + std::string(8, '\x07');
  const std::string fixed32 = key(61, 5) + std::string(4, '\x07');
  CHECK(load("unknown_fields", good + vfield(60, 300) + fixed64 + fixed32 + sfield(62, "x") +
                                   sfield(2, vfield(4, 8000) + sfield(1, "corpus.txt")))->vocab_size() == 4);

  check_rejected("truncated", good.substr(0, good.size() - 3), "past the end");
  check_rejected("cut_in_piece", good.substr(0, 10), "past the end");
  check_rejected("truncated_varint", good + key(60, 0) + "\xFF", "varint runs past the end");
  check_rejected("long_varint", good + key(60, 0) + std::string(10, '\xFF') + "\x01", "longer than 10 bytes");
  check_rejected("group", good + key(60, 3), "wire type 3");
  check_rejected("field_zero", good + key(0, 0) + "\x01", "field number 0");
  check_rejected("score_as_varint", specials() + sfield(1, sfield(1, "a") + vfield(2, 5)), "pieces.score has wire type 0");
  check_rejected("pieces_as_varint", good + vfield(1, 3), "pieces has wire type 0");
  check_rejected("piece_type_7", good + piece("b", -1, 7), "type 7");
  check_rejected("model_type_5", good + trainer(5), "model_type is 5");
  check_rejected("unk_id_past_end", good + sfield(2, vfield(40, 4)), "unk_id is 4 but the model has 4 pieces");
  check_rejected("bos_id_below", good + sfield(2, vfield(41, -2)), "bos_id is -2");
  // The vocabulary.
  check_rejected("empty", "", "no piece of type UNKNOWN");
  check_rejected("empty_piece", good + piece("", -1), "piece 4 is empty");
  check_rejected("twice", good + piece("a", -2), "appears twice");
  check_rejected("two_unk", good + piece("<unk2>", 0, kUnknown), "both of type UNKNOWN");
  check_rejected("byte_without_fallback", good + piece("<0x41>", 0, kByte), "byte_fallback is false");
  check_rejected("bad_byte_piece", specials() + piece("<0x4g>", 0, kByte) + trainer(2, true), "not <0xXX>");
  check_rejected("missing_bytes", specials() + piece("<0x41>", 0, kByte) + trainer(2, true), "no byte piece <0x00>");
  check_rejected("word_model", good + trainer(3), "WORD");
  check_rejected("char_model", good + trainer(4), "CHAR");
  check_rejected("denormalizer", good + sfield(5, sfield(2, std::string(12, '\0'))), "denormalizer_spec");
  check_rejected("charsmap_short", specials() + piece("a", -1) + normalizer(true, true, std::string_view("\x01\0\0", 3)), "too short");
  check_rejected("charsmap_size", specials() + piece("a", -1) + normalizer(true, true, std::string("\x09\0\0\0xxxx", 8)),
                 "runs past");
  // A charsmap whose root points outside the array fails when text reaches it.
  const auto broken = load("charsmap_index", specials() + piece("a", -1) + trainer(1) +
                                                 normalizer(true, true, std::string("\x04\0\0\0\x00\x04\0\0\0", 9)));
  CHECK_THROWS_WITH_AS(broken->encode("a"), doctest::Contains("precompiled_charsmap is damaged"), Error);
}

TEST_CASE("sentencepiece model: BPE merges the best-scoring pair, the leftmost of a tie") {
  // "▁aba": ab and ba score the same, so the leftmost pair (a,b) merges; then nothing joins.
  // "▁abb": bb scores higher than ab although it is to the right.
  const auto tok = load("bpe_tie", specials() + piece(kSpace, -10) + piece("a", -10) + piece("b", -10) +
                                       piece("ab", -1) + piece("ba", -1) + piece("bb", -0.5f) +
                                       piece(kSpace + "a", -5) + trainer(2) + normalizer(true, true));
  //                           0..2 specials, 3 ▁, 4 a, 5 b, 6 ab, 7 ba, 8 bb, 9 ▁a
  CHECK(tok->encode("aba") == Ids{3, 6, 4});
  CHECK(tok->encode("abb") == Ids{9, 8});
  CHECK(tok->encode("") == Ids{});
  CHECK(tok->encode("   ") == Ids{});  // remove_extra_whitespaces leaves nothing
  CHECK(tok->encode("  a  b ") == Ids{9, 3, 5});  // "▁a▁b"
  // Unknown characters: one <unk> for a run of them (no byte fallback).
  CHECK(tok->encode("azzb") == Ids{9, 0, 5});
  CHECK(tok->encode("a z") == Ids{9, 3, 0});
  CHECK(tok->decode(Ids{9, 0, 5}) == "a \xE2\x81\x87 b");  // <unk> is " ⁇ "
  // Decoding drops the dummy prefix of the first piece; with remove_extra_whitespaces every
  // leading U+2581 goes.
  CHECK(tok->decode(Ids{3, 9, 3, 5}) == "a b");
}

TEST_CASE("sentencepiece model: dummy prefix and kept whitespace (Llama-2's settings)") {
  const auto tok = load("bpe_spaces", specials() + piece(kSpace, -10) + piece("a", -10) + piece(kSpace + kSpace, -1) +
                                          trainer(2) + normalizer(true, false));
  //                            3 ▁, 4 a, 5 ▁▁
  CHECK(tok->encode(" a") == Ids{5, 4});
  CHECK(tok->encode("a  ") == Ids{3, 4, 5});
  CHECK(tok->encode("   ") == Ids{5, 5});
  CHECK(tok->decode(Ids{5, 4}) == " a");  // only the first U+2581 is the dummy prefix
  CHECK(tok->decode(Ids{3, 3, 4}) == " a");
  const auto no_prefix = load("bpe_no_prefix", specials() + piece(kSpace, -10) + piece("a", -10) +
                                                   piece(kSpace + kSpace, -1) + trainer(2) + normalizer(false, false));
  CHECK(no_prefix->encode("a ") == Ids{4, 3});
  CHECK(no_prefix->decode(Ids{3, 4}) == " a");
}

TEST_CASE("sentencepiece model: byte fallback") {
  std::string bytes;
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) bytes += piece(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 0, kByte);
  const auto tok = load("bpe_bytes", specials() + bytes + piece(kSpace, -10) + piece("h", -10) + piece("i", -10) +
                                         piece("hi", -1) + piece(kSpace + "hi", -2) + trainer(2, true) +
                                         normalizer(true, false));
  //                           3..258 bytes, 259 ▁, 260 h, 261 i, 262 hi, 263 ▁hi
  CHECK(tok->encode("hi\xC3\xA9") == Ids{263, 3 + 0xC3, 3 + 0xA9});
  CHECK(tok->encode("\xC3\xA9\xC3\xA9") == Ids{259, 3 + 0xC3, 3 + 0xA9, 3 + 0xC3, 3 + 0xA9});  // no <unk> merging
  CHECK(tok->decode(Ids{263, 3 + 0xC3, 3 + 0xA9}) == "hi\xC3\xA9");
  CHECK(tok->decode(Ids{3 + 0xC3}) == "\xEF\xBF\xBD");
  CHECK(tok->decode(Ids{3 + 0xC3, 3 + 0x41, 263}) == "\xEF\xBF\xBD" "A hi");
  CHECK(tok->decode(Ids{3 + 0x41, 263}) == "A hi");  // a byte is text: the later ▁ is a space
}

TEST_CASE("sentencepiece model: Unigram takes the best-scoring segmentation (Viterbi)") {
  const auto tok = load("unigram", specials() + piece(kSpace, -2) + piece("a", -2) + piece("b", -2) + piece("ab", -3) +
                                       piece(kSpace + "a", -3) + piece(kSpace + "ab", -7) + piece("c", -2) +
                                       piece("bc", -1) + piece("<tool>", 0, kUserDefined) + piece("zz", -1, kUnused) +
                                       trainer(1) + normalizer(true, true));
  //                         3 ▁, 4 a, 5 b, 6 ab, 7 ▁a, 8 ▁ab, 9 c, 10 bc, 11 <tool>, 12 zz (unused)
  // "▁ab": ▁ab -7, ▁a+b -5, ▁+ab -5, ▁+a+b -6. The tie goes to the path whose last piece
  // starts first (▁+ab), as SentencePiece keeps the first candidate of equal score.
  CHECK(tok->encode("ab") == Ids{3, 6});
  // "▁abc": ▁a+bc -4 beats ▁+ab+c -7 and ▁a+b+c -7.
  CHECK(tok->encode("abc") == Ids{7, 10});
  CHECK(tok->encode("ac") == Ids{7, 9});
  // A character no piece covers is <unk>, scored 10 below the lowest piece; a run is one <unk>.
  // "zz" is a piece but UNUSED, so Unigram never takes it.
  CHECK(tok->encode("azz") == Ids{7, 0});
  CHECK(tok->encode("a<tool>b") == Ids{7, 11, 5});  // a user-defined piece is always one piece
  CHECK(tok->encode("<tool>") == Ids{3, 11});
  CHECK(tok->decode(Ids{7, 11, 5}) == "a<tool>b");

  // Path scores are summed in double and kept in float, as SentencePiece does. "▁ab": ▁+ab
  // comes first with -1 - 2^-25, kept as the float -1; ▁a+b is -1 + 2^-26 in double, higher,
  // so it wins, although in float both would be -1 and the first would stay.
  const float tiny = 1.0f / (1 << 26);
  const auto rounding = load("unigram_rounding", specials() + piece(kSpace, -1) + piece("a", -5) + piece("b", tiny) +
                                                     piece(kSpace + "a", -1) + piece("ab", -2 * tiny) + trainer(1) +
                                                     normalizer(true, true));
  //                                   3 ▁, 4 a, 5 b, 6 ▁a, 7 ab
  CHECK(rounding->encode("ab") == Ids{6, 5});
}

TEST_CASE("sentencepiece model: user-defined pieces match first in BPE, unused pieces are split") {
  const auto tok = load("bpe_user", specials() + piece(kSpace, -10) + piece("a", -10) + piece("b", -10) +
                                        piece("ab", -1, kUnused) + piece(kSpace + "ab", -2) + piece("<b>", 0, kUserDefined) +
                                        trainer(2) + normalizer(true, true));
  //                          3 ▁, 4 a, 5 b, 6 ab (unused), 7 ▁ab, 8 <b>
  CHECK(tok->encode("ab") == Ids{7});          // merged through the unused ab
  CHECK(tok->encode("b ab") == Ids{3, 5, 7});  // ▁b is not a piece
  CHECK(tok->encode("xab") == Ids{3, 0, 4, 5});  // ab alone is unused: split back into a, b
  CHECK(tok->encode("a<b>b") == Ids{3, 4, 8, 5});  // <b> never merges with its neighbours
}

TEST_CASE("sentencepiece model: precompiled_charsmap rules (longest rule first)") {
  // testdata/tokenizers/sp-rules: rules compiled by libsentencepiece_train, in code points:
  // 41 -> 61 (A -> a), FF21 -> 61 (fullwidth A -> a), FB01 -> 66 69 (the fi ligature -> fi),
  // 3000 -> 20 (ideographic space -> space), 61 62 -> 79 (ab -> y), 61 62 63 -> 78 (abc -> x),
  // 200B -> nothing.
  std::ifstream in(std::string(NVLLM_TESTDATA) + "/tokenizers/sp-rules/charsmap.bin", std::ios::binary);
  const std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(blob.size() == 1040);
  // Every character a piece of its own, all scoring the same, so the ids spell the normalized
  // text one character at a time.
  const auto tok = load("charsmap", specials() + piece(kSpace, -1) + piece("a", -1) + piece("b", -1) + piece("c", -1) +
                                        piece("f", -1) + piece("i", -1) + piece("x", -1) + piece("y", -1) +
                                        piece("A", -1) + trainer(1) + normalizer(true, true, blob));
  //                          3 ▁, 4 a, 5 b, 6 c, 7 f, 8 i, 9 x, 10 y, 11 A (never reached)
  CHECK(tok->encode("A") == Ids{3, 4});
  CHECK(tok->encode("\xEF\xBC\xA1" "bc") == Ids{3, 4, 5, 6});  // the rules see the input: Ａbc is not abc
  CHECK(tok->encode("abc") == Ids{3, 9});
  CHECK(tok->encode("abcab") == Ids{3, 9, 10});
  CHECK(tok->encode("aba") == Ids{3, 10, 4});
  CHECK(tok->encode("\xEF\xAC\x81") == Ids{3, 7, 8});  // ﬁ
  CHECK(tok->encode("a\xE3\x80\x80\xE3\x80\x80" "b") == Ids{3, 4, 3, 5});  // two ideographic spaces: one ▁
  CHECK(tok->encode("\xE3\x80\x80" "a") == Ids{3, 4});  // a leading one is removed
  CHECK(tok->encode("a\xE2\x80\x8B" "b") == Ids{3, 4, 5});  // U+200B deleted
  CHECK(tok->encode("\xE2\x80\x8B").empty());
}

}  // namespace nvllm
