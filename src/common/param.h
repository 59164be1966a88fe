// SPDX-License-Identifier: Apache-2.0
// param.h - tunables from environment variables, each read once (like NCCL_PARAM).
//
// Declare a parameter where it is used:
//   TPS_PARAM_INT(SpinTimeoutMs, "TPSCOPE_SPIN_TIMEOUT_MS", 10000)   defines int64_t tpsParamSpinTimeoutMs()
// The first call reads the variable; later calls return the cached value. A value that does not parse
// is reported once at WARN and the default is used. Every parameter is listed in docs/cli.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tpscope {

// Parses a whole decimal integer with an optional K/M/G (binary) suffix: "4096", "64K", "1M".
std::optional<int64_t> parseInt(std::string_view text);
// Parses a byte size with an optional K/M/G suffix (binary multiples) and an optional trailing 'B'.
std::optional<uint64_t> parseBytes(std::string_view text);

namespace detail {
int64_t readIntParam(const char* env, int64_t fallback);
std::string readStringParam(const char* env, const char* fallback);
}  // namespace detail

}  // namespace tpscope

#define TPS_PARAM_INT(name, env, fallback)                                         \
  inline int64_t tpsParam##name() {                                                \
    static const int64_t value = ::tpscope::detail::readIntParam(env, (fallback)); \
    return value;                                                                  \
  }

#define TPS_PARAM_STRING(name, env, fallback)                                             \
  inline const std::string& tpsParam##name() {                                            \
    static const std::string value = ::tpscope::detail::readStringParam(env, (fallback)); \
    return value;                                                                         \
  }
