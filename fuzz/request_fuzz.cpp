// libFuzzer target: the JSONL request reader (our form and the OpenAI batch form), many lines
// at once so that ids repeat, BOMs, CRLF and blank lines meet the per-line parser. Bad content
// must become a per-line error, never an exception or a crash. The checking pass's scanner
// (io/request_scan.h) reads the same input and must agree with the reader line for line.
#include <sstream>

#include "io/request.h"
#include "io/request_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  nvllm::ParseOptions options;
  options.allow_unknown_fields = size > 0 && (data[0] & 1);
  std::istringstream in(input), again(input);
  nvllm::RequestReader reader(in, options);
  nvllm::RequestScanner scanner(again, options);
  while (std::optional<nvllm::ParsedLine> line = reader.next()) {
    // A line is a request or an error, never both or neither.
    if (line->request.has_value() == !line->error.empty()) __builtin_trap();
    const std::optional<nvllm::ScannedLine> scanned = scanner.next();
    if (!scanned || scanned->line != line->line || scanned->id != nvllm::id_to_string(line->id) ||
        scanned->not_json != line->not_json || scanned->duplicate_of != line->duplicate_of ||
        (line->request && scanned->output_tokens != int64_t{line->request->params.max_tokens} * line->request->params.n)) {
      __builtin_trap();
    }
  }
  if (scanner.next()) __builtin_trap();
  return 0;
}
