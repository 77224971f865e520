// nvllm tokenize: text to token ids (or back with --decode) with a checkpoint's tokenizer, one
// JSON line per input line. Users count prompt tokens with it before a batch job.
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cmd/nvllm/chat_setup.h"
#include "cmd/nvllm/commands.h"
#include "core/error.h"
#include "io/request.h"
#include "tokenizer/tokenizer.h"

namespace nvllm {
namespace {

using Json = nlohmann::ordered_json;

struct TokenizeFlags {
  std::string model;
  std::optional<std::string> text;
  std::string input = "-";
  std::string output = "-";
  bool decode = false;
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
  ChatFlags chat;
};

CLI::App* add_tokenize(CLI::App& app, TokenizeFlags& f) {
  CLI::App* cmd = app.add_subcommand("tokenize", "Turn text into token ids, or ids into text, with a model's tokenizer");
  cmd->footer(
      "Encode (default): each input line is a JSON object {\"text\": \"...\"} (\"prompt\" is accepted too, so a\n"
      "generate input file can be counted); each output line is {\"ids\": [...], \"count\": N}, plus \"id\" when\n"
      "the input line has one. Blank lines are skipped.\n"
      "A chat line (any line with \"messages\" that generate accepts) gives {\"prompt\": <rendered text>,\n"
      "\"ids\": [...], \"count\": N}, plus \"id\" (or \"custom_id\"): exactly what generate would run.\n"
      "Decode (--decode): each input line is {\"ids\": [...]}; each output line is {\"text\": \"...\"}.\n"
      "A line that is not of that form stops the run with a message naming the line, exit status 1.\n"
      "The tokenizer is DIR/tokenizer.json, or DIR/tokenizer.model when there is no tokenizer.json.");
  cmd->add_option("--model", f.model, "Checkpoint folder holding tokenizer.json or tokenizer.model")->required();
  CLI::Option* text = cmd->add_option(
      "--text", f.text,
      "Tokenize this text instead of reading --input (with --decode: a JSON array of ids, e.g. \"[1, 2]\"); default: none");
  CLI::Option* input = cmd->add_option("--input", f.input, "JSONL input; - reads standard input")->capture_default_str();
  text->excludes(input);
  cmd->add_option("--output", f.output, "JSONL output; - writes standard output")->capture_default_str();
  cmd->add_flag("--decode", f.decode, "Decode {\"ids\": [...]} lines to text instead of encoding (default: off)");
  cmd->add_flag("--add-special-tokens", f.add_special_tokens,
                "Encode: add the tokens the tokenizer's post-processor adds around a text, e.g. Llama's BOS "
                "(default: off, the text's own tokens only)");
  cmd->add_flag("--skip-special-tokens", f.skip_special_tokens,
                "Decode: leave special tokens such as <|im_end|> out of the text (default: off)");
  add_chat_flags(*cmd, f.chat, /*reasoning=*/false);
  return cmd;
}

std::vector<int32_t> ids_of(const Json& j, const std::string& where) {
  NVLLM_CHECK(j.is_array(), where, ": \"ids\" must be an array of integers");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    NVLLM_CHECK(j[i].is_number_integer(), where, ": ids[", i, "] is ", j[i].dump(), ", not an integer");
    const auto v = j[i].get<int64_t>();
    NVLLM_CHECK(v >= 0 && v <= INT32_MAX, where, ": ids[", i, "] = ", v, " is out of range");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// A line in generate's chat form: parsed as generate parses it (sampling fields are checked and
// ignored), rendered, and tokenized as generate would. `input` names the file.
Json process_chat(const Tokenizer& tok, const ChatSetup& chat, const Json& in, const std::string& text, size_t number,
                  const std::string& input) {
  const std::string where = str_cat(input, " line ", number);
  ParseOptions options;
  options.allow_unknown_fields = true;
  const ParsedLine parsed = parse_request_line(text, static_cast<int64_t>(number), options);
  NVLLM_CHECK(parsed.request, input, " ", parsed.error);  // the parser's error starts "line N: "
  NVLLM_CHECK(parsed.request->chat, where, ": expected a chat request (\"messages\")");
  Json out;
  if (parsed.openai_batch) out["custom_id"] = in["custom_id"];
  if (in.contains("id")) out["id"] = in["id"];
  try {
    std::string prompt = chat.render(*parsed.request->chat);
    std::vector<int32_t> ids = tok.encode(prompt, /*add_special_tokens=*/false);
    const size_t count = ids.size();
    out["prompt"] = std::move(prompt);
    out["ids"] = std::move(ids);
    out["count"] = count;
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  return out;
}

bool is_chat_line(const Json& in) {
  return in.is_object() && (in.contains("messages") || in.contains("body"));
}

// One input line's output line; throws nvllm::Error naming `where` for a bad line.
std::string process(const Tokenizer& tok, const TokenizeFlags& f, const Json& in, const std::string& where) {
  Json out;
  if (f.decode) {
    const Json& ids = in.is_object() && in.contains("ids") ? in["ids"] : in;
    NVLLM_CHECK(in.is_array() || (in.is_object() && in.contains("ids")), where,
                ": expected {\"ids\": [...]} for --decode");
    out["text"] = tok.decode(ids_of(ids, where), f.skip_special_tokens);
  } else {
    NVLLM_CHECK(in.is_object(), where, ": expected a JSON object {\"text\": \"...\"}");
    const char* key = in.contains("text") ? "text" : "prompt";
    NVLLM_CHECK(in.contains(key) && in[key].is_string(), where, ": expected a string field \"text\"");
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(in[key].get<std::string>(), f.add_special_tokens);
    } catch (const Error& e) {
      fail(where, ": ", e.what());
    }
    if (in.contains("id")) out["id"] = in["id"];
    const size_t count = ids.size();
    out["ids"] = std::move(ids);
    out["count"] = count;
  }
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

int run_tokenize(const TokenizeFlags& f) {
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(f.model);
  const ChatSetup chat(f.chat, f.model);

  std::ofstream out_file;
  if (f.output != "-") {
    out_file.open(f.output);
    NVLLM_CHECK(out_file, "--output ", f.output, ": cannot open the file for writing");
  }
  std::ostream& out = f.output == "-" ? std::cout : out_file;

  if (f.text) {
    Json in;
    if (f.decode) {
      in = Json::parse(*f.text, nullptr, /*allow_exceptions=*/false);
      NVLLM_CHECK(!in.is_discarded(), "--text: with --decode give a JSON array of ids, e.g. \"[1, 2]\"");
    } else {
      in = Json{{"text", *f.text}};
    }
    out << process(*tok, f, in, "--text") << '\n';
    out.flush();
    return 0;
  }

  std::ifstream in_file;
  if (f.input != "-") {
    in_file.open(f.input);
    NVLLM_CHECK(in_file, "--input ", f.input, ": cannot open the file");
  }
  std::istream& in = f.input == "-" ? std::cin : in_file;
  const std::string name = f.input == "-" ? "standard input" : f.input;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str_cat(name, " line ", number);
    NVLLM_CHECK(!json_nested_deeper_than(line, kMaxJsonDepth), where, ": JSON nested more than ", kMaxJsonDepth,
                " deep (nvllm's limit)");
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    NVLLM_CHECK(!j.is_discarded(), where, ": not valid JSON");
    if (!f.decode && is_chat_line(j)) {
      out << process_chat(*tok, chat, j, line, number, name).dump(-1, ' ', false, Json::error_handler_t::replace)
          << '\n';
    } else {
      out << process(*tok, f, j, where) << '\n';
    }
  }
  out.flush();
  NVLLM_CHECK(out, "--output ", f.output, ": writing failed (disk full?)");
  return 0;
}

}  // namespace

Command make_tokenize_command() {
  auto flags = std::make_shared<TokenizeFlags>();
  Command c;
  c.add_fn = [flags](CLI::App& app) { return add_tokenize(app, *flags); };
  c.run = [flags] { return run_tokenize(*flags); };
  return c;
}

}  // namespace nvllm
