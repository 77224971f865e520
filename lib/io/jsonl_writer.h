// JsonlWriter: the output JSONL file, one record per line, each line handed to the kernel
// whole at once so an interrupted job leaves only complete lines; optionally in input order. Also
// the --resume side: which ids an earlier, interrupted run already wrote.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "io/response.h"

namespace nvllm {

struct JsonlWriterOptions {
  bool append = false;   // --resume: add to the existing file instead of replacing it
  bool ordered = false;  // --ordered: hold records back until every earlier index is out
};

class JsonlWriter {
 public:
  // `path` "-" writes to stdout. Throws nvllm::Error when the file cannot be opened.
  JsonlWriter(const std::string& path, JsonlWriterOptions options = {});
  // Writes any records still held (best effort, out of order if a gap remains): work that
  // finished must reach the file even when the run ends early, so --resume can skip it.
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // Writes `record` as one line. `index` is the record's position in input order (0, 1, 2,
  // ..., each used once, counting only requests that will produce a record); it matters only
  // in ordered mode, where the line waits until every lower index was written or skipped.
  void write(int64_t index, const OrderedJson& record);
  // In ordered mode: `index` will never be written, so records after it need not wait for it.
  void skip(int64_t index);
  // Writes every held record now, lowest index first, gaps or not (end of run, SIGINT).
  void flush_held();

  size_t held() const;
  int64_t lines_written() const;

 private:
  void write_line(const OrderedJson& record);  // caller holds mutex_
  void release_ready();                        // caller holds mutex_

  std::string path_;
  JsonlWriterOptions options_;
  int fd_ = -1;
  bool owns_fd_ = false;
  int64_t next_index_ = 0;                 // ordered mode: the lowest index not yet released
  std::map<int64_t, OrderedJson> held_;    // ordered mode: records waiting for a lower index
  std::set<int64_t> skipped_;              // ordered mode: indices above next_index_ to pass over
  int64_t lines_written_ = 0;
  mutable std::mutex mutex_;
};

// For --resume: the ids of every complete line of an earlier run's output (custom_id for
// OpenAI-form records, id otherwise, as id_to_string writes them). A last line without its
// newline was cut short by a kill: it is removed from the file (truncated at the last
// newline) and not counted, so that request runs again. A missing file gives no ids; a
// complete line that is not a record is an error (the path is probably not an nvllm output).
std::set<std::string> read_existing_ids(const std::string& path);

}  // namespace nvllm
