// tokenizer.model through SentencePiece, on the hand-made BPE model of
// testdata/tokenizers/tiny-sp (make_model.py). Expected ids are worked out by hand from the
// piece scores: BPE merges the adjacent pair whose joined piece scores highest.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {

TEST_CASE("sentencepiece: tokenizer.model is used when there is no tokenizer.json") {
  const auto tok = load_tokenizer(std::string(NVLLM_TESTDATA) + "/tokenizers/tiny-sp");
  // "▁hello▁world": ll(-1), he(-2), ▁he(-3), llo(-4), ▁hello(-5), or(-6), wor(-7); nothing
  // joins ▁ with wor, or l with d.
  const std::vector<int32_t> ids = {15, 3, 17, 6, 10};
  CHECK(tok->encode("hello world") == ids);
  CHECK(tok->encode("hello world", true) == std::vector<int32_t>{1, 15, 3, 17, 6, 10});  // add_bos_token default
  CHECK(tok->encode("hellz") == std::vector<int32_t>{13, 11, 0});  // ▁he, ll, then z: <unk>
  CHECK(tok->decode(ids) == "hello world");
  const std::vector<int32_t> with_bos = {1, 15, 3, 17, 6, 10, 2};
  CHECK(tok->decode(with_bos) == "<s>hello world</s>");
  CHECK(tok->decode(with_bos, true) == "hello world");
  CHECK(tok->is_special(1));
  CHECK(tok->is_special(0));
  CHECK_FALSE(tok->is_special(15));
  CHECK(tok->vocab_size() == 18);
  CHECK(tok->token_to_id("wor") == 17);
  CHECK(tok->token_to_id("<unk>") == 0);
  CHECK_FALSE(tok->token_to_id("xyz").has_value());

  IncrementalDetokenizer detok(*tok, {}, true);
  std::string streamed;
  for (int32_t id : with_bos) streamed += detok.push(id);
  CHECK(streamed == "hello world");
}

TEST_CASE("sentencepiece: a damaged tokenizer.model is an error naming the file") {
  const auto dir = std::filesystem::temp_directory_path() / "nvllm_sp_bad";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer.model") << "not a model";
  CHECK_THROWS_WITH_AS(load_tokenizer(dir), doctest::Contains((dir / "tokenizer.model").string().c_str()), Error);
}

}  // namespace nvllm
