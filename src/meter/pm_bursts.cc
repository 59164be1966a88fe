// SPDX-License-Identifier: Apache-2.0
// pm_bursts.cc - bursts of busy PM records, merged across short dips; a step's figures.
#include "meter/pm_bursts.h"

#include <algorithm>
#include <stdexcept>

namespace tpscope::detail {

namespace {

// The record's rate in MB/s (bytes per microsecond); 0 for a record of no length.
double rateMBps(const MeterRecord& r, int dir) {
  const int64_t len_ns = r.t_end_ns - r.t_start_ns;
  return len_ns > 0 ? r.bytes[dir] / (len_ns * 1e-3) : 0.0;
}

bool busy(const MeterRecord& r, const PmBurstRule& rule) {
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

std::vector<int> burstLabels(const std::vector<MeterRecord>& records, const PmBurstRule& rule) {
  std::vector<int> out(records.size(), -1);
  const double min_gap_ns = rule.min_gap_us * 1e3;
  int n = 0;
  int64_t end = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const MeterRecord& r = records[i];
    if (!busy(r, rule)) continue;
    // Strictly shorter than the minimum gap merges.
    if (n == 0 || static_cast<double>(r.t_start_ns - end) >= min_gap_ns) ++n;
    out[i] = n - 1;
    end = r.t_end_ns;
  }
  return out;
}

std::vector<PmBurst> pmBursts(const std::vector<MeterRecord>& records, const PmBurstRule& rule) {
  std::vector<PmBurst> out;
  const std::vector<int> label = burstLabels(records, rule);
  for (size_t i = 0; i < records.size(); ++i) {
    if (label[i] < 0) continue;
    const MeterRecord& r = records[i];
    if (static_cast<int>(out.size()) == label[i]) out.push_back({r.t_start_ns, r.t_end_ns, 0, 0});
    PmBurst& b = out.back();
    b.end_ns = r.t_end_ns;
    b.tx_bytes += r.bytes[0];
    b.rx_bytes += r.bytes[1];
  }
  return out;
}

std::optional<PmBurstRule> parseBurstRule(const std::string& text, std::string* error) {
  const size_t a = text.find(':'), b = a == std::string::npos ? a : text.find(':', a + 1);
  PmBurstRule r;
  bool ok = b != std::string::npos && text.find(':', b + 1) == std::string::npos;
  if (ok) {
    const std::string dir = text.substr(0, a);
    ok = dir == "tx" || dir == "rx" || dir == "either";
    r.direction = dir == "tx" ? PmDirection::kTx : dir == "rx" ? PmDirection::kRx : PmDirection::kEither;
    try {
      size_t used = 0;
      const std::string mbps = text.substr(a + 1, b - a - 1), gap = text.substr(b + 1);
      r.threshold_mbps = std::stod(mbps, &used);
      ok = ok && used == mbps.size();
      r.min_gap_us = std::stod(gap, &used);
      ok = ok && used == gap.size() && r.threshold_mbps >= 0 && r.min_gap_us >= 0;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok) {
    *error = "a burst rule is DIRECTION:MBPS:GAP_US (tx, rx or either; MB/s and us not below 0), e.g. " +
             burstRuleText(kStepBurstRule) + ", not '" + text + "'";
    return std::nullopt;
  }
  return r;
}

std::string burstRuleText(const PmBurstRule& rule) {
  auto num = [](double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
    return s;
  };
  return std::string(pmDirectionName(rule.direction)) + ":" + num(rule.threshold_mbps) + ":" + num(rule.min_gap_us);
}

PmStepFigures pmStepFigures(const std::vector<MeterRecord>& records, int64_t start_ns, int64_t end_ns,
                            int64_t interval_us, const PmBurstRule& rule) {
  PmStepFigures f;
  const PmSeries s = pmSeriesOf(records, pmGapNs(interval_us));
  const PmFigure tx = computePm(s, kPmTx, start_ns, end_ns, "the step");
  f.records = tx.samples;
  f.tx_bytes = tx.bytes;
  f.rx_bytes = computePm(s, kPmRx, start_ns, end_ns, "the step").bytes;
  f.bursts = static_cast<int>(pmBursts(records, rule).size());
  f.complete = tx.complete;
  f.why = tx.why;
  return f;
}

}  // namespace tpscope::detail
