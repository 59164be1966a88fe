// SPDX-License-Identifier: Apache-2.0
// exposition.h - the meter's counters in Prometheus' text format (version 0.0.4), for `tpscope meter --serve`.
//
// A consumer of the meter's series, not a second sampler: every value comes from Meter's own
// accessors (the newest unwrapped counter values, the read counts, the calibration) at the moment of
// the scrape. Byte counters are cumulative since the meter's first read, so a restarted meter starts
// again from 0, which Prometheus' rate() and increase() read as a counter reset. docs/cli.md lists
// every metric; a test checks the text with Prometheus' own promtool.
//
// Why not prometheus-cpp: Debian ships it as shared libraries only (libprometheus-cpp-core and -pull,
// the latter on libcivetweb), which a GPU machine with only CUDA, cuBLAS and NCCL lacks; the text
// format is a few lines of HELP, TYPE and samples, and the HTTP side is cpp-httplib, already here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meter/meter.h"

namespace tpscope::detail {

// The content type of renderMetrics()'s text.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// One metric family at a time: HELP and TYPE lines, then its samples. Label values are escaped as the
// format requires (backslash, double quote, newline); values print as the shortest exact decimal.
class MetricsText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  // type: "counter" or "gauge". Each family must be opened once, its samples right after.
  void family(const std::string& name, const char* type, const std::string& help);
  void sample(const Labels& labels, double value);
  void sample(const Labels& labels, uint64_t value);  // exact beyond 2^53 (byte counters)
  const std::string& text() const { return text_; }

 private:
  void labels(const Labels& labels);
  std::string name_, text_;
};

// What the serving side knows beyond the meter: each GPU's PCIe link as last read (by GPU
// position; it is read at most every few seconds, not at every scrape) and when the meter started.
struct ExpositionContext {
  std::vector<MeterPcieLink> links;
  double start_unix_s = 0;
};

// Every metric of `meter` now, in the text format.
std::string renderMetrics(const Meter& meter, const ExpositionContext& ctx);

}  // namespace tpscope::detail
