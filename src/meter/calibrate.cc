// SPDX-License-Identifier: Apache-2.0
// calibrate.cc - quiet intervals against bursts of reads, per GPU and kind of read.
#include "meter/calibrate.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace tpscope::detail {

namespace {

// The values of one interval's brackets: each counter as its own group's read gave it.
struct Snapshot {
  std::array<uint64_t, kMeterCounters> raw{};
  std::array<int64_t, kMeterCounters> t_ns{};
  uint32_t valid = 0;
};

// Bytes and seconds of counter c between two snapshots; the counter wraps at its width.
struct Delta {
  std::array<std::optional<double>, kMeterCounters> bytes{};
  std::array<double, kMeterCounters> seconds{};
};

Delta delta(CounterReader& r, const Snapshot& a, const Snapshot& b) {
  Delta d;
  for (int c = 0; c < kMeterCounters; ++c) {
    if (!(a.valid & b.valid & (1u << c))) continue;
    const int bits = r.widthBits(static_cast<MeterCounter>(c));
    const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    d.bytes[c] = static_cast<double>((b.raw[c] - a.raw[c]) & mask);
    d.seconds[c] = std::max<int64_t>(0, b.t_ns[c] - a.t_ns[c]) * 1e-9;
  }
  return d;
}

void sleepFor(int64_t ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }

struct Summary {
  std::optional<double> median, low, high;
};
Summary summarise(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.low = v.front();
  s.high = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

// Solves a x = b for a small square system (Gaussian elimination with partial pivoting); false when
// singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>* x) {
  const size_t n = b.size();
  for (size_t col = 0; col < n; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < n; ++r)
      if (std::abs(a[r][col]) > std::abs(a[piv][col])) piv = r;
    if (std::abs(a[piv][col]) < 1e-12) return false;
    std::swap(a[piv], a[col]);
    std::swap(b[piv], b[col]);
    for (size_t r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (size_t k = col; k < n; ++k) a[r][k] -= f * a[col][k];
      b[r] -= f * b[col];
    }
  }
  x->resize(n);
  for (size_t i = 0; i < n; ++i) (*x)[i] = b[i] / a[i][i];
  return true;
}

}  // namespace

// Every interval is opened by a PCIe read then an NVLink read (where the GPU has NVLink) and closed by
// an NVLink read then a PCIe read, so the reads that bracket a counter are the same in every
// interval. A counter's bytes over interval i are then
//     delta_i = quiet_rate * T_i + sum over kinds k of (reads_ik + bracket_k) * cost_k
// where reads_ik are the reads of kind k inside the interval's body and bracket_k what the brackets
// contribute: one read of the counter's own group (its first bracket's traffic lands after its value
// was taken, or its last's before: one read's worth either way), plus, for a PCIe counter, the two
// NVLink reads nested inside its brackets. One quiet interval and one burst per kind give as many
// equations as unknowns (the quiet rate and a cost per kind), solved per round and counter.
MeterGpuCalibration calibrateGpu(CounterReader& counters, DmonReader* dmon, const MeterGpu& info,
                                 const CalibrationPlan& plan) {
  const bool nvlink = counters.supported() & groupMask(MeterGroup::kNvlink);
  std::vector<MeterReadKind> kinds{MeterReadKind::kPcie};
  if (nvlink) kinds.push_back(MeterReadKind::kNvlink);
  if (dmon) kinds.push_back(MeterReadKind::kDmon);
  struct Interval {
    Delta d;
    std::array<int, kMeterReadKinds> reads{};  // in the body
  };
  // Reads group g into s: each counter of the group keeps its own value and time.
  auto take = [&](MeterGroup g, Snapshot* s) {
    Reading x;
    counters.read(g, &x);
    for (int c = 0; c < kMeterCounters; ++c) {
      if (!(groupMask(g) & x.valid & (1u << c))) continue;
      s->raw[c] = x.raw[c];
      s->t_ns[c] = x.t_ns[c];
      s->valid |= 1u << c;
    }
  };
  auto open = [&](Snapshot* s) {
    take(MeterGroup::kPcie, s);
    if (nvlink) take(MeterGroup::kNvlink, s);
  };
  auto close = [&](Snapshot* s) {
    if (nvlink) take(MeterGroup::kNvlink, s);
    take(MeterGroup::kPcie, s);
  };
  auto measure = [&](MeterReadKind kind) {
    Interval iv;
    Snapshot a, b;
    open(&a);
    Reading x;
    MeterDmonSample dm;
    int n = 0;
    switch (kind) {
      case MeterReadKind::kPcie: {
        const int64_t spacing = std::clamp<int64_t>(plan.pcie_spacing_ns, 350000, 5000000);
        const int64_t t0 = monotonicNs(), until = t0 + plan.burst_ns;
        for (int64_t next = t0; next < until; next += spacing) {
          sleepFor(next - monotonicNs());
          counters.read(MeterGroup::kPcie, &x);
          ++n;
        }
        break;
      }
      case MeterReadKind::kNvlink:
        for (; n < plan.nvlink_reads; ++n) counters.read(MeterGroup::kNvlink, &x);
        break;
      case MeterReadKind::kDmon:
        for (; n < plan.dmon_calls; ++n) dmon->read(n % 2 ? MeterCounter::kPcieTx : MeterCounter::kPcieRx, &dm);
        break;
    }
    close(&b);
    iv.d = delta(counters, a, b);
    iv.reads[static_cast<int>(kind)] = n;
    return iv;
  };
  auto quietInterval = [&] {
    Interval iv;
    Snapshot a, b;
    open(&a);
    sleepFor(plan.quiet_ns);
    close(&b);
    iv.d = delta(counters, a, b);
    return iv;
  };

  std::array<std::array<std::vector<double>, kMeterCounters>, kMeterReadKinds> per_round;
  std::array<std::vector<double>, kMeterCounters> quiet_rates;
  std::array<int, kMeterReadKinds> reads{};
  MeterGpuCalibration out;
  for (int round = 0; round < plan.rounds; ++round) {
    if (out.rounds + (plan.rounds - round) < plan.min_rounds) break;  // too busy to reach min_rounds
    const Interval quiet = quietInterval();
    bool busy = false;
    for (int c = 0; c < kMeterCounters; ++c)
      if (quiet.d.bytes[c] && quiet.d.seconds[c] > 0)
        busy = busy || *quiet.d.bytes[c] / quiet.d.seconds[c] / 1e6 > plan.busy_mbps;
    if (busy) continue;
    std::vector<Interval> intervals{quiet};
    for (MeterReadKind k : kinds) intervals.push_back(measure(k));
    for (size_t i = 0; i < kinds.size(); ++i)
      reads[static_cast<int>(kinds[i])] += intervals[1 + i].reads[static_cast<int>(kinds[i])];
    for (int c = 0; c < kMeterCounters; ++c) {
      if (!info.supported[c]) continue;
      const MeterReadKind own = isPcie(static_cast<MeterCounter>(c)) ? MeterReadKind::kPcie : MeterReadKind::kNvlink;
      std::vector<std::vector<double>> a;
      std::vector<double> b;
      bool ok = true;
      for (const Interval& iv : intervals) {
        if (!iv.d.bytes[c]) ok = false;
        if (!ok) break;
        std::vector<double> row{iv.d.seconds[c]};
        for (MeterReadKind k : kinds) {
          double n = iv.reads[static_cast<int>(k)];
          if (k == own) n += 1;                                                    // the counter's own bracket
          if (k == MeterReadKind::kNvlink && own == MeterReadKind::kPcie) n += 2;  // nested NVLink brackets
          row.push_back(n);
        }
        a.push_back(row);
        b.push_back(*iv.d.bytes[c]);
      }
      std::vector<double> x;
      if (!ok || !solve(a, b, &x)) continue;
      quiet_rates[c].push_back(x[0] / 1e6);
      for (size_t i = 0; i < kinds.size(); ++i) per_round[static_cast<int>(kinds[i])][c].push_back(x[1 + i]);
    }
    ++out.rounds;
  }
  if (out.rounds < plan.min_rounds) return out;
  for (int k = 0; k < kMeterReadKinds; ++k) {
    MeterReadCost& cost = out.cost[k];
    cost.reads = reads[k];
    if (cost.reads == 0) continue;
    for (int c = 0; c < kMeterCounters; ++c) {
      if (!info.supported[c]) continue;
      const Summary s = summarise(per_round[k][c]);
      cost.bytes[c] = s.median;
      cost.low[c] = s.low;
      cost.high[c] = s.high;
    }
  }
  for (int c = 0; c < kMeterCounters; ++c)
    if (info.supported[c]) out.quiet_mbps[c] = summarise(quiet_rates[c]).median;
  return out;
}

MeterCalibration calibrateAll(std::vector<std::unique_ptr<CounterReader>>& counters,
                              std::vector<std::unique_ptr<DmonReader>>& dmon, const std::vector<MeterGpu>& gpus,
                              const CalibrationPlan& plan) {
  MeterCalibration cal;
  cal.start_ns = monotonicNs();
  cal.gpus.resize(gpus.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < counters.size() && k < gpus.size(); ++k) {
    DmonReader* d = k < dmon.size() ? dmon[k].get() : nullptr;
    threads.emplace_back([&, k, d] { cal.gpus[k] = calibrateGpu(*counters[k], d, gpus[k], plan); });
  }
  for (std::thread& t : threads) t.join();
  cal.end_ns = monotonicNs();
  std::vector<std::string> busy;
  for (size_t k = 0; k < cal.gpus.size(); ++k)
    if (cal.gpus[k].rounds < plan.min_rounds) busy.push_back(std::to_string(gpus[k].index));
  cal.calibrated = !cal.gpus.empty() && busy.empty() && counters.size() == gpus.size();
  if (counters.empty()) {
    cal.note = "not calibrated: the meter reads no counters (dmon method only)";
  } else if (!busy.empty()) {
    std::string list;
    for (const std::string& b : busy) list += (list.empty() ? "" : ", ") + b;
    cal.note = "not calibrated: GPU " + list + " moved more than " + std::to_string(static_cast<int>(plan.busy_mbps)) +
               " MB/s in too many quiet intervals; figures include the meter's own reads";
  } else {
    cal.note = "calibrated: " + std::to_string(cal.gpus.front().rounds) +
               " rounds of a quiet interval against a burst of reads";
  }
  return cal;
}

std::optional<double> ownBytes(const MeterGpuCalibration& g, MeterReadKind k, int c, int64_t reads, int which) {
  if (reads == 0) return 0.0;
  const MeterReadCost& cost = g.cost[static_cast<int>(k)];
  const std::optional<double>& per = which < 0 ? cost.low[c] : which > 0 ? cost.high[c] : cost.bytes[c];
  if (!per) return std::nullopt;
  return *per * static_cast<double>(reads);
}

std::optional<double> ownBytes(const MeterGpuCalibration& g, int c, const std::array<int64_t, kMeterReadKinds>& reads,
                               int which) {
  double sum = 0;
  for (int k = 0; k < kMeterReadKinds; ++k) {
    const std::optional<double> x = ownBytes(g, static_cast<MeterReadKind>(k), c, reads[k], which);
    if (!x) return std::nullopt;
    sum += *x;
  }
  return sum;
}

}  // namespace tpscope::detail
