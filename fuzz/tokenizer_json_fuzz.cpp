// libFuzzer target: the tokenizer.json loader (normalizers, pre-tokenizers with their regexes,
// the BPE model, added tokens, post-processor, decoders) and a short encode/decode with what
// it accepted. Anything may be rejected with nvllm::Error; nothing may crash.
#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path file = nvllm::fuzz::scratch_dir() / "tokenizer.json";
  nvllm::fuzz::write_file(file, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    nvllm::HfTokenizer tok(nvllm::parse_tokenizer_json(file));
    const std::vector<int32_t> ids = tok.encode("Hello wörld  <|x|>\n\t12345 ▁a", true);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    }
    (void)tok.decode(ids);
  } catch (const nvllm::Error&) {
  }
  return 0;
}
