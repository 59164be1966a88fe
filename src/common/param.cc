// SPDX-License-Identifier: Apache-2.0
// param.cc - parsing for environment parameters and K/M/G sizes.
#include "common/param.h"

#include <cctype>
#include <cstdlib>
#include <limits>

#include "common/log.h"

namespace tpscope {

namespace {
// Splits "64K" into 64 and 1024; returns false for anything but digits and one suffix.
bool parseScaled(std::string_view text, bool allow_byte_suffix, bool allow_negative, int64_t* out) {
  if (text.empty()) return false;
  bool negative = false;
  if (allow_negative && text.front() == '-') {
    negative = true;
    text.remove_prefix(1);
  }
  if (allow_byte_suffix && !text.empty() && (text.back() == 'B' || text.back() == 'b')) text.remove_suffix(1);
  int64_t scale = 1;
  if (!text.empty()) {
    switch (std::toupper(static_cast<unsigned char>(text.back()))) {
      case 'K': scale = int64_t{1} << 10; break;
      case 'M': scale = int64_t{1} << 20; break;
      case 'G': scale = int64_t{1} << 30; break;
      case 'T': scale = int64_t{1} << 40; break;
      default: break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  if (text.empty()) return false;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    if (value > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10) return false;
    value = value * 10 + (c - '0');
  }
  if (value > std::numeric_limits<int64_t>::max() / scale) return false;
  *out = (negative ? -value : value) * scale;
  return true;
}
}  // namespace

std::optional<int64_t> parseInt(std::string_view text) {
  int64_t v = 0;
  if (!parseScaled(text, false, true, &v)) return std::nullopt;
  return v;
}

std::optional<uint64_t> parseBytes(std::string_view text) {
  int64_t v = 0;
  if (!parseScaled(text, true, false, &v)) return std::nullopt;
  return static_cast<uint64_t>(v);
}

namespace detail {

int64_t readIntParam(const char* env, int64_t fallback) {
  const char* raw = std::getenv(env);
  if (raw == nullptr || *raw == '\0') return fallback;
  std::optional<int64_t> v = parseInt(raw);
  if (!v) {
    TPS_LOG_WARN("{}={} is not an integer (K/M/G suffixes allowed); using the default {}", env, raw, fallback);
    return fallback;
  }
  TPS_LOG_INFO("{} set by environment to {}", env, *v);
  return *v;
}

std::string readStringParam(const char* env, const char* fallback) {
  const char* raw = std::getenv(env);
  if (raw == nullptr || *raw == '\0') return fallback;
  TPS_LOG_INFO("{} set by environment to {}", env, raw);
  return raw;
}

}  // namespace detail
}  // namespace tpscope
