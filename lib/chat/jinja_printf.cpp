// Python's printf-style `str % args` (also the `format` filter): %s %r %d %i %f %e %g %x %o %c %%
// with flags, width, precision and %(name)s keys, and Python's errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
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

std::string pad(std::string s, const Spec& sp) {
  size_t len = text::cp_count(s);
  if (sp.width < 0 || len >= static_cast<size_t>(sp.width)) return s;
  std::string fill(static_cast<size_t>(sp.width) - len, ' ');
  return sp.flags.find('-') != std::string::npos ? s + fill : fill + s;
}

// %d of a float is int() of it (NaN raises here, as in Python).
int64_t integer_of(const Value& v, char type) {
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return v.as_int();
  const std::optional<int64_t> i = int_of_float(number_of(v, type));
  if (!i) throw std::runtime_error("cannot convert float NaN to integer");
  return *i;
}

// Python's %d %i %u %x %X %o of an integer (C's printf differs on four counts: %x of a negative,
// %#o's prefix, + and space on x and o, and the 0 flag beside a precision): the sign, the '#'
// prefix (0x, 0X, 0o), the digits padded with zeros to the precision, then to the width zeros
// after the sign and prefix with '0' (and no '-'), else as pad() pads.
std::string format_int(const Spec& sp, int64_t v) {
  const auto has = [&](char f) { return sp.flags.find(f) != std::string::npos; };
  const bool neg = v < 0;
  uint64_t mag = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const unsigned base = sp.type == 'x' || sp.type == 'X' ? 16 : sp.type == 'o' ? 8 : 10;
  const char* digit_chars = sp.type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string digits;
  do {
    digits += digit_chars[mag % base];
    mag /= base;
  } while (mag != 0);
  if (sp.precision > static_cast<int>(digits.size())) digits.append(sp.precision - digits.size(), '0');
  std::reverse(digits.begin(), digits.end());
  std::string head = neg ? "-" : has('+') ? "+" : has(' ') ? " " : "";
  if (has('#') && base != 10) head += sp.type == 'o' ? "0o" : sp.type == 'x' ? "0x" : "0X";
  const size_t len = head.size() + digits.size();
  if (has('0') && !has('-') && sp.width >= 0 && static_cast<size_t>(sp.width) > len)
    return head + std::string(static_cast<size_t>(sp.width) - len, '0') + digits;
  return pad(head + digits, sp);
}

// A float conversion through C's printf (Python's %f %e %g agree with it).
std::string c_format(const Spec& sp, const char* conv, double d) {
  std::string f = "%" + sp.flags;
  if (sp.width >= 0) f += std::to_string(sp.width);
  if (sp.precision >= 0) f.append(".").append(std::to_string(sp.precision));
  f += conv;
  // Sized by a first call: a width or precision may ask for up to kMaxStringBytes characters.
  const int n = std::snprintf(nullptr, 0, f.c_str(), d);
  if (n < 0) throw std::runtime_error("format failed");
  std::string out(static_cast<size_t>(n), '\0');
  std::snprintf(out.data(), out.size() + 1, f.c_str(), d);
  return out;
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
    case 'd': case 'i': case 'u': return format_int(sp, integer_of(v, sp.type));
    case 'x': case 'X': case 'o': {
      if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
        throw std::runtime_error(std::string("%") + sp.type + " format: an integer is required, not " + type_name(v));
      }
      return format_int(sp, v.as_int());
    }
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
      Spec s = sp;
      if (s.precision < 0) s.precision = 6;
      return c_format(s, std::string(1, sp.type).c_str(), number_of(v, sp.type));
    }
    case 'c': {
      std::string s;
      if (v.is_string() && text::cp_count(v.str()) == 1) {
        s = std::string(v.str());
      } else if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) {
        if (v.as_int() < 0 || v.as_int() > 0x10FFFF) throw std::runtime_error("%c arg not in range(0x110000)");
        append_utf8(s, static_cast<uint32_t>(v.as_int()));
      } else {
        throw std::runtime_error("%c requires an int or a unicode character");
      }
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
