#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "engine/fake_runner.h"
#include "io/request_feeder.h"
#include "tokenizer/test_tokenizers.h"

namespace nvllm {

namespace {

// What generate's prepare hook does, in small: tokenize a text prompt, or check the given token
// ids against a vocabulary of 5000.
EngineRequest prepare(const Request& r, int64_t index) {
  EngineRequest er;
  er.id = "set by the feeder";
  er.params = r.params;
  if (r.prompt) {
    er.prompt_ids = test_tokenizer("qwen3").encode(*r.prompt, true);
  } else {
    er.prompt_ids = r.prompt_token_ids;
    for (int32_t id : er.prompt_ids) NVLLM_CHECK(id < 5000, "id ", id, " is outside the model's vocabulary");
  }
  return er;
}

// One engine + writer + reader over `input`, output to a temp file; records read back by id.
struct Harness {
  explicit Harness(const std::string& input, int max_num_seqs = 4, int window = 8,
                   std::function<bool(const ParsedLine&)> keep = nullptr, ParseOptions parse = {})
      : path((std::filesystem::temp_directory_path() / ("nvllm_feeder_" + std::to_string(getpid()))).string()),
        in(input), reader(in, parse), runner(256, 16), engine(config(max_num_seqs), runner, &test_tokenizer("qwen3")),
        writer(path, {}), feeder(reader, engine, writer, {.window = window, .keep = keep, .prepare = prepare}) {}
  ~Harness() { std::filesystem::remove(path); }

  static EngineConfig config(int max_num_seqs) {
    EngineConfig c;
    c.max_num_seqs = max_num_seqs;
    c.max_model_len = 64;
    return c;
  }
  // Runs to the end; returns the most lines the reader was ever ahead of finished requests.
  int64_t run() {
    int64_t finished = 0, most_ahead = 0;
    feeder.top_up();
    while (engine.has_unfinished()) {
      for (const FinishedRequest& done : engine.step()) {
        const RequestFeeder::InFlight r = feeder.take(done.id);
        OrderedJson rec;
        rec["id"] = r.request.id;
        rec["index"] = r.index;
        rec["tokens"] = done.outputs.at(0).token_ids.size();
        writer.write(r.index, rec);
        ++finished;
      }
      feeder.top_up();
      most_ahead = std::max(most_ahead, reader.lines_read() - finished);
    }
    return most_ahead;
  }
  std::map<std::string, nlohmann::json> records() const {
    std::map<std::string, nlohmann::json> by_id;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      const std::string id = id_to_string(j["id"]);
      REQUIRE_MESSAGE(!by_id.contains(id), "id written twice: ", id);
      by_id[id] = j;
    }
    return by_id;
  }

  std::string path;
  std::istringstream in;
  RequestReader reader;
  FakeRunner runner;
  DataParallelEngine engine;
  JsonlWriter writer;
  RequestFeeder feeder;
};

std::string lines(int n, const std::string& body = R"("prompt_token_ids": [5, 6, 7], "max_tokens": 3)") {
  std::string s;
  for (int i = 0; i < n; ++i) s += R"({"id": "r)" + std::to_string(i) + R"(", )" + body + "}\n";
  return s;
}

}  // namespace

TEST_CASE("feeder: a long input is read a window at a time, and every request gets one record") {
  Harness h(lines(3000), /*max_num_seqs=*/4, /*window=*/16);
  h.feeder.top_up();
  CHECK(h.reader.lines_read() == 16);  // one window, not the file
  const int64_t most_ahead = h.run();
  // Read ahead of what finished: at most the window plus what runs.
  CHECK(most_ahead <= 16 + 4);
  const auto recs = h.records();
  CHECK(recs.size() == 3000);
  for (int i = 0; i < 3000; ++i) {
    const auto it = recs.find("r" + std::to_string(i));
    REQUIRE(it != recs.end());
    CHECK(it->second["index"] == i);
    CHECK(it->second["tokens"] == 3);
  }
  CHECK(h.feeder.queued() == 3000);
  CHECK(h.feeder.errors() == 0);
  CHECK(h.feeder.exhausted());
}

TEST_CASE("feeder: refills exactly when half the window is left waiting") {
  // window 4: the first top-up queues 4; a step admits max_num_seqs = 2, leaving 2 = 4 / 2
  // waiting, which is refilled back to 4 (6 lines read). One more waiting would not be.
  Harness h(lines(20), /*max_num_seqs=*/2, /*window=*/4);
  h.feeder.top_up();
  CHECK(h.reader.lines_read() == 4);
  CHECK(h.engine.num_waiting() == 4);
  h.feeder.top_up();  // nothing to do: the window is full
  CHECK(h.reader.lines_read() == 4);
  (void)h.engine.step();
  CHECK(h.engine.num_waiting() == 2);
  h.feeder.top_up();
  CHECK(h.reader.lines_read() == 6);
  CHECK(h.engine.num_waiting() == 4);

  Harness h3(lines(20), /*max_num_seqs=*/2, /*window=*/5);  // 3 waiting > 5 / 2: no refill
  h3.feeder.top_up();
  (void)h3.engine.step();
  CHECK(h3.engine.num_waiting() == 3);
  h3.feeder.top_up();
  CHECK(h3.reader.lines_read() == 5);
}

TEST_CASE("feeder: bad lines, out-of-vocabulary ids and rejected prompts become error records in place") {
  std::string input = lines(1);
  input += "{not json\n";
  input += R"({"id": "oov", "prompt_token_ids": [1, 5000]})" "\n";
  // Longer than max_model_len (64): the engine rejects them; more than a window in a row, so
  // the feeder must keep reading past a refill that queued nothing.
  for (int i = 0; i < 20; ++i) {
    input += R"({"id": "long)" + std::to_string(i) + R"(", "prompt_token_ids": [)";
    for (int k = 0; k < 70; ++k) input += (k ? ",3" : "3");
    input += "]}\n";
  }
  input += R"({"id": "last", "prompt": "hello world", "max_tokens": 2})" "\n";
  Harness h(input, /*max_num_seqs=*/2, /*window=*/4);
  h.run();
  const auto recs = h.records();
  REQUIRE(recs.size() == 24);
  CHECK(recs.at("r0")["tokens"] == 3);
  CHECK(recs.at("2").contains("error"));  // the bad line's id is its line number
  CHECK(recs.at("oov")["error"]["message"].get<std::string>().find("outside the model's vocabulary") != std::string::npos);
  CHECK(recs.at("long19")["error"]["message"].get<std::string>().find("line 23") == 0);
  CHECK(recs.at("last")["tokens"] == 2);
  CHECK(recs.at("last")["index"] == 23);
  CHECK(h.feeder.errors() == 22);
  CHECK(h.feeder.queued() == 2);
  CHECK(h.feeder.records() == 24);
}

TEST_CASE("feeder: lines keep() refuses get no record and the rest are numbered from 0") {
  const std::set<std::string> done = {"r0", "r2", "r3"};
  Harness h(lines(6), 4, 8, [&](const ParsedLine& l) { return !done.contains(id_to_string(l.id)); });
  h.run();
  const auto recs = h.records();
  REQUIRE(recs.size() == 3);
  CHECK(recs.at("r1")["index"] == 0);
  CHECK(recs.at("r4")["index"] == 1);
  CHECK(recs.at("r5")["index"] == 2);
  CHECK(h.feeder.skipped() == 3);
}

TEST_CASE("feeder: keep() sees bad lines too, and a repeated id's record names its first line") {
  std::string input = lines(2);
  input += "{not json\n";                                     // line 3, id 3
  input += "{also not json\n";                                // line 4, id 4: refused below
  input += R"({"id": "r0", "prompt_token_ids": [1]})" "\n";  // line 5 repeats line 1
  Harness h(input, 4, 8, [](const ParsedLine& l) { return l.line != 4; }, {});
  h.run();
  // The repeat's record has the id "r0" too, so the records are read by line, not by id.
  std::vector<nlohmann::json> recs;
  std::ifstream f(h.path);
  for (std::string text; std::getline(f, text);) recs.push_back(nlohmann::json::parse(text));
  REQUIRE(recs.size() == 4);
  std::map<int64_t, nlohmann::json> by_line;
  for (const nlohmann::json& r : recs) {
    if (r.contains("index")) CHECK(r["id"] != "4");
    if (r.contains("error")) by_line[r["error"].value("line", int64_t{0})] = r["error"];
  }
  CHECK(by_line.size() == 2);
  CHECK(by_line.at(3).is_object());
  CHECK_FALSE(by_line.at(3).contains("duplicate_of"));
  CHECK(by_line.at(5)["duplicate_of"] == 1);
  CHECK_FALSE(by_line.contains(4));  // refused by keep(): no record at all
  CHECK(h.feeder.skipped() == 1);
  CHECK(h.feeder.errors() == 2);
  CHECK(h.feeder.records() == 4);
}

TEST_CASE("feeder: take() of an id it never queued is an error") {
  Harness h(lines(1));
  h.feeder.top_up();
  CHECK_THROWS_AS(h.feeder.take("99"), Error);
  CHECK(h.feeder.take("0").request.id == "r0");
  CHECK_THROWS_AS(h.feeder.take("0"), Error);  // forgotten once taken
}

}  // namespace nvllm
