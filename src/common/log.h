// SPDX-License-Identifier: Apache-2.0
// log.h - leveled logging to stderr, gated by TPSCOPE_DEBUG=WARN|INFO|TRACE (default WARN).
//
// Lines look like "tpscope WARN allreduce/backend.cc:120 message", so they grep beside NCCL's.
// Formatting uses fmt; a disabled level costs one integer compare.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace tpscope {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// The level read once from TPSCOPE_DEBUG; an unknown value selects WARN and says so once.
LogLevel logLevel();
// Parses a TPSCOPE_DEBUG value ("warn", "INFO", ...); returns false for an unknown one.
bool parseLogLevel(std::string_view text, LogLevel* out);

namespace detail {
void logLine(LogLevel level, const char* file, int line, std::string_view message);
}  // namespace detail

}  // namespace tpscope

#define TPS_LOG_AT(level, ...)                                                             \
  do {                                                                                     \
    if (::tpscope::logLevel() >= (level))                                                  \
      ::tpscope::detail::logLine((level), __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define TPS_LOG_WARN(...) TPS_LOG_AT(::tpscope::LogLevel::kWarn, __VA_ARGS__)
#define TPS_LOG_INFO(...) TPS_LOG_AT(::tpscope::LogLevel::kInfo, __VA_ARGS__)
#define TPS_LOG_TRACE(...) TPS_LOG_AT(::tpscope::LogLevel::kTrace, __VA_ARGS__)
