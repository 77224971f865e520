// libFuzzer target: the JSONL request reader (our form and the OpenAI batch form), many lines
// at once so that ids repeat, BOMs, CRLF and blank lines meet the per-line parser. Bad content
// must become a per-line error, never an exception or a crash.
#include <sstream>

#include "io/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  nvllm::ParseOptions options;
  options.allow_unknown_fields = size > 0 && (data[0] & 1);
  nvllm::RequestReader reader(in, options);
  while (std::optional<nvllm::ParsedLine> line = reader.next()) {
    // A line is a request or an error, never both or neither.
    if (line->request.has_value() == !line->error.empty()) __builtin_trap();
    (void)nvllm::id_to_string(line->id);
  }
  return 0;
}
