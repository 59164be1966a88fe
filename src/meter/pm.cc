// SPDX-License-Identifier: Apache-2.0
// pm.cc - PM-sampling records: clock mapping, the series with its holes, window figures.
#include "meter/pm.h"

#include <algorithm>
#include <climits>

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

void appendRecord(const MeterRecord& r, int64_t gap_ns, PmSeries* out) {
  MeterRecord m = r;
  if (!out->samples.empty()) {
    const int64_t prev_end = out->samples.back().t_end_ns;
    if (m.t_start_ns < prev_end) m.t_start_ns = prev_end;  // never overlap (a ns of rounding)
    if (m.t_end_ns < m.t_start_ns) m.t_end_ns = m.t_start_ns;
    if (m.t_start_ns - prev_end > gap_ns) out->holes.push_back({prev_end, m.t_start_ns, "gap"});
  }
  out->samples.push_back(m);
}

PmSeries pmSeriesOf(const std::vector<MeterRecord>& records, int64_t gap_ns) {
  PmSeries s;
  for (const MeterRecord& r : records) appendRecord(r, gap_ns, &s);
  return s;
}

void PmSeriesBuilder::append(const PmBatch& batch, PmSeries* out) {
  for (const PmRecord& r : batch.records) {
    if (out->ended) break;  // nothing after the end of the session counts
    if (!first_seen_) {     // began before the configuration, ended at the start: meaningless
      first_seen_ = true;
      ++dropped_;
      continue;
    }
    MeterRecord m;
    m.gpu = gpu_;
    m.t_start_ns = map_.toMonotonic(r.start_ns);
    m.t_end_ns = map_.toMonotonic(std::max(r.end_ns, r.start_ns));
    m.bytes = r.bytes;
    appendRecord(m, gap_ns_, out);
  }
  if (!out->ended && (batch.overflow || !batch.error.empty())) {
    const int64_t from = out->samples.empty() ? INT64_MIN : out->samples.back().t_end_ns;
    out->holes.push_back({from, INT64_MAX, batch.overflow ? "overflow" : batch.error});
    out->ended = true;
  }
}

PmFigure computePm(const PmSeries& s, int dir, int64_t start_ns, int64_t end_ns, const char* what) {
  PmFigure f;
  // First record ending after start (records are in time order and do not overlap).
  auto it = std::lower_bound(s.samples.begin(), s.samples.end(), start_ns,
                             [](const MeterRecord& m, int64_t t) { return m.t_end_ns <= t; });
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
  // Holes are appended in time order and do not overlap (each lies between two records, the end of the
  // session after the last), so the first that ends after start is the only one that can be the first
  // to touch the window: a bisection, not a pass over every hole.
  const auto h =
      std::partition_point(s.holes.begin(), s.holes.end(), [&](const PmHole& x) { return x.to_ns <= start_ns; });
  if (h != s.holes.end() && h->from_ns < end_ns) {
    f.why = h->why == "gap" ? "a gap between PM records" : "PM sampling ended (" + h->why + ")";
    return f;
  }
  if (!covers_start || covered_to < end_ns) {
    f.why = std::string(s.samples.empty() ? "no PM records over " : "PM records do not cover ") + what;
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

std::optional<double> pmPeakMBps(const PmSeries& s, int dir, int64_t start_ns, int64_t end_ns, double peak_span_ms) {
  auto first = std::lower_bound(s.samples.begin(), s.samples.end(), start_ns,
                                [](const MeterRecord& m, int64_t t) { return m.t_start_ns < t; });
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

}  // namespace tpscope::detail
