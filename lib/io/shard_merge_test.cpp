// Tests of nvllm merge's checks on hand-written files: input order and byte-exact copies, a
// repeated input id (whose second line gets an error record of its own), the OpenAI form's
// custom_id, error records counted as present, and each kind of problem refused.
#include "io/shard_merge.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"

namespace nvllm {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("nvllm_merge_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Line 2 repeats line 1's id: generate answers it with an error record under the same id.
const char* kInput =
    "{\"id\": \"a\", \"prompt\": \"x\"}\n"
    "{\"id\": \"a\", \"prompt\": \"y\"}\n"
    "\n"
    "{\"prompt\": \"no id: line 4\"}\n"
    "{\"custom_id\": \"c\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": \"z\"}}\n";

TEST_CASE("merge: a complete set is written byte for byte, in input order when asked") {
  TempDir d;
  const std::string input = d.write("in.jsonl", kInput);
  const std::string rec_a = "{\"id\":\"a\",\"text\":\"1\"}\n";
  const std::string err_a = "{\"id\":\"a\",\"error\":{\"message\":\"dup\"}}\n";
  const std::string rec_4 = "{\"id\":4,  \"text\":\"spaced as written\"}\n";
  const std::string rec_c = "{\"id\":\"nvllm-5\",\"custom_id\":\"c\",\"error\":null}\n";
  const std::string s0 = d.write("s0", rec_c + rec_a), s1 = d.write("s1", rec_4 + "\n" + err_a);
  MergeOptions o;
  o.input = input;
  o.shard_files = {s0, s1};
  o.output = (d.path / "merged.jsonl").string();
  SUBCASE("shard order") {
    const MergeReport r = merge_shards(o);
    CHECK(r.complete());
    CHECK(r.written);
    CHECK(r.expected == 4);
    CHECK(r.found == 4);
    CHECK(r.error_records == 1);  // the OpenAI form's "error": null is a success
    CHECK(read(o.output) == rec_c + rec_a + rec_4 + err_a);
  }
  SUBCASE("input order") {
    o.ordered = true;
    CHECK(merge_shards(o).written);
    CHECK(read(o.output) == rec_a + err_a + rec_4 + rec_c);
  }
}

TEST_CASE("merge: missing, repeated, foreign and cut-short records are listed and nothing is written") {
  TempDir d;
  const std::string input = d.write("in.jsonl", kInput);
  MergeOptions o;
  o.input = input;
  o.output = (d.path / "merged.jsonl").string();
  const std::string a = "{\"id\":\"a\"}\n", four = "{\"id\":4}\n", c = "{\"custom_id\":\"c\"}\n";
  SUBCASE("one of a repeated id's two records missing") {
    o.shard_files = {d.write("s", a + four + c)};
    const MergeReport r = merge_shards(o);
    CHECK(r.missing == 1);
    REQUIRE(r.problems.size() == 1);
    CHECK(r.problems[0].find("line 1: id \"a\" is on 2 input lines but has 1 records") != std::string::npos);
  }
  SUBCASE("a third record for a twice-listed id") {
    o.shard_files = {d.write("s", a + a + four + c + a)};
    const MergeReport r = merge_shards(o);
    CHECK(r.duplicated == 1);
    CHECK(r.problems.at(0).find("s line 5: id \"a\" again (also") != std::string::npos);
  }
  SUBCASE("an id the input does not have, and a line that is not a record") {
    o.shard_files = {d.write("s", a + a + four + c + "{\"id\":\"zz\"}\n" + "[1, 2]\n")};
    const MergeReport r = merge_shards(o);
    CHECK(r.unknown == 1);
    CHECK(r.unreadable == 1);
  }
  SUBCASE("a last line without its newline") {
    o.shard_files = {d.write("s", a + a + four + c.substr(0, 8))};
    const MergeReport r = merge_shards(o);
    CHECK(r.unreadable == 1);
    CHECK(r.missing == 1);
    CHECK(r.problems.at(0).find("cut short") != std::string::npos);
  }
  SUBCASE("only the first max_listed problems are spelled out") {
    o.max_listed = 1;
    o.shard_files = {d.write("s", "")};
    const MergeReport r = merge_shards(o);
    CHECK(r.missing == 4);
    CHECK(r.problems.size() == 1);
  }
  const MergeReport r = merge_shards(o);
  CHECK_FALSE(r.complete());
  CHECK_FALSE(r.written);
  CHECK_FALSE(fs::exists(o.output));
}

TEST_CASE("merge: refuses an output that is also a shard file, and unreadable files") {
  TempDir d;
  MergeOptions o;
  o.input = d.write("in.jsonl", kInput);
  o.shard_files = {d.write("s", "")};
  o.output = o.shard_files[0];
  CHECK_THROWS_WITH_AS(merge_shards(o), doctest::Contains("also one of the shard files"), Error);
  o.output = "-";
  o.shard_files = {(d.path / "nope").string()};
  CHECK_THROWS_WITH_AS(merge_shards(o), doctest::Contains("nope"), Error);
  o.input = (d.path / "no_input").string();
  CHECK_THROWS_WITH_AS(merge_shards(o), doctest::Contains("--input"), Error);
}

}  // namespace
}  // namespace nvllm
