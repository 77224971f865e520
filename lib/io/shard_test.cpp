// Tests of the shard split and the shard output names: the documented hash (anchored to the
// xxHash reference value), boundaries of the line split, every line in exactly one shard, and
// the naming of per-shard files.
#include "io/shard.h"

#include <doctest/doctest.h>

#include <set>
#include <sstream>

#include "core/error.h"

namespace nvllm {
namespace {

TEST_CASE("shard: the id hash is XXH3-64 with seed 0, as documented") {
  // The reference value of XXH3_64bits of empty input (xxHash's own sanity check).
  CHECK(shard_hash("") == 0x2D06800538D394C2ULL);
  CHECK(shard_hash("req-1") != shard_hash("req-2"));
  CHECK(shard_of({0, 3, ShardBy::kId}, "", 1) == static_cast<int>(0x2D06800538D394C2ULL % 3));
}

TEST_CASE("shard: by line, line L goes to shard (L - 1) mod N, whatever the id") {
  const ShardSpec s{0, 3, ShardBy::kLine};
  CHECK(shard_of(s, "x", 1) == 0);
  CHECK(shard_of(s, "x", 3) == 2);
  CHECK(shard_of(s, "y", 4) == 0);
  CHECK(shard_of({0, 1, ShardBy::kId}, "anything", 9) == 0);
}

TEST_CASE("shard: every line lands in exactly one shard, in file order, error lines included") {
  std::ostringstream text;
  for (int i = 0; i < 300; ++i) {
    if (i == 17) text << "not json\n";
    else if (i % 2) text << "{\"id\": \"r" << i << "\", \"prompt\": \"p\"}\n";
    else text << "{\"prompt\": \"no id\"}\n";
  }
  for (const ShardBy by : {ShardBy::kId, ShardBy::kLine}) {
    std::multiset<int64_t> seen;
    for (int k = 0; k < 3; ++k) {
      std::istringstream in(text.str());
      std::vector<ParsedLine> lines = read_requests(in, ParseOptions{});
      keep_shard({k, 3, by}, lines);
      CHECK(lines.size() > 70);  // a fair share of 300 (each shard's expected size is 100)
      CHECK(lines.size() < 130);
      for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) CHECK(lines[i - 1].line < lines[i].line);
        CHECK(shard_of({k, 3, by}, id_to_string(lines[i].id), lines[i].line) == k);
        seen.insert(lines[i].line);
      }
    }
    CHECK(seen.size() == 300);
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 300);
  }
}

TEST_CASE("shard: --resume refuses an output that holds another shard's ids") {
  const ShardSpec s{1, 3, ShardBy::kId};
  std::set<std::string> mine, others;
  for (int i = 0; i < 50; ++i) {
    const std::string id = "r" + std::to_string(i);
    (shard_of(s, id, 0) == 1 ? mine : others).insert(id);
  }
  REQUIRE(!mine.empty());
  REQUIRE(!others.empty());
  CHECK_NOTHROW(check_resumed_ids(s, mine, "out.1-of-3.jsonl"));
  std::set<std::string> mixed = mine;
  mixed.insert(*others.begin());
  CHECK_THROWS_WITH_AS(check_resumed_ids(s, mixed, "out.1-of-3.jsonl"), doctest::Contains(others.begin()->c_str()),
                       Error);
  CHECK_NOTHROW(check_resumed_ids({1, 3, ShardBy::kLine}, mixed, "out.1-of-3.jsonl"));  // no line numbers to check
  CHECK_NOTHROW(check_resumed_ids({0, 1, ShardBy::kId}, mixed, "out.jsonl"));
}

TEST_CASE("shard: --shard K/N parsing names the flag for bad values") {
  const ShardSpec s = parse_shard("2/3");
  CHECK(s.index == 2);
  CHECK(s.count == 3);
  CHECK(parse_shard("0/1").count == 1);
  for (const char* bad : {"3/3", "-1/3", "1/0", "a/b", "1", "1/3x", "/3"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(parse_shard(bad), doctest::Contains("--shard"), Error);
  }
}

TEST_CASE("shard: output names") {
  CHECK(shard_output_path("out.jsonl", {2, 3}) == "out.2-of-3.jsonl");
  CHECK(shard_output_path("dir.v1/out", {0, 2}) == "dir.v1/out.0-of-2");
  CHECK(shard_output_path("out.jsonl", {9, 10}) == "out.9-of-10.jsonl");
  CHECK(shard_output_path("out.jsonl", {3, 11}) == "out.03-of-11.jsonl");  // sorts before 10
  CHECK(shard_output_path("out.{shard}.jsonl", {3, 11}) == "out.03.jsonl");
  CHECK(shard_output_path("{num_shards}/o-{shard}.jsonl", {1, 4}) == "4/o-1.jsonl");
  CHECK(shard_output_path("out.jsonl", {0, 1}) == "out.jsonl");
  CHECK(shard_output_path("-", {1, 4}) == "-");
  CHECK(shard_output_path("", {1, 4}).empty());
  CHECK_THROWS_WITH_AS(shard_output_path("out.{num_shards}.jsonl", {1, 4}), doctest::Contains("{shard}"), Error);
}

}  // namespace
}  // namespace nvllm
