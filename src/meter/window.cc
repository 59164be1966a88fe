// SPDX-License-Identifier: Apache-2.0
// window.cc - interpolation, proration, bounds, peak rate, the dmon figure; net figures and windows over
// any sources; spread and quiescing verdicts.
#include "meter/window.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

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

int wrapGapsIn(const Series& series, int64_t start_ns, int64_t end_ns, std::optional<double> ceiling_mbps) {
  if (!ceiling_mbps || *ceiling_mbps <= 0) return 0;
  const double wrap_ns = 4294967296.0 / (*ceiling_mbps * 1e6) * 1e9;
  int gaps = 0;
  for (int c : {static_cast<int>(MeterCounter::kPcieTx), static_cast<int>(MeterCounter::kPcieRx)}) {
    // A pair counts when it ends after start and begins before end. Pairs that end at or before start
    // cannot, so the walk begins at the last value read at or before start (t_ns[c] never decreases
    // along the series) and stops at the first read at or after end: every later pair begins there.
    size_t i = upperBound(series, c, start_ns);
    const size_t before = validBefore(series, c, i);
    if (before != std::string::npos) i = before;
    std::optional<int64_t> prev;
    for (; i < series.size(); ++i) {
      const MeterSample& m = series[i];
      if (!has(m, c)) continue;
      const int64_t t = m.t_ns[c];
      if (prev && t - *prev >= wrap_ns && *prev < end_ns && t > start_ns) ++gaps;
      prev = t;
      if (t >= end_ns) break;
    }
  }
  return gaps;
}

SourceFigure counterFigure(const Series& s, MeterCounter counter, int64_t start, int64_t end, double peak_span_ms) {
  const int c = static_cast<int>(counter);
  SourceFigure f;
  // Reads inside [start, end] and the two that bracket it.
  const size_t first_in = lowerBound(s, c, start), past_in = upperBound(s, c, end);
  size_t inner_first = std::string::npos, inner_last = std::string::npos;
  for (size_t i = first_in; i < past_in; ++i) {
    if (!has(s[i], c)) continue;
    if (inner_first == std::string::npos) inner_first = i;
    inner_last = i;
    ++f.samples;
  }
  const size_t last = validBefore(s, c, s.size());
  f.complete = last != std::string::npos && s[last].t_ns[c] >= end;
  const size_t lo =
      inner_first != std::string::npos && s[inner_first].t_ns[c] == start ? inner_first : validBefore(s, c, first_in);
  const size_t hi =
      inner_last != std::string::npos && s[inner_last].t_ns[c] == end ? inner_last : validFrom(s, c, past_in);
  if (lo == std::string::npos || hi == std::string::npos) return f;  // not bracketed: N/A

  const std::optional<double> c_start = cumulativeAt(s, counter, start), c_end = cumulativeAt(s, counter, end);
  if (!c_start || !c_end) return f;
  f.bytes = *c_end - *c_start;
  f.high = at(s[hi], c) - at(s[lo], c);
  f.low = inner_first == std::string::npos ? 0.0 : at(s[inner_last], c) - at(s[inner_first], c);
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
  if (!peak && s[hi].t_ns[c] > s[lo].t_ns[c]) peak = *f.high / ((s[hi].t_ns[c] - s[lo].t_ns[c]) * 1e-9) / 1e6;
  f.peak_mbps = peak;
  return f;
}

namespace {

int64_t midOf(const MeterDmonSample& d) { return readMidNs(d.t_before_ns, d.t_after_ns); }
MeterReadKind kindOf(const MeterSample& x) {
  return x.group == MeterGroup::kPcie ? MeterReadKind::kPcie : MeterReadKind::kNvlink;
}

// Calls f on each reading of [first, last) (any order) whose midpoint lies in [start, end], in their order.
template <typename F>
void forDmonIn(const MeterDmonSample* first, const MeterDmonSample* last, int64_t start, int64_t end, F&& f) {
  for (const MeterDmonSample* d = first; d != last; ++d) {
    const int64_t mid = midOf(*d);
    if (mid >= start && mid <= end) f(*d);
  }
}

SourceFigure dmonFigureOf(const MeterDmonSample* first, const MeterDmonSample* last, int gpu, MeterCounter c,
                          int64_t start, int64_t end) {
  SourceFigure f;
  double sum = 0;
  forDmonIn(first, last, start, end, [&](const MeterDmonSample& d) {
    if (d.gpu != gpu || d.counter != c || !d.mbps) return;
    sum += *d.mbps;
    ++f.samples;
  });
  if (f.samples > 0) f.mean_mbps = sum / f.samples;
  return f;
}

int64_t dmonCallsOf(const MeterDmonSample* first, const MeterDmonSample* last, int gpu, int64_t start, int64_t end) {
  int64_t n = 0;
  forDmonIn(first, last, start, end, [&](const MeterDmonSample& d) { n += d.gpu == gpu; });
  return n;
}

}  // namespace

SourceFigure dmonFigure(const std::vector<MeterDmonSample>& dmon, int gpu, MeterCounter c, int64_t start, int64_t end) {
  return dmonFigureOf(dmon.data(), dmon.data() + dmon.size(), gpu, c, start, end);
}

DmonRange dmonReadingsIn(const std::vector<MeterDmonSample>& dmon, int64_t start, int64_t end) {
  if (end < start) return {};
  const MeterDmonSample *b = dmon.data(), *e = dmon.data() + dmon.size();
  const MeterDmonSample* first = std::partition_point(b, e, [&](const MeterDmonSample& d) { return midOf(d) < start; });
  return {first, std::partition_point(first, e, [&](const MeterDmonSample& d) { return midOf(d) <= end; })};
}

// A range is already cut to its window: every reading in it counts.
SourceFigure dmonFigure(DmonRange r, int gpu, MeterCounter c) {
  return dmonFigureOf(r.first, r.last, gpu, c, INT64_MIN, INT64_MAX);
}

int64_t dmonCalls(DmonRange r, int gpu) { return dmonCallsOf(r.first, r.last, gpu, INT64_MIN, INT64_MAX); }

std::array<int64_t, kMeterReadKinds> readsInside(const Series& s, const std::vector<MeterDmonSample>& dmon, int gpu,
                                                 int64_t start, int64_t end) {
  std::array<int64_t, kMeterReadKinds> n{};
  for (const MeterSample& x : s) {
    const int64_t mid = readMidNs(x.t_before_ns, x.t_after_ns);
    if (mid >= start && mid <= end) ++n[static_cast<int>(kindOf(x))];
  }
  n[static_cast<int>(MeterReadKind::kDmon)] = dmonCallsOf(dmon.data(), dmon.data() + dmon.size(), gpu, start, end);
  return n;
}

void ReadIndex::add(MeterReadKind kind, int64_t mid_ns) {
  std::vector<int64_t>& m = mids[static_cast<int>(kind)];
  if (m.empty() || m.back() <= mid_ns)
    m.push_back(mid_ns);
  else
    m.insert(std::upper_bound(m.begin(), m.end(), mid_ns), mid_ns);
}

ReadIndex indexReads(const Series& s) {
  ReadIndex index;
  for (const MeterSample& x : s) index.add(kindOf(x), readMidNs(x.t_before_ns, x.t_after_ns));
  return index;
}

std::array<int64_t, kMeterReadKinds> readsInside(const ReadIndex& index, int64_t start, int64_t end) {
  std::array<int64_t, kMeterReadKinds> n{};
  if (end < start) return n;
  for (int k = 0; k < kMeterReadKinds; ++k) {
    const std::vector<int64_t>& m = index.mids[k];
    n[k] = std::upper_bound(m.begin(), m.end(), end) - std::lower_bound(m.begin(), m.end(), start);
  }
  return n;
}

std::optional<OwnBytes> ownOfReads(const MeterGpuCalibration& cal, int c,
                                   const std::array<int64_t, kMeterReadKinds>& reads) {
  const std::optional<double> mid = ownBytes(cal, c, reads), lo = ownBytes(cal, c, reads, -1),
                              hi = ownBytes(cal, c, reads, +1);
  if (!mid || !lo || !hi) return std::nullopt;
  return OwnBytes{*mid, *lo, *hi};
}

MeterFigure netFigure(const SourceFigure& f, const std::optional<OwnBytes>& own, double duration_s,
                      std::optional<double> ceiling_mbps) {
  MeterFigure m;
  m.samples = f.samples;
  if (duration_s > 0) m.peak_mbps = f.peak_mbps;
  if (f.bytes) {
    m.counted_bytes = f.bytes;
    double net = *f.bytes;
    std::optional<double> low = f.low, high = f.high;
    if (own) {
      m.own_bytes = own->bytes;
      net -= own->bytes;
      if (low) *low -= own->high;
      if (high) *high -= own->low;
    }
    m.bytes = net;
    m.bytes_low = low;
    m.bytes_high = high;
    if (duration_s > 0) m.mean_mbps = net / duration_s / 1e6;
  } else {
    m.mean_mbps = f.mean_mbps;  // a source of rates
  }
  if (m.mean_mbps && ceiling_mbps && *ceiling_mbps > 0) m.share_of_ceiling = *m.mean_mbps / *ceiling_mbps;
  return m;
}

MeterWindow computeWindow(const std::string& name, int repetition, int64_t start, int64_t end,
                          const std::vector<const Source*>& sources, const std::vector<MeterGpu>& gpus,
                          double peak_span_ms) {
  MeterWindow w;
  w.name = name;
  w.repetition = repetition;
  w.start_ns = start;
  w.end_ns = end;
  w.cells.resize(gpus.size());
  const double duration_s = (end - start) * 1e-9;
  // A verdict for every source that can miss a window (not dmon's readings: a rate has no edge to miss).
  std::vector<int> verdict_of(sources.size(), -1);
  for (size_t i = 0; i < sources.size(); ++i)
    if (sources[i]->canMiss()) {
      verdict_of[i] = static_cast<int>(w.verdicts.size());
      w.verdicts.push_back({sources[i]->name(), true, "", sources[i]->gapsIn(start, end)});
    }
  for (size_t k = 0; k < gpus.size(); ++k) {
    for (int c = 0; c < kMeterCounters; ++c) {
      const MeterCounter mc = static_cast<MeterCounter>(c);
      // Every source's own traffic on this counter, in source order; nullopt when none measured its own.
      std::optional<OwnBytes> own;
      for (const Source* src : sources)
        if (const std::optional<OwnBytes> o = src->own(k, mc, start, end)) {
          if (!own) own = OwnBytes{};
          own->bytes += o->bytes;
          own->low += o->low;
          own->high += o->high;
        }
      MeterCell& cell = w.cells[k][c];
      for (size_t i = 0; i < sources.size(); ++i) {
        const Source& src = *sources[i];
        if (!src.measures(k, mc)) continue;
        const SourceFigure f = src.figure(k, mc, start, end, peak_span_ms);
        if (verdict_of[i] >= 0 && !f.complete && w.verdicts[verdict_of[i]].complete) {
          MeterVerdict& v = w.verdicts[verdict_of[i]];
          v.complete = false;
          if (!f.why.empty()) v.why = "GPU " + std::to_string(gpus[k].index) + ": " + f.why;
        }
        const MeterFigure m = netFigure(f, src.net() ? own : std::nullopt, duration_s, gpus[k].ceilingMBps(mc));
        if (i == 0) {
          static_cast<MeterFigure&>(cell) = m;
        } else {
          std::optional<double> ratio;
          if (m.bytes && cell.bytes && *cell.bytes != 0) ratio = *m.bytes / *cell.bytes;
          cell.beside.push_back({src.name(), m, ratio});
        }
      }
    }
  }
  w.complete = verdict_of.empty() || verdict_of[0] < 0 || w.verdicts[verdict_of[0]].complete;
  return w;
}

namespace {

// Recorded NVML series as a source: what a run folder or a test replays.
class RecordedCounters : public Source {
 public:
  RecordedCounters(const std::vector<Series>& series, const std::vector<MeterGpu>& gpus, const MeterCalibration* cal)
      : series_(series), gpus_(gpus), cal_(cal && cal->calibrated && cal->gpus.size() == gpus.size() ? cal : nullptr) {}
  const char* name() const override { return "nvml"; }
  tpsResult_t start(std::string*) override { return tpsSuccess; }
  void stop() override {}
  bool measures(size_t k, MeterCounter c) const override { return gpus_[k].supported[static_cast<int>(c)]; }
  SourceFigure figure(size_t k, MeterCounter c, int64_t start, int64_t end, double peak_span_ms) const override {
    // A reference, never `k < n ? series_[k] : Series{}`: that conditional is a temporary, a copy of the
    // whole series for every window.
    static const Series kNone;
    return counterFigure(k < series_.size() ? series_[k] : kNone, c, start, end, peak_span_ms);
  }
  std::optional<OwnBytes> own(size_t k, MeterCounter c, int64_t start, int64_t end) const override {
    if (!cal_ || k >= series_.size()) return std::nullopt;
    return ownOfReads(cal_->gpus[k], static_cast<int>(c), readsInside(series_[k], {}, static_cast<int>(k), start, end));
  }
  bool readAfter(int64_t t) const override {
    for (size_t k = 0; k < gpus_.size(); ++k)
      if (k >= series_.size() || !detail::readAfter(series_[k], gpus_[k], t)) return false;
    return true;
  }

 private:
  const std::vector<Series>& series_;
  const std::vector<MeterGpu>& gpus_;
  const MeterCalibration* cal_;
};

// Recorded dmon readings as a source, their calls at the calibrated cost.
class RecordedDmon : public Source {
 public:
  RecordedDmon(const std::vector<MeterDmonSample>& dmon, const MeterCalibration* cal, size_t gpus)
      : dmon_(dmon), cal_(cal && cal->calibrated && cal->gpus.size() == gpus ? cal : nullptr) {}
  const char* name() const override { return "dmon"; }
  tpsResult_t start(std::string*) override { return tpsSuccess; }
  void stop() override {}
  bool net() const override { return false; }
  bool measures(size_t, MeterCounter c) const override { return isPcie(c); }
  SourceFigure figure(size_t k, MeterCounter c, int64_t start, int64_t end, double) const override {
    return dmonFigure(dmon_, static_cast<int>(k), c, start, end);
  }
  std::optional<OwnBytes> own(size_t k, MeterCounter c, int64_t start, int64_t end) const override {
    if (!cal_) return std::nullopt;
    return ownOfReads(cal_->gpus[k], static_cast<int>(c), readsInside({}, dmon_, static_cast<int>(k), start, end));
  }
  bool readAfter(int64_t) const override { return true; }
  bool canMiss() const override { return false; }

 private:
  const std::vector<MeterDmonSample>& dmon_;
  const MeterCalibration* cal_;
};

}  // namespace

MeterWindow computeWindow(const std::string& name, int repetition, int64_t start, int64_t end,
                          const std::vector<Series>& series, const std::vector<MeterGpu>& gpus,
                          const std::vector<MeterDmonSample>& dmon, double peak_span_ms,
                          const MeterCalibration* calibration) {
  RecordedCounters counters(series, gpus, calibration);
  RecordedDmon rates(dmon, calibration, gpus.size());
  std::vector<const Source*> sources{&counters};
  if (!dmon.empty()) sources.push_back(&rates);
  return computeWindow(name, repetition, start, end, sources, gpus, peak_span_ms);
}

MeterCell computeCell(const Series& s, MeterCounter c, int64_t start, int64_t end, double peak_span_ms,
                      std::optional<double> ceiling_mbps) {
  MeterCell cell;
  static_cast<MeterFigure&>(cell) =
      netFigure(counterFigure(s, c, start, end, peak_span_ms), std::nullopt, (end - start) * 1e-9, ceiling_mbps);
  return cell;
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
