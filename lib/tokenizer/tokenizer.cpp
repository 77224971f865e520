// load_tokenizer: picks the tokenizer implementation from the files a checkpoint folder has.
#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"

namespace nvllm {

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& file);

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  // A tokenizer file given directly is accepted too (tests, one-off use).
  if (fs::is_regular_file(dir)) {
    if (dir.extension() == ".model") return load_sentencepiece_tokenizer(dir);
    return std::make_unique<HfTokenizer>(parse_tokenizer_json(dir));
  }
  NVLLM_CHECK(fs::is_directory(dir), dir.string(), ": no such folder; pass the checkpoint folder with --model");
  if (fs::exists(dir / "tokenizer.json")) return std::make_unique<HfTokenizer>(parse_tokenizer_json(dir / "tokenizer.json"));
  if (fs::exists(dir / "tokenizer.model")) return load_sentencepiece_tokenizer(dir / "tokenizer.model");
  fail(dir.string(), ": has neither tokenizer.json nor tokenizer.model; copy the tokenizer files of the checkpoint "
       "into this folder");
}

}  // namespace nvllm
