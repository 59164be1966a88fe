// SPDX-License-Identifier: Apache-2.0
// pm_bursts.cc - bursts of busy PM records, merged across short dips (scripts/plot_timeline.py's rule).
#include "meter/pm_bursts.h"

#include <algorithm>

namespace tpscope::detail {

namespace {

// The record's rate in MB/s (bytes per microsecond); 0 for a record of no length.
double rateMBps(const MeterPmSample& r, int dir) {
  const int64_t len_ns = r.t_end_ns - r.t_start_ns;
  return len_ns > 0 ? r.bytes[dir] / (len_ns * 1e-3) : 0.0;
}

bool busy(const MeterPmSample& r, const PmBurstRule& rule) {
  switch (rule.direction) {
    case PmDirection::kTx: return rateMBps(r, 0) > rule.threshold_mbps;
    case PmDirection::kRx: return rateMBps(r, 1) > rule.threshold_mbps;
    case PmDirection::kEither: return std::max(rateMBps(r, 0), rateMBps(r, 1)) > rule.threshold_mbps;
  }
  return false;
}

}  // namespace

const char* pmDirectionName(PmDirection d) {
  switch (d) {
    case PmDirection::kTx: return "tx";
    case PmDirection::kRx: return "rx";
    case PmDirection::kEither: return "either";
  }
  return "?";
}

std::vector<PmBurst> pmBursts(const std::vector<MeterPmSample>& records, const PmBurstRule& rule) {
  std::vector<PmBurst> out;
  const double min_gap_ns = rule.min_gap_us * 1e3;
  bool open = false;
  for (const MeterPmSample& r : records) {
    if (!busy(r, rule)) continue;
    // Strictly shorter than the minimum gap merges, as the script's `t0 - cur[1] < min_gap_us`.
    if (!open || static_cast<double>(r.t_start_ns - out.back().end_ns) >= min_gap_ns) {
      out.push_back({r.t_start_ns, r.t_end_ns, 0, 0});
      open = true;
    }
    PmBurst& b = out.back();
    b.end_ns = r.t_end_ns;
    b.tx_bytes += r.bytes[0];
    b.rx_bytes += r.bytes[1];
  }
  return out;
}

}  // namespace tpscope::detail
