#include "chat/jinja_value.h"

#include <stdexcept>
#include <string>

#include "chat/jinja_text.h"
#include "core/flat_free.h"
#include "core/stack_room.h"

namespace nvllm::jinja {

namespace {

struct UndefinedInfo {
  std::string hint;
};

const std::string kEmpty;

// Lists and dicts nest as deep as a template makes them (`{% set ns.x = [ns.x] %}` a million
// times): their deleter frees them without recursion (core/flat_free.h).
void take_items(List& items, std::vector<Value>& to) {
  for (Value& v : items) to.push_back(std::move(v));
}
void take_items(DictItems& items, std::vector<Value>& to) {
  for (auto& kv : items) to.push_back(std::move(kv.second));
}

template <typename Items>
struct FlatFree {
  void operator()(Items* p) const {
    free_children_flat<Value>([p](std::vector<Value>& to) { take_items(*p, to); });
    delete p;
  }
};

}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.obj_ = std::make_shared<UndefinedInfo>(UndefinedInfo{std::move(hint)});
  return v;
}

const std::string& Value::undefined_hint() const {
  return obj_ && kind_ == Kind::kUndefined ? static_cast<UndefinedInfo*>(obj_.get())->hint : kEmpty;
}

namespace {
thread_local RenderBudget* t_budget = nullptr;

// Takes n from one account of the current render's budget; true when that overdraws it.
bool overdrawn(RenderBudget::Account& a, size_t n) {
  a.left -= static_cast<int64_t>(n);
  return a.left < 0;
}

std::string byte_count(int64_t n) {  // "1024 MiB", or "1000 bytes"
  return n >= (int64_t{1} << 20) ? std::to_string(n >> 20) + " MiB" : std::to_string(n) + " bytes";
}
}  // namespace

RenderBudget::RenderBudget(int64_t bytes, int64_t items, int64_t walk_bytes)
    : bytes_{bytes, bytes}, items_{items, items}, walk_{walk_bytes, walk_bytes}, previous_(t_budget) {
  t_budget = this;
}
RenderBudget::~RenderBudget() { t_budget = previous_; }

void charge_string_bytes(size_t n) {
  RenderBudget* b = t_budget;
  if (b != nullptr && overdrawn(b->bytes_, n)) {
    throw std::runtime_error("more than " + byte_count(b->bytes_.limit) +
                             " of strings made in one render (nvllm's limit)");
  }
}

void charge_string_walk(size_t n) {
  RenderBudget* b = t_budget;
  if (b != nullptr && overdrawn(b->walk_, n)) {
    throw std::runtime_error("more than " + byte_count(b->walk_.limit) +
                             " of strings walked (in, ==, <, length) in one render (nvllm's limit)");
  }
}

void check_stack_room() {
  if (stack_nearly_full()) {
    throw std::runtime_error("values or calls nested too deeply (the thread's stack is nearly full)");
  }
}

void charge_list_items(size_t n) {
  RenderBudget* b = t_budget;
  if (b != nullptr && overdrawn(b->items_, n)) {
    throw std::runtime_error("more than " + std::to_string(b->items_.limit) +
                             " list items made or walked in one render (nvllm's limit)");
  }
}

Value::Value(std::string s) : kind_(Kind::kString) {
  charge_string_bytes(s.size());
  obj_ = std::make_shared<std::string>(std::move(s));
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::list(List items) {
  charge_list_items(items.size());
  Value v(Kind::kList);
  v.obj_ = std::shared_ptr<List>(new List(std::move(items)), FlatFree<List>());
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(DictItems items) {
  Value v(Kind::kDict);
  v.obj_ = std::shared_ptr<DictItems>(new DictItems(std::move(items)), FlatFree<DictItems>());
  return v;
}

Value Value::namespace_(DictItems items) {
  Value v = dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::callable(std::string name, std::function<Value(Interpreter&, Args&)> fn) {
  Value v(Kind::kCallable);
  v.obj_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::loop(std::shared_ptr<LoopState> state) {
  Value v(Kind::kLoop);
  v.obj_ = std::move(state);
  return v;
}

Value Value::borrow(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return none();
    case Json::value_t::boolean: return Value(j.get<bool>());
    case Json::value_t::number_integer: return Value(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(u)) : Value(static_cast<double>(u));
    }
    case Json::value_t::number_float: return Value(j.get<double>());
    case Json::value_t::string: { Value v(Kind::kString); v.json_ = &j; return v; }
    case Json::value_t::array: { Value v(Kind::kList); v.json_ = &j; return v; }
    case Json::value_t::object: { Value v(Kind::kDict); v.json_ = &j; return v; }
    default: return none();  // binary / discarded: not produced by JSON parsing
  }
}

Value from_json_copy(const Json& j) {
  switch (j.type()) {
    case Json::value_t::string: return Value(j.get<std::string>());
    case Json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(from_json_copy(e));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      DictItems items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, from_json_copy(e));
      return Value::dict(std::move(items));
    }
    default: return Value::borrow(j);
  }
}

std::string_view Value::str() const {
  if (json_) return json_->get_ref<const std::string&>();
  return *static_cast<const std::string*>(obj_.get());
}

size_t Value::size() const {
  switch (kind_) {
    case Kind::kString:
      charge_string_walk(str().size());
      return text::cp_count(str());
    case Kind::kList: case Kind::kTuple:
      return json_ ? json_->size() : static_cast<const List*>(obj_.get())->size();
    case Kind::kDict: case Kind::kNamespace:
      return json_ ? json_->size() : static_cast<const DictItems*>(obj_.get())->size();
    default: return 0;
  }
}

Value Value::at(size_t i) const {
  if (json_) return borrow((*json_)[i]);
  return (*static_cast<const List*>(obj_.get()))[i];
}

bool Value::dict_find(std::string_view key, Value* out) const {
  if (json_) {
    for (auto it = json_->begin(); it != json_->end(); ++it) {
      if (it.key() == key) {
        *out = borrow(it.value());
        return true;
      }
    }
    return false;
  }
  for (const auto& [k, v] : *static_cast<const DictItems*>(obj_.get())) {
    if (k == key) {
      *out = v;
      return true;
    }
  }
  return false;
}

void Value::dict_for_each(const std::function<void(std::string_view, const Value&)>& f) const {
  if (json_) {
    for (auto it = json_->begin(); it != json_->end(); ++it) f(it.key(), borrow(it.value()));
    return;
  }
  for (const auto& [k, v] : *static_cast<const DictItems*>(obj_.get())) f(k, v);
}

DictItems& Value::namespace_items() const { return *static_cast<DictItems*>(obj_.get()); }
LoopState& Value::loop_state() const { return *static_cast<LoopState*>(obj_.get()); }
const Callable& Value::callable_fn() const { return *static_cast<const Callable*>(obj_.get()); }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return num_.b;
    case Kind::kInt: return num_.i != 0;
    case Kind::kFloat: return num_.f != 0.0;
    case Kind::kString: return !str().empty();
    case Kind::kList: case Kind::kTuple: case Kind::kDict: return size() != 0;
    default: return true;
  }
}

Value Args::get(size_t index, std::string_view name, Value fallback) const {
  if (index < pos.size()) return pos[index];
  for (const auto& [k, v] : kw) {
    if (k == name) return v;
  }
  return fallback;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kLoop: return "LoopContext";
    case Kind::kCallable: return "function";
  }
  return "object";
}

}  // namespace nvllm::jinja
