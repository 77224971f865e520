#include "cmd/nvllm/cli_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/error.h"

namespace nvllm {
namespace {

// The value as a person wrote it: 0.05, 1, 1e+06.
std::string shown(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno == 0 && std::isfinite(*out);
}

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  *out = v;
  return end == text.c_str() + text.size() && errno == 0;
}

CLI::Validator make(std::string expected, std::function<bool(const std::string&)> ok) {
  return CLI::Validator(
      [expected, ok](std::string& input) -> std::string {
        return ok(input) ? std::string() : str_cat("expected ", expected, ", got ", input);
      },
      expected);
}

}  // namespace

CLI::Validator number_in(double lo, double hi, bool lo_exclusive) {
  const std::string expected = lo_exclusive ? str_cat("a number > ", shown(lo), " and <= ", shown(hi))
                                             : str_cat("a number from ", shown(lo), " to ", shown(hi));
  return make(expected, [lo, hi, lo_exclusive](const std::string& s) {
    double v = 0;
    return parse_double(s, &v) && (lo_exclusive ? v > lo : v >= lo) && v <= hi;
  });
}

CLI::Validator number_at_least(double lo, bool exclusive) {
  return make(str_cat("a number ", exclusive ? "> " : ">= ", shown(lo)), [lo, exclusive](const std::string& s) {
    double v = 0;
    return parse_double(s, &v) && (exclusive ? v > lo : v >= lo);
  });
}

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return make(str_cat("an integer from ", lo, " to ", hi), [lo, hi](const std::string& s) {
    int64_t v = 0;
    return parse_int(s, &v) && v >= lo && v <= hi;
  });
}

CLI::Validator integer_at_least(int64_t lo) {
  return make(str_cat("an integer >= ", lo), [lo](const std::string& s) {
    int64_t v = 0;
    return parse_int(s, &v) && v >= lo;
  });
}

CLI::Validator unsigned_64() {
  return make("an integer from 0 to 18446744073709551615", [](const std::string& s) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
    errno = 0;
    std::strtoull(s.c_str(), nullptr, 10);
    return errno == 0;
  });
}

}  // namespace nvllm
