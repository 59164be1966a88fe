// SPDX-License-Identifier: Apache-2.0
// log.cc - the TPSCOPE_DEBUG level and the line writer.
#include "common/log.h"

#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace tpscope {

bool parseLogLevel(std::string_view text, LogLevel* out) {
  static const struct {
    const char* name;
    LogLevel level;
  } kLevels[] = {
      {"NONE", LogLevel::kNone}, {"WARN", LogLevel::kWarn}, {"INFO", LogLevel::kInfo}, {"TRACE", LogLevel::kTrace}};
  for (const auto& l : kLevels) {
    if (text.size() == std::strlen(l.name) && strncasecmp(text.data(), l.name, text.size()) == 0) {
      *out = l.level;
      return true;
    }
  }
  return false;
}

LogLevel logLevel() {
  static const LogLevel level = [] {
    const char* env = std::getenv("TPSCOPE_DEBUG");
    LogLevel parsed = LogLevel::kWarn;
    if (env != nullptr && *env != '\0' && !parseLogLevel(env, &parsed)) {
      std::fprintf(stderr, "tpscope WARN TPSCOPE_DEBUG=%s is not one of NONE, WARN, INFO, TRACE; using WARN\n", env);
      parsed = LogLevel::kWarn;
    }
    return parsed;
  }();
  return level;
}

namespace detail {

void logLine(LogLevel level, const char* file, int line, std::string_view message) {
  static const char* kNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  // Show the path from src/ on, which is what a reader greps for.
  const char* shown = std::strstr(file, "src/");
  shown = shown ? shown + 4 : file;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "tpscope %s %s:%d %.*s\n", kNames[static_cast<int>(level)], shown, line,
               static_cast<int>(message.size()), message.data());
}

}  // namespace detail
}  // namespace tpscope
