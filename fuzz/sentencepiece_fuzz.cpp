// libFuzzer target: the native tokenizer.model reader (lib/tokenizer/sentencepiece_*): the
// protobuf wire format, the vocabulary checks, the precompiled_charsmap, and encode/decode with
// what it accepted. The input is the model's bytes, optionally followed by "\n---\n" and a text
// to encode besides the fixed ones. Loading may refuse anything with nvllm::Error; encoding
// valid UTF-8 may refuse only a damaged charsmap; ids must be inside the vocabulary; decoding
// any ids in range must work; nothing may crash.
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/sentencepiece_processor.h"
#include "tokenizer/unicode.h"

namespace {

void encode_decode(const nvllm::sp::Processor& sp, std::string_view text) {
  if (nvllm::unicode::first_invalid_utf8(text)) return;  // the tokenizer refuses it before sp
  std::vector<int32_t> ids;
  try {
    ids = sp.encode(text);
  } catch (const nvllm::Error& e) {
    if (std::string_view(e.what()).find("precompiled_charsmap is damaged") == std::string_view::npos) __builtin_trap();
    return;
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= sp.size()) __builtin_trap();
  }
  (void)sp.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [model, text] = nvllm::fuzz::split_at(data, size, "\n---\n");
  try {
    const nvllm::sp::Processor sp(nvllm::sp::parse_model_proto(model, "tokenizer.model"), "tokenizer.model");
    encode_decode(sp, "Hello w\xC3\xB6rld  <tool>\n\t12345 \xE2\x96\x81" "a \xEF\xBC\xA1\xEF\xAC\x81\xE3\x80\x80z");
    encode_decode(sp, "   ");
    encode_decode(sp, text);
    std::vector<int32_t> all;
    for (int32_t id = 0; id < sp.size() && id < 4096; ++id) all.push_back(id);
    (void)sp.decode(all);
    (void)sp.bos_id();
    (void)sp.eos_id();
  } catch (const nvllm::Error&) {
  }
  return 0;
}
