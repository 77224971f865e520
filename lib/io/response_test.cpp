#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "io/response.h"

namespace nvllm {

namespace {

// Records are compared as parsed JSON against hand-written expected objects; key order is
// checked separately on the dumped text.
nlohmann::json as_json(const OrderedJson& record) { return nlohmann::json::parse(record.dump()); }

StepLogprobs step(int32_t id, float logprob, const std::string& token) {
  StepLogprobs s;
  s.chosen.token_id = id;
  s.chosen.logprob = logprob;
  s.chosen.token = token;
  return s;
}

StepLogprobs& with_top(StepLogprobs& s, int32_t id, float logprob, const std::string& token) {
  OutputLogprob t;
  t.token_id = id;
  t.logprob = logprob;
  t.token = token;
  s.top.push_back(t);
  return s;
}

}  // namespace

TEST_CASE("response: our form, one completion") {
  RequestResult r;
  r.id = "q1";
  r.line = 3;
  r.outputs = {{" world", {11, 12, 13}, "length", std::nullopt, std::nullopt, std::nullopt}};
  r.prompt_tokens = 5;
  r.cached_tokens = 0;
  r.ttft_s = 0.05;
  r.e2e_s = 0.25;  // (250 - 50) ms over the 2 tokens after the first: 100 ms per token
  const OrderedJson record = result_record(r);
  CHECK(record.dump() ==
        R"({"id":"q1","text":" world","token_ids":[11,12,13],"finish_reason":"length","stop_reason":null,)"
        R"("usage":{"prompt_tokens":5,"completion_tokens":3,"cached_tokens":0},)"
        R"("timing":{"ttft_ms":50.0,"e2e_ms":250.0,"tpot_ms":100.0}})");
}

TEST_CASE("response: our form, n = 2 with logprobs") {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  StepLogprobs a0 = step(1, -0.1f, "A"), b0 = step(2, -1.25f, "B");
  with_top(with_top(a0, 1, -0.1f, "A"), 2, -1.25f, "B");
  with_top(b0, 2, -1.25f, "B");
  CompletionOutput a{"A", {1}, "stop", std::vector<StepLogprobs>{a0}, std::nullopt, 7};
  CompletionOutput b{"BC", {2, 3}, "length", std::vector<StepLogprobs>{b0, step(3, neg_inf, "C")}, {}, {}};
  RequestResult r;
  r.id = 4;
  r.line = 4;
  r.outputs = {a, b};
  r.prompt_tokens = 3;
  r.cached_tokens = 2;
  r.ttft_s = 0.001;
  r.e2e_s = 0.0025;  // the longer output (2 tokens) sets the per-token time: 1.5 ms
  // Token text beside each id; stop_reason: the stop token id 7 that ended "A", none for "length".
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "id": 4, "text": "A", "token_ids": [1], "finish_reason": "stop", "stop_reason": 7,
    "logprobs": {"tokens": ["A"], "token_logprobs": [-0.1],
                 "top_logprobs": [[{"token_id": 1, "token": "A", "logprob": -0.1},
                                   {"token_id": 2, "token": "B", "logprob": -1.25}]]},
    "outputs": [
      {"text": "A", "token_ids": [1], "finish_reason": "stop", "stop_reason": 7,
       "logprobs": {"tokens": ["A"], "token_logprobs": [-0.1],
                    "top_logprobs": [[{"token_id": 1, "token": "A", "logprob": -0.1},
                                      {"token_id": 2, "token": "B", "logprob": -1.25}]]}},
      {"text": "BC", "token_ids": [2, 3], "finish_reason": "length", "stop_reason": null,
       "logprobs": {"tokens": ["B", "C"], "token_logprobs": [-1.25, -9999.0],
                    "top_logprobs": [[{"token_id": 2, "token": "B", "logprob": -1.25}], []]}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 3, "cached_tokens": 2},
    "timing": {"ttft_ms": 1.0, "e2e_ms": 2.5, "tpot_ms": 1.5}})");
  const OrderedJson record = result_record(r);
  CHECK(as_json(record) == expected);
  CHECK(record.dump().starts_with(R"({"id":4,"text":"A",)"));
  // Floats print in their shortest form, not as the double nearest the float.
  CHECK(record.dump().find("-0.1]") != std::string::npos);
}

TEST_CASE("response: OpenAI batch form, as vLLM's run-batch writes it") {
  RequestResult r;
  r.id = "req-1";
  r.line = 2;
  r.openai_batch = true;
  r.model = "Qwen3-0.6B";
  r.created_unix = 1700000000;
  r.outputs = {{" hi", {5, 6}, "stop", std::nullopt, "\n\n", std::nullopt}};
  r.prompt_tokens = 6;
  r.cached_tokens = 0;
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "id": "nvllm-2", "custom_id": "req-1",
    "response": {"status_code": 200, "request_id": "nvllm-batch-2",
      "body": {"id": "cmpl-2", "object": "text_completion", "created": 1700000000, "model": "Qwen3-0.6B",
        "choices": [{"index": 0, "text": " hi", "logprobs": null, "finish_reason": "stop", "stop_reason": "\n\n"}],
        "usage": {"prompt_tokens": 6, "completion_tokens": 2, "total_tokens": 8,
                  "prompt_tokens_details": {"cached_tokens": 0}}}},
    "error": null})");
  const OrderedJson record = result_record(r);
  CHECK(as_json(record) == expected);
  CHECK(record.dump().starts_with(R"({"id":"nvllm-2","custom_id":"req-1","response":)"));
}

TEST_CASE("response: OpenAI completion logprobs") {
  RequestResult r;
  r.id = "c";
  r.line = 1;
  r.openai_batch = true;
  // "Hé" is two characters (three bytes): the next token's text_offset is 2, as Python's len() counts.
  StepLogprobs s0 = step(7, -0.25f, "H\xC3\xA9"), s1 = step(8, -2.0f, " x");
  with_top(with_top(s0, 7, -0.25f, "H\xC3\xA9"), 9, -1.5f, "Hi");
  // The sampled token is not among the alternatives: it is added. Two alternatives with the
  // same text: the first (more likely) keeps the key.
  with_top(with_top(s1, 10, -0.5f, " y"), 11, -0.75f, " y");
  const std::vector<StepLogprobs> steps = {s0, s1};
  r.outputs = {{"H\xC3\xA9 x", {7, 8}, "length", steps, {}, {}}};
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "text_offset": [0, 2], "token_logprobs": [-0.25, -2.0], "tokens": ["Hé", " x"],
    "top_logprobs": [{"Hé": -0.25, "Hi": -1.5}, {" y": -0.5, " x": -2.0}]})");
  CHECK(as_json(result_record(r))["response"]["body"]["choices"][0]["logprobs"] == expected);
}

TEST_CASE("response: error records in both forms") {
  CHECK(as_json(error_record("q", 5, false, "line 5: bad")) ==
        nlohmann::json::parse(R"({"id": "q", "error": {"line": 5, "message": "line 5: bad"}})"));
  CHECK(error_record(5, 5, false, "m").dump().starts_with(R"({"id":5,"error":)"));
  CHECK(as_json(error_record("c", 5, true, "line 5: bad")) ==
        nlohmann::json::parse(R"({"id": "nvllm-5", "custom_id": "c", "response": null,
                                  "error": {"code": "invalid_request", "message": "line 5: bad", "line": 5}})"));
}

TEST_CASE("response: time per output token") {
  CHECK(time_per_output_token_s(1.0, 3.0, 5) == doctest::Approx(0.5));
  CHECK(time_per_output_token_s(1.0, 3.0, 1) == 0.0);
  CHECK(time_per_output_token_s(1.0, 3.0, 0) == 0.0);
  RequestResult empty;
  CHECK_THROWS(result_record(empty));
}

}  // namespace nvllm
