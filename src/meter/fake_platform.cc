// SPDX-License-Identifier: Apache-2.0
// fake_platform.cc - scripted counter, dmon and PM readers (tests and CI: MeterOptions::fake_gpus).
#include "meter/fake_platform.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "common/bounded_input.h"

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
  int nvlinkLinks() const override { return (s_.supported & 0x0c) ? s_.nvlink_links : 0; }
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

namespace {

class FakePlatform : public Platform {
 public:
  FakePlatform(const std::vector<FakeGpuScript>& scripts, int64_t pm_interval_us)
      : scripts_(scripts), t0_(monotonicNs()), pm_interval_ns_(pm_interval_us * 1000) {
    for (size_t k = 0; k < scripts_.size(); ++k) {
      const FakeGpuScript& s = scripts_[k];
      MeterGpu g;
      g.index = static_cast<int>(k);
      g.name = s.name;
      g.bus_id = "0000:F" + std::to_string(k) + ":00.0";
      g.uuid = !s.uuid.empty() ? s.uuid : "GPU-fa4e0000-0000-0000-0000-00000000000" + std::to_string(k % 10);
      g.pcie_ceiling_mbps = s.pcie_ceiling_mbps;
      g.nvlink_ceiling_mbps = s.nvlink_ceiling_mbps;
      gpus_.push_back(g);
      tallies_.push_back(std::make_shared<ReadTally>());
    }
  }
  const std::vector<MeterGpu>& gpus() const override { return gpus_; }
  std::vector<MeterGpu>& mutableGpus() { return gpus_; }
  std::unique_ptr<CounterReader> counterReader(size_t k, std::string*) override {
    return std::make_unique<FakeCounterReader>(scripts_[k], t0_, tallies_[k]);
  }
  std::unique_ptr<DmonReader> dmonReader(size_t k, std::string*) override {
    return std::make_unique<FakeDmonReader>(scripts_[k], static_cast<int>(k), t0_, tallies_[k]);
  }
  tpsResult_t pmReaders(std::vector<std::unique_ptr<PmReader>>* out, std::string*) override {
    for (const FakeGpuScript& s : scripts_) out->push_back(std::make_unique<FakePmReader>(s, t0_, pm_interval_ns_));
    return tpsSuccess;
  }
  std::optional<std::vector<unsigned>> processes(size_t k) override { return scripts_[k].pids; }
  MeterPcieLink pcieLink(size_t k) override { return scripts_[k].pcie_link; }

 private:
  std::vector<FakeGpuScript> scripts_;
  int64_t t0_, pm_interval_ns_;
  std::vector<MeterGpu> gpus_;
  std::vector<std::shared_ptr<ReadTally>> tallies_;
};

}  // namespace

std::unique_ptr<Platform> makeFakePlatform(const std::vector<FakeGpuScript>& scripts, int64_t pm_interval_us) {
  return std::make_unique<FakePlatform>(scripts, pm_interval_us);
}

namespace {

std::optional<MeterCounter> counterNamed(const std::string& name) {
  for (int c = 0; c < kMeterCounters; ++c)
    if (name == meterCounterName(static_cast<MeterCounter>(c))) return static_cast<MeterCounter>(c);
  return std::nullopt;
}

std::optional<int> optInt(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<int>();
}

}  // namespace

tpsResult_t parseFakeScript(const std::string& text, double now_unix_s, std::vector<FakeGpuScript>* out,
                            std::string* reason) {
  out->clear();
  try {
    std::string error;
    const std::optional<nlohmann::json> parsed = parseJsonBounded(text, &error);  // outside input: bounded
    if (!parsed) throw std::invalid_argument(error);
    const nlohmann::json& j = *parsed;
    const double shift = j.contains("epoch_unix_s") ? j["epoch_unix_s"].get<double>() - now_unix_s : 0.0;
    for (const nlohmann::json& g : j.at("gpus")) {
      FakeGpuScript s;
      s.name = g.value("name", s.name);
      s.uuid = g.value("uuid", s.uuid);
      if (!g.value("nvlink", true)) s.supported &= 0x03;
      const nlohmann::json background = g.value("background_bytes_per_s", nlohmann::json::object());
      for (const auto& [name, rate] : background.items()) {
        const std::optional<MeterCounter> c = counterNamed(name);
        if (!c) throw std::invalid_argument("unknown counter '" + name + "'");
        s.background_bytes_per_s[static_cast<int>(*c)] = rate.get<double>();
      }
      const nlohmann::json bursts = g.value("bursts", nlohmann::json::array());
      for (const nlohmann::json& b : bursts) {
        const std::optional<MeterCounter> c = counterNamed(b.at("counter").get<std::string>());
        if (!c) throw std::invalid_argument("unknown counter '" + b.at("counter").get<std::string>() + "'");
        FakeBurst fb{b.at("from_s").get<double>() + shift, b.at("to_s").get<double>() + shift, *c,
                     b.at("bytes_per_s").get<double>()};
        if (!(fb.to_s >= fb.from_s) || !(fb.bytes_per_s >= 0))
          throw std::invalid_argument("a burst needs to_s >= from_s and bytes_per_s >= 0");
        s.bursts.push_back(fb);
      }
      if (g.contains("pcie_link")) {
        const nlohmann::json& l = g["pcie_link"];
        s.pcie_link = {optInt(l, "gen_current"), optInt(l, "gen_max"), optInt(l, "width_current"),
                       optInt(l, "width_max")};
      }
      out->push_back(s);
    }
    if (out->empty()) throw std::invalid_argument("'gpus' is empty");
  } catch (const std::exception& e) {
    *reason = std::string("the fake meter script does not parse: ") + e.what();
    return tpsInvalidArgument;
  }
  return tpsSuccess;
}

tpsResult_t openFakePlatform(const MeterOptions& options, std::unique_ptr<Platform>* out, std::string* reason) {
  // Without a script: two GPUs with steady traffic; GPU0 sends 1000 MB/s over PCIe and 2000 MB/s over
  // NVLink to GPU1.
  std::vector<FakeGpuScript> all(2);
  all[0].background_bytes_per_s = {1e9, 250e6, 2e9, 0, 0, 0};
  all[1].background_bytes_per_s = {10e6, 10e6, 0, 2e9, 0, 0};
  if (!options.fake_script.empty()) {
    std::ifstream f(options.fake_script);
    std::stringstream text;
    text << f.rdbuf();
    if (!f) {
      *reason = "cannot read the fake meter script " + options.fake_script;
      return tpsInvalidArgument;
    }
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (tpsResult_t r = parseFakeScript(text.str(), ts.tv_sec + ts.tv_nsec * 1e-9, &all, reason); r != tpsSuccess)
      return r;
  }
  std::vector<FakeGpuScript> chosen;
  std::vector<int> ids = options.devices;
  if (ids.empty())
    for (size_t k = 0; k < all.size(); ++k) ids.push_back(static_cast<int>(k));
  for (int id : ids) {
    if (id < 0 || id >= static_cast<int>(all.size())) {
      *reason = "GPU index " + std::to_string(id) + " does not exist: this machine has " + std::to_string(all.size()) +
                " GPUs (0-" + std::to_string(all.size() - 1) + ")";
      return tpsInvalidArgument;
    }
    FakeGpuScript s = all[id];
    if (!options.nvlink) s.supported &= 0x03;
    chosen.push_back(s);
  }
  for (FakeGpuScript& s : chosen) s.pm_own_bytes_per_s = {1.4e6, 0.3e6};  // what H200's sampler adds at 100 us
  auto platform = std::make_unique<FakePlatform>(chosen, options.pm_interval_us);
  for (size_t k = 0; k < ids.size(); ++k) platform->mutableGpus()[k].index = ids[k];
  *out = std::move(platform);
  return tpsSuccess;
}

}  // namespace tpscope::detail
