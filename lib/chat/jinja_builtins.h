// The built-in filters, tests, Python methods (str/dict/list) and globals the chat templates use,
// with jinja2's (and Python's) semantics. Errors are std::runtime_error with Python's message;
// the interpreter adds the template line.
#pragma once

#include <string_view>

#include "chat/jinja_value.h"

namespace nvllm::jinja {

class Interpreter;

// The longest string one operation may make: printf widths and precisions, repetition
// (`'x' * n`), tojson's indent. Python has no such limit; a chat prompt is bounded by a model's
// context (a million tokens is 4-8 MB of text), so 16 MiB refuses only what no template means
// and keeps a hostile one from asking for gigabytes.
inline constexpr size_t kMaxStringBytes = size_t{1} << 24;
// The most loop iterations and macro calls one render may run. Nested loops and macros that call
// themselves twice grow exponentially in a few lines; real chat templates run a few per message
// and content part (thousands at most).
inline constexpr int64_t kMaxRenderSteps = 1'000'000;
// The most bytes of strings one render may make (RenderBudget): 64 strings of the 16 MiB limit.
// With the step limit alone, a loop could make a 16 MiB string a million times.
inline constexpr int64_t kMaxRenderStringBytes = int64_t{1} << 30;
// The most list and tuple items one render may make or walk (RenderBudget), 16 M: about one
// repetition at the 16 MiB limit (`[0] * 16777215`, 512 MiB of values). Without it a few lines
// could ask for gigabytes (`[[0] * n] * n | sum(start=[])` copies n^2 items) or hours (`x in
// big` a million times: the step limit bounds the loop, not what each turn walks). Walks are
// iteration (for, filters: iterate copies the items), `in` and `==` on lists; real templates
// make and walk thousands (a loop over the messages walks each once).
inline constexpr int64_t kMaxRenderListItems = int64_t{1} << 24;
// The most bytes of strings one render may walk without making anything (RenderBudget), 8 GiB:
// `in`, `==` and `<` on strings, their length in code points (Value::size) and hash. Uncounted,
// `'b' in s` over a 16 MiB s in a loop of 100,000 turns (1.6 TB) ran for minutes; 8 GiB takes a
// second or two. Real templates walk their prompt a few times; even a 4 MB conversation searched
// once for each of 1,000 messages walks 4 GB.
inline constexpr int64_t kMaxRenderWalkBytes = int64_t{1} << 33;

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(Interpreter& in, std::string_view name, const Value& v, Args& args);
bool apply_test(Interpreter& in, std::string_view name, const Value& v, Args& args);

// Python's str/dict/list method `name` on `obj`; false when `obj`'s type has no such method.
bool has_method(const Value& obj, std::string_view name);
Value call_method(Interpreter& in, const Value& obj, std::string_view name, Args& args);

// raise_exception, strftime_now, namespace, range, dict, as transformers' environment has them.
void install_globals(Interpreter& in);

// Python's `fmt % args` (printf-style); `args` a tuple for several values.
std::string py_printf(std::string_view fmt, const Value& args);

// Python's iter(v) materialised: list items, dict keys, string characters; Undefined is empty.
List iterate(const Value& v);

}  // namespace nvllm::jinja
