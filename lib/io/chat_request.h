// The chat fields of a request line (`messages` and what goes with it), in our form or in the
// body of an OpenAI /v1/chat/completions batch line: checked here, rendered later by cmd/ with
// the model's chat template. Lines are read as ordered JSON (ChatJson) so that tools and
// messages reach the template with their keys in the order the request wrote them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "engine/sampling_params.h"

namespace nvllm {

// A bad chat field. `field` is relative to the object read (e.g. "messages[2].content[0].type");
// the caller adds the line and the "body." prefix.
struct ChatFieldError {
  enum class Kind { kBadValue, kMissing, kRule };
  Kind kind = Kind::kBadValue;
  std::string field;     // kBadValue, kMissing
  std::string expected;  // kBadValue, kMissing: what the field should hold; kRule: the whole message
  ChatJson got;          // kBadValue
};

// True for the keys read_chat_fields reads (messages, tools, logprobs, ...), which a chat
// request may hold beside the sampling fields.
bool is_chat_field(std::string_view key);

// Reads the chat fields of `object` into `chat` and the chat spellings of sampling fields
// (max_completion_tokens; logprobs as a bool with top_logprobs) into `params`. Content parts
// stay as given (ChatTemplate::render converts them to the template's form); tool call
// arguments given as JSON text become objects, as vLLM hands them to templates. `prefix` ("" or
// "body.") names fields in the messages of kRule errors. Throws ChatFieldError.
void read_chat_fields(const ChatJson& object, std::string_view prefix, ChatInputs& chat, SamplingParams& params);

// Reads OpenAI's logit_bias ({"token id": bias in [-100, 100]}) into `params`. Throws ChatFieldError.
void read_logit_bias(const ChatJson& value, SamplingParams& params);

// OpenAI fields nvllm accepts with one value only: `stream` (false: the output file is the
// stream) and `response_format` ({"type": "text"}: no constraint). True for such a key; throws
// ChatFieldError for a value that would need a feature nvllm lacks.
bool read_fixed_field(std::string_view key, const ChatJson& value);

}  // namespace nvllm
