#include "core/log.h"

#include <mutex>

namespace nvllm {

LogLevel& log_threshold() {
  static LogLevel level = LogLevel::kInfo;
  return level;
}

void log_line(LogLevel level, const std::string& message) {
  static std::mutex mutex;
  static constexpr const char* kNames[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "nvllm: %s: %s\n", kNames[static_cast<int>(level)], message.c_str());
}

}  // namespace nvllm
