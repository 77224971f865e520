// The checking pass's summaries against the full parser (parse_request_line, RequestReader),
// which they must match line for line.
#include <doctest/doctest.h>

#include <sstream>
#include <unordered_map>

#include "io/request_scan.h"

namespace nvllm {
namespace {

ParseOptions options() {
  ParseOptions o;
  o.defaults.max_tokens = 17;
  return o;
}

void check_summary_matches_parse(const std::string& text) {
  CAPTURE(text);
  const ParsedLine p = parse_request_line(text, 7, options());
  const LineSummary s = summarize_request_line(text, 7, options());
  CHECK(s.not_json == p.not_json);
  CHECK(s.openai_batch == p.openai_batch);
  CHECK(s.id.type() == p.id.type());
  CHECK(id_to_string(s.id) == id_to_string(p.id));
  if (p.request) CHECK(s.output_tokens == int64_t{p.request->params.max_tokens} * p.request->params.n);
}

TEST_CASE("request scan: a line's summary has the full parser's id, form and token budget") {
  const char* chat = R"("messages": [{"role": "user", "content": "hi", "max_tokens": 99}])";
  const std::string lines[] = {
      R"({"id": "a", "prompt": "x"})",
      R"({"id": 5, "prompt": "x", "max_tokens": 7, "n": 3})",
      R"({"id": 5.0, "prompt": "x"})",
      R"({"id": -3, "prompt": "x"})",
      R"({"id": 18446744073709551615, "prompt": "x"})",
      R"({"id": 18446744073709551616, "prompt": "x"})",
      R"({"id": 1e300, "prompt": "x"})",
      R"({"id": 1e999, "prompt": "x"})",  // past a double: not JSON for the parser
      R"({"id": 0.1, "prompt": "x"})",
      R"({"id": "a\u00e9\ud83d\ude00\n\"", "prompt": "x"})",
      R"({"id": "\ud800", "prompt": "x"})",  // a lone surrogate: not JSON
      "{\"id\": \"\x80\", \"prompt\": \"x\"}",  // not UTF-8: not JSON
      "{\"id\": \"a\tb\", \"prompt\": \"x\"}",  // a raw control character: not JSON
      R"({"id": null, "prompt": "x"})",
      R"({"id": true, "prompt": "x"})",
      R"({"id": [1], "prompt": "x"})",
      R"({"id": {"id": "inner"}, "prompt": "x"})",
      R"({"id": "a", "id": "b", "prompt": "x"})",  // the last of a repeated key counts
      R"({"id": "a", "id": [1], "prompt": "x"})",
      R"({"id": "a", "prompt": "x", "max_tokens": 3, "max_tokens": 4})",
      R"({"prompt": "x", "max_tokens": 3.0, "n": 2.0})",
      R"({"prompt": "x", "max_tokens": null, "n": null})",
      R"({"prompt": "x", "max_tokens": 2147483647, "n": 16})",
      R"({"prompt": "x", "max_tokens": 2147483648})",
      R"({"prompt": "x", "max_tokens": 0})",
      R"({"prompt": "x", "max_tokens": "3"})",
      R"({"prompt": "x", "nested": {"max_tokens": 5, "id": "no"}})",
      R"({"prompt": "x", "max_completion_tokens": 5})",  // a chat field without messages: bad
      R"({"prompt": "x"} trailing)",
      R"({"prompt": "x"}   )",
      R"(  {"prompt": "x"})",
      R"([1, 2])",
      R"("text")",
      "5",
      "null",
      "{",
      "not json",
      "{}",
      R"({"a": [[[[{"b": [1, {"id": 3}]}]]]], "prompt": "x"})",
      // OpenAI batch form: the id is custom_id, the budget comes from the body.
      R"({"custom_id": "c1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 5, "n": 2}})",
      R"({"id": "x", "custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}})",
      R"({"url": "/v1/completions"})",
      R"({"custom_id": {"x": 1}, "body": {}})",
      R"({"custom_id": 3, "body": 5})",
      R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "max_tokens": 9, "body": {"prompt": "x"}})",
      R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 9}, "body": {"prompt": "y", "max_tokens": 4}})",
      R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 9}, "body": null})",
      R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "body": {"max_tokens": 2}, "max_tokens": 3}})",
      std::string(R"({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {)") + chat +
          R"(, "max_completion_tokens": 6, "n": 2}})",
      // Chat in our form: max_completion_tokens is the budget (equal to max_tokens when both are given).
      std::string(R"({"id": "c", )") + chat + R"(, "max_completion_tokens": 5, "max_tokens": 5.0})",
      std::string(R"({"id": "c", )") + chat + R"(, "max_completion_tokens": 5, "max_tokens": 6})",
      std::string(R"({"id": "c", )") + chat + R"(, "max_tokens": 8})",
      std::string(R"({"id": "c", )") + chat + R"(, "max_completion_tokens": null, "max_tokens": 8})",
      std::string(R"({"id": "c", )") + chat + "}",
  };
  for (const std::string& line : lines) check_summary_matches_parse(line);
}

TEST_CASE("request scan: the scanner gives RequestReader's lines, ids, errors and duplicates") {
  const std::string input =
      "\xEF\xBB\xBF{\"id\": \"a\", \"prompt\": \"x\", \"max_tokens\": 4}\r\n"
      "\n"
      "   \t\n"
      "not json\n"                                      // line 4: its id is 4
      "{\"id\": \"a\", \"prompt\": \"y\"}\n"            // a good repeat of line 1
      "{\"id\": \"a\", \"prompt\": 5}\n"                // a bad repeat: its own error, not a duplicate
      "{\"id\": 4, \"prompt\": \"z\"}\n"                // repeats the id of the line that is not JSON
      "{\"prompt\": \"no id\"}\n"                       // line 8: its id is 8
      "{\"id\": \"8\", \"prompt\": \"w\", \"n\": 2}\r\n"  // repeats it
      "{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": \"v\"}}\n"
      "[1]\n"
      "{\"id\": \"b\", \"prompt\": \"x\", \"max_tokens\": 0}\n"
      "{\"id\": \"b\", \"prompt\": \"x\", \"max_tokens\": 3}";  // no newline at the end
  std::istringstream a(input), b(input);
  RequestReader reader(a, options());
  RequestScanner scanner(b, options());
  int lines = 0;
  while (std::optional<ParsedLine> p = reader.next()) {
    std::optional<ScannedLine> s = scanner.next();
    REQUIRE(s.has_value());
    CAPTURE(p->line);
    CHECK(s->line == p->line);
    CHECK(s->id == id_to_string(p->id));
    CHECK(s->not_json == p->not_json);
    CHECK(s->duplicate_of == p->duplicate_of);
    if (p->not_json) CHECK(s->error == p->error);
    if (p->request) CHECK(s->output_tokens == int64_t{p->request->params.max_tokens} * p->request->params.n);
    if (p->duplicate_of > 0) CHECK(s->output_tokens == 0);
    ++lines;
  }
  CHECK_FALSE(scanner.next().has_value());
  CHECK(lines == 11);
}

// A line whose JSON nests past kMaxJsonDepth (512) is refused by both passes, as not JSON we
// read: copying such a value recursed a frame a level and crashed the process at 200,000. The
// line object, messages and a message are 3 levels, so 509 arrays in a message field reach 512
// and pass, 510 fail; brackets inside strings do not count.
TEST_CASE("request scan: JSON nested past 512 is refused by the reader and the scanner alike") {
  const auto line = [](int arrays, const std::string& id) {
    return "{\"id\": \"" + id + "\", \"messages\": [{\"role\": \"user\", \"content\": \"" + std::string(5000, '[') +
           "\", \"x\": " + std::string(arrays, '[') + std::string(arrays, ']') + "}]}\n";
  };
  const std::string input = line(509, "at") + line(510, "over") + line(200000, "far");
  CHECK_FALSE(json_nested_deeper_than(line(509, "at"), kMaxJsonDepth));
  CHECK(json_nested_deeper_than(line(510, "over"), kMaxJsonDepth));
  ParseOptions opts = options();
  opts.allow_unknown_fields = true;
  std::istringstream a(input), b(input);
  RequestReader reader(a, opts);
  RequestScanner scanner(b, opts);
  for (int k = 0; k < 3; ++k) {
    const std::optional<ParsedLine> p = reader.next();
    const std::optional<ScannedLine> s = scanner.next();
    REQUIRE((p && s));
    CAPTURE(p->line);
    CHECK(s->not_json == p->not_json);
    CHECK(p->not_json == (k > 0));
    if (k > 0) CHECK(p->error == "line " + std::to_string(k + 1) + ": JSON nested more than 512 deep (nvllm's limit)");
  }
}

TEST_CASE("request scan: the first line of each id, across the table's growth") {
  FirstLineOfId table;
  std::unordered_map<std::string, int64_t> reference;
  // 5,000 ids (the table grows at 512, 1,024, 2,048 and 4,096), each id again after its first,
  // ids that differ only in the last byte or in length, and the empty id.
  for (int64_t line = 1; line <= 10000; ++line) {
    const int64_t k = line % 2 == 1 ? line / 2 : (line / 2) * 7919 % 5000;
    const std::string id = k % 3 == 0 ? std::string(static_cast<size_t>(k % 40), 'x') + std::to_string(k)
                                      : std::to_string(k) + (k % 2 ? "a" : "");
    const auto [it, inserted] = reference.emplace(id, line);
    CAPTURE(id);
    CHECK(table.find_or_add(id, line) == (inserted ? 0 : it->second));
  }
  CHECK(table.find_or_add("", 20000) == 0);
  CHECK(table.find_or_add("", 20001) == 20000);
  CHECK(table.size() == reference.size() + 1);
}

}  // namespace
}  // namespace nvllm
