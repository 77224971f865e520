// Output records: what one finished (or failed) request becomes in the output JSONL, in our
// form or in the OpenAI batch form that vLLM's run-batch writes. Independent of the engine:
// the caller converts its results into these plain structs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nvllm {

// Records keep their keys in the order written (id first), so output lines read naturally.
using OrderedJson = nlohmann::ordered_json;

struct OutputLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::string token;  // the token's text; used as the key of OpenAI's top_logprobs
};

// One generated token's log-probability and, when logprobs > 0, the most likely alternatives.
struct StepLogprobs {
  OutputLogprob chosen;
  std::vector<OutputLogprob> top;  // best first
};

struct CompletionOutput {
  std::string text;
  std::vector<int32_t> token_ids;
  std::string finish_reason;  // "stop" or "length"
  std::optional<std::vector<StepLogprobs>> logprobs;  // set when the request asked for logprobs
};

// A chat answer's message. `content` is the text unless a reasoning parser split it (then either
// part may be null, as in vLLM).
struct AssistantMessage {
  std::optional<std::string> content;
  std::optional<std::string> reasoning_content;
  bool reasoning_parsed = false;  // a --reasoning-parser ran: write reasoning_content (text or null)
};

struct RequestResult {
  nlohmann::json id;   // the request's id (custom_id in the OpenAI form)
  int64_t line = 0;    // input line; names the record in the OpenAI form ("nvllm-<line>")
  bool openai_batch = false;
  std::vector<CompletionOutput> outputs;  // n of them; outputs[0] is the main one
  // A chat (`messages`) request: one per output, answered in the chat form. Empty otherwise.
  std::vector<AssistantMessage> messages;
  int prompt_tokens = 0;
  int cached_tokens = 0;   // prompt tokens served from the prefix cache
  double ttft_s = 0.0;     // arrival to first output token
  double e2e_s = 0.0;      // arrival to the last output finishing
  std::string model;       // reported in the OpenAI form (e.g. the --model folder's name)
  int64_t created_unix = 0;  // OpenAI "created"; the caller passes the time so tests stay fixed
};

// The record of a finished request, in the form its line came in. Chat requests in our form keep
// every field of a completion (text is the raw output, as vLLM's LLM.chat returns it) and add
// "message": {"role": "assistant", "content", "reasoning_content"?}; in the OpenAI form the body is
// a chat.completion object.
OrderedJson result_record(const RequestResult& result);

// The record of a request that failed (bad line, prompt too long, ...). `message` should
// already name the line.
OrderedJson error_record(const nlohmann::json& id, int64_t line, bool openai_batch, const std::string& message);

// Time per output token after the first: (e2e - ttft) / (tokens - 1), 0 with fewer than 2.
double time_per_output_token_s(double ttft_s, double e2e_s, int output_tokens);

}  // namespace nvllm
