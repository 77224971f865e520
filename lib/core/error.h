// nvllm::Error, the one exception type a user ever sees, and helpers to build its message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace nvllm {

// An error the user can act on: the message names the file, line, field or flag and says
// what to do. cmd/ prints what() on one line and exits non-zero.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates any streamable arguments: str_cat("line ", 17, ": bad field").
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// Throws nvllm::Error with the concatenated message.
template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

}  // namespace nvllm

// Checks a condition a user (or a file) can violate; throws nvllm::Error with the message.
#define NVLLM_CHECK(cond, ...)                 \
  do {                                         \
    if (!(cond)) ::nvllm::fail(__VA_ARGS__);   \
  } while (0)
