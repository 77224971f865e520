// Golden tokenizations made by the Hugging Face tokenizers library (testdata/tokenizers/*/
// goldens.jsonl): ids must match exactly and decode must give the library's text.
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/test_tokenizers.h"

namespace nvllm {
namespace {

void check_goldens(const std::string& name) {
  const Tokenizer& tok = test_tokenizer(name);
  std::ifstream in(std::string(NVLLM_TESTDATA) + "/tokenizers/" + name + "/goldens.jsonl");
  REQUIRE(in);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n;
    const auto g = nlohmann::json::parse(line);
    const std::string text = g["text"].get<std::string>();
    const auto expected = g["ids"].get<std::vector<int32_t>>();
    CAPTURE(name);
    CAPTURE(text);
    CHECK(tok.encode(text) == expected);
    CHECK(tok.decode(expected) == g["decoded"].get<std::string>());
  }
  CHECK(n >= 40);
}

}  // namespace

TEST_CASE("tokenizer goldens: qwen3") { check_goldens("qwen3"); }
TEST_CASE("tokenizer goldens: llama3") { check_goldens("llama3"); }
TEST_CASE("tokenizer goldens: llama2") { check_goldens("llama2"); }

TEST_CASE("tokenizer: encode from several threads at once gives the single-thread ids") {
  // The word cache and the regex match state are shared or per thread; a request thread pool
  // may tokenize concurrently.
  const Tokenizer& tok = test_tokenizer("llama3");
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(str_cat("request ", i, ": the ", i * 7919 % 1000, " quick brown foxes"));
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& t : texts) expected.push_back(tok.encode(t));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t i = t; i < texts.size() + t; ++i) {
          const size_t k = i % texts.size();
          if (tok.encode(texts[k]) != expected[k]) ++mismatches;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(mismatches == 0);
}

TEST_CASE("tokenizer: added and special tokens (Qwen3)") {
  const Tokenizer& tok = test_tokenizer("qwen3");
  CHECK(tok.vocab_size() == 151669);
  CHECK(tok.token_to_id("<|im_end|>") == 151645);
  CHECK(tok.token_to_id("<tool_call>") == 151657);
  CHECK(tok.token_to_id("\xC4\xA0the") == 279);  // "Ġthe": vocabulary strings as in the file
  CHECK_FALSE(tok.token_to_id("no such token").has_value());
  CHECK(tok.is_special(151645));
  CHECK_FALSE(tok.is_special(151657));  // <tool_call> is an added token but not special
  CHECK_FALSE(tok.is_special(279));

  // Added tokens are matched anywhere in the text, special or not, before the model runs.
  const std::vector<int32_t> ids = tok.encode("x<tool_call>y<|im_end|>");
  REQUIRE(ids.size() == 4);
  CHECK(ids[1] == 151657);
  CHECK(ids[3] == 151645);
  // Qwen3's post-processor adds nothing.
  CHECK(tok.encode("x<tool_call>y<|im_end|>", true) == ids);
  // skip_special_tokens drops special tokens only.
  CHECK(tok.decode(ids, true) == "x<tool_call>y");
  CHECK(tok.decode(ids, false) == "x<tool_call>y<|im_end|>");
  // Ids past the vocabulary (models pad theirs) are dropped, as the reference does.
  const std::vector<int32_t> padded = {ids[0], 151900};
  CHECK(tok.decode(padded) == "x");
}

TEST_CASE("tokenizer: add_special_tokens follows the post-processor") {
  const Tokenizer& llama2 = test_tokenizer("llama2");
  const std::vector<int32_t> plain = llama2.encode("Hello");
  std::vector<int32_t> with_bos = {1};
  with_bos.insert(with_bos.end(), plain.begin(), plain.end());
  CHECK(llama2.encode("Hello", true) == with_bos);  // TemplateProcessing: <s> $A
  CHECK(llama2.encode("", true) == std::vector<int32_t>{1});
  CHECK(llama2.is_special(1));
  CHECK(llama2.decode(with_bos, true) == "Hello");
  // Special tokens written in the text are matched too; the text after one is its own segment
  // and gets the metaspace prefix again, as in the reference.
  CHECK(llama2.encode("</s>Hello") == std::vector<int32_t>{2, plain[0]});

  // This Llama 3 file's post-processor is ByteLevel, which adds no tokens.
  const Tokenizer& llama3 = test_tokenizer("llama3");
  CHECK(llama3.encode("Hello", true) == llama3.encode("Hello"));
  CHECK(llama3.encode("<|begin_of_text|>Hello") == std::vector<int32_t>{128000, 9906});
}

namespace {

// Writes `content` as DIR/tokenizer.json in a fresh folder and returns the load error.
std::string load_error(const std::string& content) {
  const auto dir = std::filesystem::temp_directory_path() / "nvllm_tokenizer_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << content;
  try {
    load_tokenizer(dir);
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find((dir / "tokenizer.json").string()) != std::string::npos);
    return message;
  }
  FAIL("no error for ", content);
  return "";
}

// A small valid tokenizer.json (no normalizer, no pre-tokenizer), with `model` and `extra`.
std::string tiny_json(const std::string& model, const std::string& extra = "") {
  return R"({"added_tokens": [{"id": 3, "content": "<x>", "special": true}, {"id": 4, "content": "<xy>", "special": true}],
             "model": )" + model + extra + "}";
}

constexpr const char* kTinyModel =
    R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<x>": 3, "<xy>": 4}, "merges": [["a", "b"]]})";

}  // namespace

TEST_CASE("tokenizer: a small tokenizer.json: pair merges, leftmost-longest added tokens") {
  const auto dir = std::filesystem::temp_directory_path() / "nvllm_tokenizer_tiny";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_json(kTinyModel, R"(, "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<xy>", "type_id": 0}}],
      "special_tokens": {"<x>": {"id": "<x>", "ids": [3], "tokens": ["<x>"]},
                         "<xy>": {"id": "<xy>", "ids": [4], "tokens": ["<xy>"]}}})");
  const auto tok = load_tokenizer(dir);
  CHECK(tok->encode("abab") == std::vector<int32_t>{2, 2});
  CHECK(tok->encode("ba") == std::vector<int32_t>{1, 0});
  CHECK(tok->encode("a<xy>b<x>") == std::vector<int32_t>{0, 4, 1, 3});  // <xy>, not <x> then "y>"
  CHECK(tok->encode("ab", true) == std::vector<int32_t>{3, 2, 4});
  // Without a decoder the reference joins tokens with spaces.
  const std::vector<int32_t> ids = {2, 3, 0};
  CHECK(tok->decode(ids) == "ab <x> a");
  CHECK(tok->decode(ids, true) == "ab a");
  CHECK_THROWS_AS(tok->encode("abc"), Error);  // "c" is unknown and there is no unk_token
  CHECK_THROWS_AS(tok->encode("a\xFF"), Error);  // not UTF-8
}

TEST_CASE("tokenizer: a Metaspace pre-tokenizer and decoder match Llama 2's Prepend/Replace normalizer") {
  // Newer conversions of SentencePiece vocabularies spell Llama 2's normalizer as a Metaspace
  // pre-tokenizer with prepend_scheme "first". For texts that do not start with a space the two
  // give the same words, so Llama 2's goldens (from the reference library) must reproduce.
  std::ifstream in(std::string(NVLLM_TESTDATA) + "/tokenizers/llama2/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}}}}};
  const auto dir = std::filesystem::temp_directory_path() / "nvllm_tokenizer_metaspace";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  const auto tok = load_tokenizer(dir);
  std::ifstream goldens(std::string(NVLLM_TESTDATA) + "/tokenizers/llama2/goldens.jsonl");
  int checked = 0;
  for (std::string line; std::getline(goldens, line);) {
    const auto g = nlohmann::json::parse(line);
    const std::string text = g["text"].get<std::string>();
    if (text.empty() || text[0] == ' ') continue;
    CAPTURE(text);
    const auto ids = g["ids"].get<std::vector<int32_t>>();
    CHECK(tok->encode(text) == ids);
    CHECK(tok->decode(ids) == g["decoded"].get<std::string>());
    ++checked;
  }
  CHECK(checked >= 35);
  // "first": no prefix after an added token; the reference's Prepend normalizer would add one.
  const Tokenizer& llama2 = test_tokenizer("llama2");
  const std::vector<int32_t> after_eos = tok->encode("</s>Hello");
  REQUIRE(after_eos.size() >= 2);
  CHECK(after_eos[0] == 2);
  CHECK(after_eos != llama2.encode("</s>Hello"));  // that one has "▁Hello"
  CHECK(tok->decode(after_eos, true) == "Hello");
  CHECK(tok->encode("Hello</s>Hello").front() == llama2.encode("Hello").front());
}

TEST_CASE("tokenizer: a bad or unsupported tokenizer.json is an error naming the file and component") {
  CHECK(load_error("{not json").find("not valid JSON") != std::string::npos);
  CHECK(load_error(R"({"model": {"type": "WordPiece", "vocab": {}}})").find("WordPiece") != std::string::npos);
  CHECK(load_error(tiny_json(kTinyModel, R"(, "normalizer": {"type": "NFKC"})")).find("normalizer") !=
        std::string::npos);
  CHECK(load_error(tiny_json(kTinyModel, R"(, "pre_tokenizer": {"type": "Whitespace"})")).find("pre_tokenizer") !=
        std::string::npos);
  CHECK(load_error(tiny_json(kTinyModel, R"(, "decoder": {"type": "WordPiece"})")).find("decoder") !=
        std::string::npos);
  CHECK(load_error(tiny_json(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]})")).find("model.merges[0]") !=
        std::string::npos);
  CHECK(load_error(tiny_json(kTinyModel, R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"},
                                             "behavior": "Isolated", "invert": false})"))
            .find("regex") != std::string::npos);
  CHECK(load_error(R"({"model": {"type": "BPE", "vocab": [1, 2]}})").find("model.vocab") != std::string::npos);
  // Found by tokenizer_json_fuzz: a key the loader reads without checking it first (here the
  // post-processor's "ids", "single", a SpecialToken's "id", a Sequence's "processors") was
  // read past the end of the JSON object (undefined behaviour); now it is an error.
  for (const char* post : {
           R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>"}}], "special_tokens": {"<x>": {"id": "<x>"}}})",
           R"({"type": "TemplateProcessing", "special_tokens": {}})",
           R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {}}], "special_tokens": {}})",
           R"({"type": "Sequence"})"}) {
    CAPTURE(post);
    CHECK(load_error(tiny_json(kTinyModel, std::string(", \"post_processor\": ") + post)).find("unexpected structure") !=
          std::string::npos);
  }
  CHECK(load_error(tiny_json(kTinyModel, R"(, "normalizer": {"type": "Sequence"})")).find("unexpected structure") !=
        std::string::npos);
  CHECK(load_error(tiny_json(kTinyModel, R"(, "pre_tokenizer": {"type": "Sequence"})")).find("unexpected structure") !=
        std::string::npos);
  CHECK(load_error(tiny_json(kTinyModel, R"(, "decoder": {"type": "Replace", "pattern": {"String": "a"}})"))
            .find("unexpected structure") != std::string::npos);

  // Found by tokenizer_json_fuzz in CI's smoke run: a token id of 1e130 was converted to int
  // (undefined behaviour). Ids must be integers from 0 to 2^31 - 1, the boundary included.
  for (const char* id : {"1e130", "2.5", "-1", "2147483648"}) {
    CAPTURE(id);
    const std::string model = std::string(R"({"type": "BPE", "vocab": {"a": 0, "b": )") + id + R"(}, "merges": []})";
    CHECK(load_error(tiny_json(model)).find("model.vocab: token \"b\": expected a token id") != std::string::npos);
    const std::string added = std::string(R"({"added_tokens": [{"id": )") + id +
                              R"(, "content": "<x>"}], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
    CHECK(load_error(added).find("added_tokens[0] (\"<x>\"): expected a token id") != std::string::npos);
  }
  {  // the largest id is still one
    const auto dir = std::filesystem::temp_directory_path() / "nvllm_tokenizer_max_id";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "tokenizer.json") << tiny_json(R"({"type": "BPE", "vocab": {"a": 0, "b": 2147483647}, "merges": []})");
    CHECK(parse_tokenizer_json(dir / "tokenizer.json").id_to_token.at(2147483647) == "b");
  }

  const auto empty = std::filesystem::temp_directory_path() / "nvllm_tokenizer_empty";
  std::filesystem::create_directories(empty);
  std::filesystem::remove(empty / "tokenizer.json");
  CHECK_THROWS_WITH_AS(load_tokenizer(empty), doctest::Contains("tokenizer.json"), Error);
}

TEST_CASE("tokenizer: an added token that begins another is matched only where the longer one is not") {
  const auto dir = std::filesystem::temp_directory_path() / "nvllm_tokenizer_prefix";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"added_tokens": [{"id": 1, "content": "<x>", "special": true},
                                                                {"id": 2, "content": "<x><x>", "special": true}],
      "model": {"type": "BPE", "vocab": {"a": 0, "<x>": 1, "<x><x>": 2}, "merges": []}})";
  const auto tok = load_tokenizer(dir);
  // Leftmost-longest, as the reference: "<x><x>" first, then the "<x>" left over.
  CHECK(tok->encode("a<x><x><x>") == std::vector<int32_t>{0, 2, 1});
}

TEST_CASE("tokenizer: a Strip decoder removes start leading and stop trailing characters of each token") {
  const auto dir = std::filesystem::temp_directory_path() / "nvllm_tokenizer_strip";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_json(kTinyModel, R"(, "decoder": {"type": "Sequence", "decoders": [
      {"type": "Strip", "content": "b", "start": 0, "stop": 1}, {"type": "Strip", "content": "a", "start": 1, "stop": 0}]})");
  const auto tok = load_tokenizer(dir);
  // "ab" -> "a" (one trailing b) -> "" (one leading a); "a" -> "" ; "b" -> "".
  CHECK(tok->decode(std::vector<int32_t>{2, 0, 1}) == "");
  CHECK(tok->decode(std::vector<int32_t>{2}) == "");
  std::ofstream(dir / "tokenizer.json") << tiny_json(kTinyModel, R"(, "decoder": {"type": "Strip", "content": "b", "start": 0, "stop": 1})");
  // Every token keeps all but one trailing "b": "ab" -> "a", "a" -> "a", "b" -> "".
  CHECK(load_tokenizer(dir)->decode(std::vector<int32_t>{2, 0, 1}) == "aa");
  // Found by tokenizer_json_fuzz: a count that is no integer in [0, 2^31) is an error naming it.
  for (const char* bad : {"8.9e45", "-1", "1.5", "2147483648"}) {
    CAPTURE(bad);
    std::ofstream(dir / "tokenizer.json")
        << tiny_json(kTinyModel, std::string(R"(, "decoder": {"type": "Strip", "content": "b", "start": 0, "stop": )") + bad + "}");
    CHECK_THROWS_WITH_AS(load_tokenizer(dir), doctest::Contains("Strip \"stop\" must be an integer"), Error);
  }
  std::ofstream(dir / "tokenizer.json")
      << tiny_json(kTinyModel, R"(, "decoder": {"type": "Strip", "content": "b", "start": 0, "stop": 2147483647})");
  CHECK(load_tokenizer(dir)->decode(std::vector<int32_t>{2, 0, 1}) == "aa");
}

}  // namespace nvllm
