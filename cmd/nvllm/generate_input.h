// The checks nvllm generate makes before its model loads (every path it will write, the input
// itself) and the reading of its input, so that a wrong path or a wrong file fails in a second
// with one message instead of after the model load, or worse, after the run.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/request.h"

namespace nvllm {

// Throws nvllm::Error naming `flag` when `path` could not be written: a folder, a missing
// parent folder, no write permission. "-" (stdout) and "" (not asked for) pass.
void check_output_path(const std::string& path, std::string_view flag);

// Throws when `path` (written under `flag`) is the --input file itself.
void check_not_input(const std::string& path, std::string_view flag, const std::string& input);

struct InputOptions {
  std::string path = "-";  // - reads standard input
  ParseOptions parse;
  bool allow_empty = false;          // no requests: a warning, not an error
  bool allow_duplicate_ids = false;  // a repeated id: an error record, not a refusal of the file
};

// After this many consecutive lines at the start of the input that are not JSON objects, the
// input is taken to be the wrong file and reading stops.
constexpr int kMaxLeadingGarbageLines = 20;

// Reads every line of the input. Throws nvllm::Error for a folder, an unreadable file, a file
// whose first kMaxLeadingGarbageLines lines are not JSON, a repeated id (unless allowed) and
// an input without requests (unless allowed). On a terminal it first says that it waits for
// JSONL on standard input.
std::vector<ParsedLine> read_input(const InputOptions& options);

// nvllm generate reads its input twice: once up front for read_input's checks and the ids
// (--resume, shards), then again as the engine needs requests, so that a file of a million
// lines never sits in memory. Standard input (or a pipe given as a path) cannot be read twice,
// so it is first copied to an unlinked temporary file (in TMPDIR), which disappears with the
// process.
struct InputSource {
  std::string name;                      // the path, or "(standard input)", for messages
  std::unique_ptr<std::iostream> stream;
};
InputSource open_input(const InputOptions& options);

// What the checking pass keeps of a line: enough to count, shard and resume, not the request.
struct InputLine {
  std::string id;            // as --resume compares ids
  int64_t line = 0;
  int64_t duplicate_of = 0;  // see ParsedLine::duplicate_of
  // max_tokens * n as the line asks (the progress total): exact for a good line; a bad line that
  // is JSON is only known to be bad when the run reads it again (ScannedLine::output_tokens).
  int64_t output_tokens = 0;
};

// Reads `source` once with read_input's checks (the same errors) and rewinds it. Lines are not
// parsed into requests here (RequestScanner), so a million lines take about a second.
std::vector<InputLine> scan_input(InputSource& source, const InputOptions& options);

}  // namespace nvllm
