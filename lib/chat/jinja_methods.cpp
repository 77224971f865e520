// Python's str/dict/list methods as the sandbox allows them (methods that modify a list or dict
// raise, as in transformers' ImmutableSandboxedEnvironment), and the template globals.
#include <algorithm>
#include <charconv>
#include <ctime>
#include <stdexcept>

#include "chat/chat_template.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_text.h"

namespace nvllm::jinja {

namespace {

constexpr std::string_view kStrMethods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "replace",
    "format", "title", "capitalize", "count", "find", "rfind", "join", "isdigit", "isalpha", "isalnum",
    "isspace", "isupper", "islower", "splitlines"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get", "copy"};
constexpr std::string_view kDictUnsafe[] = {"pop", "popitem", "setdefault", "update", "clear"};
constexpr std::string_view kListMethods[] = {"index", "count", "copy"};
constexpr std::string_view kListUnsafe[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};

template <size_t N>
bool in(const std::string_view (&names)[N], std::string_view name) {
  for (auto n : names) {
    if (n == name) return true;
  }
  return false;
}

std::optional<std::string_view> opt_str(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) throw std::runtime_error("expected a str argument, got " + type_name(v));
  return v.str();
}

bool affix_match(std::string_view s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw std::runtime_error(std::string(prefix ? "startswith" : "endswith") +
                                                 " first arg must be str or a tuple of str, not " + type_name(a));
    std::string_view x = a.str();
    return x.size() <= s.size() && (prefix ? s.substr(0, x.size()) == x : s.substr(s.size() - x.size()) == x);
  };
  if (affix.is_sequence()) {
    for (size_t i = 0; i < affix.size(); ++i) {
      if (one(affix.at(i))) return true;
    }
    return false;
  }
  return one(affix);
}

// str.format with {} / {0} / {name} fields and {{ }} escapes; format specs are refused.
std::string py_format(std::string_view fmt, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) throw std::runtime_error("Single '{' encountered in format string");
    std::string_view field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string_view::npos) {
      throw std::runtime_error("format specs in str.format are not supported");
    }
    Value v;
    if (field.empty()) {
      if (auto_index >= args.pos.size()) throw std::runtime_error("Replacement index out of range for positional args");
      v = args.pos[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char c) { return isdigit(static_cast<unsigned char>(c)); })) {
      size_t k = 0;
      if (std::from_chars(field.data(), field.data() + field.size(), k).ec != std::errc())
        throw std::runtime_error("Too many decimal digits in format string");  // Python's words
      if (k >= args.pos.size()) throw std::runtime_error("Replacement index out of range for positional args");
      v = args.pos[k];
    } else {  // a name, even one that starts with a digit ('{0abc}': Python's KeyError too)
      v = args.get(SIZE_MAX, field, Value::undefined());  // keyword only
      if (v.is_undefined()) throw std::runtime_error("KeyError: '" + std::string(field) + "'");
    }
    append_str(out, v);
    i = close;
  }
  return out;
}

Value str_list(std::vector<std::string> parts) {
  List items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

bool all_cps(std::string_view s, bool (*pred)(uint32_t)) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    if (!pred(text::next_cp(s, i))) return false;
  }
  return true;
}

Value str_method(const Value& obj, std::string_view name, Args& a) {
  std::string_view s = obj.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto chars = opt_str(a.get(0, "chars", Value::none()));
    return Value(std::string(text::strip(s, chars, name != "rstrip", name != "lstrip")));
  }
  if (name == "split" || name == "rsplit") {
    auto sep = opt_str(a.get(0, "sep", Value::none()));
    if (sep && sep->empty()) throw std::runtime_error("empty separator");
    return str_list(text::split(s, sep, a.get(1, "maxsplit", Value(int64_t{-1})).as_int(), name == "rsplit"));
  }
  if (name == "startswith" || name == "endswith") {
    if (a.pos.size() != 1) throw std::runtime_error(std::string(name) + " with start/end arguments is not supported");
    return Value(affix_match(s, a.pos[0], name == "startswith"));
  }
  if (name == "upper") return Value(text::upper(s));
  if (name == "lower") return Value(text::lower(s));
  if (name == "title") return Value(text::py_title(s));
  if (name == "capitalize") return Value(text::capitalize(s));
  if (name == "replace") {
    Value old = a.get(0, "old"), repl = a.get(1, "new");
    if (!old.is_string() || !repl.is_string()) throw std::runtime_error("replace arguments must be str");
    return Value(text::replace(s, old.str(), repl.str(), a.get(2, "count", Value(int64_t{-1})).as_int()));
  }
  if (name == "format") return Value(py_format(s, a));
  if (name == "count" || name == "find" || name == "rfind") {
    if (a.pos.size() > 1) throw std::runtime_error(std::string(name) + " with start/end arguments is not supported");
    auto sub = opt_str(a.get(0, "sub"));
    if (!sub) throw std::runtime_error(std::string(name) + " needs a str argument");
    if (name == "count") return Value(text::count(s, *sub));
    return Value(text::find(s, *sub, name == "rfind"));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const auto& item : iterate(a.get(0, "iterable"))) {
      if (!item.is_string()) throw std::runtime_error("sequence item: expected str instance, " + type_name(item) + " found");
      if (!first) out += s;
      first = false;
      out += item.str();
    }
    return Value(std::move(out));
  }
  if (name == "isdigit") return Value(all_cps(s, [](uint32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value(all_cps(s, [](uint32_t c) { return c < 0x80 ? isalpha(static_cast<int>(c)) != 0 : true; }));
  if (name == "isalnum") return Value(all_cps(s, [](uint32_t c) { return c < 0x80 ? isalnum(static_cast<int>(c)) != 0 : true; }));
  if (name == "isspace") return Value(all_cps(s, text::is_space));
  if (name == "isupper") return Value(text::all_cased(s, true));
  if (name == "islower") return Value(text::all_cased(s, false));
  // splitlines
  std::vector<std::string> lines = text::split(s, std::string_view("\n"), -1);
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return str_list(std::move(lines));
}

Value dict_method(const Value& obj, std::string_view name, Args& a) {
  if (name == "get") {
    Value v;
    Value key = a.get(0, "key");
    if (key.is_string() && obj.dict_find(key.str(), &v)) return v;
    return a.get(1, "default", Value::none());
  }
  List out;
  obj.dict_for_each([&](std::string_view k, const Value& v) {
    if (name == "items") out.push_back(Value::tuple({Value(std::string(k)), v}));
    else if (name == "keys") out.emplace_back(std::string(k));
    else out.push_back(v);
  });
  if (name == "copy") {
    DictItems items;
    obj.dict_for_each([&](std::string_view k, const Value& v) { items.emplace_back(std::string(k), v); });
    return Value::dict(std::move(items));
  }
  return Value::list(std::move(out));
}

Value list_method(const Value& obj, std::string_view name, Args& a) {
  List items = iterate(obj);
  if (name == "copy") return Value::list(std::move(items));
  Value x = a.get(0, "value");
  int64_t n = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (values_equal(items[i], x)) {
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
  }
  if (name == "index") throw std::runtime_error("list.index(x): x not in list");
  return Value(n);
}

}  // namespace

bool has_method(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Kind::kString: return in(kStrMethods, name);
    case Kind::kDict: return in(kDictMethods, name) || in(kDictUnsafe, name);
    case Kind::kList: case Kind::kTuple: return in(kListMethods, name) || in(kListUnsafe, name);
    default: return false;
  }
}

Value call_method(Interpreter&, const Value& obj, std::string_view name, Args& args) {
  switch (obj.kind()) {
    case Kind::kString: return str_method(obj, name, args);
    case Kind::kDict:
      if (in(kDictUnsafe, name)) break;
      return dict_method(obj, name, args);
    default:
      if (in(kListUnsafe, name)) break;
      return list_method(obj, name, args);
  }
  throw std::runtime_error("access to attribute '" + std::string(name) + "' of '" + type_name(obj) +
                           "' object is unsafe.");
}

void install_globals(Interpreter& in) {
  in.set_global("raise_exception", Value::callable("raise_exception", [](Interpreter&, Args& a) -> Value {
    throw ChatTemplateError(to_str(a.get(0, "message")));  // the template's own words, as transformers raises them
  }));
  in.set_global("strftime_now", Value::callable("strftime_now", [](Interpreter&, Args& a) -> Value {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    size_t n = std::strftime(buf, sizeof buf, to_str(a.get(0, "format")).c_str(), &tm);
    return Value(std::string(buf, n));
  }));
  in.set_global("namespace", Value::callable("namespace", [](Interpreter& self, Args& a) {
    DictItems items;
    for (const auto& p : a.pos) {
      if (p.is_dict()) p.dict_for_each([&](std::string_view k, const Value& v) { items.emplace_back(std::string(k), v); });
    }
    for (auto& [k, v] : a.kw) items.emplace_back(k, v);
    return self.make_namespace(std::move(items));
  }));
  in.set_global("dict", Value::callable("dict", [](Interpreter&, Args& a) {
    DictItems items;
    for (auto& [k, v] : a.kw) items.emplace_back(k, v);
    return Value::dict(std::move(items));
  }));
  in.set_global("range", Value::callable("range", [](Interpreter&, Args& a) {
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) stop = a.pos[0].as_int();
    else if (a.pos.size() >= 2) start = a.pos[0].as_int(), stop = a.pos[1].as_int();
    else throw std::runtime_error("range expected at least 1 argument, got 0");
    if (a.pos.size() == 3) step = a.pos[2].as_int();
    if (step == 0) throw std::runtime_error("range() arg 3 must not be zero");
    // In 128 bits: stop - start and the last i + step can pass int64 (range(-2**62 * 2, 2**62 * 2)).
    using Wide = __int128;
    const Wide span = step > 0 ? Wide(stop) - start : Wide(start) - stop;
    const Wide stride = step > 0 ? Wide(step) : -Wide(step);
    const Wide len = span > 0 ? (span + stride - 1) / stride : 0;
    if (len > 100000) {  // jinja2's sandbox limit
      throw std::runtime_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    List items;
    for (Wide k = 0; k < len; ++k) items.emplace_back(static_cast<int64_t>(Wide(start) + k * step));
    return Value::list(std::move(items));
  }));
}

}  // namespace nvllm::jinja
