#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/safetensors.h"
#include "model/test_util.h"

namespace nvllm {

namespace {

using testing::safetensors_bytes;
using testing::ScratchDir;
using testing::write_bytes;

HostTensor random_tensor(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  HostTensor t(dtype, std::move(shape));
  std::mt19937 rng(seed);
  for (size_t i = 0; i < t.nbytes(); ++i) t.data()[i] = static_cast<std::byte>(rng());
  return t;
}

std::string bytes_of(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// The message of the Error SafetensorsFile::open throws for a file holding `bytes`.
std::string open_error(const ScratchDir& dir, const std::string& bytes) {
  const auto path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  try {
    SafetensorsFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors: reads a file laid out by hand as the format specifies") {
  ScratchDir dir;
  const float a[3] = {1.5f, -2.0f, 0.25f};
  const uint16_t b[2] = {0x3f80, 0xc000};  // bf16 1.0, -2.0
  const int32_t s = -7;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[12,16]},)"
      R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"s":{"dtype":"I32","shape":[],"data_offsets":[16,20]}}  )";
  write_bytes(dir / "x.safetensors", safetensors_bytes(header, bytes_of(a, 12) + bytes_of(b, 4) + bytes_of(&s, 4)));
  const auto f = SafetensorsFile::open(dir / "x.safetensors");
  REQUIRE(f->tensors().size() == 3);
  CHECK(f->tensors()[0].name == "a");  // ordered by offset
  const TensorView* ta = f->find("a");
  REQUIRE(ta);
  CHECK(ta->dtype == DType::kF32);
  CHECK(ta->shape == std::vector<int64_t>{3});
  CHECK(ta->numel() == 3);
  float got[3];
  std::memcpy(got, ta->data, 12);
  CHECK(got[0] == 1.5f);
  CHECK(got[1] == -2.0f);
  CHECK(got[2] == 0.25f);
  const TensorView* tb = f->find("b");
  REQUIRE(tb);
  CHECK(tb->dtype == DType::kBF16);
  CHECK(tb->shape == std::vector<int64_t>{1, 2});
  CHECK(std::memcmp(tb->data, b, 4) == 0);
  const TensorView* ts = f->find("s");  // a scalar: shape [], one element
  REQUIRE(ts);
  CHECK(ts->numel() == 1);
  CHECK(std::memcmp(ts->data, &s, 4) == 0);
  CHECK(f->find("c") == nullptr);
  CHECK(f->metadata().at("format") == "pt");
}

TEST_CASE("safetensors: writer round trip for every dtype and empty tensors") {
  ScratchDir dir;
  std::vector<HostTensor> tensors;
  tensors.push_back(random_tensor(DType::kF32, {3, 5}, 1));
  tensors.push_back(random_tensor(DType::kF16, {7}, 2));
  tensors.push_back(random_tensor(DType::kBF16, {2, 3, 4}, 3));
  tensors.push_back(random_tensor(DType::kF8E4M3, {5, 3}, 4));  // 15 bytes: later data unaligned
  tensors.push_back(random_tensor(DType::kI32, {4}, 5));
  tensors.push_back(random_tensor(DType::kI64, {1}, 6));
  tensors.push_back(random_tensor(DType::kF32, {0, 4}, 7));
  const std::vector<std::string> names = {"w.f32", "w.f16", "w.bf16", "w.f8", "w.i32", "w.i64", "w.empty"};
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < tensors.size(); ++i) entries.push_back({names[i], &tensors[i]});
  const auto path = dir / "rt.safetensors";
  write_safetensors(path, entries, {{"format", "pt"}, {"note", "test"}});

  // The header length is a multiple of 8 so the data section starts aligned.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len[i];
  CHECK(header_len % 8 == 0);
  CHECK(std::filesystem::file_size(path) == 8 + header_len + (60 + 14 + 48 + 15 + 16 + 8 + 0));

  const auto f = SafetensorsFile::open(path);
  CHECK(f->tensors().size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    CAPTURE(names[i]);
    const TensorView* t = f->find(names[i]);
    REQUIRE(t);
    CHECK(t->dtype == tensors[i].dtype());
    CHECK(t->shape == tensors[i].shape());
    CHECK(t->nbytes == tensors[i].nbytes());
    CHECK(t->file == path);
    if (t->nbytes) CHECK(std::memcmp(t->data, tensors[i].data(), t->nbytes) == 0);
  }
  CHECK(f->metadata().at("note") == "test");
}

TEST_CASE("safetensors: every corruption gives an error naming the file (and tensor)") {
  ScratchDir dir;
  const std::string file = (dir / "bad.safetensors").string();
  const std::string eight(8, '\0');
  auto entry = [](const char* name, const char* dtype, const char* shape, int begin, int end) {
    return std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
  };
  struct Case {
    const char* what;
    std::string bytes;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"truncated to 5 bytes", std::string(5, '\0'), {"only 5 bytes"}},
      {"empty file", "", {"only 0 bytes"}},
      {"header length past the end", safetensors_bytes("{}", eight, 1000), {"header length 1000", "past the end"}},
      // One byte more than the file holds after the length (2 + 1 data bytes; found untested by mutation).
      {"header length one past the end", safetensors_bytes("{}", "x", 4), {"header length 4", "past the end"}},
      {"bad JSON", safetensors_bytes(R"({"a": {"dtype": )", ""), {"not valid JSON"}},
      {"header not an object", safetensors_bytes("[1,2]", ""), {"must be a JSON object"}},
      // A number past the range of a double: out_of_range from the JSON parser, once uncaught.
      {"number overflow", safetensors_bytes(R"({"__metadata__": {"x": 1e999}})", ""), {"not valid JSON"}},
      {"unknown dtype", safetensors_bytes("{" + entry("w", "Q4_K", "[2]", 0, 2) + "}", "xx"),
       {"\"w\"", "Q4_K", "not supported"}},
      {"wrong dtype size", safetensors_bytes("{" + entry("w", "F32", "[2]", 0, 6) + "}", "123456"),
       {"\"w\"", "hold 6 bytes", "needs 8"}},
      {"range larger than the shape", safetensors_bytes("{" + entry("w", "F32", "[1]", 0, 8) + "}", eight),
       {"\"w\"", "hold 8 bytes", "needs 4"}},
      {"shape mismatch", safetensors_bytes("{" + entry("w", "BF16", "[2,3]", 0, 8) + "}", eight),
       {"\"w\"", "[2, 3]", "needs 12"}},
      {"range outside the file", safetensors_bytes("{" + entry("w", "F32", "[4]", 0, 16) + "}", eight),
       {"\"w\"", "outside the data section", "truncated"}},
      {"range one byte past the data", safetensors_bytes("{" + entry("w", "F32", "[2]", 0, 8) + "}", "1234567"),
       {"\"w\"", "outside the data section"}},
      {"overlapping ranges",
       safetensors_bytes("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}",
                         eight + "1234"),
       {"\"a\"", "\"b\"", "overlapping"}},
      {"offsets end before they begin", safetensors_bytes("{" + entry("w", "F32", "[0]", 8, 0) + "}", eight),
       {"\"w\"", "end before they begin"}},
      {"missing data_offsets", safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1]}})", eight),
       {"\"w\"", "data_offsets"}},
      {"negative dim", safetensors_bytes("{" + entry("w", "F32", "[-1]", 0, 4) + "}", eight), {"\"w\"", "shape"}},
      {"entry not an object", safetensors_bytes(R"({"w": 3})", ""), {"\"w\"", "object"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string msg = open_error(dir, c.bytes);
    CAPTURE(msg);
    REQUIRE_FALSE(msg.empty());
    CHECK(msg.rfind(file, 0) == 0);  // starts with the file's path
    for (const std::string& p : c.parts) CHECK(msg.find(p) != std::string::npos);
  }
  // A missing file.
  CHECK_THROWS_WITH_AS(SafetensorsFile::open(dir / "none.safetensors"),
                       doctest::Contains("none.safetensors: cannot open"), Error);
}

TEST_CASE("safetensors: a file truncated after a valid header") {
  ScratchDir dir;
  HostTensor t = random_tensor(DType::kBF16, {64, 64}, 9);
  write_safetensors(dir / "m.safetensors", {{"w", &t}});
  const auto size = std::filesystem::file_size(dir / "m.safetensors");
  std::filesystem::resize_file(dir / "m.safetensors", size - 100);
  CHECK_THROWS_WITH_AS(SafetensorsFile::open(dir / "m.safetensors"),
                       doctest::Contains("m.safetensors: tensor \"w\": data_offsets [0, 8192] lie outside"), Error);
}

TEST_CASE("checkpoint: sharded index, single file and loose files") {
  HostTensor a = random_tensor(DType::kBF16, {4, 2}, 1);
  HostTensor b = random_tensor(DType::kF32, {3}, 2);
  HostTensor c = random_tensor(DType::kF16, {2, 2}, 3);

  SUBCASE("sharded through model.safetensors.index.json") {
    ScratchDir dir;
    write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", &a}, {"b", &b}});
    write_safetensors(dir / "model-00002-of-00002.safetensors", {{"c", &c}});
    // A stray single-file checkpoint next to the index must be ignored: the index wins.
    write_safetensors(dir / "model.safetensors", {{"stray", &a}});
    nlohmann::json index = {{"metadata", {{"total_size", 48}}},
                            {"weight_map",
                             {{"a", "model-00001-of-00002.safetensors"},
                              {"b", "model-00001-of-00002.safetensors"},
                              {"c", "model-00002-of-00002.safetensors"}}}};
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    const Checkpoint ck = Checkpoint::open(dir.path());
    CHECK(ck.num_files() == 2);  // each shard opened once
    CHECK(ck.tensor_names() == std::vector<std::string>{"a", "b", "c"});
    const TensorView& tc = ck.get("c");
    CHECK(tc.file == dir / "model-00002-of-00002.safetensors");
    CHECK(std::memcmp(tc.data, c.data(), c.nbytes()) == 0);
    CHECK(std::memcmp(ck.get("a").data, a.data(), a.nbytes()) == 0);
    CHECK(ck.find("stray") == nullptr);
    CHECK_THROWS_WITH_AS(ck.get("lm_head.weight"),
                         doctest::Contains((dir.path().string() + ": checkpoint has no tensor \"lm_head.weight\"").c_str()),
                         Error);

    // A number past the range of a double in the index (found by checkpoint_fuzz's sibling,
    // config_fuzz): a JSON error naming the file, not an uncaught out_of_range.
    write_bytes(dir / "model.safetensors.index.json", R"({"metadata": {"total_size": 1e999}, "weight_map": {}})");
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()),
                         doctest::Contains("model.safetensors.index.json: not valid JSON"), Error);

    // The index names a shard that is not there.
    index["weight_map"]["d"] = "model-00003-of-00003.safetensors";
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()),
                         doctest::Contains("model-00003-of-00003.safetensors: not found"), Error);
    // A shard name the system refuses (longer than a file name may be; found by checkpoint_fuzz):
    // an error naming it, not an uncaught filesystem_error.
    index["weight_map"]["d"] = std::string(300, 'x') + ".safetensors";
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()), doctest::Contains("xx.safetensors: File name too long; "),
                         Error);
    // The index puts a tensor in a shard that lacks it.
    index["weight_map"]["d"] = "model-00002-of-00002.safetensors";
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()),
                         doctest::Contains("model-00002-of-00002.safetensors: has no tensor \"d\""), Error);
    write_bytes(dir / "model.safetensors.index.json", "{\"weight_map\": ");
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()), doctest::Contains("model.safetensors.index.json: not valid JSON"),
                         Error);
    write_bytes(dir / "model.safetensors.index.json", "{\"metadata\": {}}");
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()), doctest::Contains("weight_map"), Error);
  }
  SUBCASE("a folder whose path leaves no room for the files' names") {
    // The folder's path (4,080 characters) is under the system's limit, the index's beside it
    // over (File name too long): an error naming the index, not an uncaught filesystem_error.
    ScratchDir dir;
    std::filesystem::path deep = dir.path();
    while (deep.string().size() < 4080) deep /= std::string(std::min<size_t>(200, 4080 - deep.string().size()), 'd');
    std::filesystem::create_directories(deep);
    CHECK_THROWS_WITH_AS(Checkpoint::open(deep), doctest::Contains("model.safetensors.index.json: File name too long"),
                         Error);
  }
  SUBCASE("single model.safetensors") {
    ScratchDir dir;
    write_safetensors(dir / "model.safetensors", {{"a", &a}, {"c", &c}});
    write_safetensors(dir / "other.safetensors", {{"b", &b}});  // ignored: model.safetensors wins
    const Checkpoint ck = Checkpoint::open(dir.path());
    CHECK(ck.num_files() == 1);
    CHECK(ck.tensor_names() == std::vector<std::string>{"a", "c"});
  }
  SUBCASE("every *.safetensors without an index") {
    ScratchDir dir;
    write_safetensors(dir / "part1.safetensors", {{"a", &a}});
    write_safetensors(dir / "part2.safetensors", {{"b", &b}, {"c", &c}});
    const Checkpoint ck = Checkpoint::open(dir.path());
    CHECK(ck.num_files() == 2);
    CHECK(ck.tensor_names() == std::vector<std::string>{"a", "b", "c"});
    write_safetensors(dir / "part3.safetensors", {{"a", &b}});
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()), doctest::Contains("tensor \"a\" appears in both"), Error);
  }
  SUBCASE("no weights at all") {
    ScratchDir dir;
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()),
                         doctest::Contains((dir.path().string() + ": no model.safetensors").c_str()), Error);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir / "missing"), doctest::Contains("not a folder"), Error);
  }
}

}  // namespace nvllm
