// Chat request lines, in our form and in the OpenAI /v1/chat/completions batch form: every field
// read, every bad value an error naming the line and the field (with "body." in the batch form).
#include "io/chat_request.h"

#include <doctest/doctest.h>

#include "io/request.h"

namespace nvllm {

namespace {

constexpr const char* kUser = R"("messages": [{"role": "user", "content": "hi"}])";

Request ok(const std::string& text) {
  const ParsedLine p = parse_request_line(text, 4, {});
  INFO(text, " -> ", p.error);
  REQUIRE(p.request);
  return *p.request;
}

// The error of our-form line `{<messages>, <extra>}`.
std::string error(const std::string& extra, const char* messages = kUser) {
  const std::string text = std::string("{") + messages + (extra.empty() ? "" : ", " + extra) + "}";
  const ParsedLine p = parse_request_line(text, 4, {});
  CHECK_MESSAGE(!p.request, text, " was accepted");
  return p.error;
}

// The error of the same body in the OpenAI batch form.
std::string batch_error(const std::string& extra, const char* messages = kUser) {
  const std::string text =
      std::string(R"({"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": {)") + messages +
      (extra.empty() ? "" : ", " + extra) + "}}";
  const ParsedLine p = parse_request_line(text, 4, {});
  CHECK_MESSAGE(!p.request, text, " was accepted");
  CHECK(p.openai_batch);
  return p.error;
}

}  // namespace

TEST_CASE("chat request: messages and the defaults of the chat fields") {
  const Request r = ok(R"({"id": "c1", "messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  REQUIRE(r.chat);
  CHECK_FALSE(r.prompt);
  CHECK(r.prompt_token_ids.empty());
  CHECK(r.chat->messages.size() == 2);
  CHECK(r.chat->messages[1]["content"][1]["text"] == "b");  // parts kept as given: render converts them
  CHECK(r.chat->tools.is_null());
  CHECK(r.chat->documents.is_null());
  CHECK(r.chat->add_generation_prompt);
  CHECK_FALSE(r.chat->continue_final_message);
  CHECK(r.chat->kwargs == ChatJson::object());
  CHECK_FALSE(r.params.logprobs);
  CHECK(r.id == "c1");
}

TEST_CASE("chat request: every chat field is read") {
  const Request r = ok(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "documents": [{"title": "t", "text": "x"}],
      "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": false,
      "continue_final_message": true, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3,
      "tool_choice": "auto", "model": "m", "user": "u", "stream": false, "n": 2,
      "logit_bias": {"5": 1.5, "0": -100}, "response_format": {"type": "text"}})");
  REQUIRE(r.chat);
  CHECK(r.chat->tools[0]["function"]["name"] == "f");
  CHECK(r.chat->documents[0]["title"] == "t");
  CHECK(r.chat->kwargs == ChatJson{{"enable_thinking", false}});
  CHECK_FALSE(r.chat->add_generation_prompt);
  CHECK(r.chat->continue_final_message);
  CHECK(r.params.max_tokens == 9);
  CHECK(r.params.logprobs == 3);
  CHECK(r.params.n == 2);
  CHECK(r.params.logit_bias == std::map<int32_t, float>{{0, -100.0f}, {5, 1.5f}});
  // logprobs true alone: the chosen token's logprob only; false: none.
  CHECK(ok(std::string("{") + kUser + R"(, "logprobs": true})").params.logprobs == 0);
  CHECK_FALSE(ok(std::string("{") + kUser + R"(, "logprobs": false, "top_logprobs": 0})").params.logprobs);
  CHECK(ok(std::string("{") + kUser + R"(, "logprobs": true, "top_logprobs": 20})").params.logprobs == 20);
  CHECK(ok(std::string("{") + kUser + R"(, "max_tokens": 7})").params.max_tokens == 7);
  CHECK(ok(std::string("{") + kUser + R"(, "max_completion_tokens": 1})").params.max_tokens == 1);
  CHECK(ok(std::string("{") + kUser + R"(, "tool_choice": "none", "tools": null})").chat->tools.is_null());
}

TEST_CASE("chat request: the OpenAI batch form") {
  const Request r = ok(R"({"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
      "body": {"model": "Qwen3", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5}})");
  REQUIRE(r.chat);
  CHECK(r.openai_batch);
  CHECK(r.id == "r1");
  CHECK(r.params.max_tokens == 5);
  CHECK(r.chat->messages.dump() == R"([{"role":"user","content":"hi"}])");
}

TEST_CASE("chat request: keys reach the template in the request's order (tojson prints them so)") {
  const Request r = ok(R"({"messages": [{"role": "user", "content": "hi", "name": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"z": 1, "a": 2}}}],
      "chat_template_kwargs": {"zeta": 1, "alpha": 2}})");
  CHECK(r.chat->messages.dump() == R"([{"role":"user","content":"hi","name":"x"}])");
  CHECK(r.chat->tools.dump() ==
        R"([{"type":"function","function":{"name":"f","description":"d","parameters":{"z":1,"a":2}}}])");
  CHECK(r.chat->kwargs.dump() == R"({"zeta":1,"alpha":2})");
}

TEST_CASE("chat request: assistant content may be null; tool call arguments become objects") {
  const Request r = ok(R"({"messages": [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [
         {"id": "1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}},
         {"id": "2", "type": "function", "function": {"name": "v", "arguments": ""}},
         {"id": "3", "type": "function", "function": {"name": "u", "arguments": {"a": 1}}}]},
      {"role": "tool", "tool_call_id": "1", "content": "sunny"}]})");
  const nlohmann::json& calls = r.chat->messages[1]["tool_calls"];
  CHECK(r.chat->messages[1]["content"].is_null());
  CHECK(calls[0]["function"]["arguments"] == nlohmann::json{{"city", "Paris"}});
  CHECK(calls[1]["function"]["arguments"] == nlohmann::json::object());
  CHECK(calls[2]["function"]["arguments"] == nlohmann::json{{"a", 1}});
  CHECK(r.chat->messages[2]["tool_call_id"] == "1");
  // An assistant turn without content at all is kept (as null) too.
  CHECK(ok(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant"}]})")
            .chat->messages[1]["content"]
            .is_null());
}

// Arguments given as JSON text are parsed too, so they get the line's depth limit (512): the
// string's brackets escape the line's own check. 512 nested arrays pass, 513 are the field's error.
TEST_CASE("chat request: tool call arguments as JSON text nest at most 512 deep") {
  const auto line = [](int depth) {
    return R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [)"
           R"({"type": "function", "function": {"name": "f", "arguments": ")" +
           std::string(depth, '[') + std::string(depth, ']') + R"("}}]}]})";
  };
  const Request at_limit = ok(line(512));
  CHECK(at_limit.chat->messages[1]["tool_calls"][0]["function"]["arguments"].is_array());
  const ParsedLine over = parse_request_line(line(513), 4, {});
  CHECK_FALSE(over.request);
  CHECK(over.error.find("\"messages[1].tool_calls[0].function.arguments\": expected JSON text nested at most 512 deep") !=
        std::string::npos);
}

TEST_CASE("chat request: each bad message names its field") {
  CHECK(error("", R"("messages": [])") ==
        R"(line 4: field "messages": expected a non-empty array of messages {"role", "content"}, got [])");
  CHECK(error("", R"("messages": {"role": "user"})").starts_with(R"(line 4: field "messages": expected a non-empty)"));
  CHECK(error("", R"("messages": ["hi"])") ==
        R"(line 4: field "messages[0]": expected an object {"role": ..., "content": ...}, got "hi")");
  CHECK(error("", R"("messages": [{"role": "user", "content": "a"}, {"content": "b"}])") ==
        R"(line 4: missing field "messages[1].role" (a string: system, user, assistant or tool))");
  CHECK(error("", R"("messages": [{"role": 3, "content": "a"}])") ==
        R"(line 4: field "messages[0].role": expected a string: system, user, assistant or tool, got 3)");
  CHECK(error("", R"("messages": [{"role": "user"}])") ==
        R"(line 4: missing field "messages[0].content" (a string or a list of {"type": "text", "text": ...} parts))");
  CHECK(error("", R"("messages": [{"role": "user", "content": null}])")
            .starts_with(R"(line 4: missing field "messages[0].content")"));
  CHECK(
      error("", R"("messages": [{"role": "user", "content": 5}])") ==
      R"(line 4: field "messages[0].content": expected a string or a list of {"type": "text", "text": ...} parts, got 5)");
  CHECK(
      error("", R"("messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])") ==
      R"(line 4: field "messages[2].content[0].type": expected "text" (nvllm runs text-only models; images and audio are not supported), got "image_url")");
  CHECK(error("", R"("messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, "b"]}])") ==
        R"(line 4: field "messages[0].content[1]": expected an object {"type": "text", "text": ...}, got "b")");
  CHECK(error("", R"("messages": [{"role": "user", "content": [{"text": "a"}]}])") ==
        R"(line 4: missing field "messages[0].content[0].type" ("text"))");
  CHECK(error("", R"("messages": [{"role": "user", "content": [{"type": "text"}]}])") ==
        R"(line 4: missing field "messages[0].content[0].text" (a string))");
  CHECK(error("", R"("messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}])") ==
        R"(line 4: field "messages[0].content[0].text": expected a string, got 1)");
  CHECK(error("", R"("messages": [{"role": "assistant", "content": null, "tool_calls": {}}])") ==
        R"(line 4: field "messages[0].tool_calls": expected an array of tool calls, got {})");
  CHECK(
      error(
          "",
          R"("messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}])") ==
      R"(line 4: field "messages[0].tool_calls[0].function.arguments": expected a JSON object or its JSON text, got "{oops")");
  // The same in the batch form, under "body.".
  CHECK(batch_error("", R"("messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
      {"role": "user", "content": [{"type": "input_audio"}]}])")
            .starts_with(R"(line 4: field "body.messages[2].content[0].type": expected "text")"));
  CHECK(batch_error("", R"("messages": [{"content": "a"}])") ==
        R"(line 4: missing field "body.messages[0].role" (a string: system, user, assistant or tool))");
}

TEST_CASE("chat request: each bad chat field names itself") {
  CHECK(error(R"("tools": {})") == R"(line 4: field "tools": expected an array of tool definitions, got {})");
  CHECK(error(R"("documents": "d")") == R"(line 4: field "documents": expected an array of documents, got "d")");
  CHECK(error(R"("chat_template_kwargs": [])") ==
        R"(line 4: field "chat_template_kwargs": expected an object, e.g. {"enable_thinking": false}, got [])");
  CHECK(error(R"("add_generation_prompt": 1)") ==
        R"(line 4: field "add_generation_prompt": expected true or false, got 1)");
  CHECK(error(R"("continue_final_message": "yes")") ==
        R"(line 4: field "continue_final_message": expected true or false, got "yes")");
  // Both true is an error, as in vLLM (add_generation_prompt defaults to true).
  CHECK(batch_error(R"("continue_final_message": true)", R"("messages": [{"role": "assistant", "content": "x"}])") ==
        R"(line 4: fields "body.continue_final_message" and "body.add_generation_prompt" are both true; )"
        R"(set "add_generation_prompt": false to continue the final message)");
  // Any final message may be continued (vLLM does not ask for an assistant's).
  CHECK(ok(std::string("{") + kUser + R"(, "continue_final_message": true, "add_generation_prompt": false})")
            .chat->continue_final_message);
  CHECK(error(R"("max_completion_tokens": 0)") ==
        R"(line 4: field "max_completion_tokens": expected an integer >= 1, got 0)");
  CHECK(error(R"("max_completion_tokens": 2.5)") ==
        R"(line 4: field "max_completion_tokens": expected an integer >= 1, got 2.5)");
  CHECK(
      error(R"("max_completion_tokens": 4, "max_tokens": 5)") ==
      R"(line 4: field "max_completion_tokens": expected the same value as "max_tokens" (5) or no "max_tokens", got 4)");
  CHECK(ok(std::string("{") + kUser + R"(, "max_completion_tokens": 4, "max_tokens": 4})").params.max_tokens == 4);
  CHECK(error(R"("logprobs": 2)") == R"(line 4: field "logprobs": expected true or false, got 2)");
  CHECK(error(R"("logprobs": true, "top_logprobs": 21)") ==
        R"(line 4: field "top_logprobs": expected an integer from 0 to 20, got 21)");
  CHECK(error(R"("logprobs": true, "top_logprobs": -1)") ==
        R"(line 4: field "top_logprobs": expected an integer from 0 to 20, got -1)");
  CHECK(error(R"("top_logprobs": 1)") ==
        R"(line 4: field "top_logprobs": expected no value unless "logprobs" is true (as OpenAI requires), got 1)");
  CHECK(error(R"("tool_choice": "required")") ==
        R"(line 4: field "tool_choice": expected "auto" or "none" (nvllm does not force tool calls), got "required")");
  CHECK(
      batch_error(R"("stream": true)") ==
      R"(line 4: field "body.stream": expected false (nvllm writes each answer to the output file when it is done), got true)");
  CHECK(batch_error(R"("response_format": {"type": "json_object"})") ==
        R"(line 4: field "body.response_format": expected {"type": "text"}: structured output is not supported yet, )"
        R"(got {"type":"json_object"})");
  CHECK(error(R"("min_tokens": 5, "max_completion_tokens": 4)") ==
        R"(line 4: field "min_tokens": expected an integer <= max_tokens (4), got 5)");
}

TEST_CASE("chat request: logit_bias, in chat and prompt requests") {
  CHECK(ok(R"({"prompt": "x", "logit_bias": {"7": 100, "8": -100}})").params.logit_bias ==
        std::map<int32_t, float>{{7, 100.0f}, {8, -100.0f}});
  CHECK(error(R"("logit_bias": {"7": 100.5})") ==
        R"(line 4: field "logit_bias.7": expected a number from -100 to 100, got 100.5)");
  CHECK(error(R"("logit_bias": {"7": -100.5})") ==
        R"(line 4: field "logit_bias.7": expected a number from -100 to 100, got -100.5)");
  CHECK(error(R"("logit_bias": {"7": "1"})") ==
        R"(line 4: field "logit_bias.7": expected a number from -100 to 100, got "1")");
  CHECK(error(R"("logit_bias": {"x": 1})")
            .starts_with(
                R"(line 4: field "logit_bias": expected token ids as keys ("x" is not a non-negative integer))"));
  CHECK(error(R"("logit_bias": {"-1": 1})").starts_with(R"(line 4: field "logit_bias": expected token ids as keys)"));
  CHECK(error(R"("logit_bias": {"1": 1, "01": 2})")
            .starts_with(R"(line 4: field "logit_bias": expected each token id once (1 is given twice))"));
  CHECK(error(R"("logit_bias": [1])").starts_with(R"(line 4: field "logit_bias": expected an object)"));
}

TEST_CASE("chat request: prompt and messages, url and fields of the other kind") {
  CHECK(error(R"("prompt": "x")") ==
        R"(line 4: fields "messages" and "prompt" are both set; give a conversation or a prompt, not both)");
  CHECK(
      batch_error(R"("prompt_token_ids": [1])") ==
      R"(line 4: fields "body.messages" and "body.prompt_token_ids" are both set; give a conversation or a prompt, not both)");
  const auto line = [](const std::string& text) { return parse_request_line(text, 4, {}).error; };
  CHECK(line(R"({"custom_id": "b", "url": "/v1/chat/completions", "body": {"prompt": "x"}})") ==
        R"(line 4: missing field "body.messages" (/v1/chat/completions takes a conversation))");
  CHECK(line(R"({"custom_id": "b", "url": "/v1/chat/completions", "body": {"messages": null}})") ==
        R"(line 4: missing field "body.messages" (/v1/chat/completions takes a conversation))");
  CHECK(
      line(
          R"({"custom_id": "b", "url": "/v1/completions", "body": {"messages": [{"role": "user", "content": "x"}]}})") ==
      R"(line 4: field "body.messages" needs "url": "/v1/chat/completions" (/v1/completions takes a prompt))");
  CHECK(line(R"({"prompt": "x", "tools": []})") ==
        R"(line 4: field "tools" belongs to chat requests (with "messages"))");
  CHECK(line(R"({"prompt": "x", "max_completion_tokens": 3})") ==
        R"(line 4: field "max_completion_tokens" belongs to chat requests (with "messages"))");
  // A prompt request keeps the completions spelling of logprobs (an integer).
  CHECK(ok(R"({"prompt": "x", "logprobs": 2, "stream": false, "model": "m", "user": "u"})").params.logprobs == 2);
  CHECK(line(R"({"prompt": "x", "stream": true})").starts_with(R"(line 4: field "stream": expected false)"));
  CHECK_FALSE(ok(R"({"prompt": "x"})").chat);
}

}  // namespace nvllm
