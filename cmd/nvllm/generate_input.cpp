#include "cmd/nvllm/generate_input.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/error.h"
#include "core/log.h"

namespace nvllm {

namespace fs = std::filesystem;

void check_output_path(const std::string& path, std::string_view flag) {
  if (path.empty() || path == "-") return;
  std::error_code ec;
  const fs::path p(path);
  NVLLM_CHECK(!fs::is_directory(p, ec), flag, " ", path, ": is a folder; give a file name");
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  NVLLM_CHECK(fs::is_directory(parent, ec), flag, " ", path, ": the folder ", parent.string(),
              " does not exist; create it first");
  if (fs::exists(p, ec)) {
    NVLLM_CHECK(::access(p.c_str(), W_OK) == 0, flag, " ", path, ": the file is not writable (permissions)");
  } else {
    NVLLM_CHECK(::access(parent.c_str(), W_OK | X_OK) == 0, flag, " ", path, ": cannot create a file in ",
                parent.string(), " (permissions)");
  }
}

void check_not_input(const std::string& path, std::string_view flag, const std::string& input) {
  if (path.empty() || path == "-" || input == "-") return;
  std::error_code ec;
  NVLLM_CHECK(!(fs::exists(path, ec) && fs::equivalent(path, input, ec)), flag, " ", path,
              " is the --input file itself; writing it would destroy the requests: give another file");
}

namespace {

void say_waiting_on_terminal() {
  if (::isatty(STDIN_FILENO)) {
    std::fprintf(stderr,
                 "nvllm: reading JSONL requests from standard input (one JSON object per line; end with Ctrl-D). "
                 "Use --input FILE to read a file.\n");
  }
}

// The lines of `in`; stops at the first kMaxLeadingGarbageLines lines when none is JSON.
std::vector<ParsedLine> read_lines(std::istream& in, const InputOptions& o, const std::string& name) {
  RequestReader reader(in, o.parse);
  std::vector<ParsedLine> lines;
  bool leading_garbage = true;
  while (std::optional<ParsedLine> parsed = reader.next()) {
    leading_garbage = leading_garbage && parsed->not_json;
    lines.push_back(std::move(*parsed));
    if (leading_garbage && lines.size() == kMaxLeadingGarbageLines) {
      fail("--input ", name, ": the first ", kMaxLeadingGarbageLines,
           " lines are not JSON objects; is this the right file? nvllm reads JSONL, one request "
           "object per line (", lines.front().error, ")");
    }
  }
  return lines;
}

void check_duplicates(const std::vector<ParsedLine>& lines, const InputOptions& o, const std::string& name) {
  if (o.allow_duplicate_ids) return;
  for (const ParsedLine& l : lines) {
    NVLLM_CHECK(l.duplicate_of == 0, "--input ", name, ": line ", l.line, " repeats the id ", id_to_string(l.id),
                " of line ", l.duplicate_of, "; output lines are matched to requests by id, so ids must be "
                "unique. Fix the input, or pass --allow-duplicate-ids to run the first and write an error "
                "record (with \"duplicate_of\") for each repeat");
  }
}

}  // namespace

std::vector<ParsedLine> read_input(const InputOptions& o) {
  const std::string name = o.path == "-" ? "(standard input)" : o.path;
  std::vector<ParsedLine> lines;
  if (o.path == "-") {
    say_waiting_on_terminal();
    lines = read_lines(std::cin, o, name);
  } else {
    std::error_code ec;
    NVLLM_CHECK(!fs::is_directory(o.path, ec), "--input ", o.path,
                ": is a folder; give a JSONL file (one request per line)");
    std::ifstream in(o.path);
    NVLLM_CHECK(in, "--input ", o.path, ": cannot open the file");
    lines = read_lines(in, o, name);
  }
  check_duplicates(lines, o, name);
  if (lines.empty()) {
    NVLLM_CHECK(o.allow_empty, "--input ", name, ": no requests (the input is empty or blank); "
                "pass --allow-empty to accept that with exit status 0");
    log_warn("--input ", name, ": no requests; nothing to do (--allow-empty)");
  }
  return lines;
}

std::vector<std::string> input_ids(const std::vector<ParsedLine>& lines) {
  std::vector<std::string> ids;
  ids.reserve(lines.size());
  for (const ParsedLine& l : lines) ids.push_back(id_to_string(l.id));
  return ids;
}

}  // namespace nvllm
