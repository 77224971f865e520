// Python's binary operators and `in` over jinja values, with Python's results and TypeErrors.
#include "chat/jinja_operators.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "chat/jinja_builtins.h"
#include "chat/jinja_text.h"

namespace nvllm::jinja {

[[noreturn]] void undefined_error(const Value& v) {
  const std::string& hint = v.undefined_hint();
  throw std::runtime_error(hint.empty() ? "value is undefined" : hint);
}

void integer_overflow() { throw std::runtime_error("integer result does not fit in 64 bits (not supported)"); }

std::optional<int64_t> int_of_float(double d) {
  if (std::isnan(d)) return std::nullopt;
  if (std::isinf(d)) throw std::runtime_error("cannot convert float infinity to integer");
  // 2^63 is exact in a double; every double below it in magnitude truncates into int64.
  if (d >= 0x1p63 || d < -0x1p63) integer_overflow();
  return static_cast<int64_t>(d);
}

namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw std::runtime_error("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) + "' and '" +
                           type_name(b) + "'");
}

// Python's // and % on int64 (b != 0). b == -1 is its own case: INT64_MIN / -1 traps on x86 (and
// INT64_MIN % -1 with it), and -INT64_MIN is past int64. % is C's remainder moved to b's sign, not
// a - q * b, whose product can pass int64 (INT64_MAX % -2: q * b = 2^63).
int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) {
    if (a == INT64_MIN) integer_overflow();
    return -a;
  }
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(const Value& seq, int64_t n) {
  // Compared by division: size * n can wrap past 2^64 (3 x 6,148,914,691,236,517,206 is 2).
  const size_t size = seq.is_string() ? seq.str().size() : seq.size();
  if (n <= 0 || size == 0) {  // nothing to copy, however many times: no loop of n empty appends
    if (seq.is_string()) return seq.is_markup() ? Value::markup("") : Value(std::string());
    return seq.kind() == Kind::kTuple ? Value::tuple({}) : Value::list({});
  }
  if (static_cast<uint64_t>(n) > kMaxStringBytes / size) {
    throw std::runtime_error("repetition result too large");
  }
  if (seq.is_string()) {
    std::string out;
    out.reserve(size * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
  }
  List items;
  items.reserve(size * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < seq.size(); ++k) items.push_back(seq.at(k));
  }
  return seq.kind() == Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

Value add(const Value& a, const Value& b) {
  if (a.is_string() && b.is_string() && (a.is_markup() || b.is_markup())) {
    std::string out = a.is_markup() ? std::string(a.str()) : text::html_escape(a.str());
    out += b.is_markup() ? std::string(b.str()) : text::html_escape(b.str());
    return Value::markup(std::move(out));
  }
  if (a.is_string() && b.is_string()) {
    std::string out;
    out.reserve(a.str().size() + b.str().size());
    out += a.str();
    out += b.str();
    return Value(std::move(out));
  }
  if (a.is_sequence() && b.is_sequence() && a.kind() == b.kind()) {
    List items;
    for (size_t i = 0; i < a.size(); ++i) items.push_back(a.at(i));
    for (size_t i = 0; i < b.size(); ++i) items.push_back(b.at(i));
    return a.kind() == Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (a.is_string()) {
    throw std::runtime_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
  }
  if (a.kind() == Kind::kList && b.kind() != Kind::kList) {
    throw std::runtime_error("can only concatenate list (not \"" + type_name(b) + "\") to list");
  }
  unsupported("+", a, b);
}

Value arith(std::string_view op, const Value& a, const Value& b) {
  bool ints = a.kind() != Kind::kFloat && b.kind() != Kind::kFloat;
  char c = op[0];
  if (op == "/") {
    if (b.as_float() == 0) throw std::runtime_error("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (b.as_float() == 0) throw std::runtime_error(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (ints) return Value(op == "//" ? floor_div(a.as_int(), b.as_int()) : floor_mod(a.as_int(), b.as_int()));
    double q = std::floor(a.as_float() / b.as_float());
    return op == "//" ? Value(q) : Value(a.as_float() - q * b.as_float());
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t x = a.as_int(), e = b.as_int(), r = 1;
      if (x == 0 || x == 1) return Value(e == 0 ? int64_t{1} : x);
      if (x == -1) return Value(e % 2 ? int64_t{-1} : int64_t{1});
      for (int64_t i = 0; i < e; ++i) {  // |x| >= 2: overflows within 63 steps
        if (__builtin_mul_overflow(r, x, &r)) integer_overflow();
      }
      return Value(r);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  if (ints) {
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    bool over = c == '+' ? __builtin_add_overflow(x, y, &r)
                : c == '-' ? __builtin_sub_overflow(x, y, &r) : __builtin_mul_overflow(x, y, &r);
    if (over) integer_overflow();
    return Value(r);
  }
  double x = a.as_float(), y = b.as_float();
  return Value(c == '+' ? x + y : c == '-' ? x - y : x * y);
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out;
    append_str(out, a);
    append_str(out, b);
    return Value(std::move(out));
  }
  if (op == "%" && a.is_string()) return Value(py_printf(a.str(), b));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) return arith(op, a, b);
  if (op == "+") return add(a, b);
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && (b.kind() == Kind::kInt || b.kind() == Kind::kBool)) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_sequence()) && (a.kind() == Kind::kInt || a.kind() == Kind::kBool)) return repeat(b, a.as_int());
  }
  unsupported(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;  // jinja's Undefined iterates as empty
    case Kind::kString:
      if (!item.is_string()) {
        throw std::runtime_error("'in <string>' requires string as left operand, not " + type_name(item));
      }
      charge_string_walk(container.str().size());
      return container.str().find(item.str()) != std::string_view::npos;
    case Kind::kList: case Kind::kTuple:
      charge_list_items(container.size());  // a walk, as iterate's copy
      for (size_t i = 0; i < container.size(); ++i) {
        if (values_equal(container.at(i), item)) return true;
      }
      return false;
    case Kind::kDict: {
      if (item.is_sequence() || item.is_dict()) {
        throw std::runtime_error("unhashable type: '" + type_name(item) + "'");
      }
      if (!item.is_string()) return false;
      Value ignored;
      return container.dict_find(item.str(), &ignored);
    }
    default:
      throw std::runtime_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

bool compare(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "<") return values_less(a, b);
  if (op == ">") return values_less(b, a);
  if (op == "<=") return !values_less(b, a);
  return !values_less(a, b);  // >=
}

}  // namespace nvllm::jinja
