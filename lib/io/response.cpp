#include "io/response.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace nvllm {

namespace {

// vLLM writes this in place of -inf (a token the sampler ruled out), which JSON cannot hold.
constexpr double kMinLogprob = -9999.0;

// A float as the double nearest its shortest decimal form, so -0.1f prints as -0.1 and not
// -0.10000000149011612.
double json_float(float f) {
  if (std::isinf(f)) return f < 0 ? kMinLogprob : f;
  if (std::isnan(f)) return f;
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, f).ptr;
  double d = 0.0;
  std::from_chars(buf, end, d);
  return d;
}

// Milliseconds rounded to the microsecond: finer digits are noise.
double ms(double seconds) { return std::round(seconds * 1e6) / 1e3; }

// Length in Unicode code points, as OpenAI's text_offset counts (Python's len()).
int64_t code_points(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

OrderedJson our_logprobs(const std::vector<StepLogprobs>& steps) {
  OrderedJson chosen = OrderedJson::array(), top = OrderedJson::array();
  for (const StepLogprobs& step : steps) {
    chosen.push_back(json_float(step.chosen.logprob));
    OrderedJson alternatives = OrderedJson::array();
    for (const OutputLogprob& t : step.top) {
      alternatives.push_back({{"token_id", t.token_id}, {"logprob", json_float(t.logprob)}});
    }
    top.push_back(std::move(alternatives));
  }
  return {{"token_logprobs", std::move(chosen)}, {"top_logprobs", std::move(top)}};
}

// OpenAI's completion logprobs. As in vLLM, each step's top_logprobs also holds the sampled
// token; when two alternatives decode to the same text the more likely one keeps the key.
OrderedJson openai_logprobs(const std::vector<StepLogprobs>& steps) {
  OrderedJson offsets = OrderedJson::array(), chosen = OrderedJson::array();
  OrderedJson tokens = OrderedJson::array(), top = OrderedJson::array();
  int64_t offset = 0;
  for (const StepLogprobs& step : steps) {
    offsets.push_back(offset);
    offset += code_points(step.chosen.token);
    chosen.push_back(json_float(step.chosen.logprob));
    tokens.push_back(step.chosen.token);
    OrderedJson alternatives = OrderedJson::object();
    for (const OutputLogprob& t : step.top) {
      if (!alternatives.contains(t.token)) alternatives[t.token] = json_float(t.logprob);
    }
    if (!alternatives.contains(step.chosen.token)) alternatives[step.chosen.token] = json_float(step.chosen.logprob);
    top.push_back(std::move(alternatives));
  }
  return {{"text_offset", std::move(offsets)},
          {"token_logprobs", std::move(chosen)},
          {"tokens", std::move(tokens)},
          {"top_logprobs", std::move(top)}};
}

// The assistant message of a chat answer.
OrderedJson chat_message(const AssistantMessage& out) {
  const auto text_or_null = [](const std::optional<std::string>& s) {
    return s ? OrderedJson(*s) : OrderedJson(nullptr);
  };
  OrderedJson m = {{"role", "assistant"}, {"content", text_or_null(out.content)}};
  if (out.reasoning_parsed) m["reasoning_content"] = text_or_null(out.reasoning_content);
  return m;
}

OrderedJson token_bytes(const std::string& token) {
  OrderedJson bytes = OrderedJson::array();
  for (char ch : token) bytes.push_back(static_cast<unsigned char>(ch));
  return bytes;
}

// OpenAI's chat logprobs: one entry per generated token, with its `top_logprobs` most likely
// alternatives (best first) as a list; `bytes` are the token text's UTF-8 bytes.
OrderedJson chat_logprobs(const std::vector<StepLogprobs>& steps) {
  OrderedJson content = OrderedJson::array();
  for (const StepLogprobs& step : steps) {
    OrderedJson top = OrderedJson::array();
    for (const OutputLogprob& t : step.top) {
      top.push_back({{"token", t.token}, {"logprob", json_float(t.logprob)}, {"bytes", token_bytes(t.token)}});
    }
    content.push_back({{"token", step.chosen.token},
                       {"logprob", json_float(step.chosen.logprob)},
                       {"bytes", token_bytes(step.chosen.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

OrderedJson our_output(const CompletionOutput& out, const AssistantMessage* message) {
  OrderedJson o = OrderedJson::object();
  if (message) o["message"] = chat_message(*message);
  o["text"] = out.text;
  o["token_ids"] = out.token_ids;
  o["finish_reason"] = out.finish_reason;
  if (out.logprobs) o["logprobs"] = our_logprobs(*out.logprobs);
  return o;
}

// The chat message of output `i`, or null for a completion request.
const AssistantMessage* message_of(const RequestResult& r, size_t i) {
  return r.messages.empty() ? nullptr : &r.messages[i];
}

int completion_tokens(const RequestResult& r) {
  int total = 0;
  for (const CompletionOutput& out : r.outputs) total += static_cast<int>(out.token_ids.size());
  return total;
}

// The request ends when its longest completion does, so that one sets the per-token time.
int longest_output(const RequestResult& r) {
  size_t longest = 0;
  for (const CompletionOutput& out : r.outputs) longest = std::max(longest, out.token_ids.size());
  return static_cast<int>(longest);
}

OrderedJson our_record(const RequestResult& r) {
  OrderedJson record = {{"id", r.id}};
  const OrderedJson first = our_output(r.outputs.front(), message_of(r, 0));
  for (const auto& [key, value] : first.items()) record[key] = value;
  if (r.outputs.size() > 1) {
    OrderedJson outputs = OrderedJson::array();
    for (size_t i = 0; i < r.outputs.size(); ++i) outputs.push_back(our_output(r.outputs[i], message_of(r, i)));
    record["outputs"] = std::move(outputs);
  }
  record["usage"] = {{"prompt_tokens", r.prompt_tokens},
                     {"completion_tokens", completion_tokens(r)},
                     {"cached_tokens", r.cached_tokens}};
  record["timing"] = {{"ttft_ms", ms(r.ttft_s)},
                      {"e2e_ms", ms(r.e2e_s)},
                      {"tpot_ms", ms(time_per_output_token_s(r.ttft_s, r.e2e_s, longest_output(r)))}};
  return record;
}

OrderedJson openai_choice(size_t index, const CompletionOutput& out, const AssistantMessage* message) {
  if (message) {
    return {{"index", index},
            {"message", chat_message(*message)},
            {"logprobs", out.logprobs ? chat_logprobs(*out.logprobs) : OrderedJson(nullptr)},
            {"finish_reason", out.finish_reason}};
  }
  return {{"index", index},
          {"text", out.text},
          {"logprobs", out.logprobs ? openai_logprobs(*out.logprobs) : OrderedJson(nullptr)},
          {"finish_reason", out.finish_reason}};
}

OrderedJson openai_record(const RequestResult& r) {
  OrderedJson choices = OrderedJson::array();
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    choices.push_back(openai_choice(i, r.outputs[i], message_of(r, i)));
  }
  const bool chat = !r.messages.empty();
  const int completion = completion_tokens(r);
  OrderedJson body = {{"id", str_cat(chat ? "chatcmpl-" : "cmpl-", r.line)},
                      {"object", chat ? "chat.completion" : "text_completion"},
                      {"created", r.created_unix},
                      {"model", r.model},
                      {"choices", std::move(choices)},
                      {"usage",
                       {{"prompt_tokens", r.prompt_tokens},
                        {"completion_tokens", completion},
                        {"total_tokens", r.prompt_tokens + completion},
                        {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}}}};
  return {{"id", str_cat("nvllm-", r.line)},
          {"custom_id", r.id},
          {"response", {{"status_code", 200}, {"request_id", str_cat("nvllm-batch-", r.line)}, {"body", std::move(body)}}},
          {"error", nullptr}};
}

}  // namespace

double time_per_output_token_s(double ttft_s, double e2e_s, int output_tokens) {
  return output_tokens < 2 ? 0.0 : (e2e_s - ttft_s) / (output_tokens - 1);
}

OrderedJson result_record(const RequestResult& result) {
  NVLLM_CHECK(!result.outputs.empty(), "result_record: request ", result.id.dump(), " has no outputs");
  NVLLM_CHECK(result.messages.empty() || result.messages.size() == result.outputs.size(), "result_record: request ",
              result.id.dump(), " has ", result.messages.size(), " chat messages for ", result.outputs.size(),
              " outputs");
  return result.openai_batch ? openai_record(result) : our_record(result);
}

OrderedJson error_record(const nlohmann::json& id, int64_t line, bool openai_batch, const std::string& message) {
  if (!openai_batch) return {{"id", id}, {"error", {{"line", line}, {"message", message}}}};
  return {{"id", str_cat("nvllm-", line)},
          {"custom_id", id},
          {"response", nullptr},
          {"error", {{"code", "invalid_request"}, {"message", message}, {"line", line}}}};
}

}  // namespace nvllm
