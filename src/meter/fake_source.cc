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

}  // namespace

double fakeCumulative(const FakeGpuScript& s, MeterCounter c, double t_s) {
  const int k = static_cast<int>(c);
  double v = s.background_bytes_per_s[k] * std::max(0.0, t_s);
  for (const FakeBurst& b : s.bursts)
    if (b.counter == c && t_s > b.from_s) v += b.bytes_per_s * (std::min(t_s, b.to_s) - b.from_s);
  return v;
}

SourceSet makeFakeSources(const std::vector<FakeGpuScript>& scripts, MeterMethod method) {
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
    if (method != MeterMethod::kDmon) set.counters.push_back(std::make_unique<FakeCounterReader>(s, t0, tally));
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
  *out = makeFakeSources(chosen, options.method);
  for (size_t k = 0; k < ids.size(); ++k) out->gpus[k].index = ids[k];
  return tpsSuccess;
}

}  // namespace tpscope::detail
