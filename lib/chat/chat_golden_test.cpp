// The chat templates rendered against transformers' own rendering: testdata/chat/goldens/*.json,
// made by scripts/chat_goldens.py on the GPU machine (apply_chat_template over
// testdata/chat/conversations.json). Equal byte for byte, or raising where transformers raised.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace nvllm {
namespace {

namespace fs = std::filesystem;
using json = ChatJson;  // ordered: tools and messages reach the template in their file order

const fs::path kChat = fs::path(NVLLM_TESTDATA) / "chat";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "cannot open ", path.string());
  return json::parse(in);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot open ", path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The template a golden file names: a file under testdata/chat/, or a tokenizer folder's
// tokenizer_config.json ("tokenizer_config:<folder>").
std::string template_source(const json& golden) {
  const std::string source = golden.at("template");
  const std::string kConfig = "tokenizer_config:";
  if (source.starts_with(kConfig)) {
    const fs::path config = fs::path(NVLLM_TESTDATA) / "tokenizers" / source.substr(kConfig.size()) /
                            "tokenizer_config.json";
    return read_json(config).at("chat_template").get<std::string>();
  }
  return read_text(kChat / source);
}

ChatInputs inputs_of(const json& c) {
  ChatInputs in;
  in.messages = c.at("messages");
  if (c.contains("tools")) in.tools = c["tools"];
  if (c.contains("documents")) in.documents = c["documents"];
  in.add_generation_prompt = c.value("add_generation_prompt", true);
  in.continue_final_message = c.value("continue_final_message", false);
  if (c.contains("kwargs")) in.kwargs = c["kwargs"];
  return in;
}

std::string token_or_empty(const json& v) { return v.is_string() ? v.get<std::string>() : std::string(); }

TEST_CASE("chat templates render as transformers' apply_chat_template does (goldens)") {
  const json conversations = read_json(kChat / "conversations.json").at("cases");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kChat / "goldens")) {
    const json golden = read_json(entry.path());
    const std::string name = entry.path().stem().string();
    ++files;
    const ChatTemplate tmpl(template_source(golden), name, token_or_empty(golden["bos_token"]),
                            token_or_empty(golden["eos_token"]));
    const ContentFormat expected_format =
        golden.at("content_format") == "openai" ? ContentFormat::kOpenai : ContentFormat::kString;
    CHECK_MESSAGE(tmpl.detected_content_format() == expected_format, name);
    const json& cases = golden.at("cases");
    REQUIRE(cases.size() == conversations.size());
    int raised = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const json& want = cases[i];
      REQUIRE(want.at("name") == conversations[i].at("name"));
      INFO(name, ": case ", want["name"].get<std::string>());
      const ChatInputs in = inputs_of(conversations[i]);
      if (want.contains("error")) {
        ++raised;
        CHECK_THROWS_AS(tmpl.render(in, expected_format), Error);
      } else {
        std::string got;
        CHECK_NOTHROW(got = tmpl.render(in, expected_format));
        CHECK(got == want.at("text").get<std::string>());
      }
    }
    // A template that never raised would make the error half of this test vacuous.
    CHECK_MESSAGE(raised >= 1, name);
  }
  CHECK(files == 6);
}

// The raise_exception message reaches the caller as the template wrote it.
TEST_CASE("chat goldens: raise_exception messages are the template's own") {
  const json golden = read_json(kChat / "goldens" / "mistral.json");
  const json conversations = read_json(kChat / "conversations.json").at("cases");
  const ChatTemplate tmpl(template_source(golden), "mistral", "<s>", "</s>");
  for (size_t i = 0; i < conversations.size(); ++i) {
    const json& want = golden["cases"][i];
    if (!want.contains("error") || want.value("error_type", "") != "TemplateError") continue;
    INFO("case ", want["name"].get<std::string>());
    try {
      tmpl.render(inputs_of(conversations[i]), ContentFormat::kString);
      FAIL("expected the template to raise");
    } catch (const ChatTemplateError& e) {
      CHECK(std::string(e.what()).find(want["error"].get<std::string>()) != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace nvllm
