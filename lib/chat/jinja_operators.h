// Python's binary operators, comparisons and `in` over jinja values.
#pragma once

#include <cstdint>
#include <optional>
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
// Python integers do not overflow; ours are 64-bit: an integer result past them is this error,
// never a wrapped number.
[[noreturn]] void integer_overflow();
// int(d) of a float as Python truncates it: nullopt for NaN (Python's ValueError, which the int
// filter turns into its default), infinity raises Python's OverflowError message, and a value
// past int64 (a Python int we do not have) integer_overflow.
std::optional<int64_t> int_of_float(double d);

}  // namespace nvllm::jinja
