// libFuzzer target: encode and decode of every tokenizer kind in testdata/tokenizers
// (byte-level BPE: qwen3, llama3; Metaspace BPE: llama2; SentencePiece: tiny-sp). The first
// byte picks the tokenizer and the operation; the rest is the text to encode, or little-endian
// int32 ids to decode (in range or not) through decode and the incremental detokenizer.
// Encoding may refuse only invalid UTF-8 (which JSON strings cannot carry) and must give ids
// inside the vocabulary; nothing may crash.
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::array<std::unique_ptr<nvllm::Tokenizer>, 4>& tokenizers() {
  static const auto all = [] {
    const std::string dir = std::string(NVLLM_TESTDATA) + "/tokenizers/";
    return std::array<std::unique_ptr<nvllm::Tokenizer>, 4>{
        nvllm::load_tokenizer(dir + "qwen3"), nvllm::load_tokenizer(dir + "llama3"),
        nvllm::load_tokenizer(dir + "llama2"), nvllm::load_tokenizer(dir + "tiny-sp/tokenizer.model")};
  }();
  return all;
}

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), written here
// rather than taken from the tokenizer so that the two can disagree.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? b : b & (0x7f >> len);
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 2) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

void fuzz_encode(const nvllm::Tokenizer& tok, std::string_view text, bool special) {
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, special);
  } catch (const nvllm::Error&) {
    if (valid_utf8(text)) __builtin_trap();  // only invalid UTF-8 may be refused
    return;
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  }
  (void)tok.decode(ids);
}

void fuzz_decode(const nvllm::Tokenizer& tok, const uint8_t* data, size_t size, bool skip_special) {
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  // Mostly valid ids, so that decoding gets past the range check; the top bit keeps some raw.
  for (int32_t& id : ids) {
    if (id >= 0) id %= tok.vocab_size() + 1;
  }
  try {
    (void)tok.decode(ids, skip_special);
  } catch (const nvllm::Error&) {
  }
  try {
    nvllm::IncrementalDetokenizer detok(tok, {}, skip_special);
    for (int32_t id : ids) (void)detok.push(id);
  } catch (const nvllm::Error&) {
  }
}

}  // namespace

// The four tokenizers load here, before the first input: loading them inside it (8 s on a loaded
// 2-core machine without ASan) made that input count as slow and brought it near the smoke's 20 s
// per-input timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const nvllm::Tokenizer& tok = *tokenizers()[mode % 4];
  ++data;
  --size;
  if (mode & 4) {
    fuzz_encode(tok, std::string_view(reinterpret_cast<const char*>(data), size), mode & 8);
  } else {
    fuzz_decode(tok, data, size, mode & 8);
  }
  return 0;
}
