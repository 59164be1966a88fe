// SPDX-License-Identifier: Apache-2.0
// fuzz_util.h - what the harnesses share: a contract check that fails as a crash, and input sections.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

// A broken contract is a finding like a sanitizer report: say which, then abort (libFuzzer keeps the input).
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace tpscope::fuzz {

// Log lines off (TPSCOPE_DEBUG=NONE) unless the environment asks for them: a harness that makes the
// parsers WARN on every bad input would spend its time writing them. Call from LLVMFuzzerInitialize.
inline void quietLogs() { setenv("TPSCOPE_DEBUG", "NONE", /*overwrite=*/0); }

// The input cut at NUL bytes into at most `n` sections (the last takes the rest); missing ones are absent.
// Harnesses that read several files or answers take them this way; text never holds a NUL.
inline std::vector<std::string> sections(const uint8_t* data, size_t size, size_t n) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> out;
  while (out.size() + 1 < n) {
    const size_t nul = in.find('\0');
    if (nul == std::string_view::npos) break;
    out.emplace_back(in.substr(0, nul));
    in.remove_prefix(nul + 1);
  }
  out.emplace_back(in);
  return out;
}

// Whether `text` can be written as a JSON string: the JSON writer throws on bytes that are not UTF-8.
inline bool dumpsAsJson(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace tpscope::fuzz
