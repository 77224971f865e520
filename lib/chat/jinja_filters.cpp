// jinja2's built-in filters (those chat templates use) and transformers' own `tojson`.
// Filters that return generators in jinja2 (map, select, reverse, ...) return lists here: the
// same items, and templates consume them with `| list`, `join` or a for loop.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "chat/jinja_builtins.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"
#include "core/error.h"

namespace nvllm::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, Args&);

constexpr size_t kKeywordOnly = SIZE_MAX;  // Args::get index for a keyword-only parameter

std::string soft_str(const Value& v) { return to_str(v); }

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False): note
// that the first positional argument is ensure_ascii, not indent.
Value f_tojson(Interpreter&, const Value& v, Args& a) {
  DumpOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
  Value indent = a.get(1, "indent", Value::none());
  if (indent.kind() == Kind::kInt || indent.kind() == Kind::kBool) {
    o.has_indent = true;
    const int64_t n = std::max<int64_t>(0, indent.as_int());
    if (static_cast<uint64_t>(n) > kMaxStringBytes) throw std::runtime_error("tojson: indent too big");
    o.indent = std::string(static_cast<size_t>(n), ' ');
  } else if (indent.is_string()) {
    o.has_indent = true;
    o.indent = std::string(indent.str());
  } else if (!indent.is_none()) {
    throw std::runtime_error("tojson: indent must be an int or a str, not " + type_name(indent));
  }
  if (o.has_indent) o.item_sep = ",";
  Value seps = a.get(2, "separators", Value::none());
  if (!seps.is_none()) {
    if (!seps.is_sequence() || seps.size() != 2 || !seps.at(0).is_string() || !seps.at(1).is_string()) {
      throw std::runtime_error("tojson: separators must be a pair of strings");
    }
    o.item_sep = std::string(seps.at(0).str());
    o.key_sep = std::string(seps.at(1).str());
  }
  o.sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
  return Value(json_dumps(v, o));
}

Value f_trim(Interpreter&, const Value& v, Args& a) {
  Value chars = a.get(0, "chars", Value::none());
  std::string s = soft_str(v);
  std::optional<std::string_view> set;
  std::string cs;
  if (chars.is_string()) cs = std::string(chars.str()), set = cs;
  return Value(std::string(text::strip(s, set, true, true)));
}

Value f_length(Interpreter&, const Value& v, Args&) {
  switch (v.kind()) {
    case Kind::kUndefined: return Value(int64_t{0});
    case Kind::kString: case Kind::kList: case Kind::kTuple: case Kind::kDict: case Kind::kNamespace:
      return Value(static_cast<int64_t>(v.size()));
    default: throw std::runtime_error("object of type '" + type_name(v) + "' has no len()");
  }
}

Value f_default(Interpreter&, const Value& v, Args& a) {
  Value dflt = a.get(0, "default_value", Value(std::string()));
  bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return dflt;
  return v;
}

Value f_upper(Interpreter&, const Value& v, Args&) { return Value(text::upper(soft_str(v))); }
Value f_lower(Interpreter&, const Value& v, Args&) { return Value(text::lower(soft_str(v))); }
Value f_title(Interpreter&, const Value& v, Args&) { return Value(text::jinja_title(soft_str(v))); }
Value f_capitalize(Interpreter&, const Value& v, Args&) { return Value(text::capitalize(soft_str(v))); }
Value f_string(Interpreter&, const Value& v, Args&) { return Value(soft_str(v)); }
Value f_safe(Interpreter&, const Value& v, Args&) { return v.is_markup() ? v : Value::markup(soft_str(v)); }
Value f_escape(Interpreter&, const Value& v, Args&) {  // already-safe text is not escaped twice
  return v.is_markup() ? v : Value::markup(text::html_escape(soft_str(v)));
}
Value f_forceescape(Interpreter&, const Value& v, Args&) { return Value::markup(text::html_escape(soft_str(v))); }

Value f_items(Interpreter&, const Value& v, Args&) {
  List out;
  if (v.is_undefined()) return Value::list(std::move(out));
  if (!v.is_dict()) throw std::runtime_error("Can only get item pairs from a mapping.");
  v.dict_for_each([&](std::string_view k, const Value& e) { out.push_back(Value::tuple({Value(std::string(k)), e})); });
  return Value::list(std::move(out));
}

Value f_list(Interpreter&, const Value& v, Args&) { return Value::list(iterate(v)); }

Value attribute_of(Interpreter& in, const Value& item, const Value& attr) {
  if (attr.is_none() || attr.is_undefined()) return item;
  std::string path = to_str(attr);
  Value cur = item;
  for (const auto& part : text::split(path, std::string_view("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return isdigit(c); });
    if (!digits) {
      cur = in.getitem(cur, Value(part));
      continue;
    }
    // A part of digits is an index, as jinja's int(part); past int64 (Python's int has no bound)
    // no list, string or dict holds it: undefined, as an index past the end is.
    int64_t index = 0;
    if (std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc())
      cur = in.getitem(cur, Value(index));
    else if (cur.is_undefined())
      undefined_error(cur);
    else
      cur = Value::undefined(str_cat("no element ", part));
  }
  return cur;
}

Value f_join(Interpreter& in, const Value& v, Args& a) {
  std::string sep = to_str(a.get(0, "d", Value(std::string())));
  Value attr = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(out, attribute_of(in, item, attr));
  }
  return Value(std::move(out));
}

Value f_replace(Interpreter&, const Value& v, Args& a) {
  Value count = a.get(2, "count", Value::none());
  return Value(text::replace(soft_str(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")),
                             count.is_none() ? -1 : count.as_int()));
}

// select/reject/selectattr/rejectattr: keep the items whose (attribute's) test result is `want`.
Value select_impl(Interpreter& in, const Value& v, Args& a, bool by_attr, bool want) {
  size_t first_arg = by_attr ? 1 : 0;
  Value attr = by_attr ? a.get(0, "attr") : Value::none();
  List out;
  if (!v.truthy()) return Value::list(std::move(out));  // jinja2 iterates only a truthy value
  for (const auto& item : iterate(v)) {
    Value probe = by_attr ? attribute_of(in, item, attr) : item;
    bool ok;
    if (a.pos.size() <= first_arg) {
      ok = probe.truthy();
    } else {
      Args targs;
      targs.pos.assign(a.pos.begin() + static_cast<long>(first_arg) + 1, a.pos.end());
      ok = apply_test(in, to_str(a.pos[first_arg]), probe, targs);
    }
    if (ok == want) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, true, false); }

Value f_map(Interpreter& in, const Value& v, Args& a) {
  List out;
  if (!v.truthy()) return Value::list(std::move(out));  // jinja2 iterates only a truthy value
  Value attr = a.get(kKeywordOnly, "attribute", Value::none());
  if (!attr.is_none()) {
    Value dflt = a.get(kKeywordOnly, "default");
    for (const auto& item : iterate(v)) {
      Value x = attribute_of(in, item, attr);
      out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
    }
    return Value::list(std::move(out));
  }
  if (a.pos.empty()) throw std::runtime_error("map requires a filter argument");
  std::string name = to_str(a.pos[0]);
  if (!has_filter(name)) throw std::runtime_error("filter '" + name + "' is not supported");
  Args fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const auto& item : iterate(v)) {
    Args copy = fargs;
    out.push_back(apply_filter(in, name, item, copy));
  }
  return Value::list(std::move(out));
}

Value f_first(Interpreter&, const Value& v, Args&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter&, const Value& v, Args&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_int(Interpreter&, const Value& v, Args& a) {
  Value dflt = a.get(0, "default", Value(int64_t{0}));
  if (v.is_undefined()) undefined_error(v);  // int(Undefined) raises rather than falling back
  auto of_float = [&](double d) {  // NaN: jinja's int filter gives its default
    const std::optional<int64_t> i = int_of_float(d);
    return i ? Value(*i) : dflt;
  };
  if (v.kind() == Kind::kFloat) return of_float(v.as_float());
  if (v.is_number()) return Value(v.as_int());
  if (!v.is_string()) return dflt;
  std::string s(text::strip(v.str(), std::nullopt, true, true));
  try {
    size_t used = 0;
    long long i = std::stoll(s, &used, static_cast<int>(a.get(1, "base", Value(int64_t{10})).as_int()));
    if (used == s.size()) return Value(static_cast<int64_t>(i));
  } catch (const std::out_of_range&) {
    integer_overflow();  // digits past int64: Python's int would hold them
  } catch (const std::invalid_argument&) {
  }
  // "42.23" | int gives 42, as jinja's float fallback; there an infinity ('inf', or past double's
  // range) gives the default (jinja catches that OverflowError), a NaN too.
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && !std::isinf(d) ? of_float(d) : dflt;
}

Value f_float(Interpreter&, const Value& v, Args& a) {
  Value dflt = a.get(0, "default", Value(0.0));
  if (v.is_undefined()) undefined_error(v);
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    // As Python's float(): past double's range an infinity, below it zero (std::stod throws for
    // both).
    std::string s(text::strip(v.str(), std::nullopt, true, true));
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(d);
  }
  return dflt;
}

Value f_abs(Interpreter&, const Value& v, Args&) {
  if (v.kind() == Kind::kFloat) return Value(std::fabs(v.as_float()));
  if (v.is_number()) {
    if (v.as_int() == INT64_MIN) integer_overflow();  // its absolute value is past int64
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  throw std::runtime_error("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(Interpreter&, const Value& v, Args& a) {
  int64_t precision = a.get(0, "precision", Value(int64_t{0})).as_int();
  std::string method = to_str(a.get(1, "method", Value("common")));
  if (!v.is_number()) throw std::runtime_error("round needs a number, got " + type_name(v));
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_float() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);  // half-even
  if (method == "common" && v.kind() != Kind::kFloat) return Value(v.as_int());
  return Value(r / scale);
}

// Sort/unique/min/max compare strings case-insensitively unless asked not to, as jinja2 does.
Value sort_key(Interpreter& in, const Value& item, const Value& attr, bool case_sensitive) {
  Value k = attribute_of(in, item, attr);
  return !case_sensitive && k.is_string() ? Value(text::lower(k.str())) : k;
}

Value f_sort(Interpreter& in, const Value& v, Args& a) {
  bool reverse = a.get(0, "reverse", Value(false)).truthy();
  bool cs = a.get(1, "case_sensitive", Value(false)).truthy();
  Value attr = a.get(2, "attribute", Value::none());
  List items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(sort_key(in, item, attr, cs), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? values_less(y.first, x.first) : values_less(x.first, y.first);
  });
  List out;
  for (auto& [k, item] : keyed) out.push_back(item);
  return Value::list(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attr = a.get(1, "attribute", Value::none());
  // A hash set: comparing each item with every kept one took minutes on range(100000).
  const auto hash = [](const Value& k) { return value_hash(k); };
  const auto equal = [](const Value& x, const Value& y) { return values_equal(x, y); };
  std::unordered_set<Value, decltype(hash), decltype(equal)> seen(16, hash, equal);
  List out;
  for (const auto& item : iterate(v)) {
    Value k = sort_key(in, item, attr, cs);
    if (k.is_sequence() || k.is_dict()) throw std::runtime_error("unhashable type: '" + type_name(k) + "'");
    if (seen.insert(std::move(k)).second) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, Args& a, bool want_max) {
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attr = a.get(1, "attribute", Value::none());
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    Value ki = sort_key(in, items[i], attr, cs), kb = sort_key(in, items[best], attr, cs);
    if (want_max ? values_less(kb, ki) : values_less(ki, kb)) best = i;
  }
  return items[best];
}

Value f_min(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, Args& a) {
  Value attr = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value(int64_t{0}));
  for (const auto& item : iterate(v)) total = binary_op("+", total, attribute_of(in, item, attr));
  return total;
}

Value f_reverse(Interpreter&, const Value& v, Args&) {
  if (v.is_string()) {
    auto cps = text::to_cps(v.str());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) append_utf8(out, *it);
    return Value(std::move(out));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_indent(Interpreter&, const Value& v, Args& a) {
  Value width = a.get(0, "width", Value(int64_t{4}));
  std::string pad;
  if (width.is_string()) {
    pad = std::string(width.str());
  } else {
    // " " * width, as jinja2 builds it: empty for a negative width; past kMaxStringBytes an error
    // (Python's would be a MemoryError at some size).
    const int64_t spaces = std::max<int64_t>(0, width.as_int());
    if (static_cast<uint64_t>(spaces) > kMaxStringBytes) throw std::runtime_error("indent: width too big");
    pad.assign(static_cast<size_t>(spaces), ' ');
  }
  bool first = a.get(1, "first", Value(false)).truthy();
  bool blank = a.get(2, "blank", Value(false)).truthy();
  if (!v.is_string()) {  // jinja2 does `s += "\n"; s.splitlines()`: Python's own errors
    if (v.kind() == Kind::kList) throw std::runtime_error("'list' object has no attribute 'splitlines'");
    throw std::runtime_error("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  }
  std::string s(v.str());
  std::vector<std::string> lines = text::split(s, std::string_view("\n"), -1);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    bool indent = (i > 0 || first) && (blank || !text::strip(lines[i], std::nullopt, true, true).empty());
    if (indent) out += pad;
    out += lines[i];
  }
  return Value(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, Args&) {  // runs of Python's \w
  std::string s = soft_str(v);
  int64_t words = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    bool w = text::is_word(text::next_cp(s, i));
    words += w && !in_word;
    in_word = w;
  }
  return Value(words);
}

Value f_batch(Interpreter&, const Value& v, Args& a) {
  int64_t n = a.get(0, "linecount").as_int();
  if (n <= 0) throw std::runtime_error("batch size must be positive");
  Value fill = a.get(1, "fill_with", Value::none());
  List out, cur;
  for (auto& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (!fill.is_none()) {
      if (static_cast<uint64_t>(n) > kMaxStringBytes)  // billions of fill values
        throw std::runtime_error("batch: linecount too big to fill (at most " + std::to_string(kMaxStringBytes) + ")");
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_dictsort(Interpreter&, const Value& v, Args& a) {
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  std::string by = to_str(a.get(1, "by", Value("key")));
  bool reverse = a.get(2, "reverse", Value(false)).truthy();
  if (!v.is_dict()) throw std::runtime_error("dictsort needs a mapping");
  List items;
  v.dict_for_each([&](std::string_view k, const Value& e) { items.push_back(Value::tuple({Value(std::string(k)), e})); });
  auto key = [&](const Value& t) {
    Value k = t.at(by == "value" ? 1 : 0);
    return !cs && k.is_string() ? Value(text::lower(k.str())) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? values_less(key(y), key(x)) : values_less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_attr(Interpreter& in, const Value& v, Args& a) { return in.getattr(v, to_str(a.get(0, "name"))); }

Value f_format(Interpreter&, const Value& v, Args& a) {  // soft_str(value) % (kwargs or args)
  if (!a.pos.empty() && !a.kw.empty()) throw std::runtime_error("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) return Value(py_printf(soft_str(v), Value::dict(DictItems(a.kw.begin(), a.kw.end()))));
  return Value(py_printf(soft_str(v), Value::tuple(a.pos)));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"tojson", f_tojson}, {"trim", f_trim}, {"length", f_length}, {"count", f_length}, {"default", f_default},
      {"d", f_default}, {"upper", f_upper}, {"lower", f_lower}, {"title", f_title}, {"capitalize", f_capitalize},
      {"items", f_items}, {"list", f_list}, {"join", f_join}, {"replace", f_replace}, {"select", f_select},
      {"reject", f_reject}, {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"map", f_map},
      {"first", f_first}, {"last", f_last}, {"string", f_string}, {"int", f_int}, {"float", f_float},
      {"abs", f_abs}, {"unique", f_unique}, {"safe", f_safe}, {"e", f_escape}, {"escape", f_escape},
      {"forceescape", f_forceescape}, {"round", f_round}, {"sum", f_sum}, {"sort", f_sort}, {"reverse", f_reverse},
      {"indent", f_indent}, {"wordcount", f_wordcount}, {"batch", f_batch}, {"dictsort", f_dictsort},
      {"min", f_min}, {"max", f_max}, {"attr", f_attr}, {"format", f_format},
  };
  return table;
}

}  // namespace

bool has_filter(std::string_view name) { return filters().count(name) != 0; }

Value apply_filter(Interpreter& in, std::string_view name, const Value& v, Args& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw std::runtime_error("filter '" + std::string(name) + "' is not supported");
  return it->second(in, v, args);
}

List iterate(const Value& v) {
  List out;
  switch (v.kind()) {
    case Kind::kUndefined: return out;
    case Kind::kList: case Kind::kTuple:
      charge_list_items(v.size());  // a copy of the items: as many as a list made
      out.reserve(v.size());
      for (size_t i = 0, n = v.size(); i < n; ++i) out.push_back(v.at(i));
      return out;
    case Kind::kDict:
      charge_list_items(v.size());
      v.dict_for_each([&](std::string_view k, const Value&) { out.push_back(Value(std::string(k))); });
      return out;
    case Kind::kString:
      for (size_t i = 0; i < v.str().size();) {
        size_t at = i;
        text::next_cp(v.str(), i);
        out.push_back(Value(std::string(v.str().substr(at, i - at))));
      }
      return out;
    default: throw std::runtime_error("'" + type_name(v) + "' object is not iterable");
  }
}

}  // namespace nvllm::jinja
