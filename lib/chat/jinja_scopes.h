// jinja2 decides at compile time which names a scope owns: a name whose first mention in a scope
// (the template, a for body, a macro, ...) is an unconditional `set` becomes that scope's local,
// undefined until the set runs -- even for reads from nested loops or macros, and even when the
// caller passed a variable of that name. This pass reproduces that analysis (jinja2's
// idtracking) so the interpreter can bind those names as undefined when the scope starts.
#pragma once

#include <string>
#include <vector>

#include "chat/jinja_ast.h"

namespace nvllm::jinja {

// Annotates the nested scopes' nodes (undefined_names) and returns the template scope's names.
std::vector<std::string> analyze_scopes(Body& root);

}  // namespace nvllm::jinja
