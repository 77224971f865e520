// RegexSplitter: the Split pre-tokenizer with "behavior": "Isolated" — every match of the
// pattern is a piece and so is every stretch of text between matches.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nvllm {

class RegexSplitter {
 public:
  // Compiles `pattern` with PCRE2_UTF | PCRE2_UCP (\p{L}, \s etc. are Unicode-aware, as in the
  // reference library's Oniguruma) and JIT. `where` names the file and field for errors.
  RegexSplitter(const std::string& pattern, const std::string& where);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Splits text[begin, end) (valid UTF-8) and appends the pieces as [begin, end) offsets.
  void split(std::string_view text, size_t begin, size_t end, std::vector<std::pair<size_t, size_t>>& pieces) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so the header needs no PCRE2 macros
  bool jit_ = false;
  std::string where_;
};

}  // namespace nvllm
