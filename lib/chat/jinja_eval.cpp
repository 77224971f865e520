// Expression evaluation: names, attribute/item access with jinja2's getattr/getitem rules,
// calls, filters, tests and slicing.
#include <stdexcept>

#include "chat/jinja_builtins.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"
#include "core/error.h"

namespace nvllm::jinja {

namespace {

// jinja2's object_type_repr, for "'dict object' has no attribute 'x'".
std::string object_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + static_cast<int64_t>(n) : i; }

}  // namespace

Value Interpreter::eval(const Node& n) {
  check_stack_room();
  switch (n.kind) {
    case NodeKind::kConst: return n.value;
    case NodeKind::kName: {
      Value v;
      if (lookup(n.name, &v)) return v;
      return Value::undefined("'" + n.name + "' is undefined");
    }
    case NodeKind::kGetAttr: {
      Value obj = eval(*n.a);
      line_ = n.line;
      return getattr(obj, n.name);
    }
    case NodeKind::kGetItem: {
      Value obj = eval(*n.a);
      if (n.b->kind == NodeKind::kSlice) return eval_slice(obj, *n.b);
      Value key = eval(*n.b);
      line_ = n.line;
      return getitem(obj, key);
    }
    case NodeKind::kCall: return eval_call(n);
    case NodeKind::kFilter: return eval_filter(n);
    case NodeKind::kTest: {
      Value v = eval(*n.a);
      Args args = eval_args(n);
      line_ = n.line;
      return Value(apply_test(*this, n.name, v, args));
    }
    case NodeKind::kNot: return Value(!eval(*n.a).truthy());
    case NodeKind::kNeg: case NodeKind::kPos: return eval_unary(n);
    case NodeKind::kAnd: {  // Python's and/or return an operand, not a bool
      Value a = eval(*n.a);
      return a.truthy() ? eval(*n.b) : a;
    }
    case NodeKind::kOr: {
      Value a = eval(*n.a);
      return a.truthy() ? a : eval(*n.b);
    }
    case NodeKind::kBinary: {
      Value a = eval(*n.a);
      Value b = eval(*n.b);
      line_ = n.line;
      return binary_op(n.name, a, b);
    }
    case NodeKind::kCompare: return eval_compare(n);
    case NodeKind::kCondExpr:
      if (eval(*n.a).truthy()) return eval(*n.b);
      return n.c ? eval(*n.c) : Value::undefined("the conditional expression has no else branch");
    case NodeKind::kList: case NodeKind::kTuple: case NodeKind::kDict: return eval_literal(n);
    default: throw std::runtime_error("internal: statement node in expression position");
  }
}

Value Interpreter::eval_unary(const Node& n) {
  Value v = eval(*n.a);
  line_ = n.line;
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_number()) throw std::runtime_error("bad operand type for unary -: '" + type_name(v) + "'");
  if (n.kind == NodeKind::kPos) return v.kind() == Kind::kBool ? Value(v.as_int()) : v;
  if (v.kind() == Kind::kFloat) return Value(-v.as_float());
  if (v.as_int() == INT64_MIN) integer_overflow();  // -(-2**63) is past int64
  return Value(-v.as_int());
}

Value Interpreter::eval_literal(const Node& n) {
  if (n.kind != NodeKind::kDict) {
    List items;
    items.reserve(n.items.size());
    for (const auto& e : n.items) items.push_back(eval(*e));
    return n.kind == NodeKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  DictItems items;
  for (size_t i = 0; i + 1 < n.items.size(); i += 2) {
    Value k = eval(*n.items[i]);
    if (!k.is_string()) throw std::runtime_error("dict keys other than strings are not supported");
    Value v = eval(*n.items[i + 1]);
    bool replaced = false;
    for (auto& [ek, ev] : items) {
      if (ek == k.str()) ev = v, replaced = true;
    }
    if (!replaced) items.emplace_back(std::string(k.str()), std::move(v));
  }
  return Value::dict(std::move(items));
}

Value Interpreter::eval_compare(const Node& n) {
  Value left = eval(*n.items[0]);
  for (size_t i = 0; i < n.ops.size(); ++i) {
    Value right = eval(*n.items[i + 1]);
    line_ = n.line;
    if (!compare(n.ops[i], left, right)) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Args Interpreter::eval_args(const Node& n) {
  Args args;
  args.pos.reserve(n.items.size());
  for (const auto& e : n.items) args.pos.push_back(eval(*e));
  for (const auto& [k, e] : n.kwargs) args.kw.emplace_back(k, eval(*e));
  return args;
}

Value Interpreter::eval_call(const Node& n) {
  if (n.a->kind == NodeKind::kGetAttr) {  // obj.method(...): Python methods without a bound object
    Value obj = eval(*n.a->a);
    const std::string& name = n.a->name;
    if (has_method(obj, name)) {
      Args args = eval_args(n);
      line_ = n.line;
      return call_method(*this, obj, name, args);
    }
    line_ = n.line;
    Value fn = getattr(obj, name);
    Args args = eval_args(n);
    line_ = n.line;
    return call(fn, args);
  }
  Value fn = eval(*n.a);
  Args args = eval_args(n);
  line_ = n.line;
  return call(fn, args);
}

Value Interpreter::call(const Value& fn, Args& args) {
  if (fn.kind() == Kind::kCallable) return fn.callable_fn().fn(*this, args);
  if (fn.is_undefined()) undefined_error(fn);
  throw std::runtime_error("'" + type_name(fn) + "' object is not callable");
}

Value Interpreter::eval_filter(const Node& n) {
  Value v = n.a ? eval(*n.a) : filter_input_;
  Args args = eval_args(n);
  line_ = n.line;
  return apply_filter(*this, n.name, v, args);
}

Value Interpreter::getattr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Kind::kUndefined: undefined_error(obj);
    case Kind::kDict: {
      if (has_method(obj, name)) break;  // Python attributes of a dict are its methods
      Value v;
      if (obj.dict_find(name, &v)) return v;
      break;
    }
    case Kind::kNamespace:
      for (const auto& [k, v] : obj.namespace_items()) {
        if (k == name) return v;
      }
      break;
    case Kind::kLoop: return loop_attr(obj, name);
    default: break;
  }
  if (has_method(obj, name)) {
    std::string method(name);
    Value self = obj;
    return Value::callable(method, [self, method](Interpreter& in, Args& args) {
      return call_method(in, self, method, args);
    });
  }
  return Value::undefined(str_cat("'", object_repr(obj), "' has no attribute '", name, "'"));
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined: undefined_error(obj);
    case Kind::kList: case Kind::kTuple: case Kind::kString:
      if (key.kind() == Kind::kInt || key.kind() == Kind::kBool) {
        size_t n = obj.kind() == Kind::kString ? text::cp_count(obj.str()) : obj.size();
        int64_t i = norm_index(key.as_int(), n);
        if (i >= 0 && static_cast<size_t>(i) < n) {
          if (obj.kind() != Kind::kString) return obj.at(static_cast<size_t>(i));
          auto cps = text::to_cps(obj.str());
          std::string ch;
          append_utf8(ch, cps[static_cast<size_t>(i)]);
          return Value(std::move(ch));
        }
        return Value::undefined(str_cat("'", object_repr(obj), "' has no element ", key.as_int()));
      }
      break;
    case Kind::kDict: {
      if (key.is_string()) {
        Value v;
        if (obj.dict_find(key.str(), &v)) return v;
      }
      break;
    }
    default: break;
  }
  if (key.is_string()) return getattr(obj, key.str());  // jinja2: obj[key] falls back to getattr
  std::string k;
  append_repr(k, key);
  return Value::undefined(str_cat("'", object_repr(obj), "' has no element ", k));
}

Value Interpreter::eval_slice(const Value& obj, const Node& s) {
  auto bound = [&](const NodePtr& e, bool* given) -> int64_t {
    *given = false;
    if (!e) return 0;
    Value v = eval(*e);
    if (v.is_none()) return 0;
    if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
      throw std::runtime_error("slice indices must be integers or None");
    }
    *given = true;
    return v.as_int();
  };
  bool has_start, has_stop, has_step;
  int64_t start = bound(s.a, &has_start), stop = bound(s.b, &has_stop), step = bound(s.c, &has_step);
  if (!has_step) step = 1;
  if (step == 0) throw std::runtime_error("slice step cannot be zero");
  if (obj.is_undefined()) undefined_error(obj);
  bool is_str = obj.is_string();
  if (!is_str && !obj.is_sequence()) throw std::runtime_error("'" + type_name(obj) + "' object is not subscriptable");
  std::vector<uint32_t> cps;
  if (is_str) cps = text::to_cps(obj.str());
  auto n = static_cast<int64_t>(is_str ? cps.size() : obj.size());
  // Python's slice.indices()
  auto clamp = [&](int64_t v, bool given, int64_t dflt) {
    if (!given) return dflt;
    if (v < 0) v += n;
    if (step > 0) return v < 0 ? 0 : (v > n ? n : v);
    return v < 0 ? -1 : (v >= n ? n - 1 : v);
  };
  start = clamp(start, has_start, step > 0 ? 0 : n - 1);
  stop = clamp(stop, has_stop, step > 0 ? n : -1);
  std::string out;
  List items;
  // i in 128 bits: i + step can pass int64 (a step of 2**62 * 2 - 1 from index 2).
  for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (is_str) append_utf8(out, cps[static_cast<size_t>(i)]);
    else items.push_back(obj.at(static_cast<size_t>(i)));
  }
  if (is_str) return Value(std::move(out));
  return obj.kind() == Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

Value Interpreter::loop_attr(const Value& loop, std::string_view name) {
  LoopState& st = loop.loop_state();
  auto n = static_cast<int64_t>(st.items.size());
  auto i = static_cast<int64_t>(st.index0);
  if (name == "index0") return Value(i);
  if (name == "index") return Value(i + 1);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(int64_t{1});
  if (name == "depth0") return Value(int64_t{0});
  if (name == "previtem") return i > 0 ? st.items[st.index0 - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? st.items[st.index0 + 1] : Value::undefined("there is no next item");
  if (name == "cycle") {
    Value self = loop;
    return Value::callable("cycle", [self](Interpreter&, Args& args) -> Value {
      if (args.pos.empty()) throw std::runtime_error("no items for cycling given");
      return args.pos[self.loop_state().index0 % args.pos.size()];
    });
  }
  if (name == "changed") {
    Value self = loop;
    return Value::callable("changed", [self](Interpreter&, Args& args) -> Value {
      LoopState& s = self.loop_state();
      bool same = s.last_changed.size() == args.pos.size();
      for (size_t k = 0; same && k < args.pos.size(); ++k) same = values_equal(s.last_changed[k], args.pos[k]);
      if (same && !s.last_changed.empty()) return Value(false);
      s.last_changed = args.pos;
      return Value(true);
    });
  }
  return Value::undefined("'LoopContext object' has no attribute '" + std::string(name) + "'");
}

}  // namespace nvllm::jinja
