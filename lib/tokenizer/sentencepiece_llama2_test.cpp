// The native tokenizer.model reader on a real-size model: Llama-2's tokenizer.json (32,000
// pieces, BPE with byte fallback) turned back into a tokenizer.model at test time by
// testdata/tokenizers/make_sp_from_json.py, checked against the goldens the Hugging Face library
// made, and against nvllm's own tokenizer.json BPE (a different algorithm: merges by rank, not
// pieces by score) on random text.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "tokenizer/test_tokenizers.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {
namespace {

// The converted model, made once per test process; null when python3 is missing.
const Tokenizer* llama2_sp() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (std::system("command -v python3 >/dev/null 2>&1") != 0) return nullptr;
    const auto dir = std::filesystem::temp_directory_path() / ("nvllm_sp_llama2_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string testdata = NVLLM_TESTDATA;
    const std::string cmd = "python3 '" + testdata + "/tokenizers/make_sp_from_json.py' '" + testdata +
                            "/tokenizers/llama2/tokenizer.json' '" + (dir / "tokenizer.model").string() + "'";
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "failed: ", cmd);
    std::filesystem::copy_file(testdata + "/tokenizers/llama2/tokenizer_config.json", dir / "tokenizer_config.json");
    auto loaded = load_tokenizer(dir / "tokenizer.model");
    std::filesystem::remove_all(dir);
    return loaded;
  }();
  if (!tok) MESSAGE("skipped: python3 is not installed, so the Llama-2 tokenizer.model cannot be made");
  return tok.get();
}

}  // namespace

TEST_CASE("sentencepiece llama2: the converted tokenizer.model gives the goldens' ids and text") {
  const Tokenizer* tok = llama2_sp();
  if (!tok) return;
  CHECK(tok->vocab_size() == 32000);
  std::ifstream in(std::string(NVLLM_TESTDATA) + "/tokenizers/llama2/goldens.jsonl");
  REQUIRE(in);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    ++n;
    const auto g = nlohmann::json::parse(line);
    const std::string text = g["text"].get<std::string>();
    const auto ids = g["ids"].get<std::vector<int32_t>>();
    CAPTURE(text);
    CHECK(tok->encode(text) == ids);
    CHECK(tok->decode(ids) == g["decoded"].get<std::string>());
    std::vector<int32_t> with_bos = {1};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    CHECK(tok->encode(text, true) == with_bos);  // tokenizer_config.json: add_bos_token
  }
  CHECK(n >= 40);
}

TEST_CASE("sentencepiece llama2: boundaries (empty, spaces, byte fallback, <unk>, specials)") {
  const Tokenizer* tok = llama2_sp();
  if (!tok) return;
  const Tokenizer& json = test_tokenizer("llama2");
  CHECK(tok->encode("").empty());
  // Only spaces: the dummy prefix and the spaces all become U+2581 (Llama-2 keeps extra
  // whitespace); the tokenizer.json BPE is the reference.
  for (const char* spaces : {" ", "  ", "   ", "        "}) {
    CAPTURE(spaces);
    CHECK(tok->encode(spaces) == json.encode(spaces));
    CHECK(tok->decode(tok->encode(spaces)) == spaces);
  }
  // A character with no piece of its own goes to its UTF-8 bytes: U+10FFFF is F4 8F BF BF, the
  // byte pieces <0x00>..<0xFF> are ids 3..258.
  const std::vector<int32_t> bytes = {3 + 0xF4, 3 + 0x8F, 3 + 0xBF, 3 + 0xBF};
  std::vector<int32_t> ids = tok->encode("\xF4\x8F\xBF\xBF");
  REQUIRE(ids.size() == 5);
  CHECK(tok->token_to_id("\xE2\x96\x81") == ids[0]);  // the dummy prefix "▁"
  CHECK(std::vector<int32_t>(ids.begin() + 1, ids.end()) == bytes);
  CHECK(tok->decode(ids) == "\xF4\x8F\xBF\xBF");
  // Bytes that are not UTF-8 decode to U+FFFD, one for each byte.
  CHECK(tok->decode(std::vector<int32_t>{3 + 0xF4, 3 + 0x8F}) == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(tok->decode(std::vector<int32_t>{3 + 0xC3, 3 + 0x41}) == "\xEF\xBF\xBD" "A");
  // The text "<s>" is not the control token (SentencePiece never matches control pieces in
  // text; the tokenizer.json path matches added tokens first, so it is no reference here).
  const std::vector<int32_t> s_text = tok->encode("<s>");
  CHECK(std::find(s_text.begin(), s_text.end(), 1) == s_text.end());
  CHECK(tok->decode(s_text) == "<s>");
  CHECK(tok->is_special(0));
  CHECK(tok->is_special(2));
  CHECK_FALSE(tok->is_special(3));  // a byte piece
  CHECK(tok->token_to_id("<0x0A>") == 3 + 0x0A);
}

TEST_CASE("sentencepiece llama2: the same ids as the tokenizer.json BPE on random text") {
  const Tokenizer* tok = llama2_sp();
  if (!tok) return;
  const Tokenizer& json = test_tokenizer("llama2");
  // Characters that exercise whitespace runs, byte fallback (rare CJK, emoji, private use),
  // combining marks and the U+2581 character itself.
  const std::vector<std::string> pool = {" ", " ", "  ", "\t", "\n", "e", "t", "a", "th", "the", "ing", "I", "'s",
                                         "0", "1", ".", ",", "\xC3\xA9", "e\xCC\x81", "\xE4\xB8\xAD", "\xE6\x96\x87",
                                         "\xE3\x81\x82", "\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D", "\xEE\x80\x80",
                                         "\xE2\x96\x81", "\xEF\xBF\xBD", "\xF4\x8F\xBF\xBF", "\xD0\x96", "\xE0\xB8\x81"};
  std::mt19937 rng(22);
  int compared = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    for (int k = static_cast<int>(rng() % 24); k > 0; --k) text += pool[rng() % pool.size()];
    CAPTURE(text);
    const std::vector<int32_t> ids = tok->encode(text);
    REQUIRE(ids == json.encode(text));
    CHECK(tok->decode(ids) == json.decode(ids));
    ++compared;
  }
  CHECK(compared == 3000);
}

}  // namespace nvllm
