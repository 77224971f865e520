#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "io/jsonl_writer.h"

namespace nvllm {

namespace {

// A fresh path in the temp folder, removed when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() / ("nvllm_io_" + std::to_string(getpid()) + "_" + name)).string()) {
    std::filesystem::remove(path_);
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

OrderedJson rec(int i) { return {{"id", i}}; }

// Keeps the expected "removed an unfinished last line" warnings out of the test output.
class QuietLog {
 public:
  QuietLog() : saved_(log_threshold()) { log_threshold() = LogLevel::kQuiet; }
  ~QuietLog() { log_threshold() = saved_; }

 private:
  LogLevel saved_;
};

}  // namespace

TEST_CASE("writer: unordered mode writes each record at once, one line each") {
  TempFile f("unordered.jsonl");
  JsonlWriter w(f.path());
  w.write(2, rec(2));
  CHECK(read_all(f.path()) == "{\"id\":2}\n");  // flushed before write returns
  w.write(0, rec(0));
  w.write(1, rec(1));
  CHECK(w.lines_written() == 3);
  CHECK(read_all(f.path()) == "{\"id\":2}\n{\"id\":0}\n{\"id\":1}\n");
}

TEST_CASE("writer: ordered mode releases records in input order") {
  TempFile f("ordered.jsonl");
  JsonlWriter w(f.path(), {.ordered = true});
  w.write(2, rec(2));
  w.write(0, rec(0));
  CHECK(read_all(f.path()) == "{\"id\":0}\n");
  CHECK(w.held() == 1);
  w.skip(1);  // e.g. already done in an earlier run
  CHECK(read_all(f.path()) == "{\"id\":0}\n{\"id\":2}\n");
  w.skip(5);
  w.write(4, rec(4));
  CHECK(w.held() == 1);
  w.write(3, rec(3));
  w.write(6, rec(6));
  CHECK(w.held() == 0);
  CHECK(read_all(f.path()) == "{\"id\":0}\n{\"id\":2}\n{\"id\":3}\n{\"id\":4}\n{\"id\":6}\n");
  w.write(9, rec(9));
  CHECK_THROWS_AS(w.write(9, rec(9)), Error);  // an index used twice is a caller bug
}

TEST_CASE("writer: flush_held writes what waits; a late record still gets written") {
  TempFile f("flush.jsonl");
  {
    JsonlWriter w(f.path(), {.ordered = true});
    w.write(3, rec(3));
    w.write(1, rec(1));
    CHECK(read_all(f.path()).empty());
    w.flush_held();
    CHECK(read_all(f.path()) == "{\"id\":1}\n{\"id\":3}\n");
    w.write(0, rec(0));
    w.write(5, rec(5));  // held again: 4 is missing
  }  // the destructor writes it: finished work must not be lost
  CHECK(read_all(f.path()) == "{\"id\":1}\n{\"id\":3}\n{\"id\":0}\n{\"id\":5}\n");
}

TEST_CASE("writer: append mode keeps earlier lines; invalid UTF-8 becomes U+FFFD") {
  TempFile f("append.jsonl");
  write_all(f.path(), "{\"id\":\"old\"}\n");
  {
    JsonlWriter w(f.path(), {.append = true});
    w.write(0, OrderedJson{{"id", "new"}, {"text", "a\xFF"}});
  }
  CHECK(read_all(f.path()) == "{\"id\":\"old\"}\n{\"id\":\"new\",\"text\":\"a\xEF\xBF\xBD\"}\n");
  CHECK_THROWS_AS(JsonlWriter("/nonexistent-dir/x.jsonl"), Error);
}

TEST_CASE("resume: ids of complete lines; a cut last line is removed") {
  TempFile f("resume.jsonl");
  QuietLog quiet;
  const std::string complete =
      "{\"id\":\"a\",\"text\":\"x\"}\n"
      "{\"id\":7,\"error\":{\"line\":7,\"message\":\"m\"}}\n"
      "\n"
      "{\"id\":\"nvllm-3\",\"custom_id\":\"c1\",\"response\":null,\"error\":{\"message\":\"m\",\"line\":3}}\n";
  write_all(f.path(), complete + "{\"id\":\"z\",\"te");
  CHECK(read_existing_ids(f.path()) == std::set<std::string>{"a", "7", "c1"});
  CHECK(read_all(f.path()) == complete);
  // Nothing to cut the second time; appending continues cleanly.
  CHECK(read_existing_ids(f.path()) == std::set<std::string>{"a", "7", "c1"});
  {
    JsonlWriter w(f.path(), {.append = true});
    w.write(0, rec(9));
  }
  CHECK(read_all(f.path()) == complete + "{\"id\":9}\n");
}

TEST_CASE("resume: a missing file has no ids; a cut first line empties the file; a foreign file is an error") {
  TempFile f("resume2.jsonl");
  QuietLog quiet;
  CHECK(read_existing_ids(f.path()).empty());
  write_all(f.path(), "{\"id\":");
  CHECK(read_existing_ids(f.path()).empty());
  CHECK(read_all(f.path()).empty());
  write_all(f.path(), "{\"id\":1}\nhello world\n");
  try {
    read_existing_ids(f.path());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(f.path() + " line 2 is not JSON") != std::string::npos);
  }
  write_all(f.path(), "{\"text\":\"no id\"}\n");
  CHECK_THROWS_WITH_AS(read_existing_ids(f.path()), doctest::Contains("line 1 has no \"id\""), Error);
  CHECK_THROWS_AS(read_existing_ids("-"), Error);
}

}  // namespace nvllm
