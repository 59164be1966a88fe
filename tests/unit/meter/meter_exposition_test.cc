// SPDX-License-Identifier: Apache-2.0
// meter_exposition_test - `tpscope meter --serve`'s series of the meter itself, checked by value: the
// reads it made, the reads that gave no value, the PCIe gaps long enough to hide a wrap and the bytes its
// own reads added, each against a count made here from the meter's samples and the reader's own tally
// (src/meter/exposition.h). A series that printed 0, or another series' number, fails.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "meter/exposition.h"
#include "meter/fake_platform.h"
#include "meter/meter_internal.h"

namespace tpscope::detail {
namespace {

// A fake GPU's counter reader that gives no values on every fifth PCIe read once armed (as NVML does for
// a field it cannot read), and counts what it did.
class FlakyReader : public CounterReader {
 public:
  explicit FlakyReader(std::unique_ptr<CounterReader> inner) : inner_(std::move(inner)) {}
  uint32_t supported() const override { return inner_->supported(); }
  int widthBits(MeterCounter c) const override { return inner_->widthBits(c); }
  int nvlinkLinks() const override { return inner_->nvlinkLinks(); }
  bool read(MeterGroup group, Reading* out) override {
    const bool ok = inner_->read(group, out);
    if (group != MeterGroup::kPcie || !armed) return ok;
    if (++pcie_reads % 5 != 0) return ok;
    out->valid = 0;
    out->error = "scripted: no value";
    ++failures;
    return false;
  }
  std::atomic<bool> armed{false};
  std::atomic<int64_t> pcie_reads{0}, failures{0};

 private:
  std::unique_ptr<CounterReader> inner_;
};

// Scripted GPUs whose first GPU's counter reader is a FlakyReader (`reader`, once the meter asked for it).
class FlakyPlatform : public Platform {
 public:
  explicit FlakyPlatform(std::unique_ptr<Platform> inner) : inner_(std::move(inner)) {}
  const std::vector<MeterGpu>& gpus() const override { return inner_->gpus(); }
  std::unique_ptr<CounterReader> counterReader(size_t k, std::string* reason) override {
    std::unique_ptr<CounterReader> r = inner_->counterReader(k, reason);
    if (k != 0 || !r) return r;
    auto flaky = std::make_unique<FlakyReader>(std::move(r));
    reader = flaky.get();
    return flaky;
  }
  std::unique_ptr<DmonReader> dmonReader(size_t k, std::string* reason) override {
    return inner_->dmonReader(k, reason);
  }
  tpsResult_t pmReaders(std::vector<std::unique_ptr<PmReader>>* out, std::string* reason) override {
    return inner_->pmReaders(out, reason);
  }
  std::optional<std::vector<unsigned>> processes(size_t k) override { return inner_->processes(k); }
  MeterPcieLink pcieLink(size_t k) override { return inner_->pcieLink(k); }
  FlakyReader* reader = nullptr;

 private:
  std::unique_ptr<Platform> inner_;
};

// Series name + labels as printed -> value, from the text format.
std::map<std::string, double> series(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

TEST(MeterExposition, TheMetersOwnSeriesHaveTheirValues) {
  FakeGpuScript s;
  s.background_bytes_per_s = {3e6, 2e6, 0, 0, 0, 0};
  s.bytes_per_read[static_cast<int>(MeterReadKind::kPcie)] = {27000, 24000, 0, 0, 0, 0};  // tx, rx
  s.bytes_per_read[static_cast<int>(MeterReadKind::kDmon)] = {5000, 4000, 0, 0, 0, 0};
  s.dmon_window_ns = 5000000;
  s.supported = 0x03;  // PCIe only
  // A ceiling so high that 2^32 bytes pass in 4 us: every space between two PCIe reads could hide a wrap.
  s.pcie_ceiling_mbps = 1e9;
  MeterOptions o;
  o.sources = {"nvml", "dmon"};
  o.nvlink = false;
  o.calibrate = true;
  std::string reason;
  ASSERT_EQ(resolveOptions(&o, &reason), tpsSuccess) << reason;
  auto platform = std::make_unique<FlakyPlatform>(makeFakePlatform({s}));
  FlakyPlatform* flaky = platform.get();
  std::unique_ptr<Meter> m;
  ASSERT_EQ(createMeter(o, std::move(platform), &m, &reason), tpsSuccess) << reason;
  FlakyReader* reader = flaky->reader;
  ASSERT_TRUE(reader);
  ASSERT_TRUE(m->calibration().calibrated) << m->calibration().note;
  reader->armed = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  m->stop();  // the series stop moving: the text and the counts below are of the same reads

  const std::map<std::string, double> got = series(renderMetrics(*m, {}));
  const std::string gpu = "gpu=\"0\",uuid=\"" + m->gpus()[0].uuid + "\",bus_id=\"" + m->gpus()[0].bus_id + "\"";
  auto value = [&](const std::string& key) {
    const auto it = got.find(key);
    EXPECT_NE(it, got.end()) << "no series " << key;
    return it == got.end() ? -1.0 : it->second;
  };

  // The meter's samples, counted here: PCIe rows made, rows without a value, spaces between valid reads.
  int64_t rows = 0, failed = 0, gaps = 0;
  std::map<int, int64_t> last_t;
  for (const MeterSample& x : m->samples()) {
    if (x.group != MeterGroup::kPcie) continue;
    ++rows;
    bool row_failed = false;
    for (MeterCounter c : {MeterCounter::kPcieRx, MeterCounter::kPcieTx}) {
      const int k = static_cast<int>(c);
      if (!x.bytes[k]) {
        row_failed = true;
        continue;
      }
      if (last_t.count(k) && (x.t_ns[k] - last_t[k]) * 1e-9 * 1e15 >= 4294967296.0) ++gaps;
      last_t[k] = x.t_ns[k];
    }
    failed += row_failed;
  }
  const int64_t pcie_reads = m->reads(0, MeterReadKind::kPcie);
  ASSERT_GE(reader->failures, 5);
  EXPECT_EQ(rows, pcie_reads) << "the meter keeps every read (no history limit here)";
  EXPECT_EQ(value("tpscope_meter_reads_total{" + gpu + ",kind=\"pcie_read\"}"), pcie_reads);
  EXPECT_EQ(value("tpscope_meter_reads_total{" + gpu + ",kind=\"dmon_call\"}"), m->reads(0, MeterReadKind::kDmon));
  EXPECT_GT(m->reads(0, MeterReadKind::kDmon), 0);
  EXPECT_EQ(value("tpscope_meter_failed_reads_total{" + gpu + ",group=\"pcie\"}"), failed);
  EXPECT_EQ(failed, reader->failures) << "every read the reader failed, and no other, is a failed read";
  EXPECT_GT(gaps, 4 * reader->failures);
  EXPECT_EQ(value("tpscope_meter_wrap_gaps_total{" + gpu + ",group=\"pcie\"}"), gaps);

  // Own bytes: every read of each kind at its calibrated cost, and that cost the script's, within 3 %.
  const MeterGpuCalibration& cal = m->calibration().gpus.at(0);
  for (const auto& [counter, name, script_cost] : {std::make_tuple(MeterCounter::kPcieRx, "pcie_rx", 24000.0),
                                                   std::make_tuple(MeterCounter::kPcieTx, "pcie_tx", 27000.0)}) {
    const int c = static_cast<int>(counter);
    double want = 0;
    for (int k = 0; k < kMeterReadKinds; ++k) {
      const auto& cost = cal.cost[k].bytes[c];
      if (cost) want += std::max(0.0, *cost) * static_cast<double>(m->reads(0, static_cast<MeterReadKind>(k)));
    }
    EXPECT_EQ(value(std::string("tpscope_meter_own_") + name + "_bytes_total{" + gpu + "}"), std::llround(want));
    const auto& pcie_cost = cal.cost[static_cast<int>(MeterReadKind::kPcie)].bytes[c];
    ASSERT_TRUE(pcie_cost);
    EXPECT_NEAR(*pcie_cost, script_cost, 0.03 * script_cost) << name;
    EXPECT_GT(want, static_cast<double>(pcie_reads) * script_cost * 0.9) << name;
  }
}

}  // namespace
}  // namespace tpscope::detail
