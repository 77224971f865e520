// ChatTemplate over the shipped templates, against jinja2 renders made the way transformers'
// apply_chat_template makes them (testdata/chat/template_cases.jsonl, from jinja_reference.py).
#include "chat/chat_template.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace nvllm {
namespace {

const std::string kTemplates = std::string(NVLLM_TESTDATA) + "/chat/templates/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

ChatTemplate load(const std::string& file) {
  static const std::map<std::string, std::pair<std::string, std::string>> tokens = {
      {"qwen3.jinja", {"", "<|im_end|>"}},
      {"llama3.jinja", {"<|begin_of_text|>", "<|end_of_text|>"}},
      {"deepseek_v3.jinja", {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"}},
      {"llama2.jinja", {"<s>", "</s>"}},
      {"mistral_instruct.jinja", {"<s>", "</s>"}},
  };
  const auto& [bos, eos] = tokens.at(file);
  return ChatTemplate(read(kTemplates + file), file, bos, eos);
}

ChatInputs inputs_of(const ChatJson& c) {
  ChatInputs in;
  in.messages = c["messages"];
  if (c.contains("tools")) in.tools = c["tools"];
  in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  in.continue_final_message = c["continue_final_message"].get<bool>();
  in.kwargs = c["kwargs"];
  return in;
}

TEST_CASE("chat template: shipped templates render as transformers renders them") {
  std::ifstream in(std::string(NVLLM_TESTDATA) + "/chat/template_cases.jsonl");
  REQUIRE(in.good());
  std::map<std::string, ChatTemplate> templates;
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    ChatJson c = ChatJson::parse(line);
    std::string file = c["template"].get<std::string>(), name = c["name"].get<std::string>();
    CAPTURE(file);
    CAPTURE(name);
    if (!templates.count(file)) templates.emplace(file, load(file));
    const ChatTemplate& t = templates.at(file);
    ContentFormat format = c["format"] == "openai" ? ContentFormat::kOpenai : ContentFormat::kString;
    CHECK(t.detected_content_format() == format);
    if (c.contains("expected")) {
      std::string got;
      CHECK_NOTHROW(got = t.render(inputs_of(c), format));
      CHECK(got == c["expected"].get<std::string>());
    } else {
      CHECK_THROWS_AS(t.render(inputs_of(c), format), ChatTemplateError);
    }
    ++cases;
  }
  CHECK(cases == 80);
}

TEST_CASE("chat template: raise_exception's message is the template's own") {
  ChatTemplate t = load("mistral_instruct.jinja");
  ChatInputs in;
  in.messages = ChatJson::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  try {
    t.render(in, ContentFormat::kString);
    FAIL("expected a ChatTemplateError");
  } catch (const ChatTemplateError& e) {
    CHECK(std::string(e.what()) == "Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

TEST_CASE("chat template: content format detection follows vLLM's rules") {
  auto detect = [](const std::string& src) { return ChatTemplate(src, "t", "", "").detected_content_format(); };
  CHECK(detect("{% for m in messages %}{% for part in m['content'] %}{{ part.text }}{% endfor %}{% endfor %}") ==
        ContentFormat::kOpenai);
  CHECK(detect("{% for m in messages %}{% for part in m.content | selectattr('type', 'eq', 'text') %}{% endfor %}{% endfor %}") ==
        ContentFormat::kOpenai);
  // through an alias of messages, including a slice
  CHECK(detect("{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% for p in m.content %}{% endfor %}{% endfor %}") ==
        ContentFormat::kOpenai);
  CHECK(detect("{% for m in messages %}{{ m['content'] }}{% endfor %}") == ContentFormat::kString);
  // looping over the content of something that is not a message is not the signal
  CHECK(detect("{% for p in tools[0]['content'] %}{% endfor %}") == ContentFormat::kString);
  // vLLM's detector gives up (and says "string") on a tuple target over messages
  CHECK(detect("{% for i, m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}") == ContentFormat::kString);
  for (const char* f : {"qwen3.jinja", "llama3.jinja", "deepseek_v3.jinja", "llama2.jinja", "mistral_instruct.jinja"}) {
    CHECK(load(f).detected_content_format() == ContentFormat::kString);
  }
}

TEST_CASE("chat template: content parts become what the template expects") {
  ChatTemplate t("{% for m in messages %}[{{ m.content }}]{% endfor %}", "t", "", "");
  ChatInputs in;
  in.messages = ChatJson::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                   {"role": "user", "content": "c"}])");
  CHECK(t.render(in, ContentFormat::kString) == "[a\nb][c]");
  CHECK(t.render(in, ContentFormat::kOpenai) ==
        "[[{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}]][[{'type': 'text', 'text': 'c'}]]");
  in.messages[0]["content"][1] = ChatJson::parse(R"({"type": "image_url", "image_url": {"url": "x"}})");
  CHECK_THROWS_AS(t.render(in, ContentFormat::kString), ChatTemplateError);
}

TEST_CASE("chat template: continue_final_message cuts after the final message") {
  ChatTemplate t = load("qwen3.jinja");
  ChatInputs in;
  in.messages = ChatJson::parse(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure,"}])");
  in.add_generation_prompt = false;
  in.continue_final_message = true;
  CHECK(t.render(in, ContentFormat::kString) ==
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nSure,");
  in.add_generation_prompt = true;  // transformers refuses the combination
  CHECK_THROWS_AS(t.render(in, ContentFormat::kString), ChatTemplateError);
  in.add_generation_prompt = false;
  ChatTemplate drops("{% for m in messages %}{{ m.role }}{% endfor %}content", "t", "", "");
  CHECK_THROWS_AS(drops.render(in, ContentFormat::kString), ChatTemplateError);
}

TEST_CASE("chat template: from_model_dir reads tokenizer_config.json and chat_template.jinja") {
  std::string tok = std::string(NVLLM_TESTDATA) + "/tokenizers/";
  auto qwen = ChatTemplate::from_model_dir(tok + "qwen3");
  REQUIRE(qwen.has_value());
  ChatInputs in;
  in.messages = ChatJson::parse(R"([{"role": "user", "content": "Hi"}])");
  CHECK(qwen->render(in, ContentFormat::kString) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(qwen->name() == tok + "qwen3/tokenizer_config.json: chat_template");
  auto llama3 = ChatTemplate::from_model_dir(tok + "llama3");
  REQUIRE(llama3.has_value());
  CHECK(llama3->render(in, ContentFormat::kString) ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK_FALSE(ChatTemplate::from_model_dir(tok + "llama2").has_value());
  ChatTemplate file = ChatTemplate::from_file(kTemplates + "llama2.jinja", tok + "llama2");
  CHECK(file.render(in, ContentFormat::kString) == "<s>[INST] Hi [/INST]");
}

TEST_CASE("chat template: the tokenizer's special tokens are variables, unset ones undefined (as transformers)") {
  auto path = std::filesystem::temp_directory_path() / "nvllm_chat_template_tokens.jinja";
  std::ofstream(path) << "{{ eos_token }}|{{ pad_token }}|{{ additional_special_tokens[1] }}|"
                         "{{ bos_token is defined }}|{{ unk_token is defined }}";
  ChatTemplate t = ChatTemplate::from_file(path, std::string(NVLLM_TESTDATA) + "/tokenizers/qwen3");
  std::filesystem::remove(path);
  ChatInputs in;
  in.messages = ChatJson::parse(R"([{"role": "user", "content": "hi"}])");
  CHECK(t.render(in, ContentFormat::kString) == "<|im_end|>|<|endoftext|>|<|im_end|>|False|False");
}

// Found by chat_template_fuzz in CI's smoke runs: a printf width past a C int overflowed the
// parser's int (undefined behaviour), and one of 2^31 - 1 asked for 2 GB of padding. Widths,
// precisions, repetition and tojson's indent stop at 2^24 (16 MiB): an error past it, exactly.
TEST_CASE("chat template: a printf width past a C int is an error, not an overflow") {
  ChatInputs in;
  in.messages = ChatJson::parse(R"([{"role": "user", "content": "hi"}])");
  const ChatTemplate huge("{{ '%7777777777d' % 1 }}", "t", "", "");
  CHECK_THROWS_WITH_AS(huge.render(in, ContentFormat::kString), doctest::Contains("width too big"), ChatTemplateError);
  const ChatTemplate over("{{ '%16777217d' % 1 }}", "t", "", "");
  CHECK_THROWS_WITH_AS(over.render(in, ContentFormat::kString), doctest::Contains("width too big"), ChatTemplateError);
  const ChatTemplate at("{{ ('%16777216d' % 1) | length }}", "t", "", "");
  CHECK(at.render(in, ContentFormat::kString) == "16777216");
  const ChatTemplate repeat_at("{{ ('ab' * 8388608) | length }}", "t", "", "");
  CHECK(repeat_at.render(in, ContentFormat::kString) == "16777216");
  const ChatTemplate repeat_over("{{ 'ab' * 8388609 }}", "t", "", "");
  CHECK_THROWS_WITH_AS(repeat_over.render(in, ContentFormat::kString), doctest::Contains("too large"), ChatTemplateError);
  const ChatTemplate indent_over("{{ [1] | tojson(indent=16777217) }}", "t", "", "");
  CHECK_THROWS_WITH_AS(indent_over.render(in, ContentFormat::kString), doctest::Contains("indent too big"),
                       ChatTemplateError);
  const ChatTemplate precision("{{ '%.2147483647d' % 1 }}", "t", "", "");
  CHECK_THROWS_WITH_AS(precision.render(in, ContentFormat::kString), doctest::Contains("width too big"),
                       ChatTemplateError);
  // Past the 511 characters a fixed buffer once cut numbers to: Python pads them in full.
  const ChatTemplate wide("{{ ('%600d' % 7) | length }} {{ ('%-600.2f|' % 0.5) | length }} {{ ('%600d' % 7)[-2:] }}",
                          "t", "", "");
  CHECK(wide.render(in, ContentFormat::kString) == "600 601  7");
  const ChatTemplate ok("{{ '%05d|%.3f' % (42, 0.5) }}", "t", "", "");
  CHECK(ok.render(in, ContentFormat::kString) == "00042|0.500");
}

// Found by chat_template_fuzz's long runs: a value holding another twice, nested k deep, prints
// 2^k leaves (each operation within the 16 MiB limits above), and macros or loops nest to
// billions of steps in a few lines. Printed text now stops at 16 MiB (the output or any one
// string: an error one byte past it) and a render at 1,000,000 loop iterations and macro calls
// (jinja_test.cpp).
TEST_CASE("chat template: printed text is bounded: 16 MiB, however the value was built") {
  ChatInputs in;
  in.messages = ChatJson::parse(R"([{"role": "user", "content": "hi"}])");
  const auto error_of = [&](const std::string& source) {
    try {
      (void)ChatTemplate(source, "t", "", "").render(in, ContentFormat::kString);
    } catch (const ChatTemplateError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string doubling =
      "{% set ns = namespace(v=0) %}{% for i in range(40) %}{% set ns.v = (ns.v, ns.v) %}{% endfor %}";
  CHECK(error_of(doubling + "{{ ns.v }}").find("longer than 16 MiB") != std::string::npos);
  CHECK(error_of(doubling + "{{ ns.v | tojson }}").find("longer than 16 MiB") != std::string::npos);
  // (join, string and ~ print through the same append_str as {{ }}.)
  // The same doubling, 10 deep: 1,024 leaves print.
  const ChatTemplate small("{% set ns = namespace(v=0) %}{% for i in range(10) %}{% set ns.v = [ns.v, ns.v] %}"
                           "{% endfor %}{{ (ns.v | string).count('0') }}",
                           "t", "", "");
  CHECK(small.render(in, ContentFormat::kString) == "1024");
  // Exactly 16 MiB of output renders; one byte more, printed or literal, does not.
  const ChatTemplate at("{{ 'x' * 16777216 }}", "t", "", "");
  CHECK(at.render(in, ContentFormat::kString).size() == 16777216);
  CHECK(error_of("{{ 'x' * 16777216 }}y").find("longer than 16 MiB") != std::string::npos);
  CHECK(error_of("{{ 'x' * 16777216 }}{{ 'y' }}").find("longer than 16 MiB") != std::string::npos);
  // Loops and macro calls stop at 1,000,000 a render: jinja_test.cpp checks that limit's boundary
  // (with a small limit: a million steps take seconds under the sanitizers).
}

TEST_CASE("bench.chat_template qwen3 4-turn renders per second" * doctest::skip()) {
  ChatTemplate t = load("qwen3.jinja");
  ChatInputs in;
  in.messages = ChatJson::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nParis."},
    {"role": "user", "content": "And of Germany?"}])");
  size_t bytes = 0;
  for (int i = 0; i < 1000; ++i) bytes += t.render(in, ContentFormat::kString).size();  // warm-up
  const int n = 100000;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) bytes += t.render(in, ContentFormat::kString).size();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("qwen3 template, 4 turns: %.0f renders/s on one core (%.2f us each, %zu bytes)\n", n / s, 1e6 * s / n,
              bytes);
  CHECK(n / s >= 20000);
}

}  // namespace
}  // namespace nvllm
