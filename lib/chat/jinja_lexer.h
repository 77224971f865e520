// The Jinja lexer: template text -> tokens, applying the whitespace rules transformers renders
// with (trim_blocks, lstrip_blocks, `-`/`+` modifiers, raw blocks, comments, the dropped final
// newline) so the parser sees exactly the text jinja2 would emit.
#pragma once

#include <string>
#include <vector>

namespace nvllm::jinja {

enum class Tok { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type;
  std::string text;  // data text, name, decoded string literal, number text, or operator
  int line;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws nvllm::Error "chat template NAME line N: ..." on a lexical error.
std::vector<Token> tokenize(const std::string& source, const std::string& name, const LexOptions& opt = {});

}  // namespace nvllm::jinja
