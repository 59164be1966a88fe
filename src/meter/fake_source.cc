// SPDX-License-Identifier: Apache-2.0
// fake_source.cc - scripted counter and dmon readers (tests and CI: MeterOptions::fake_gpus).
#include "meter/fake_source.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace tpscope::detail {

namespace {

// Reads of each kind made so far on one fake GPU, shared by its counter and dmon readers.
struct ReadTally {
  std::array<std::atomic<int64_t>, kMeterReadKinds> n{};
  double own(const FakeGpuScript& s, int c) const {
    double v = 0;
    for (int k = 0; k < kMeterReadKinds; ++k) v += s.bytes_per_read[k][c] * n[k].load();
    return v;
  }
};

void sleepNs(int64_t ns) {
  if (ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
}

class FakeCounterReader : public CounterReader {
 public:
  FakeCounterReader(const FakeGpuScript& s, int64_t t0, std::shared_ptr<ReadTally> tally)
      : s_(s), t0_(t0), tally_(std::move(tally)) {}
  uint32_t supported() const override { return s_.supported; }
  int widthBits(MeterCounter c) const override { return isPcie(c) ? 32 : 64; }
  bool read(MeterGroup group, Reading* out) override {
    *out = Reading{};
    out->t_before_ns = monotonicNs();
    sleepNs(group == MeterGroup::kPcie ? s_.read_cost_ns : s_.nvlink_read_cost_ns);
    out->t_after_ns = monotonicNs();
    const int64_t t = out->t_before_ns + (out->t_after_ns - out->t_before_ns) / 2;
    for (int c = 0; c < kMeterCounters; ++c) {
      if (!(s_.supported & groupMask(group) & (1u << c))) continue;
      const MeterCounter mc = static_cast<MeterCounter>(c);
      uint64_t v = static_cast<uint64_t>(fakeCumulative(s_, mc, (t - t0_) * 1e-9) + tally_->own(s_, c));
      // PCIe: a 32-bit counter that starts 1 MB below its wrap.
      if (isPcie(mc)) v = (v + 0xFFFFFFFFull - 1000000) & 0xFFFFFFFFull;
      out->raw[c] = v;
      out->t_ns[c] = t;
      out->valid |= 1u << c;
    }
    tally_->n[group == MeterGroup::kPcie ? 0 : 1].fetch_add(1);
    return out->valid != 0;
  }

 private:
  FakeGpuScript s_;
  int64_t t0_;
  std::shared_ptr<ReadTally> tally_;
};

class FakeDmonReader : public DmonReader {
 public:
  FakeDmonReader(const FakeGpuScript& s, int gpu, int64_t t0, std::shared_ptr<ReadTally> tally)
      : s_(s), gpu_(gpu), t0_(t0), tally_(std::move(tally)) {}
  bool read(MeterCounter direction, MeterDmonSample* out) override {
    out->gpu = gpu_;
    out->counter = direction;
    out->t_before_ns = monotonicNs();
    sleepNs(s_.dmon_window_ns);
    out->t_after_ns = monotonicNs();
    const double a = (out->t_before_ns - t0_) * 1e-9, b = (out->t_after_ns - t0_) * 1e-9;
    out->mbps = (fakeCumulative(s_, direction, b) - fakeCumulative(s_, direction, a)) / (b - a) / 1e6;
    tally_->n[static_cast<int>(MeterReadKind::kDmon)].fetch_add(1);
    return true;
  }

 private:
  FakeGpuScript s_;
  int gpu_;
  int64_t t0_;
  std::shared_ptr<ReadTally> tally_;
};

// Records of `interval_ns` up to the last whole interval before now, on a clock kFakePmClockOffsetNs
// ahead of the monotonic one; bytes from the script, plus the sampler's own rate.
class FakePmReader : public PmReader {
 public:
  FakePmReader(const FakeGpuScript& s, int64_t t0, int64_t interval_ns) : s_(s), t0_(t0), interval_ns_(interval_ns) {}
  int64_t sourceNow() const override { return monotonicNs() + kFakePmClockOffsetNs; }
  bool start(std::string*) override {
    next_ = monotonicNs() - interval_ns_;  // the first record began before the start, as CUPTI's does
    return true;
  }
  void decode(PmBatch* out) override {
    if (ended_) return;
    const int64_t now = stopped_at_ ? stopped_at_ : monotonicNs();
    for (; next_ + interval_ns_ <= now; next_ += interval_ns_) {
      const double a = (next_ - t0_) * 1e-9, b = (next_ + interval_ns_ - t0_) * 1e-9;
      if (s_.pm_overflow_at_s >= 0 && b > s_.pm_overflow_at_s) {
        out->overflow = true;
        ended_ = true;
        return;
      }
      bool dropped = false;
      for (const auto& [from, to] : s_.pm_gaps) dropped = dropped || (a < to && b > from);
      if (dropped) continue;
      PmRecord r;
      r.start_ns = next_ + kFakePmClockOffsetNs;
      r.end_ns = next_ + interval_ns_ + kFakePmClockOffsetNs;
      for (int dir = 0; dir < 2; ++dir) {
        const MeterCounter c = dir == 0 ? MeterCounter::kPcieTx : MeterCounter::kPcieRx;
        r.bytes[dir] = fakeCumulative(s_, c, b) - fakeCumulative(s_, c, a) + s_.pm_own_bytes_per_s[dir] * (b - a);
      }
      out->records.push_back(r);
    }
  }
  void stop() override { stopped_at_ = monotonicNs(); }

 private:
  FakeGpuScript s_;
  int64_t t0_, interval_ns_;
  int64_t next_ = 0, stopped_at_ = 0;
  bool ended_ = false;
};

}  // namespace

double fakeCumulative(const FakeGpuScript& s, MeterCounter c, double t_s) {
  const int k = static_cast<int>(c);
  double v = s.background_bytes_per_s[k] * std::max(0.0, t_s);
  for (const FakeBurst& b : s.bursts)
    if (b.counter == c && t_s > b.from_s) v += b.bytes_per_s * (std::min(t_s, b.to_s) - b.from_s);
  return v;
}

SourceSet makeFakeSources(const std::vector<FakeGpuScript>& scripts, MeterMethod method, MeterSource source,
                          int64_t pm_interval_us) {
  SourceSet set;
  const int64_t t0 = monotonicNs();
  for (size_t k = 0; k < scripts.size(); ++k) {
    const FakeGpuScript& s = scripts[k];
    MeterGpu g;
    g.index = static_cast<int>(k);
    g.name = s.name;
    g.bus_id = "0000:F" + std::to_string(k) + ":00.0";
    for (int c = 0; c < kMeterCounters; ++c) g.supported[c] = s.supported & (1u << c);
    g.nvlink_links = (s.supported & 0x0c) ? s.nvlink_links : 0;
    g.pcie_ceiling_mbps = s.pcie_ceiling_mbps;
    g.nvlink_ceiling_mbps = s.nvlink_ceiling_mbps;
    auto tally = std::make_shared<ReadTally>();
    if (source == MeterSource::kPm)
      for (int c = 2; c < kMeterCounters; ++c) g.supported[c] = false;  // PM counts PCIe only
    if (method != MeterMethod::kDmon && source != MeterSource::kPm)
      set.counters.push_back(std::make_unique<FakeCounterReader>(s, t0, tally));
    if (source != MeterSource::kNvml) set.pm.push_back(std::make_unique<FakePmReader>(s, t0, pm_interval_us * 1000));
    if (method != MeterMethod::kCounters) set.dmon.push_back(std::make_unique<FakeDmonReader>(s, int(k), t0, tally));
    set.gpus.push_back(g);
  }
  set.processes = [scripts](int gpu) -> std::optional<std::vector<unsigned>> { return scripts[gpu].pids; };
  return set;
}

tpsResult_t openFakeSources(const MeterOptions& options, SourceSet* out, std::string* reason) {
  // Two GPUs with steady traffic: GPU0 sends 1000 MB/s over PCIe and 2000 MB/s over NVLink to GPU1.
  std::vector<FakeGpuScript> all(2);
  all[0].background_bytes_per_s = {1e9, 250e6, 2e9, 0, 0, 0};
  all[1].background_bytes_per_s = {10e6, 10e6, 0, 2e9, 0, 0};
  std::vector<FakeGpuScript> chosen;
  std::vector<int> ids = options.devices;
  if (ids.empty()) ids = {0, 1};
  for (int id : ids) {
    if (id < 0 || id >= static_cast<int>(all.size())) {
      *reason = "GPU index " + std::to_string(id) + " does not exist: this machine has 2 GPUs (0-1)";
      return tpsInvalidArgument;
    }
    FakeGpuScript s = all[id];
    if (!options.nvlink) s.supported &= 0x03;
    chosen.push_back(s);
  }
  for (FakeGpuScript& s : chosen) s.pm_own_bytes_per_s = {1.4e6, 0.3e6};  // what H200's sampler adds at 100 us
  *out = makeFakeSources(chosen, options.method, options.source, options.pm_interval_us);
  for (size_t k = 0; k < ids.size(); ++k) out->gpus[k].index = ids[k];
  return tpsSuccess;
}

}  // namespace tpscope::detail
