// Logging to stderr with a level set once from the command line.
#pragma once

#include <cstdio>
#include <string>

#include "core/error.h"

namespace nvllm {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kQuiet = 4 };

// The process-wide threshold. Set by cmd/ from --log-level / --quiet before any work starts;
// the library only reads it.
LogLevel& log_threshold();

void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(Args&&... args) {
  if (log_threshold() <= LogLevel::kInfo) log_line(LogLevel::kInfo, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(Args&&... args) {
  if (log_threshold() <= LogLevel::kWarn) log_line(LogLevel::kWarn, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(Args&&... args) {
  if (log_threshold() <= LogLevel::kDebug) log_line(LogLevel::kDebug, str_cat(std::forward<Args>(args)...));
}

}  // namespace nvllm
