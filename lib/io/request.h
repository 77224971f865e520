// The JSONL request schema: one JSON object per line, in our form or in the OpenAI batch form
// that vLLM's run-batch reads, parsed into a Request or a per-line error.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "engine/sampling_params.h"

namespace nvllm {

struct Request {
  nlohmann::json id;      // as given (string or number); the line number when absent
  std::string id_string;  // id as text, for --resume and logs
  int64_t line = 0;       // 1-based line in the input file
  std::optional<std::string> prompt;   // text prompt, or
  std::vector<int32_t> prompt_token_ids;  // pre-tokenized prompt
  std::optional<ChatInputs> chat;  // or a conversation (`messages`), rendered by the model's chat template
  SamplingParams params;  // request fields over the command-line defaults
  int priority = 0;       // lower runs first under --scheduling-policy priority (vLLM's field)
  bool openai_batch = false;  // came as {custom_id, method, url, body}: answer in that form
};

struct ParseOptions {
  SamplingParams defaults;  // for fields a request does not set (from --temperature etc.)
  bool allow_unknown_fields = false;
};

// Either a request or an error for that line. An error still carries the id when the line
// had a readable one, so the error record can name it.
struct ParsedLine {
  std::optional<Request> request;
  std::string error;      // line 17: field "temperature": expected a number >= 0, got "hot"
  nlohmann::json id;      // best-effort id for the error record (line number if none)
  int64_t line = 0;
  bool openai_batch = false;  // the line looked like the OpenAI batch form: answer in that form
  bool not_json = false;      // the line is not a JSON object at all (a wrong or binary file)
  int64_t duplicate_of = 0;   // the id was first used on this earlier line (0: not a duplicate)
};

// Parses one line. Never throws for bad content; the result holds the error instead.
// The default seed of a request that sets none is derived from defaults.seed and its line
// number, so that equal prompts in one file still get different samples, reproducibly.
ParsedLine parse_request_line(const std::string& text, int64_t line_no, const ParseOptions& options);

// The deepest a request line's JSON may nest. The parser builds deeper values without
// recursion, but copying, printing or comparing them recurses a level a frame: a line of
// 200,000 nested arrays in a message field crashed the process. Past this a line is not JSON we
// read (its error says so); Python's json module stops near 1,000 for its recursion limit.
inline constexpr int kMaxJsonDepth = 512;
// True when `text`'s brackets ({ and [ outside strings) nest deeper than `limit`. A line with no
// more than `limit` opening brackets at all, as nearly every line is, is only counted.
bool json_nested_deeper_than(std::string_view text, int limit);

// The seed of a request on line `line_no` that sets none: splitmix64 of the default seed
// mixed with the line number (stable across runs and across --resume).
uint64_t derived_request_seed(uint64_t default_seed, int64_t line_no);

// The text form of an id, as --resume compares them: a string as is, a number as JSON writes it.
std::string id_to_string(const nlohmann::json& id);

// The lines of a JSONL input as the readers number them: blank lines are skipped but counted,
// a UTF-8 byte-order mark at the start and CR line ends are dropped.
class JsonlLines {
 public:
  explicit JsonlLines(std::istream& in) : in_(in) {}
  // The next non-blank line into `text`; false at the end of the input.
  bool next(std::string& text);
  int64_t line_no() const { return line_no_; }  // of the line last returned (1-based)

 private:
  std::istream& in_;
  int64_t line_no_ = 0;
};

// The line on which each id first appeared, for the duplicate-id check over files of millions of
// lines: every id's text in one buffer, 16 bytes of entry an id and an open-addressing table of
// 8-byte slots (about 45 MB for a million ids of 7 characters, where a std::unordered_map<
// std::string, int64_t> takes 74 MB, a heap node an id).
class FirstLineOfId {
 public:
  // The line `id` first appeared on, or 0 when this is its first appearance (then it is
  // recorded as appearing on `line`, which must be > 0).
  int64_t find_or_add(std::string_view id, int64_t line);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t offset;  // of the id's text in text_; it ends where the next entry's begins
    int64_t line;
  };
  std::string_view text_of(size_t k) const;
  void grow();

  std::string text_;
  std::vector<Entry> entries_;
  // Empty: 0. Else the hash's top 32 bits and the entry's index + 1, so that a probe reads an
  // entry (and its text) only when those 32 bits match.
  std::vector<uint64_t> slots_;
};

// Reads requests one line at a time, so a large file (or stdin) need not be held in memory.
// Lines as JsonlLines gives them. A repeated id becomes an error for the later line, because
// output lines are matched to requests (and --resume skips them) by id.
class RequestReader {
 public:
  RequestReader(std::istream& in, ParseOptions options);
  // The next non-blank line, or nullopt at the end of the input.
  std::optional<ParsedLine> next();
  int64_t lines_read() const { return lines_.line_no(); }

 private:
  JsonlLines lines_;
  ParseOptions options_;
  FirstLineOfId first_line_of_id_;
};

// Reads every non-blank line of `in` (blank lines are skipped, but counted for numbering).
std::vector<ParsedLine> read_requests(std::istream& in, const ParseOptions& options);

}  // namespace nvllm
