#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/resume.h"

namespace nvllm {
namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / ("nvllm_resume_test_" + name);
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Three records of our form (one an error) and one of the OpenAI form (an error, then fine).
const std::string kOutput =
    "{\"id\":\"b\",\"text\":\"x\"}\n"
    "{\"id\":7,\"error\":{\"line\":2,\"message\":\"bad\"}}\n"
    "{\"id\":\"nvllm-3\",\"custom_id\":\"c\",\"response\":null,\"error\":{\"code\":\"invalid_request\"}}\n"
    "{\"id\":\"nvllm-4\",\"custom_id\":\"d\",\"response\":{},\"error\":null}\n";

}  // namespace

TEST_CASE("resume: results are done, error records run again, in both forms") {
  const std::string path = temp_file("classify", kOutput);
  const ExistingOutput e = read_existing_output(path, {"a", "b", "7", "c", "d"}, "in.jsonl");
  CHECK(e.done == std::set<std::string>{"b", "d"});
  CHECK(e.failed == std::set<std::string>{"7", "c"});
  std::filesystem::remove(path);
}

TEST_CASE("resume: an id the input does not have means another job's output, left untouched") {
  const std::string path = temp_file("foreign", kOutput);
  try {
    read_existing_output(path, {"b", "7", "c"}, "in.jsonl");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("id \"d\", which is not in --input in.jsonl") != std::string::npos);
  }
  CHECK(read_all(path) == kOutput);
  std::filesystem::remove(path);
}

TEST_CASE("resume: an error that a later resume fixed counts as done") {
  const std::string path = temp_file("fixed", "{\"id\":\"a\",\"error\":{\"message\":\"x\"}}\n{\"id\":\"a\",\"text\":\"\"}\n");
  const ExistingOutput e = read_existing_output(path, {"a"}, "in");
  CHECK(e.done == std::set<std::string>{"a"});
  CHECK(e.failed.empty());
  std::filesystem::remove(path);
}

TEST_CASE("resume: error records are dropped; records are sorted into input order") {
  const std::string path = temp_file("rewrite", kOutput);
  drop_error_records(path);
  CHECK(read_all(path) == "{\"id\":\"b\",\"text\":\"x\"}\n"
                          "{\"id\":\"nvllm-4\",\"custom_id\":\"d\",\"response\":{},\"error\":null}\n");
  sort_records(path, {"d", "a", "b"});
  CHECK(read_all(path) == "{\"id\":\"nvllm-4\",\"custom_id\":\"d\",\"response\":{},\"error\":null}\n"
                          "{\"id\":\"b\",\"text\":\"x\"}\n");
  CHECK_FALSE(std::filesystem::exists(path + ".nvllm-resume.tmp"));
  std::filesystem::remove(path);
}

}  // namespace nvllm
