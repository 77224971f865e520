#include "cmd/nvllm/generate_input.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/error.h"
#include "core/log.h"
#include "io/request_scan.h"

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

// read_input's checks, a line at a time: the wrong file (kMaxLeadingGarbageLines lines of
// non-JSON at the start), repeated ids (unless allowed), and at the end an empty input.
class InputChecks {
 public:
  InputChecks(const InputOptions& o, const std::string& name) : o_(o), name_(name) {}

  // `error` is only read for the first line, and only when it is not JSON.
  void line(bool not_json, const std::string& error, int64_t line, const std::string& id, int64_t duplicate_of) {
    ++count_;
    leading_garbage_ = leading_garbage_ && not_json;
    if (count_ == 1) first_error_ = error;
    if (leading_garbage_ && count_ == kMaxLeadingGarbageLines) {
      fail("--input ", name_, ": the first ", kMaxLeadingGarbageLines,
           " lines are not JSON objects; is this the right file? nvllm reads JSONL, one request "
           "object per line (", first_error_, ")");
    }
    NVLLM_CHECK(o_.allow_duplicate_ids || duplicate_of == 0, "--input ", name_, ": line ", line,
                " repeats the id ", id, " of line ", duplicate_of,
                "; output lines are matched to requests by id, so ids must be unique. Fix the input, or pass "
                "--allow-duplicate-ids to run the first and write an error record (with \"duplicate_of\") for "
                "each repeat");
  }

  void finish() const {
    if (count_ > 0) return;
    NVLLM_CHECK(o_.allow_empty, "--input ", name_, ": no requests (the input is empty or blank); "
                "pass --allow-empty to accept that with exit status 0");
    log_warn("--input ", name_, ": no requests; nothing to do (--allow-empty)");
  }

 private:
  const InputOptions& o_;
  const std::string& name_;
  int64_t count_ = 0;
  bool leading_garbage_ = true;
  std::string first_error_;
};

// Calls `visit` with each line of `in`, with read_input's checks.
void read_each(std::istream& in, const InputOptions& o, const std::string& name,
               const std::function<void(ParsedLine&&)>& visit) {
  RequestReader reader(in, o.parse);
  InputChecks checks(o, name);
  while (std::optional<ParsedLine> l = reader.next()) {
    checks.line(l->not_json, l->error, l->line, id_to_string(l->id), l->duplicate_of);
    visit(std::move(*l));
  }
  checks.finish();
}

void check_not_folder(const InputOptions& o) {
  std::error_code ec;
  NVLLM_CHECK(!fs::is_directory(o.path, ec), "--input ", o.path,
              ": is a folder; give a JSONL file (one request per line)");
}

}  // namespace

std::vector<ParsedLine> read_input(const InputOptions& o) {
  std::vector<ParsedLine> lines;
  const auto keep = [&](ParsedLine&& l) { lines.push_back(std::move(l)); };
  if (o.path == "-") {
    say_waiting_on_terminal();
    read_each(std::cin, o, "(standard input)", keep);
    return lines;
  }
  check_not_folder(o);
  std::ifstream in(o.path);
  NVLLM_CHECK(in, "--input ", o.path, ": cannot open the file");
  read_each(in, o, o.path, keep);
  return lines;
}

namespace {

// A seekable copy of `in` (a pipe, standard input): an unlinked temporary file in TMPDIR.
std::unique_ptr<std::iostream> spool(std::istream& in, const std::string& name) {
  const std::string dir = fs::temp_directory_path().string();
  std::string path = (fs::path(dir) / "nvllm-input-XXXXXX").string();
  const int fd = ::mkstemp(path.data());
  NVLLM_CHECK(fd >= 0, "--input ", name, ": cannot create a temporary file in ", dir,
              " to hold the input (set TMPDIR to a writable folder)");
  ::close(fd);
  auto copy = std::make_unique<std::fstream>(path, std::ios::in | std::ios::out | std::ios::binary);
  ::unlink(path.c_str());  // the open stream keeps the file until the process ends
  NVLLM_CHECK(*copy, "--input ", name, ": cannot open the temporary file ", path);
  if (in.peek() != std::char_traits<char>::eof()) *copy << in.rdbuf();
  NVLLM_CHECK(copy->flush(), "--input ", name, ": cannot copy the input to a temporary file in ", dir,
              " (disk full?)");
  copy->seekg(0);
  return copy;
}

}  // namespace

InputSource open_input(const InputOptions& o) {
  InputSource source;
  if (o.path == "-") {
    source.name = "(standard input)";
    say_waiting_on_terminal();
    source.stream = spool(std::cin, source.name);
    return source;
  }
  check_not_folder(o);
  source.name = o.path;
  auto file = std::make_unique<std::fstream>(o.path, std::ios::in | std::ios::binary);
  NVLLM_CHECK(*file, "--input ", o.path, ": cannot open the file");
  std::error_code ec;
  source.stream = fs::is_regular_file(o.path, ec) ? std::move(file) : spool(*file, o.path);  // a pipe, a FIFO
  return source;
}

std::vector<InputLine> scan_input(InputSource& source, const InputOptions& o) {
  std::vector<InputLine> lines;
  RequestScanner scanner(*source.stream, o.parse);
  InputChecks checks(o, source.name);
  while (std::optional<ScannedLine> l = scanner.next()) {
    checks.line(l->not_json, l->error, l->line, l->id, l->duplicate_of);
    lines.push_back({std::move(l->id), l->line, l->duplicate_of, l->output_tokens});
  }
  checks.finish();
  source.stream->clear();
  source.stream->seekg(0);
  NVLLM_CHECK(*source.stream, "--input ", source.name, ": cannot read the file a second time");
  return lines;
}

}  // namespace nvllm
