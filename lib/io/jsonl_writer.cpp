#include "io/jsonl_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "io/request.h"

namespace nvllm {

JsonlWriter::JsonlWriter(const std::string& path, JsonlWriterOptions options) : path_(path), options_(options) {
  if (path == "-") {
    std::fflush(stdout);  // whatever stdio holds goes first; from here on lines bypass it
    fd_ = STDOUT_FILENO;
    return;
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (options.append ? O_APPEND : O_TRUNC), 0644);
  NVLLM_CHECK(fd_ >= 0, "cannot open output file ", path, " for writing: ", std::strerror(errno));
  owns_fd_ = true;
}

JsonlWriter::~JsonlWriter() {
  try {
    flush_held();
  } catch (const std::exception& e) {
    log_warn("output ", path_, ": ", e.what());
  }
  if (owns_fd_) ::close(fd_);
}

void JsonlWriter::write(int64_t index, const OrderedJson& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!options_.ordered) {
    write_line(record);
    return;
  }
  if (index < next_index_) {  // its place was passed by flush_held (an early end): late is better than lost
    write_line(record);
    return;
  }
  NVLLM_CHECK(!held_.contains(index) && !skipped_.contains(index), "JsonlWriter: record index ", index,
              " was already written or skipped");
  held_.emplace(index, record);
  release_ready();
}

void JsonlWriter::skip(int64_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!options_.ordered) return;
  NVLLM_CHECK(!held_.contains(index), "JsonlWriter: cannot skip index ", index, ": it was already written");
  if (index >= next_index_) skipped_.insert(index);
  release_ready();
}

void JsonlWriter::flush_held() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!held_.empty()) {
    const auto first = held_.begin();
    next_index_ = first->first + 1;
    const OrderedJson record = std::move(first->second);
    held_.erase(first);
    write_line(record);
  }
}

size_t JsonlWriter::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_.size();
}

int64_t JsonlWriter::lines_written() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_written_;
}

void JsonlWriter::release_ready() {
  for (;;) {
    if (skipped_.erase(next_index_) > 0) {
      ++next_index_;
      continue;
    }
    const auto it = held_.find(next_index_);
    if (it == held_.end()) return;
    const OrderedJson record = std::move(it->second);
    held_.erase(it);
    ++next_index_;
    write_line(record);
  }
}

// The whole line and its newline go out in one write() (retried only for the rest after a
// signal or a short write), straight to the kernel: a SIGINT, whose handler only sets a flag,
// cannot leave half a line, and a kill leaves at most one unterminated last line, which
// read_existing_ids cuts off. stdio is avoided because its fwrite gives up on EINTR midway.
void JsonlWriter::write_line(const OrderedJson& record) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    NVLLM_CHECK(n > 0, "writing ", path_ == "-" ? "stdout" : path_, " failed: ", std::strerror(errno),
                " (is the disk full?)");
    done += static_cast<size_t>(n);
  }
  ++lines_written_;
}

namespace {

// The id a record was written for: custom_id in the OpenAI form, id in ours.
std::string record_id(const std::string& path, int64_t line_no, const std::string& line) {
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    fail("--resume: ", path, " line ", line_no, " is not JSON (", e.what(),
         "); --resume appends to an earlier nvllm output file: check --output");
  }
  const char* key = record.is_object() && record.contains("custom_id") ? "custom_id" : "id";
  NVLLM_CHECK(record.is_object() && record.contains(key) && (record[key].is_string() || record[key].is_number()),
              "--resume: ", path, " line ", line_no,
              " has no \"id\"; --resume appends to an earlier nvllm output file: check --output");
  return id_to_string(record[key]);
}

}  // namespace

std::set<std::string> read_existing_ids(const std::string& path) {
  NVLLM_CHECK(path != "-", "--resume needs --output to name a file (not stdout)");
  std::set<std::string> ids;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return ids;
  std::ifstream in(path, std::ios::binary);
  NVLLM_CHECK(in.good(), "--resume: cannot read ", path, ": ", std::strerror(errno));

  uintmax_t complete_bytes = 0;  // up to and including the last newline
  int64_t line_no = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: an unfinished last line
    ++line_no;
    complete_bytes += line.size() + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ids.insert(record_id(path, line_no, line));
  }
  in.close();
  const uintmax_t size = std::filesystem::file_size(path);
  if (size > complete_bytes) {
    std::filesystem::resize_file(path, complete_bytes, ec);
    NVLLM_CHECK(!ec, "--resume: cannot cut the unfinished last line from ", path, ": ", ec.message());
    log_warn("--resume: removed an unfinished last line (", size - complete_bytes, " bytes) from ", path,
             "; that request runs again");
  }
  return ids;
}

}  // namespace nvllm
