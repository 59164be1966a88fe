// SPDX-License-Identifier: Apache-2.0
// param_fuzz.cc - environment values and sizes (src/common/param.h: parseInt, parseBytes, parseLogLevel).
//
// Contract: parseInt accepts exactly [-]DIGITS[K|M|G|T] (suffix either case) whose scaled value fits
// int64, parseBytes exactly DIGITS[K|M|G|T][B] that fits; the value is the one computed here in
// 128 bits, and its decimal form parses back to it.
#include <cctype>
#include <optional>
#include <string>

#include "common/log.h"
#include "common/param.h"
#include "fuzz_util.h"

namespace {

// The reference: the grammar above, evaluated in 128-bit arithmetic.
std::optional<__int128> reference(std::string_view s, bool bytes) {
  bool negative = false;
  if (!bytes && !s.empty() && s.front() == '-') negative = true, s.remove_prefix(1);
  if (bytes && !s.empty() && (s.back() == 'B' || s.back() == 'b')) s.remove_suffix(1);
  __int128 scale = 1;
  if (!s.empty()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    const int shift = c == 'K' ? 10 : c == 'M' ? 20 : c == 'G' ? 30 : c == 'T' ? 40 : 0;
    if (shift) scale = __int128{1} << shift, s.remove_suffix(1);
  }
  if (s.empty()) return std::nullopt;
  const __int128 kMax = INT64_MAX;
  __int128 v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
    if (v > kMax) return std::nullopt;
  }
  v *= scale;
  if (v > kMax) return std::nullopt;
  return negative ? -v : v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::optional<int64_t> i = tpscope::parseInt(text);
  const std::optional<__int128> ri = reference(text, false);
  FUZZ_CHECK(i.has_value() == ri.has_value());
  if (i) {
    FUZZ_CHECK(*i == *ri);
    FUZZ_CHECK(tpscope::parseInt(std::to_string(*i)) == i);
  }
  const std::optional<uint64_t> b = tpscope::parseBytes(text);
  const std::optional<__int128> rb = reference(text, true);
  FUZZ_CHECK(b.has_value() == rb.has_value());
  if (b) {
    FUZZ_CHECK(static_cast<__int128>(*b) == *rb);
    FUZZ_CHECK(tpscope::parseBytes(std::to_string(*b) + "B") == b);
  }
  tpscope::LogLevel level;
  if (tpscope::parseLogLevel(text, &level))
    FUZZ_CHECK(level >= tpscope::LogLevel::kNone && level <= tpscope::LogLevel::kTrace);
  return 0;
}
