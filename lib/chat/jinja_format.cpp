// How values print (Python str/repr, float repr), compare (==, <), and serialise (json.dumps):
// the byte-exact half of "renders as transformers does".
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string_view>

#include "chat/jinja_builtins.h"
#include "chat/jinja_text.h"
#include "chat/jinja_value.h"

namespace nvllm::jinja {

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // shortest round-trip digits: [-]D[.DDD]e[+-]XX
  bool neg = sci[0] == '-';
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < epos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  int exp = std::stoi(sci.substr(epos + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {  // Python's repr: fixed notation for 1e-4 <= |d| < 1e16
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

namespace {

void append_repr_string(std::string& out, std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = has_single && !has_double ? '"' : '\'';
  out += q;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = text::next_cp(s, i);
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x80 ? (cp < 0x20 || cp == 0x7F) : !text::is_printable(cp)) {
      char buf[16];
      if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out += buf;
    } else {
      append_utf8(out, cp);
    }
  }
  out += q;
}

}  // namespace

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Kind::kString:
      if (v.is_markup()) out += "Markup(";
      append_repr_string(out, v.str());
      if (v.is_markup()) out += ')';
      return;
    case Kind::kUndefined: out += "Undefined"; return;
    default: append_str(out, v);
  }
}

void check_length(const std::string& out) {
  if (out.size() > kMaxStringBytes) {
    throw std::runtime_error("text longer than " + std::to_string(kMaxStringBytes >> 20) + " MiB (nvllm's limit)");
  }
}

void append_str(std::string& out, const Value& v) {
  check_stack_room();
  switch (v.kind()) {
    case Kind::kUndefined: return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += v.as_bool() ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: out += py_float_repr(v.as_float()); return;
    case Kind::kString:
      out += v.str();
      check_length(out);
      return;
    case Kind::kList: case Kind::kTuple: {
      bool tuple = v.kind() == Kind::kTuple;
      out += tuple ? '(' : '[';
      for (size_t i = 0, n = v.size(); i < n; ++i) {
        if (i) out += ", ";
        append_repr(out, v.at(i));
        check_length(out);  // a list that holds itself twice, k deep, prints 2^k items
      }
      if (tuple && v.size() == 1) out += ',';
      out += tuple ? ')' : ']';
      return;
    }
    case Kind::kDict: {
      out += '{';
      bool first = true;
      v.dict_for_each([&](std::string_view k, const Value& e) {
        if (!first) out += ", ";
        first = false;
        append_repr_string(out, k);
        out += ": ";
        append_repr(out, e);
        check_length(out);
      });
      out += '}';
      return;
    }
    case Kind::kNamespace: out += "<Namespace>"; return;
    case Kind::kLoop: out += "<LoopContext>"; return;
    case Kind::kCallable: out += "<function " + v.callable_fn().name + ">"; return;
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return std::string(v.str());
  std::string out;
  append_str(out, v);
  return out;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  check_stack_room();
  if (a.is_sequence() && b.is_sequence()) {
    if (a.kind() != b.kind() || a.size() != b.size()) return false;
    charge_list_items(a.size());  // a walk: `big == big` in a loop
    for (size_t i = 0; i < a.size(); ++i) {
      if (!values_equal(a.at(i), b.at(i))) return false;
    }
    return true;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kString:
      if (a.str().size() != b.str().size()) return false;
      charge_string_walk(a.str().size());
      return a.str() == b.str();
    case Kind::kDict: {
      if (a.size() != b.size()) return false;
      bool eq = true;
      a.dict_for_each([&](std::string_view k, const Value& x) {
        Value y;
        if (eq && (!b.dict_find(k, &y) || !values_equal(x, y))) eq = false;
      });
      return eq;
    }
    default: return a.object() == b.object();  // identity for namespaces, loops, callables
  }
}

size_t value_hash(const Value& v) {
  if (v.is_number()) {
    const double d = v.as_float();
    return std::hash<double>{}(d == 0 ? 0.0 : d);  // -0.0 == 0.0
  }
  switch (v.kind()) {
    case Kind::kString:
      charge_string_walk(v.str().size());
      return std::hash<std::string_view>{}(v.str());
    case Kind::kUndefined: case Kind::kNone: return static_cast<size_t>(v.kind());
    case Kind::kList: case Kind::kTuple: case Kind::kDict: return 0;
    default: return std::hash<const void*>{}(v.object());
  }
}

bool values_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) {
    charge_string_walk(std::min(a.str().size(), b.str().size()));
    return a.str() < b.str();  // UTF-8 byte order == code point order
  }
  check_stack_room();
  if (a.is_sequence() && b.is_sequence() && a.kind() == b.kind()) {
    size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
      if (!values_equal(a.at(i), b.at(i))) return values_less(a.at(i), b.at(i));
    }
    return a.size() < b.size();
  }
  throw std::runtime_error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

namespace {

void dump_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    uint32_t cp = text::next_cp(s, i);
    char buf[16];
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
    } else {
      out.append(s.substr(at, i - at));
    }
  }
  out += '"';
}

void dump(std::string& out, const Value& v, const DumpOptions& opt, int depth);

void newline_indent(std::string& out, const DumpOptions& opt, int depth) {
  out += '\n';
  for (int i = 0; i < depth; ++i) out += opt.indent;
}

void dump_dict(std::string& out, const Value& v, const DumpOptions& opt, int depth) {
  if (v.size() == 0) {
    out += "{}";
    return;
  }
  std::vector<std::pair<std::string_view, Value>> items;
  v.dict_for_each([&](std::string_view k, const Value& e) { items.emplace_back(k, e); });
  if (opt.sort_keys) {
    std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  }
  out += '{';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += opt.item_sep;
    if (opt.has_indent) newline_indent(out, opt, depth + 1);
    dump_string(out, items[i].first, opt.ensure_ascii);
    out += opt.key_sep;
    dump(out, items[i].second, opt, depth + 1);
    check_length(out);
  }
  if (opt.has_indent) newline_indent(out, opt, depth);
  out += '}';
}

void dump(std::string& out, const Value& v, const DumpOptions& opt, int depth) {
  check_stack_room();
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: {
      double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += py_float_repr(d);
      return;
    }
    case Kind::kString: dump_string(out, v.str(), opt.ensure_ascii); return;
    case Kind::kList: case Kind::kTuple: {
      if (v.size() == 0) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += opt.item_sep;
        if (opt.has_indent) newline_indent(out, opt, depth + 1);
        dump(out, v.at(i), opt, depth + 1);
        check_length(out);
      }
      if (opt.has_indent) newline_indent(out, opt, depth);
      out += ']';
      return;
    }
    case Kind::kDict: dump_dict(out, v, opt, depth); return;
    default:
      throw std::runtime_error("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string json_dumps(const Value& v, const DumpOptions& opt) {
  std::string out;
  dump(out, v, opt, 0);
  return out;
}

}  // namespace nvllm::jinja
