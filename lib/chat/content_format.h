// Which content form a parsed template expects (vLLM's --chat-template-content-format auto).
#pragma once

#include "chat/chat_template.h"
#include "chat/jinja_ast.h"

namespace nvllm::jinja {

ContentFormat detect_content_format(const Body& root);

}  // namespace nvllm::jinja
