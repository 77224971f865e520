// Chat answers: our form with "message" beside the completion fields, and the OpenAI batch
// form whose body is a chat.completion object in the shape OpenAI documents (choices[i].message,
// logprobs.content[] with token/logprob/bytes/top_logprobs, usage), wrapped as vLLM's run-batch.
#include <doctest/doctest.h>

#include "core/error.h"
#include "io/response.h"

namespace nvllm {

namespace {

nlohmann::json as_json(const OrderedJson& record) { return nlohmann::json::parse(record.dump()); }

CompletionOutput answer(const std::string& text, std::vector<int32_t> ids, const std::string& finish) {
  CompletionOutput out;
  out.text = text;
  out.token_ids = std::move(ids);
  out.finish_reason = finish;
  return out;
}

AssistantMessage message(std::optional<std::string> content, std::optional<std::string> reasoning = std::nullopt,
                         bool parsed = false) {
  AssistantMessage m;
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  m.reasoning_parsed = parsed;
  return m;
}

RequestResult chat_result(bool openai) {
  RequestResult r;
  r.id = "c-1";
  r.line = 5;
  r.openai_batch = openai;
  r.model = "Qwen3-0.6B";
  r.created_unix = 1700000000;
  r.prompt_tokens = 10;
  r.cached_tokens = 4;
  r.ttft_s = 0.01;
  r.e2e_s = 0.03;
  return r;
}

}  // namespace

TEST_CASE("chat response: our form adds the assistant message, keeps the raw text") {
  RequestResult r = chat_result(false);
  r.outputs = {answer("Hello!", {9, 10}, "stop")};
  r.messages = {message("Hello!")};
  CHECK(result_record(r).dump() ==
        R"({"id":"c-1","message":{"role":"assistant","content":"Hello!"},"text":"Hello!","token_ids":[9,10],)"
        R"("finish_reason":"stop","usage":{"prompt_tokens":10,"completion_tokens":2,"cached_tokens":4},)"
        R"("timing":{"ttft_ms":10.0,"e2e_ms":30.0,"tpot_ms":20.0}})");

  // With a reasoning parser: reasoning_content is written, null when there was none; n = 2 gives
  // each output its message.
  r.outputs = {answer("<think>hm</think>Hi", {1, 2, 3}, "stop"), answer("Yo", {4}, "length")};
  r.messages = {message("Hi", "hm", true), message("Yo", std::nullopt, true)};
  const nlohmann::json got = as_json(result_record(r));
  CHECK(got["message"] ==
        nlohmann::json::parse(R"({"role": "assistant", "content": "Hi", "reasoning_content": "hm"})"));
  CHECK(got["text"] == "<think>hm</think>Hi");
  CHECK(got["outputs"][1]["message"] ==
        nlohmann::json::parse(R"({"role": "assistant", "content": "Yo", "reasoning_content": null})"));
  CHECK(got["usage"]["completion_tokens"] == 4);
}

TEST_CASE("chat response: the OpenAI batch form is a chat.completion") {
  RequestResult r = chat_result(true);
  r.outputs = {answer("France's capital", {5, 6}, "stop"), answer("Lyon", {7}, "length")};
  // The first: a reasoning parser found only reasoning; the second: no parser.
  r.messages = {message(std::nullopt, "France's capital", true), message("Lyon")};
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "id": "nvllm-5", "custom_id": "c-1",
    "response": {"status_code": 200, "request_id": "nvllm-batch-5",
      "body": {"id": "chatcmpl-5", "object": "chat.completion", "created": 1700000000, "model": "Qwen3-0.6B",
        "choices": [
          {"index": 0, "message": {"role": "assistant", "content": null, "reasoning_content": "France's capital"},
           "logprobs": null, "finish_reason": "stop"},
          {"index": 1, "message": {"role": "assistant", "content": "Lyon"}, "logprobs": null, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                  "prompt_tokens_details": {"cached_tokens": 4}}}},
    "error": null})");
  const OrderedJson record = result_record(r);
  CHECK(as_json(record) == expected);
  // Key order as OpenAI writes it.
  const std::string text = record.dump();
  CHECK(text.starts_with(
      R"({"id":"nvllm-5","custom_id":"c-1","response":{"status_code":200,"request_id":"nvllm-batch-5",)"
      R"("body":{"id":"chatcmpl-5","object":"chat.completion","created":1700000000,)"
      R"("model":"Qwen3-0.6B","choices":[{"index":0,"message":{"role":"assistant","content":null,)"));
  CHECK(text.ends_with(R"("error":null})"));
}

TEST_CASE("chat response: chat logprobs in OpenAI's shape") {
  RequestResult r = chat_result(true);
  CompletionOutput out = answer("Hé!", {1, 2}, "length");
  StepLogprobs first;
  first.chosen = {1, -0.25f, "H"};
  first.top = {{1, -0.25f, "H"}, {3, -1.5f, "J"}};
  StepLogprobs second;
  second.chosen = {2, -0.5f, "é!"};
  second.top = {{4, -0.1f, "e"}, {2, -0.5f, "é!"}};
  out.logprobs = std::vector<StepLogprobs>{first, second};
  r.outputs = {out};
  r.messages = {message("Hé!")};
  const nlohmann::json expected = nlohmann::json::parse(R"({"content": [
      {"token": "H", "logprob": -0.25, "bytes": [72],
       "top_logprobs": [{"token": "H", "logprob": -0.25, "bytes": [72]}, {"token": "J", "logprob": -1.5, "bytes": [74]}]},
      {"token": "é!", "logprob": -0.5, "bytes": [195, 169, 33],
       "top_logprobs": [{"token": "e", "logprob": -0.1, "bytes": [101]}, {"token": "é!", "logprob": -0.5, "bytes": [195, 169, 33]}]}]})");
  CHECK(as_json(result_record(r))["response"]["body"]["choices"][0]["logprobs"] == expected);
  // logprobs with top_logprobs 0: each entry has an empty top_logprobs list.
  out.logprobs = std::vector<StepLogprobs>{StepLogprobs{{1, -0.25f, "H"}, {}}};
  r.outputs = {out};
  CHECK(as_json(result_record(r))["response"]["body"]["choices"][0]["logprobs"] ==
        nlohmann::json::parse(R"({"content": [{"token": "H", "logprob": -0.25, "bytes": [72], "top_logprobs": []}]})"));
}

TEST_CASE("chat response: a completion request's records are unchanged by the chat fields") {
  RequestResult r = chat_result(true);
  r.outputs = {answer("x", {1}, "stop")};
  const nlohmann::json body = as_json(result_record(r))["response"]["body"];
  CHECK(body["object"] == "text_completion");
  CHECK(body["id"] == "cmpl-5");
  CHECK(body["choices"][0]["text"] == "x");
  CHECK_FALSE(body["choices"][0].contains("message"));
  r.openai_batch = false;
  CHECK_FALSE(as_json(result_record(r)).contains("message"));
}

TEST_CASE("chat response: a message count that does not match the outputs is a bug, not a record") {
  RequestResult r = chat_result(true);
  r.outputs = {answer("a", {1}, "stop"), answer("b", {2}, "stop")};
  r.messages = {message("a")};
  CHECK_THROWS_AS(result_record(r), Error);
}

}  // namespace nvllm
