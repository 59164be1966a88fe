// SPDX-License-Identifier: Apache-2.0
// window.cc - interpolation, proration, bounds, peak rate, dmon figure, spread and quiescing verdicts.
#include "meter/window.h"

#include <fmt/format.h>

#include <algorithm>

#include "meter/calibrate.h"

namespace tpscope::detail {

namespace {

bool has(const MeterSample& s, int c) { return s.bytes[c].has_value(); }
double at(const MeterSample& s, int c) { return static_cast<double>(*s.bytes[c]); }

// First index whose t_ns[c] >= t.
size_t lowerBound(const Series& s, int c, int64_t t) {
  return std::partition_point(s.begin(), s.end(), [&](const MeterSample& x) { return x.t_ns[c] < t; }) - s.begin();
}
// First index whose t_ns[c] > t.
size_t upperBound(const Series& s, int c, int64_t t) {
  return std::partition_point(s.begin(), s.end(), [&](const MeterSample& x) { return x.t_ns[c] <= t; }) - s.begin();
}
// Last valid index < i, or npos.
size_t validBefore(const Series& s, int c, size_t i) {
  while (i > 0) {
    if (has(s[--i], c)) return i;
  }
  return std::string::npos;
}
// First valid index >= i, or npos.
size_t validFrom(const Series& s, int c, size_t i) {
  for (; i < s.size(); ++i)
    if (has(s[i], c)) return i;
  return std::string::npos;
}

}  // namespace

bool readAfter(const Series& s, const MeterGpu& info, int64_t t) {
  for (int c = 0; c < kMeterCounters; ++c) {
    if (!info.supported[c]) continue;
    const size_t last = validBefore(s, c, s.size());
    if (last == std::string::npos || s[last].t_ns[c] < t) return false;
  }
  return !s.empty();
}

std::optional<double> cumulativeAt(const Series& s, MeterCounter counter, int64_t t) {
  const int c = static_cast<int>(counter);
  const size_t next = validFrom(s, c, lowerBound(s, c, t));
  if (next == std::string::npos) return std::nullopt;
  if (s[next].t_ns[c] == t) return at(s[next], c);
  const size_t prev = validBefore(s, c, next);
  if (prev == std::string::npos) return std::nullopt;
  const double t0 = double(s[prev].t_ns[c]), t1 = double(s[next].t_ns[c]);
  if (t1 <= t0) return at(s[next], c);  // two reads at the same instant
  return at(s[prev], c) + (at(s[next], c) - at(s[prev], c)) * ((double(t) - t0) / (t1 - t0));
}

MeterCell computeCell(const Series& s, MeterCounter counter, int64_t start, int64_t end, double peak_span_ms,
                      std::optional<double> ceiling_mbps) {
  const int c = static_cast<int>(counter);
  MeterCell cell;
  // Reads inside [start, end] and the two that bracket it.
  const size_t first_in = lowerBound(s, c, start), past_in = upperBound(s, c, end);
  size_t inner_first = std::string::npos, inner_last = std::string::npos;
  for (size_t i = first_in; i < past_in; ++i) {
    if (!has(s[i], c)) continue;
    if (inner_first == std::string::npos) inner_first = i;
    inner_last = i;
    ++cell.samples;
  }
  const size_t lo =
      inner_first != std::string::npos && s[inner_first].t_ns[c] == start ? inner_first : validBefore(s, c, first_in);
  const size_t hi =
      inner_last != std::string::npos && s[inner_last].t_ns[c] == end ? inner_last : validFrom(s, c, past_in);
  if (lo == std::string::npos || hi == std::string::npos) return cell;  // not bracketed: N/A

  const std::optional<double> c_start = cumulativeAt(s, counter, start), c_end = cumulativeAt(s, counter, end);
  if (!c_start || !c_end) return cell;
  cell.bytes = *c_end - *c_start;
  cell.counted_bytes = cell.bytes;
  cell.bytes_high = at(s[hi], c) - at(s[lo], c);
  cell.bytes_low = inner_first == std::string::npos ? 0.0 : at(s[inner_last], c) - at(s[inner_first], c);
  const double duration_s = (end - start) * 1e-9;
  if (duration_s > 0) {
    cell.mean_mbps = *cell.bytes / duration_s / 1e6;
    if (ceiling_mbps && *ceiling_mbps > 0) cell.share_of_ceiling = *cell.mean_mbps / *ceiling_mbps;
  }
  // Peak: the highest rate between two reads at least peak_span apart, among the reads from lo to
  // hi. Reads closer than the span are not compared: their short intervals magnify timing jitter.
  // A bracket shorter than the span gives its own mean.
  const int64_t span = static_cast<int64_t>(peak_span_ms * 1e6);
  std::optional<double> peak;
  size_t j = lo;
  for (size_t i = lo; i <= hi; ++i) {
    if (!has(s[i], c)) continue;
    if (j < i) j = i;
    while (j <= hi && (!has(s[j], c) || s[j].t_ns[c] - s[i].t_ns[c] < span)) ++j;
    if (j > hi) break;
    const double r = (at(s[j], c) - at(s[i], c)) / ((s[j].t_ns[c] - s[i].t_ns[c]) * 1e-9) / 1e6;
    if (!peak || r > *peak) peak = r;
  }
  if (!peak && s[hi].t_ns[c] > s[lo].t_ns[c]) peak = *cell.bytes_high / ((s[hi].t_ns[c] - s[lo].t_ns[c]) * 1e-9) / 1e6;
  if (duration_s > 0) cell.peak_mbps = peak;
  return cell;
}

void addDmon(MeterCell* cell, const std::vector<MeterDmonSample>& dmon, int gpu, MeterCounter c, int64_t start,
             int64_t end) {
  double sum = 0;
  int n = 0;
  for (const MeterDmonSample& d : dmon) {
    if (d.gpu != gpu || d.counter != c || !d.mbps) continue;
    const int64_t mid = d.t_before_ns + (d.t_after_ns - d.t_before_ns) / 2;
    if (mid < start || mid > end) continue;
    sum += *d.mbps;
    ++n;
  }
  cell->dmon_samples = n;
  cell->dmon_mbps = n > 0 ? std::optional<double>(sum / n) : std::nullopt;
}

std::array<int64_t, kMeterReadKinds> readsInside(const Series& s, const std::vector<MeterDmonSample>& dmon, int gpu,
                                                 int64_t start, int64_t end) {
  std::array<int64_t, kMeterReadKinds> n{};
  for (const MeterSample& x : s) {
    const int64_t mid = x.t_before_ns + (x.t_after_ns - x.t_before_ns) / 2;
    if (mid >= start && mid <= end) ++n[x.group == MeterGroup::kPcie ? 0 : 1];
  }
  for (const MeterDmonSample& d : dmon) {
    const int64_t mid = d.t_before_ns + (d.t_after_ns - d.t_before_ns) / 2;
    if (d.gpu == gpu && mid >= start && mid <= end) ++n[static_cast<int>(MeterReadKind::kDmon)];
  }
  return n;
}

ReadIndex indexReads(const Series& s, const std::vector<MeterDmonSample>& dmon, int gpu) {
  ReadIndex index;
  for (const MeterSample& x : s)
    index.mids[x.group == MeterGroup::kPcie ? 0 : 1].push_back(x.t_before_ns + (x.t_after_ns - x.t_before_ns) / 2);
  for (const MeterDmonSample& d : dmon)
    if (d.gpu == gpu)
      index.mids[static_cast<int>(MeterReadKind::kDmon)].push_back(d.t_before_ns + (d.t_after_ns - d.t_before_ns) / 2);
  for (std::vector<int64_t>& m : index.mids) std::sort(m.begin(), m.end());
  return index;
}

std::array<int64_t, kMeterReadKinds> readsInside(const ReadIndex& index, int64_t start, int64_t end) {
  std::array<int64_t, kMeterReadKinds> n{};
  for (int k = 0; k < kMeterReadKinds; ++k) {
    const std::vector<int64_t>& m = index.mids[k];
    n[k] = std::upper_bound(m.begin(), m.end(), end) - std::lower_bound(m.begin(), m.end(), start);
  }
  return n;
}

void subtractOwn(MeterCell* cell, const MeterGpuCalibration& cal, int c,
                 const std::array<int64_t, kMeterReadKinds>& reads, double duration_s,
                 std::optional<double> ceiling_mbps) {
  if (!cell->bytes) return;
  const std::optional<double> mid = ownBytes(cal, c, reads), lo = ownBytes(cal, c, reads, -1),
                              hi = ownBytes(cal, c, reads, +1);
  if (!mid || !lo || !hi) return;
  const double own = *mid, own_low = *lo, own_high = *hi;
  cell->counted_bytes = cell->bytes;
  cell->own_bytes = own;
  cell->bytes = *cell->bytes - own;
  if (cell->bytes_low) cell->bytes_low = *cell->bytes_low - own_high;
  if (cell->bytes_high) cell->bytes_high = *cell->bytes_high - own_low;
  if (duration_s > 0) {
    cell->mean_mbps = *cell->bytes / duration_s / 1e6;
    if (ceiling_mbps && *ceiling_mbps > 0) cell->share_of_ceiling = *cell->mean_mbps / *ceiling_mbps;
  }
}

MeterWindow computeWindow(const std::string& name, int repetition, int64_t start, int64_t end,
                          const std::vector<Series>& series, const std::vector<MeterGpu>& gpus,
                          const std::vector<MeterDmonSample>& dmon, double peak_span_ms,
                          const MeterCalibration* calibration, const std::vector<ReadIndex>* index) {
  MeterWindow w;
  w.name = name;
  w.repetition = repetition;
  w.start_ns = start;
  w.end_ns = end;
  w.complete = true;
  w.cells.resize(gpus.size());
  const bool net = calibration && calibration->calibrated && calibration->gpus.size() == gpus.size();
  for (size_t k = 0; k < gpus.size(); ++k) {
    // A reference, never `k < n ? series[k] : Series{}`: that conditional is a temporary, a copy of
    // the whole series for every window.
    static const Series kNone;
    const Series& s = k < series.size() ? series[k] : kNone;
    if (!readAfter(s, gpus[k], end)) w.complete = false;
    std::array<int64_t, kMeterReadKinds> reads{};
    if (net)
      reads = index && k < index->size() ? readsInside((*index)[k], start, end)
                                         : readsInside(s, dmon, static_cast<int>(k), start, end);
    for (int c = 0; c < kMeterCounters; ++c) {
      const MeterCounter mc = static_cast<MeterCounter>(c);
      if (gpus[k].supported[c]) {
        w.cells[k][c] = computeCell(s, mc, start, end, peak_span_ms, gpus[k].ceilingMBps(mc));
        if (net)
          subtractOwn(&w.cells[k][c], calibration->gpus[k], c, reads, (end - start) * 1e-9, gpus[k].ceilingMBps(mc));
      }
      if (isPcie(mc) && !dmon.empty()) addDmon(&w.cells[k][c], dmon, static_cast<int>(k), mc, start, end);
    }
  }
  return w;
}

QuiesceRecord evaluateQuiesce(const MeterWindow& idle, const std::vector<MeterGpu>& gpus, double threshold_mbps,
                              const std::vector<std::optional<std::vector<unsigned>>>& pids,
                              const std::vector<unsigned>& own_pids) {
  QuiesceRecord q;
  q.start_ns = idle.start_ns;
  q.end_ns = idle.end_ns;
  q.threshold_mbps = threshold_mbps;
  q.processes_checked = !pids.empty();
  std::vector<std::string> problems;
  for (size_t k = 0; k < idle.cells.size(); ++k) {
    std::array<std::optional<double>, kMeterCounters> rates{};
    for (int c = 0; c < kMeterCounters; ++c) {
      rates[c] = idle.cells[k][c].mean_mbps;
      if (rates[c] && *rates[c] > threshold_mbps)
        problems.push_back(
            fmt::format("GPU {} {} averaged {:.1f} MB/s over the {:.1f} s idle interval (threshold {} MB/s)",
                        gpus[k].index, meterCounterName(static_cast<MeterCounter>(c)), *rates[c],
                        (idle.end_ns - idle.start_ns) * 1e-9, threshold_mbps));
    }
    q.idle_mbps.push_back(rates);
    if (k < pids.size()) {
      if (!pids[k]) {
        q.processes_checked = false;
        continue;
      }
      for (unsigned pid : *pids[k]) {
        if (std::find(own_pids.begin(), own_pids.end(), pid) != own_pids.end()) continue;
        if (std::find(q.other_pids.begin(), q.other_pids.end(), pid) == q.other_pids.end()) q.other_pids.push_back(pid);
        problems.push_back(fmt::format("process {} uses GPU {}", pid, gpus[k].index));
      }
    }
  }
  q.passed = problems.empty();
  for (size_t i = 0; i < problems.size(); ++i) q.reason += (i ? "; " : "") + problems[i];
  return q;
}

}  // namespace tpscope::detail

namespace tpscope {

const char* meterCounterName(MeterCounter c) {
  static const char* kNames[kMeterCounters] = {"pcie_tx",   "pcie_rx",       "nvlink_tx",
                                               "nvlink_rx", "nvlink_raw_tx", "nvlink_raw_rx"};
  const int i = static_cast<int>(c);
  return i >= 0 && i < kMeterCounters ? kNames[i] : "unknown";
}

const char* meterGroupName(MeterGroup g) { return g == MeterGroup::kPcie ? "pcie" : "nvlink"; }

const char* meterReadKindName(MeterReadKind k) {
  switch (k) {
    case MeterReadKind::kPcie: return "pcie_read";
    case MeterReadKind::kNvlink: return "nvlink_read";
    case MeterReadKind::kDmon: return "dmon_call";
  }
  return "unknown";
}

std::optional<MeterSpread> meterSpread(const std::vector<std::optional<double>>& values) {
  std::vector<double> v;
  for (const auto& x : values)
    if (x) v.push_back(*x);
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  MeterSpread s;
  s.n = static_cast<int>(v.size());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

}  // namespace tpscope
