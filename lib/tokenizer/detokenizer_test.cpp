// IncrementalDetokenizer against the tokenizers' own decode: streamed pieces are complete
// UTF-8, and together they are exactly what decoding all ids at once gives.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/test_tokenizers.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace nvllm {
namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";

// Streams `ids` after `prompt` and checks every piece and the total.
void check_stream(const Tokenizer& tok, const std::vector<int32_t>& prompt, const std::vector<int32_t>& ids,
                  bool skip_special) {
  IncrementalDetokenizer detok(tok, prompt, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detok.push(id);
    CHECK_FALSE(unicode::first_invalid_utf8(piece).has_value());
    CHECK(piece.find(kReplacement) == std::string::npos);
    streamed += piece;
  }
  CHECK(detok.text() == streamed);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), ids.begin(), ids.end());
  const std::string whole = tok.decode(all, skip_special);
  const std::string before = tok.decode(prompt, skip_special);
  REQUIRE(whole.compare(0, before.size(), before) == 0);
  CHECK(streamed == whole.substr(before.size()));
}

std::vector<std::string> golden_texts(const std::string& name) {
  std::ifstream in(std::string(NVLLM_TESTDATA) + "/tokenizers/" + name + "/goldens.jsonl");
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  }
  return texts;
}

}  // namespace

TEST_CASE("IncrementalDetokenizer: streamed goldens equal decode, for each tokenizer") {
  for (const char* name : {"qwen3", "llama3", "llama2"}) {
    CAPTURE(name);
    const Tokenizer& tok = test_tokenizer(name);
    const std::vector<std::string> texts = golden_texts(name);
    REQUIRE(texts.size() >= 40);
    for (const std::string& text : texts) {
      CAPTURE(text);
      // The golden texts have no U+FFFD of their own, so none may be streamed.
      check_stream(tok, {}, tok.encode(text), false);
      // After a prompt, as generation uses it.
      check_stream(tok, tok.encode("Question: what is it?\nAnswer:"), tok.encode(text), false);
      check_stream(tok, tok.encode("Question: what is it?\nAnswer:"), tok.encode(text), true);
    }
  }
}

TEST_CASE("IncrementalDetokenizer: a character split over byte tokens is emitted once, whole") {
  // Rare characters: byte-level BPE keeps them as several byte tokens, Llama 2 falls back to
  // <0xNN> tokens.
  const std::string text = "\xF0\x9D\x84\x9E\xF0\x9F\xA6\x80";  // U+1D11E U+1F980
  for (const char* name : {"qwen3", "llama3", "llama2"}) {
    CAPTURE(name);
    const Tokenizer& tok = test_tokenizer(name);
    const std::vector<int32_t> ids = tok.encode(text);
    REQUIRE(ids.size() >= 3);  // so some token is only part of a character
    if (std::string(name) == "llama2") {
      REQUIRE(tok.token_to_id("<0xF0>").has_value());
      CHECK(std::count(ids.begin(), ids.end(), *tok.token_to_id("<0xF0>")) == 2);
    }
    IncrementalDetokenizer detok(tok, {}, false);
    std::vector<std::string> pieces;
    for (int32_t id : ids) {
      std::string piece = detok.push(id);
      if (!piece.empty()) pieces.push_back(piece);
    }
    std::string joined;
    for (const std::string& p : pieces) {
      CHECK_FALSE(unicode::first_invalid_utf8(p).has_value());
      // Each piece is made of whole characters of the text.
      CHECK(p.find(kReplacement) == std::string::npos);
      joined += p;
    }
    CHECK(joined == text);
    CHECK(pieces.size() <= 2);
  }
}

TEST_CASE("IncrementalDetokenizer: an incomplete character at the end is held back") {
  const Tokenizer& tok = test_tokenizer("llama2");
  const auto f0 = tok.token_to_id("<0xF0>"), x9f = tok.token_to_id("<0x9F>"), x91 = tok.token_to_id("<0x91>"),
             x8d = tok.token_to_id("<0x8D>");
  REQUIRE((f0 && x9f && x91 && x8d));
  IncrementalDetokenizer detok(tok, tok.encode("Hi"), false);
  CHECK(detok.push(*f0).empty());
  CHECK(detok.push(*x9f).empty());
  CHECK(detok.push(*x91).empty());
  CHECK(detok.push(*x8d) == "\xF0\x9F\x91\x8D");  // U+1F44D
  // decode of the incomplete prefix shows replacement characters, one per byte token.
  const std::vector<int32_t> partial = {*f0, *x9f};
  CHECK(tok.decode(partial) == std::string(kReplacement) + kReplacement);
}

}  // namespace nvllm
