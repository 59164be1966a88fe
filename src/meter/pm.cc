// SPDX-License-Identifier: Apache-2.0
// pm.cc - PM-sampling records: clock mapping, the series with its holes, window figures.
#include "meter/pm.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace tpscope::detail {

ClockMap ClockMap::measure(const std::function<int64_t()>& source_now, const std::function<int64_t()>& monotonic_now,
                           int tries) {
  ClockMap best;
  int64_t best_span = INT64_MAX;
  for (int i = 0; i < std::max(1, tries); ++i) {
    const int64_t a = monotonic_now();
    const int64_t s = source_now();
    const int64_t b = monotonic_now();
    if (b - a < best_span) {
      best_span = b - a;
      best.offset_ns = s - (a + (b - a) / 2);
    }
  }
  return best;
}

void PmSeriesBuilder::append(const PmBatch& batch, PmSeries* out) {
  for (const PmRecord& r : batch.records) {
    if (out->ended) break;  // nothing after the end of the session counts
    if (!first_seen_) {     // began before the configuration, ended at the start: meaningless
      first_seen_ = true;
      ++dropped_;
      continue;
    }
    MeterPmSample m;
    m.gpu = gpu_;
    m.t_start_ns = map_.toMonotonic(r.start_ns);
    m.t_end_ns = map_.toMonotonic(std::max(r.end_ns, r.start_ns));
    m.bytes = r.bytes;
    if (!out->samples.empty()) {
      const int64_t prev_end = out->samples.back().t_end_ns;
      if (m.t_start_ns < prev_end) m.t_start_ns = prev_end;  // never overlap (a ns of rounding)
      if (m.t_end_ns < m.t_start_ns) m.t_end_ns = m.t_start_ns;
      if (m.t_start_ns - prev_end > gap_ns_) out->holes.push_back({prev_end, m.t_start_ns, "gap"});
    }
    out->samples.push_back(m);
  }
  if (!out->ended && (batch.overflow || !batch.error.empty())) {
    const int64_t from = out->samples.empty() ? INT64_MIN : out->samples.back().t_end_ns;
    out->holes.push_back({from, INT64_MAX, batch.overflow ? "overflow" : batch.error});
    out->ended = true;
  }
}

PmFigure computePm(const PmSeries& s, int dir, int64_t start_ns, int64_t end_ns) {
  PmFigure f;
  // First record ending after start (records are in time order and do not overlap).
  auto it = std::lower_bound(s.samples.begin(), s.samples.end(), start_ns,
                             [](const MeterPmSample& m, int64_t t) { return m.t_end_ns <= t; });
  const bool covers_start = it != s.samples.end() && it->t_start_ns <= start_ns;
  int64_t covered_to = INT64_MIN;
  for (; it != s.samples.end() && (it->t_start_ns < end_ns || (start_ns == end_ns && it->t_start_ns <= end_ns)); ++it) {
    const double b = it->bytes[dir];
    const int64_t len = it->t_end_ns - it->t_start_ns;
    const int64_t lo = std::max(it->t_start_ns, start_ns), hi = std::min(it->t_end_ns, end_ns);
    const double part = len > 0 ? b * double(std::max<int64_t>(0, hi - lo)) / double(len) : b;
    const bool inside = it->t_start_ns >= start_ns && it->t_end_ns <= end_ns;
    f.bytes += part;
    f.high += b;
    if (inside) f.low += b;
    ++f.samples;
    covered_to = it->t_end_ns;
  }
  f.edge_bytes = std::max(f.bytes - f.low, f.high - f.bytes);
  for (const PmHole& h : s.holes)
    if (h.from_ns < end_ns && h.to_ns > start_ns) {
      f.why = h.why == "gap" ? "a gap between PM records" : "PM sampling ended (" + h.why + ")";
      return f;
    }
  if (!covers_start || covered_to < end_ns) {
    f.why = s.samples.empty() ? "no PM records" : "PM records do not cover the window";
    return f;
  }
  f.complete = true;
  return f;
}

std::array<std::optional<double>, 2> pmQuietRate(const PmSeries& s, int64_t from_ns, int64_t to_ns, int slices) {
  std::array<std::optional<double>, 2> out{};
  if (to_ns <= from_ns || slices < 1) return out;
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<double> rates;
    for (int i = 0; i < slices; ++i) {
      const int64_t a = from_ns + (to_ns - from_ns) * i / slices, b = from_ns + (to_ns - from_ns) * (i + 1) / slices;
      PmFigure f = computePm(s, dir, a, b);
      if (!f.complete || b <= a) return out;
      rates.push_back(f.bytes / ((b - a) * 1e-9));
    }
    std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
    out[dir] = rates[rates.size() / 2];
  }
  return out;
}

int nvmlWrapGapsIn(const std::vector<MeterSample>& series, int64_t start_ns, int64_t end_ns,
                   std::optional<double> ceiling_mbps) {
  if (!ceiling_mbps || *ceiling_mbps <= 0) return 0;
  const double wrap_ns = 4294967296.0 / (*ceiling_mbps * 1e6) * 1e9;
  int gaps = 0;
  for (int c : {static_cast<int>(MeterCounter::kPcieTx), static_cast<int>(MeterCounter::kPcieRx)}) {
    // Only the reads around the window: a row's t_ns[c] never decreases along the series (a row without
    // a value carries the last one's), so the first read after start is found by bisection, and the pair
    // it makes with the last read before it is the first that can count. The window's work is then the
    // reads in it, not the whole series (a command that marks 200,000 windows).
    size_t i = std::partition_point(series.begin(), series.end(),
                                    [&](const MeterSample& m) { return m.t_ns[c] <= start_ns; }) -
               series.begin();
    while (i > 0 && !series[i - 1].bytes[c]) --i;
    if (i > 0) --i;
    std::optional<int64_t> prev;
    for (; i < series.size(); ++i) {
      const MeterSample& m = series[i];
      if (!m.bytes[c]) continue;
      const int64_t t = m.t_ns[c];
      if (prev && t - *prev >= wrap_ns && *prev < end_ns && t > start_ns) ++gaps;
      prev = t;
      if (t >= end_ns) break;  // every later pair starts at or after the window's end
    }
  }
  return gaps;
}

std::optional<double> pmPeakMBps(const PmSeries& s, int dir, int64_t start_ns, int64_t end_ns, double peak_span_ms) {
  auto first = std::lower_bound(s.samples.begin(), s.samples.end(), start_ns,
                                [](const MeterPmSample& m, int64_t t) { return m.t_start_ns < t; });
  auto last = first;
  while (last != s.samples.end() && last->t_end_ns <= end_ns) ++last;
  const int64_t span_ns = static_cast<int64_t>(peak_span_ms * 1e6);
  std::optional<double> peak;
  double sum = 0;
  auto j = first;
  for (auto i = first; i != last; ++i) {  // two pointers: [i, j) is the shortest run from i spanning span_ns
    while (j != last && (j == i || j[-1].t_end_ns - i->t_start_ns < span_ns)) sum += (j++)->bytes[dir];
    const int64_t len = j[-1].t_end_ns - i->t_start_ns;
    if (len < span_ns || len <= 0) break;
    const double mbps = sum / (len * 1e-9) / 1e6;
    if (!peak || mbps > *peak) peak = mbps;
    sum -= i->bytes[dir];
  }
  return peak;
}

void applyPm(MeterWindow* w, const std::vector<PmSeries>& series, const std::vector<MeterGpu>& gpus,
             const std::vector<std::array<std::optional<double>, 2>>& own_bps, bool replace, double peak_span_ms) {
  const double dur_s = (w->end_ns - w->start_ns) * 1e-9;
  for (size_t k = 0; k < w->cells.size() && k < series.size(); ++k) {
    for (int dir = 0; dir < 2; ++dir) {
      const MeterCounter c = dir == kPmTx ? MeterCounter::kPcieTx : MeterCounter::kPcieRx;
      MeterCell& cell = w->cells[k][static_cast<int>(c)];
      PmFigure f = computePm(series[k], dir, w->start_ns, w->end_ns);
      if (!f.complete) {
        w->pm_complete = false;
        if (w->pm_note.empty()) w->pm_note = "GPU " + std::to_string(gpus[k].index) + ": " + f.why;
      }
      std::optional<double> own =
          k < own_bps.size() && own_bps[k][dir] ? std::optional<double>(*own_bps[k][dir] * dur_s) : std::nullopt;
      // Beside NVML, PM also sees NVML's reads in the window (~14 KB RX + 18 KB TX each on H200, what the
      // NVML calibration measured them at in NVML's count, within its ~3 % difference): subtract them too.
      if (!replace && cell.own_bytes) own = own.value_or(0) + *cell.own_bytes;
      double net = f.bytes - own.value_or(0);
      if (std::abs(net) < 0.5) net = 0;  // below a byte: rounding of the own-traffic estimate
      cell.pm_counted_bytes = f.bytes;
      cell.pm_own_bytes = own;
      cell.pm_bytes = net;
      cell.pm_edge_bytes = f.edge_bytes;
      cell.pm_samples = f.samples;
      if (replace) {
        cell.counted_bytes = f.bytes;
        cell.own_bytes = own;
        cell.bytes = net;
        cell.bytes_low = std::max(0.0, f.low - own.value_or(0));
        cell.bytes_high = f.high - own.value_or(0);
        cell.samples = f.samples;
        cell.mean_mbps = dur_s > 0 ? std::optional<double>(net / dur_s / 1e6) : std::nullopt;
        const std::optional<double> ceiling = gpus[k].ceilingMBps(c);
        cell.share_of_ceiling = cell.mean_mbps && ceiling && *ceiling > 0
                                    ? std::optional<double>(*cell.mean_mbps / *ceiling)
                                    : std::nullopt;
        cell.peak_mbps = pmPeakMBps(series[k], dir, w->start_ns, w->end_ns, peak_span_ms);
      } else if (cell.bytes && *cell.bytes != 0) {
        cell.pm_ratio = net / *cell.bytes;
      }
    }
  }
}

}  // namespace tpscope::detail
