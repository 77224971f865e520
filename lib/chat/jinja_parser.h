// The Jinja parser: tokens -> Body, with jinja2's operator precedence. Constructs the engine
// does not implement (extends, include, unknown filters/tests, ...) are refused here, naming
// the template line, so nothing renders silently wrong.
#pragma once

#include <string>

#include "chat/jinja_ast.h"

namespace nvllm::jinja {

// A parsed template: its statements and the names its top-level scope owns (jinja_scopes.h).
struct Template {
  Body body;
  std::vector<std::string> undefined_names;
};

// Throws nvllm::Error "chat template NAME line N: ..." for a syntax error or an unsupported construct.
Template parse_template(const std::string& source, const std::string& name);

}  // namespace nvllm::jinja
