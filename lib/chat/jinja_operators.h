// Python's binary operators, comparisons and `in` over jinja values.
#pragma once

#include <string_view>

#include "chat/jinja_value.h"

namespace nvllm::jinja {

// + - * / // % ** and ~ (string concatenation of str() of both sides).
Value binary_op(std::string_view op, const Value& a, const Value& b);
// == != < <= > >= in notin
bool compare(std::string_view op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// jinja's UndefinedError for using `v` (its hint says which name or attribute was missing).
[[noreturn]] void undefined_error(const Value& v);

}  // namespace nvllm::jinja
