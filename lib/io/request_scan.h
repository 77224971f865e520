// The checking pass over a JSONL request file (nvllm generate reads its input once for the
// checks and the ids before the run, then again as the engine needs requests). A line is read
// with the JSON parser's event interface, keeping only the id and the token fields, instead of
// building the JSON document and the Request: about a fifth of parse_request_line's time, so
// that the check of a million-line file takes about a second, not five.
//
// RequestScanner gives, line for line, what RequestReader would give of the same input: the
// same line numbers, ids, not-JSON lines and duplicates (request_scan_test and request_fuzz
// compare the two).
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/request.h"

namespace nvllm {

// What the checking pass needs of one line, without building the request.
struct LineSummary {
  bool not_json = false;      // as ParsedLine::not_json: not a JSON object at all
  bool openai_batch = false;  // as ParsedLine::openai_batch
  nlohmann::json id;          // as ParsedLine::id (the line number when there is no readable id)
  // max_tokens x n as the line asks for them (max_completion_tokens first, the defaults for
  // fields not given): for a good line, exactly its request's; for a bad one, a number of no meaning.
  int64_t output_tokens = 0;
};

LineSummary summarize_request_line(const std::string& text, int64_t line_no, const ParseOptions& options);

struct ScannedLine {
  std::string id;            // id_to_string of ParsedLine::id
  int64_t line = 0;          // 1-based
  bool not_json = false;     // as ParsedLine::not_json
  std::string error;         // ParsedLine::error of a line that is not JSON (the only ones it is kept for)
  int64_t duplicate_of = 0;  // as ParsedLine::duplicate_of (a good line repeating an earlier line's id)
  int64_t output_tokens = 0;  // LineSummary::output_tokens; 0 for a duplicate and a line that is not JSON
};

// RequestReader's lines, summarized. Only a line whose id was seen before (and a line that is
// not JSON, for its message) is parsed in full, to tell whether it is a good request.
class RequestScanner {
 public:
  RequestScanner(std::istream& in, ParseOptions options);
  std::optional<ScannedLine> next();

 private:
  JsonlLines lines_;
  ParseOptions options_;
  FirstLineOfId first_line_of_id_;
  std::string text_;
};

}  // namespace nvllm
