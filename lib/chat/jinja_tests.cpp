// jinja2's built-in tests (`x is defined`, `x is string`, ...), with Python's isinstance rules
// (a bool is a number; Undefined is iterable).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"

namespace nvllm::jinja {

namespace {

using TestFn = bool (*)(const Value&, Args&);

const Value& arg0(Args& a, const char* test) {
  if (a.pos.empty()) throw std::runtime_error(std::string("test '") + test + "' needs an argument");
  return a.pos[0];
}

bool t_defined(const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, Args&) { return v.is_undefined(); }
bool t_none(const Value& v, Args&) { return v.is_none(); }
bool t_string(const Value& v, Args&) { return v.is_string(); }
bool t_mapping(const Value& v, Args&) { return v.is_dict(); }
bool t_iterable(const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}
bool t_sequence(const Value& v, Args&) {  // has len() and [] : Undefined has both
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}
bool t_number(const Value& v, Args&) { return v.is_number(); }
bool t_integer(const Value& v, Args&) { return v.kind() == Kind::kInt; }
bool t_float(const Value& v, Args&) { return v.kind() == Kind::kFloat; }
bool t_boolean(const Value& v, Args&) { return v.kind() == Kind::kBool; }
bool t_true(const Value& v, Args&) { return v.kind() == Kind::kBool && v.as_bool(); }
bool t_false(const Value& v, Args&) { return v.kind() == Kind::kBool && !v.as_bool(); }
bool t_callable(const Value& v, Args&) { return v.kind() == Kind::kCallable || v.is_undefined(); }  // Undefined has __call__
bool t_eq(const Value& v, Args& a) { return compare("==", v, arg0(a, "eq")); }
bool t_ne(const Value& v, Args& a) { return compare("!=", v, arg0(a, "ne")); }
bool t_lt(const Value& v, Args& a) { return compare("<", v, arg0(a, "lt")); }
bool t_le(const Value& v, Args& a) { return compare("<=", v, arg0(a, "le")); }
bool t_gt(const Value& v, Args& a) { return compare(">", v, arg0(a, "gt")); }
bool t_ge(const Value& v, Args& a) { return compare(">=", v, arg0(a, "ge")); }
bool t_in(const Value& v, Args& a) { return contains(arg0(a, "in"), v); }
bool t_sameas(const Value& v, Args& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.kind() == Kind::kBool) return values_equal(v, o);
  return v.object() == o.object() && v.json() == o.json();
}
// odd/even/divisibleby are Python's `value % n == r`, so floats take part (1.5 is neither odd nor even).
bool mod_equals(const Value& v, const Value& n, int64_t r) { return compare("==", binary_op("%", v, n), Value(r)); }
bool t_odd(const Value& v, Args&) { return mod_equals(v, Value(int64_t{2}), 1); }
bool t_even(const Value& v, Args&) { return mod_equals(v, Value(int64_t{2}), 0); }
bool t_divisibleby(const Value& v, Args& a) { return mod_equals(v, arg0(a, "divisibleby"), 0); }
bool t_lower(const Value& v, Args&) { return text::all_cased(to_str(v), false); }  // str(value).islower()
bool t_upper(const Value& v, Args&) { return text::all_cased(to_str(v), true); }

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"string", t_string},
      {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_sequence}, {"number", t_number},
      {"integer", t_integer}, {"float", t_float}, {"boolean", t_boolean}, {"true", t_true}, {"false", t_false},
      {"callable", t_callable}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
      {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le}, {"gt", t_gt},
      {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in}, {"sameas", t_sameas},
      {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby}, {"lower", t_lower}, {"upper", t_upper},
  };
  return table;
}

}  // namespace

bool has_test(std::string_view name) { return tests().count(name) != 0; }

bool apply_test(Interpreter&, std::string_view name, const Value& v, Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw std::runtime_error("test '" + std::string(name) + "' is not supported");
  static const std::string_view kOneArg[] = {"eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
                                             "greaterthan", ">", "ge", ">=", "in", "sameas", "divisibleby"};
  size_t want = std::find(std::begin(kOneArg), std::end(kOneArg), name) != std::end(kOneArg) ? 1 : 0;
  if (args.pos.size() + args.kw.size() != want) {
    throw std::runtime_error("test '" + std::string(name) + "' takes " + std::to_string(want) + " argument(s), " +
                             std::to_string(args.pos.size() + args.kw.size()) + " given");
  }
  return it->second(v, args);
}

}  // namespace nvllm::jinja
