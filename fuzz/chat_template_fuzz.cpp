// libFuzzer target: the chat template engine (lib/chat). The input is a template source,
// optionally followed by "\n---\n" and a JSON list of messages (a fixed two-turn conversation
// when absent or not JSON). Each template is parsed, its content format detected, and rendered
// in both content formats. Anything may be refused with nvllm::Error (ChatTemplateError
// included); nothing may crash or hang, and no error may be the engine's own (kEngineBug: a
// library exception the renderer caught for the request's sake is a crash here). Built only
// where lib/chat/chat_template.cpp exists (cmake/hardening.cmake).
#include <string_view>

#include "chat/chat_template.h"
#include "core/error.h"
#include "fuzz/fuzz_util.h"

namespace {

using Json = decltype(nvllm::ChatInputs::messages);  // the engine's JSON type, ordered or not

Json messages_from(std::string_view text) {
  Json m = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_array()) return m;
  return Json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>"}])");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [source, messages] = nvllm::fuzz::split_at(data, size, "\n---\n");
  try {
    const nvllm::ChatTemplate t(std::string(source), "fuzz.jinja", "<s>", "</s>");
    nvllm::ChatInputs inputs;
    inputs.messages = messages_from(messages);
    inputs.add_generation_prompt = size % 2 == 0;
    (void)t.detected_content_format();
    for (const auto format : {nvllm::ContentFormat::kString, nvllm::ContentFormat::kOpenai}) {
      try {
        (void)t.render(inputs, format);
      } catch (const nvllm::Error& e) {
        if (std::string_view(e.what()).find(nvllm::kEngineBug) != std::string_view::npos) __builtin_trap();
      }
    }
  } catch (const nvllm::Error&) {
  }
  return 0;
}
