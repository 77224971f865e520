// Python's printf-style `str % args` (also the `format` filter): %s %r %d %i %f %e %g %x %o %c %%
// with flags, width, precision and %(name)s keys, and Python's errors.
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "chat/jinja_builtins.h"
#include "chat/jinja_text.h"

namespace nvllm::jinja {

namespace {

struct Spec {
  std::string flags;
  int width = -1, precision = -1;
  char type = 's';
};

double number_of(const Value& v, char type) {
  if (!v.is_number()) {
    throw std::runtime_error(std::string("%") + type + " format: a real number is required, not " + type_name(v));
  }
  return v.as_float();
}

std::string c_format(const Spec& sp, const char* conv, double d, bool integral) {
  std::string f = "%" + sp.flags;
  if (sp.width >= 0) f += std::to_string(sp.width);
  if (sp.precision >= 0 && !integral) f.append(".").append(std::to_string(sp.precision));
  f += integral ? std::string("ll") + conv : std::string(conv);
  // Sized by a first call: a width or precision may ask for up to kMaxStringBytes characters.
  const auto print = [&](char* buf, size_t size) {
    return integral ? std::snprintf(buf, size, f.c_str(), static_cast<long long>(d))
                    : std::snprintf(buf, size, f.c_str(), d);
  };
  const int n = print(nullptr, 0);
  if (n < 0) throw std::runtime_error("format failed");
  std::string out(static_cast<size_t>(n), '\0');
  print(out.data(), out.size() + 1);
  return out;
}

std::string pad(std::string s, const Spec& sp) {
  size_t len = text::cp_count(s);
  if (sp.width < 0 || len >= static_cast<size_t>(sp.width)) return s;
  std::string fill(static_cast<size_t>(sp.width) - len, ' ');
  return sp.flags.find('-') != std::string::npos ? s + fill : fill + s;
}

std::string convert(const Spec& sp, const Value& v) {
  switch (sp.type) {
    case 's': case 'r': case 'a': {
      std::string s;
      if (sp.type == 's') append_str(s, v);
      else append_repr(s, v);
      if (sp.precision >= 0) {
        auto cps = text::to_cps(s);
        if (cps.size() > static_cast<size_t>(sp.precision)) {
          s.clear();
          for (int i = 0; i < sp.precision; ++i) append_utf8(s, cps[static_cast<size_t>(i)]);
        }
      }
      return pad(s, sp);
    }
    case 'd': case 'i': case 'u': return c_format(sp, "d", std::trunc(number_of(v, sp.type)), true);
    case 'x': case 'X': case 'o': {
      if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
        throw std::runtime_error(std::string("%") + sp.type + " format: an integer is required, not " + type_name(v));
      }
      return c_format(sp, std::string(1, sp.type).c_str(), static_cast<double>(v.as_int()), true);
    }
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
      Spec s = sp;
      if (s.precision < 0) s.precision = 6;
      return c_format(s, std::string(1, sp.type).c_str(), number_of(v, sp.type), false);
    }
    case 'c': {
      std::string s;
      if (v.is_string() && text::cp_count(v.str()) == 1) s = std::string(v.str());
      else if (v.kind() == Kind::kInt) append_utf8(s, static_cast<uint32_t>(v.as_int()));
      else throw std::runtime_error("%c requires an int or a unicode character");
      return pad(s, sp);
    }
    default: throw std::runtime_error(std::string("unsupported format character '") + sp.type + "'");
  }
}

}  // namespace

std::string py_printf(std::string_view fmt, const Value& args) {
  List positional;
  bool mapping = !args.is_string() && args.kind() != Kind::kTuple &&
                 (args.is_dict() || args.kind() == Kind::kList || args.is_undefined());  // has __getitem__
  if (args.kind() == Kind::kTuple) positional = iterate(args);
  else positional.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw std::runtime_error("incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    Value key;
    bool keyed = false;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string_view::npos) throw std::runtime_error("incomplete format key");
      if (!args.is_dict()) throw std::runtime_error("format requires a mapping");
      if (!args.dict_find(fmt.substr(i + 1, close - i - 1), &key)) {
        throw std::runtime_error("KeyError: '" + std::string(fmt.substr(i + 1, close - i - 1)) + "'");
      }
      keyed = true;
      i = close + 1;
    }
    Spec sp;
    while (i < fmt.size() && std::string_view("-+ 0#").find(fmt[i]) != std::string_view::npos) sp.flags += fmt[i++];
    auto read_int = [&]() {
      int v = 0;
      while (i < fmt.size() && isdigit(static_cast<unsigned char>(fmt[i]))) {
        // Python refuses a width or precision past a C int; we stop at kMaxStringBytes.
        v = v * 10 + (fmt[i++] - '0');
        if (static_cast<size_t>(v) > kMaxStringBytes) {
          throw std::runtime_error("width too big (at most " + std::to_string(kMaxStringBytes) + ")");
        }
      }
      return v;
    };
    if (i < fmt.size() && isdigit(static_cast<unsigned char>(fmt[i]))) sp.width = read_int();
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      sp.precision = read_int();
    }
    if (i >= fmt.size()) throw std::runtime_error("incomplete format");
    sp.type = fmt[i];
    if (!keyed) {
      if (next >= positional.size()) throw std::runtime_error("not enough arguments for format string");
      key = positional[next++];
    }
    out += convert(sp, key);
  }
  if (next < positional.size() && !mapping) {
    throw std::runtime_error("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace nvllm::jinja
