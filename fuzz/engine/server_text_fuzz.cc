// SPDX-License-Identifier: Apache-2.0
// server_text_fuzz.cc - llama-server's text answers (src/engine/llama_server.h): GET /metrics in
// Prometheus' text format (parsePrometheus) and the startup log (settingsFromLog, fallbacksInLog,
// tpscopeInLog, tailLines).
//
// Input: the metrics text, a NUL, the log. Contract: every counter written back as "name value" parses
// to the same counters; the log's settings are always the same keys in the same order, with values that
// can be written as JSON (the manifest holds them); fallbacks are lines of the log; tailLines(n) gives
// at most n lines.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "engine/llama_server.h"
#include "fuzz_util.h"

namespace en = tpscope::engine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> in = tpscope::fuzz::sections(data, size, 2);
  const std::string& metrics = in[0];
  const std::string log = in.size() > 1 ? in[1] : "";

  const std::map<std::string, double> counters = en::parsePrometheus(metrics);
  std::string text;
  for (const auto& [name, value] : counters) {
    FUZZ_CHECK(name.find('{') == std::string::npos && name.find('\n') == std::string::npos);
    text += fmt::format("{} {}\n", name, value);
  }
  const std::map<std::string, double> again = en::parsePrometheus(text);
  FUZZ_CHECK(again.size() == counters.size());
  for (const auto& [name, value] : counters) {
    const auto it = again.find(name);
    FUZZ_CHECK(it != again.end());
    FUZZ_CHECK(it->second == value || (std::isnan(it->second) && std::isnan(value)));
  }

  static const en::KeyValues kEmpty = en::settingsFromLog("");
  const en::KeyValues settings = en::settingsFromLog(log);
  FUZZ_CHECK(settings.size() == kEmpty.size());
  for (size_t i = 0; i < settings.size(); ++i) {
    FUZZ_CHECK(settings[i].first == kEmpty[i].first);
    FUZZ_CHECK(tpscope::fuzz::dumpsAsJson(settings[i].second));
  }
  for (const std::string& line : en::fallbacksInLog(log)) FUZZ_CHECK(log.find(line) != std::string::npos);
  (void)en::tpscopeInLog(log);
  const std::string tail = en::tailLines(log, 3);
  FUZZ_CHECK(std::count(tail.begin(), tail.end(), '\n') <= 3);
  return 0;
}
