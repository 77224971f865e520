// jinja::Value, the one value type of the template interpreter: Python's None/bool/int/float/str/
// list/tuple/dict plus Jinja's Undefined, namespace, loop and callables. Request JSON is not
// copied: a value may borrow a node of the caller's JSON (which outlives the render), so
// `message.content` is a pointer step, not a copy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace nvllm::jinja {

// Insertion-ordered JSON, so tojson writes keys in the order the request gave them, as Python does.
using Json = nlohmann::ordered_json;

class Value;
struct Args;
class Interpreter;

using List = std::vector<Value>;
using DictItems = std::vector<std::pair<std::string, Value>>;
struct LoopState;

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, Args&)> fn;
};

enum class Kind : uint8_t {
  kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kNamespace, kLoop, kCallable
};

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool) { num_.b = b; }
  Value(int v) : Value(static_cast<int64_t>(v)) {}
  Value(int64_t v) : kind_(Kind::kInt) { num_.i = v; }
  Value(double v) : kind_(Kind::kFloat) { num_.f = v; }
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  // A str marked safe (markupsafe.Markup, from `safe` / `escape`): `+` escapes the plain side.
  static Value markup(std::string s);
  bool is_markup() const { return markup_; }
  static Value list(List items);
  static Value tuple(List items);
  static Value dict(DictItems items);
  static Value namespace_(DictItems items);
  static Value callable(std::string name, std::function<Value(Interpreter&, Args&)> fn);
  static Value loop(std::shared_ptr<LoopState> state);
  // Borrows `j` (must outlive every use of the value): strings, arrays and objects stay in place.
  static Value borrow(const Json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }

  bool as_bool() const { return num_.b; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (num_.b ? 1 : 0) : num_.i; }
  double as_float() const { return kind_ == Kind::kFloat ? num_.f : static_cast<double>(as_int()); }
  std::string_view str() const;            // kString only
  const std::string& undefined_hint() const;  // why it is undefined, for error messages

  // Sequences (list/tuple) and dicts, owned or borrowed.
  size_t size() const;                      // list/tuple/dict/string length in elements
  Value at(size_t i) const;                 // list/tuple element
  // Dict lookup; nullopt-like Undefined when absent.
  bool dict_find(std::string_view key, Value* out) const;
  void dict_for_each(const std::function<void(std::string_view, const Value&)>& f) const;
  DictItems& namespace_items() const;       // kNamespace, mutable
  LoopState& loop_state() const;
  const Callable& callable_fn() const;

  bool truthy() const;
  const Json* json() const { return json_; }
  const void* object() const { return obj_.get(); }  // identity, for `is sameas`

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;
  union { bool b; int64_t i; double f; } num_{};
  const Json* json_ = nullptr;      // borrowed string/array/object
  std::shared_ptr<void> obj_;       // owned std::string / List / DictItems / LoopState / Callable
};

// The bytes of strings and the list items one render may make or walk, counted where a string or
// list Value is made (every string and list a template builds passes there; the output buffer is
// bounded by check_length, the request's messages are borrowed JSON) and where a list is walked
// (charge_list_items: iterate, `in`, `==`), and the bytes of strings walked (charge_string_walk).
// Interpreter::render holds one on its stack for the calling thread; outside a render nothing is
// counted. Throws std::runtime_error past any limit.
class RenderBudget {
 public:
  RenderBudget(int64_t bytes, int64_t items, int64_t walk_bytes);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;
  struct Account {
    int64_t limit, left;
  };

 private:
  Account bytes_, items_, walk_;
  RenderBudget* previous_;
  friend void charge_string_bytes(size_t n);
  friend void charge_list_items(size_t n);
  friend void charge_string_walk(size_t n);
};
void charge_string_bytes(size_t n);
void charge_list_items(size_t n);
void charge_string_walk(size_t n);
// Throws std::runtime_error when the thread's stack is nearly full (core/stack_room.h): called
// by everything that recurses as deep as a value nests or calls nest (evaluation, printing,
// comparison, tojson), so a list nested a million deep or macros recursing through deep
// expressions end the render with an error, not the process.
void check_stack_room();

// Positional and keyword arguments of a call, filter or test.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument `name` at `index` (positional) or by keyword; `fallback` when neither.
  Value get(size_t index, std::string_view name, Value fallback = Value()) const;
};

// The state behind `loop`: the (filtered) items and where the iteration is.
struct LoopState {
  List items;
  size_t index0 = 0;
  int depth0 = 0;
  std::vector<Value> last_changed;  // loop.changed()'s memory
};

// Python's str(): what `{{ x }}` prints. Undefined prints "".
std::string to_str(const Value& v);
void append_str(std::string& out, const Value& v);
// Throws std::runtime_error once `out` is longer than kMaxStringBytes (jinja_builtins.h): every
// printing path checks as it goes, so a value whose parts are shared (`(x, x)` nested k deep has
// 2^k leaves) or a loop of literal text cannot grow the output without bound.
void check_length(const std::string& out);
// Python's repr(), used inside list/dict printing.
void append_repr(std::string& out, const Value& v);
std::string py_float_repr(double d);
// The Python type name, for error messages ("str", "int", "dict", ...).
std::string type_name(const Value& v);

bool values_equal(const Value& a, const Value& b);
// A hash that keys values_equal calls equal share, for the scalars `unique` keeps: numbers by
// their double (1, 1.0 and True alike), strings by their text, none and undefined by kind, the
// rest by identity. Lists and dicts (unhashable in Python) all hash alike.
size_t value_hash(const Value& v);
// Python's a < b for numbers, strings and sequences; throws std::runtime_error otherwise.
bool values_less(const Value& a, const Value& b);

// Python json.dumps(v, ensure_ascii, indent, separators, sort_keys).
struct DumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the indent unit (spaces, or the string given)
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const DumpOptions& opt);
// A JSON document as an owned value (used for values created from C++ JSON that may not outlive).
Value from_json_copy(const Json& j);

}  // namespace nvllm::jinja
