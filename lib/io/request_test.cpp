#include <doctest/doctest.h>

#include <set>
#include <sstream>

#include "core/sampling_rng.h"
#include "io/request.h"

namespace nvllm {

namespace {

ParsedLine parse(const std::string& text, int64_t line = 7, const ParseOptions& options = {}) {
  return parse_request_line(text, line, options);
}

// The error of a line holding `{"prompt": "hi", <field>: <value>}`.
std::string field_error(const std::string& field, const std::string& value) {
  const ParsedLine p = parse(R"({"prompt": "hi", ")" + field + "\": " + value + "}");
  CHECK_MESSAGE(!p.request, field, " = ", value, " was accepted");
  return p.error;
}

Request ok(const std::string& text, const ParseOptions& options = {}) {
  const ParsedLine p = parse(text, 7, options);
  INFO(text, " -> ", p.error);
  REQUIRE(p.request);
  CHECK(p.error.empty());
  return *p.request;
}

}  // namespace

TEST_CASE("request: a text prompt with defaults applied and the line number as id") {
  ParseOptions options;
  options.defaults.temperature = 0.5f;
  options.defaults.max_tokens = 99;
  options.defaults.stop = {"END"};
  const Request r = ok(R"({"prompt": "Hello"})", options);
  CHECK(r.prompt == "Hello");
  CHECK(r.prompt_token_ids.empty());
  CHECK(r.id == 7);
  CHECK(r.id_string == "7");
  CHECK(r.line == 7);
  CHECK_FALSE(r.openai_batch);
  CHECK(r.params.temperature == 0.5f);
  CHECK(r.params.max_tokens == 99);
  CHECK(r.params.stop == std::vector<std::string>{"END"});
  CHECK(r.params.n == 1);
  CHECK_FALSE(r.params.logprobs);
}

TEST_CASE("request: ids, token prompts and every sampling field are read") {
  const Request r = ok(R"({"id": "q-1", "prompt_token_ids": [0, 5, 2147483647], "max_tokens": 12,
      "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 18446744073709551615,
      "stop": ["a", "bc"], "stop_token_ids": [2, 3], "ignore_eos": true, "min_tokens": 3,
      "presence_penalty": -2, "frequency_penalty": 1.5, "repetition_penalty": 1.1, "logprobs": 5,
      "n": 16, "include_stop_str_in_output": true, "skip_special_tokens": false})");
  CHECK(r.id == "q-1");
  CHECK(r.id_string == "q-1");
  CHECK_FALSE(r.prompt);
  CHECK(r.prompt_token_ids == std::vector<int32_t>{0, 5, 2147483647});
  const SamplingParams& p = r.params;
  CHECK(p.max_tokens == 12);
  CHECK(p.temperature == 0.7f);
  CHECK(p.top_p == 0.9f);
  CHECK(p.top_k == 40);
  CHECK(p.min_p == 0.05f);
  CHECK(p.seed == 18446744073709551615ull);
  CHECK(p.stop == std::vector<std::string>{"a", "bc"});
  CHECK(p.stop_token_ids == std::vector<int32_t>{2, 3});
  CHECK(p.ignore_eos);
  CHECK(p.min_tokens == 3);
  CHECK(p.presence_penalty == -2.0f);
  CHECK(p.frequency_penalty == 1.5f);
  CHECK(p.repetition_penalty == 1.1f);
  CHECK(p.logprobs == 5);
  CHECK(p.n == 16);
  CHECK(p.include_stop_str_in_output);
  CHECK_FALSE(p.skip_special_tokens);

  CHECK(ok(R"({"id": 42, "prompt": "x"})").id_string == "42");
  CHECK(ok(R"({"prompt": "x", "stop": "###"})").params.stop == std::vector<std::string>{"###"});
  CHECK(ok(R"({"prompt": "x", "top_k": -1})").params.top_k == 0);
  CHECK(ok(R"({"prompt": "x", "top_k": 0})").params.top_k == 0);
  CHECK(ok(R"({"prompt": "x", "max_tokens": 8.0})").params.max_tokens == 8);  // integral floats are integers
  CHECK(ok(R"({"prompt": "x", "temperature": 0})").params.greedy());
  CHECK(ok(R"({"prompt": "x", "logprobs": 0})").params.logprobs == 0);
  CHECK(ok(R"({"prompt": "x", "seed": 0})").params.seed == 0);
  CHECK(ok(R"({"prompt": "x", "min_tokens": 4, "max_tokens": 4})").params.min_tokens == 4);
  CHECK(ok(R"({"prompt": " "})").prompt == " ");
}

TEST_CASE("request: null means not set, so defaults stay") {
  ParseOptions options;
  options.defaults.logprobs = 2;
  options.defaults.top_p = 0.8f;
  const Request r = ok(R"({"id": null, "prompt": "x", "logprobs": null, "top_p": null, "stop": null})", options);
  CHECK(r.id == 7);
  CHECK(r.params.logprobs == 2);
  CHECK(r.params.top_p == 0.8f);
}

TEST_CASE("request: each invalid field names the line, the field and the value") {
  CHECK(field_error("temperature", R"("hot")") == R"(line 7: field "temperature": expected a number >= 0, got "hot")");
  CHECK(field_error("temperature", "-0.1") == R"(line 7: field "temperature": expected a number >= 0, got -0.1)");
  CHECK(field_error("max_tokens", "0") == R"(line 7: field "max_tokens": expected an integer >= 1, got 0)");
  CHECK(field_error("max_tokens", "2.5") == R"(line 7: field "max_tokens": expected an integer >= 1, got 2.5)");
  CHECK(field_error("max_tokens", "true") == R"(line 7: field "max_tokens": expected an integer >= 1, got true)");
  CHECK(field_error("n", "17") == R"(line 7: field "n": expected an integer from 1 to 16, got 17)");
  CHECK(field_error("logprobs", "21") ==
        R"(line 7: field "logprobs": expected an integer from 0 to 20, or null, got 21)");
  CHECK(field_error("stop_token_ids", "[1, -4]") ==
        R"(line 7: field "stop_token_ids[1]": expected a non-negative integer token id, got -4)");

  // The rest: the message starts with the line and the field.
  const std::pair<const char*, const char*> cases[] = {
      {"top_p", "0"},          {"top_p", "1.01"},        {"top_p", "\"0.5\""},   {"top_k", "-2"},
      {"top_k", "1.5"},        {"min_p", "-0.01"},       {"min_p", "1.5"},       {"seed", "-1"},
      {"seed", "\"7\""},       {"stop", "3"},            {"stop", "[\"a\", 1]"}, {"stop", "\"\""},
      {"stop", "[\"\"]"},      {"stop_token_ids", "5"},  {"ignore_eos", "1"},    {"ignore_eos", "\"true\""},
      {"min_tokens", "-1"},    {"presence_penalty", "2.5"}, {"presence_penalty", "-3"},
      {"frequency_penalty", "\"x\""}, {"frequency_penalty", "-2.01"}, {"repetition_penalty", "0"},
      {"repetition_penalty", "-1"}, {"logprobs", "-1"}, {"logprobs", "true"}, {"n", "0"},
      {"include_stop_str_in_output", "0"}, {"skip_special_tokens", "null1"}, {"id", "[1]"},
      {"id", "true"},          {"max_tokens", "1e999"},  {"prompt_token_ids", "[1]"},
  };
  for (const auto& field_value : cases) {
    // Not a structured binding: clang 14 (the sanitizer build) cannot capture one in INFO's lambda.
    const auto& field = field_value.first;
    const auto& value = field_value.second;
    const std::string error = field_error(field, value);
    INFO(std::string(field), " = ", std::string(value), " -> ", error);
    const std::string head = std::string("line 7: ");
    CHECK(error.starts_with(head));
    const bool names_field = error.find(std::string("field \"") + field) != std::string::npos ||
                             error.find("invalid JSON") != std::string::npos ||
                             error.find(std::string("\"") + field + "\"") != std::string::npos;
    CHECK(names_field);
  }
}

TEST_CASE("request: prompt rules") {
  CHECK(parse(R"({"max_tokens": 3})").error == R"(line 7: missing field "prompt" (or "prompt_token_ids"))");
  CHECK(parse(R"({"prompt": "a", "prompt_token_ids": [1]})").error ==
        R"(line 7: fields "prompt" and "prompt_token_ids" are both set; give exactly one)");
  CHECK(parse(R"({"prompt": ""})").error == R"(line 7: field "prompt": expected a non-empty prompt, got "")");
  CHECK(parse(R"({"prompt_token_ids": []})").error ==
        R"(line 7: field "prompt_token_ids": expected a non-empty array of token ids, got [])");
  CHECK(parse(R"({"prompt": 5})").error ==
        R"(line 7: field "prompt": expected a string or an array of token ids (one prompt per line), got 5)");
  CHECK(parse(R"({"prompt": ["a", "b"]})").error ==
        R"(line 7: field "prompt": expected a string or an array of token ids (one prompt per line), got ["a","b"])");
  CHECK(parse(R"({"prompt": [1, "b"]})").error.starts_with(R"(line 7: field "prompt[1]": expected)"));
  CHECK(parse(R"({"prompt_token_ids": [1, 2147483648]})").error.starts_with(R"(line 7: field "prompt_token_ids[1]")"));
  CHECK(parse(R"({"prompt": "x", "min_tokens": 5, "max_tokens": 4})").error ==
        R"(line 7: field "min_tokens": expected an integer <= max_tokens (4), got 5)");
  // A long value is cut short in the message.
  const std::string error = parse(R"({"prompt": "x", "stop": ")" + std::string(500, 'z') + "\", \"n\": 0}").error;
  CHECK(error.size() < 150);
}

TEST_CASE("request: malformed JSON, non-objects and a bad chat message") {
  const ParsedLine bad = parse(R"({"prompt": "x",)", 3);
  CHECK_FALSE(bad.request);
  CHECK(bad.error.starts_with("line 3: invalid JSON: parse error at column 16"));
  CHECK(bad.id == 3);
  CHECK(parse("[1, 2]", 4).error == "line 4: expected a JSON object ({...}), got [1,2]");
  CHECK(parse("\"text\"", 4).error == R"(line 4: expected a JSON object ({...}), got "text")");
  const ParsedLine chat = parse(R"({"id": "c", "messages": [{"role": "user", "content": 5}]})", 5);
  CHECK(chat.error.starts_with(R"(line 5: field "messages[0].content": expected a string or a list)"));
  CHECK(chat.id == "c");
}

TEST_CASE("request: unknown fields are errors unless allowed") {
  const ParsedLine p = parse(R"({"prompt": "x", "temprature": 0.5})");
  CHECK(p.error.starts_with(R"(line 7: unknown field "temprature")"));
  CHECK(p.error.find("--allow-unknown-fields") != std::string::npos);
  ParseOptions lenient;
  lenient.allow_unknown_fields = true;
  const Request r = ok(R"({"prompt": "x", "temprature": 0.5, "temperature": 0.25})", lenient);
  CHECK(r.params.temperature == 0.25f);
}

TEST_CASE("request: an error record keeps the line's id when it is readable") {
  CHECK(parse(R"({"id": "keep", "prompt": "x", "top_p": 2})").id == "keep");
  CHECK(parse(R"({"id": 9, "prompt": ""})").id == 9);
  CHECK(parse(R"({"id": {"a": 1}, "prompt": "x"})").id == 7);
  CHECK(parse(R"({"prompt": "x", "n": 0})").id == 7);
}

TEST_CASE("request: seeds derived from --seed and the line differ per line and are stable") {
  // Reference values of splitmix64 (Steele, Lea & Flood 2014; Vigna's splitmix64.c seeded 0).
  CHECK(splitmix64(0) == 0xe220a8397b1dcdafull);
  CHECK(splitmix64(0x9e3779b97f4a7c15ull) == 0x6e789e6aa1b965f4ull);
  ParseOptions options;
  options.defaults.seed = 1234;
  std::set<uint64_t> seen;
  for (int64_t line = 1; line <= 100; ++line) {
    const ParsedLine p = parse_request_line(R"({"prompt": "same"})", line, options);
    REQUIRE(p.request);
    CHECK(p.request->params.seed == splitmix64(1234 ^ splitmix64(static_cast<uint64_t>(line))));
    CHECK(p.request->params.seed == parse_request_line(R"({"prompt": "same"})", line, options).request->params.seed);
    seen.insert(p.request->params.seed);
  }
  CHECK(seen.size() == 100);
  options.defaults.seed = 1235;
  CHECK(parse_request_line(R"({"prompt": "same"})", 1, options).request->params.seed != *seen.begin());
  CHECK(ok(R"({"prompt": "x", "seed": 5})", options).params.seed == 5);  // an explicit seed wins
}

TEST_CASE("request: the OpenAI batch form maps custom_id and body") {
  const Request r = ok(R"({"custom_id": "req-1", "method": "POST", "url": "/v1/completions",
      "body": {"model": "Qwen/Qwen3-0.6B", "user": "u", "prompt": "Say hi", "max_tokens": 5, "temperature": 0, "seed": 3}})");
  CHECK(r.openai_batch);
  CHECK(r.id == "req-1");
  CHECK(r.id_string == "req-1");
  CHECK(r.prompt == "Say hi");
  CHECK(r.params.max_tokens == 5);
  CHECK(r.params.temperature == 0.0f);
  CHECK(r.params.seed == 3);
  CHECK(ok(R"({"custom_id": "a", "url": "/v1/completions", "body": {"prompt": ["one"]}})").prompt == "one");
  CHECK(ok(R"({"custom_id": "a", "url": "/v1/completions", "body": {"prompt": [1, 2]}})").prompt_token_ids ==
        std::vector<int32_t>{1, 2});
}

TEST_CASE("request: OpenAI batch form errors") {
  auto error = [](const std::string& text) {
    const ParsedLine p = parse(text, 2);
    CHECK(p.openai_batch);
    return p.error;
  };
  CHECK(error(R"({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}})") ==
        R"(line 2: field "body.messages": expected a non-empty array of messages {"role", "content"}, got [])");
  CHECK(error(R"({"custom_id": "c", "url": "/v1/embeddings", "body": {"input": "x"}})") ==
        R"(line 2: field "url": expected "/v1/completions" or "/v1/chat/completions", got "/v1/embeddings")");
  CHECK(error(R"({"custom_id": "c", "method": "GET", "url": "/v1/completions", "body": {"prompt": "x"}})") ==
        R"(line 2: field "method": expected "POST", got "GET")");
  CHECK(error(R"({"custom_id": "c", "url": "/v1/completions", "body": {"prompt": "x", "top_p": 0}})") ==
        R"(line 2: field "body.top_p": expected a number in (0, 1], got 0)");
  CHECK(error(R"({"custom_id": "c", "url": "/v1/completions", "body": {"prompt": "x", "echo": true}})")
            .starts_with(R"(line 2: unknown field "body.echo")"));
  CHECK(error(R"({"custom_id": "c", "url": "/v1/completions", "body": {"prompt": "x"}, "extra": 1})")
            .starts_with(R"(line 2: unknown field "extra")"));
  CHECK(error(R"({"url": "/v1/completions", "body": {"prompt": "x"}})").starts_with(R"(line 2: missing field "custom_id")"));
  CHECK(error(R"({"custom_id": "c", "body": {"prompt": "x"}})").starts_with(R"(line 2: missing field "url")"));
  CHECK(error(R"({"custom_id": "c", "url": "/v1/completions"})").starts_with(R"(line 2: missing field "body")"));
  CHECK(error(R"({"custom_id": "c", "url": "/v1/completions", "body": {}})") ==
        R"(line 2: missing field "body.prompt" (or "body.prompt_token_ids"))");
  // The error record carries the custom_id.
  CHECK(parse(R"({"custom_id": "mine", "url": "/v1/completions", "body": {"prompt": ""}})").id == "mine");
}

TEST_CASE("request reader: blank lines skipped but counted, CRLF and BOM accepted, duplicate ids rejected") {
  std::istringstream in(
      "\xEF\xBB\xBF{\"prompt\": \"a\"}\r\n"
      "\n"
      "   \n"
      "{\"prompt\": \"b\", \"id\": \"x\"}\n"
      "not json\n"
      "{\"prompt\": \"c\", \"id\": \"x\"}\n"
      "{\"prompt\": \"d\"}\n"
      "{\"id\": \"e\", \"prompt\": \"\"}\n"
      "{\"id\": \"e\", \"prompt\": \"ok\"}\n");
  const std::vector<ParsedLine> lines = read_requests(in, {});
  REQUIRE(lines.size() == 7);
  CHECK(lines[0].line == 1);
  REQUIRE(lines[0].request);
  CHECK(lines[0].request->prompt == "a");
  CHECK(lines[1].line == 4);
  CHECK(lines[1].request->id == "x");
  CHECK(lines[2].line == 5);
  CHECK(lines[2].error.starts_with("line 5: invalid JSON: "));
  CHECK(lines[3].line == 6);
  CHECK_FALSE(lines[3].request);
  CHECK(lines[3].error.starts_with(R"(line 6: field "id": duplicate id "x" (first used on line 4))"));
  CHECK(lines[4].line == 7);
  CHECK(lines[4].request->id == 7);
  // The id of a bad line is taken too: its error record carries it.
  CHECK(lines[5].error.starts_with("line 8: field \"prompt\""));
  CHECK(lines[6].error.starts_with(R"(line 9: field "id": duplicate id "e" (first used on line 8))"));
}

TEST_CASE("request: range limits are inclusive exactly where the schema says") {
  // Mutation testing found these boundaries untested.
  CHECK(ok(R"({"prompt": "x", "min_p": 1})").params.min_p == 1.0f);
  CHECK(ok(R"({"prompt": "x", "min_p": 0})").params.min_p == 0.0f);
  CHECK(ok(R"({"prompt": "x", "top_p": 1})").params.top_p == 1.0f);
  CHECK(ok(R"({"prompt": "x", "max_tokens": 2147483647})").params.max_tokens == 2147483647);
  CHECK(field_error("max_tokens", "2147483648").starts_with(R"(line 7: field "max_tokens")"));
  CHECK(field_error("min_tokens", "2147483648").starts_with(R"(line 7: field "min_tokens")"));
  // A float with an integer value takes the other path: the same limit applies.
  CHECK(ok(R"({"prompt": "x", "max_tokens": 2147483647.0})").params.max_tokens == 2147483647);
  CHECK(field_error("max_tokens", "2147483648.0").starts_with(R"(line 7: field "max_tokens")"));
  CHECK(field_error("top_k", "-2").find("top_k") != std::string::npos);
  CHECK(ok(R"({"prompt": "x", "top_k": -1})").params.top_k == 0);
}

TEST_CASE("request reader: a byte-order mark alone on the first line leaves a blank line") {
  std::istringstream in("\xEF\xBB\xBF\r\n{\"prompt\": \"a\"}\n");
  const std::vector<ParsedLine> lines = read_requests(in, {});
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].line == 2);
  CHECK(lines[0].request);
}

}  // namespace nvllm

namespace nvllm {

TEST_CASE("request: priority is an integer (vLLM's field), 0 when not set, in both forms") {
  CHECK(ok(R"({"prompt": "hi"})").priority == 0);
  CHECK(ok(R"({"prompt": "hi", "priority": -3})").priority == -3);
  CHECK(ok(R"({"prompt": "hi", "priority": 2147483647})").priority == 2147483647);
  CHECK(ok(R"({"prompt": "hi", "priority": -2147483648})").priority == -2147483648LL);
  CHECK(ok(R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "priority": 4}})")
            .priority == 4);
  CHECK(field_error("priority", "2147483648") ==
        R"(line 7: field "priority": expected an integer (lower runs first), got 2147483648)");
  CHECK(field_error("priority", "1.5").find("field \"priority\"") != std::string::npos);
  CHECK(field_error("priority", "\"high\"").find("field \"priority\"") != std::string::npos);
}

TEST_CASE("request: a line that is not a JSON object is marked, a repeated id names its first line") {
  CHECK(parse("not json").not_json);
  CHECK(parse("[1, 2]").not_json);
  CHECK_FALSE(parse(R"({"prompt": 3})").not_json);  // JSON, only a bad field
  std::istringstream in("{\"id\": \"a\", \"prompt\": \"x\"}\n\n{\"id\": \"a\", \"prompt\": \"y\"}\n");
  const std::vector<ParsedLine> lines = read_requests(in, {});
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].duplicate_of == 0);
  CHECK(lines[1].duplicate_of == 1);
  CHECK_FALSE(lines[1].request);
}

}  // namespace nvllm
