// SPDX-License-Identifier: Apache-2.0
// meter_sampler_test - the whole Meter (threads, ring, collector, windows) on scripted GPUs.
#include <gtest/gtest.h>

#include <thread>

#include "meter/fake_source.h"
#include "meter/meter_internal.h"

namespace tpscope::detail {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<Meter> startFake(const std::vector<FakeGpuScript>& scripts, MeterOptions o = {}) {
  std::string reason;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsSuccess) << reason;
  std::unique_ptr<Meter> m;
  EXPECT_EQ(createMeter(o, makeFakeSources(scripts, o.method), &m, &reason), tpsSuccess) << reason;
  return m;
}

TEST(MeterSampler, SteadyTrafficGivesRateTimesDurationAcrossWraps) {
  // 20 GB/s on PCIe TX: the 32-bit counter wraps every 0.21 s, so 0.5 s crosses at least two wraps.
  FakeGpuScript s;
  s.background_bytes_per_s = {20e9, 1e6, 3e9, 0, 0, 0};
  auto m = startFake({s});
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(m->begin("steady"), tpsSuccess);
  std::this_thread::sleep_for(milliseconds(500));
  ASSERT_EQ(m->end("steady"), tpsSuccess);
  m->stop();
  std::vector<MeterWindow> ws = m->windows();
  ASSERT_EQ(ws.size(), 1u);
  const MeterWindow& w = ws[0];
  EXPECT_TRUE(w.complete);
  const double dur = (w.end_ns - w.start_ns) * 1e-9;
  EXPECT_NEAR(*w.cells[0][0].bytes / (20e9 * dur), 1.0, 0.01);
  EXPECT_NEAR(*w.cells[0][2].mean_mbps, 3000, 30);
  EXPECT_FALSE(w.cells[0][4].bytes) << "raw NVLink is N/A in the script";
  EXPECT_GT(w.cells[0][0].samples, 100);  // 2 ms period over 0.5 s (a loaded CI box wakes late)
  std::vector<MeterCadence> cad = m->cadence();
  ASSERT_EQ(cad.size(), 1u);
  EXPECT_EQ(cad[0].dropped, 0);
  EXPECT_EQ(cad[0].wrap_gaps, 0);
  EXPECT_GE(cad[0].period_p50_ms, 1.9);
  EXPECT_LT(cad[0].period_p50_ms, 4.0);
}

TEST(MeterSampler, BurstLandsInItsWindowAndOnItsGpu) {
  // GPU1 moves 100 MB in a 50 ms burst starting 0.2 s after the meter starts; GPU0 stays idle.
  std::vector<FakeGpuScript> s(2);
  s[1].bursts.push_back({0.2, 0.25, MeterCounter::kNvlinkRx, 2e9});
  auto m = startFake(s);
  ASSERT_EQ(m->begin("all"), tpsSuccess);
  std::this_thread::sleep_for(milliseconds(400));
  ASSERT_EQ(m->end("all"), tpsSuccess);
  m->stop();
  MeterWindow w = m->windows().at(0);
  EXPECT_NEAR(*w.cells[1][3].bytes, 100e6, 1e6);
  EXPECT_NEAR(*w.cells[1][3].peak_mbps, 2000, 200);  // the burst's rate, not the 250 MB/s mean
  EXPECT_DOUBLE_EQ(*w.cells[0][3].bytes, 0);
}

TEST(MeterSampler, WindowErrorsAreStatusCodesAndStopClosesOpenWindows) {
  auto m = startFake({FakeGpuScript{}});
  EXPECT_EQ(m->begin(""), tpsInvalidArgument);
  EXPECT_EQ(m->end("never"), tpsInvalidUsage);
  EXPECT_EQ(m->begin("x"), tpsSuccess);
  EXPECT_EQ(m->begin("x"), tpsInvalidUsage);
  const int64_t t = Meter::now();
  EXPECT_EQ(m->addWindow("given", t, t - 1), tpsInvalidArgument);
  EXPECT_EQ(m->addWindow("given", t, t), tpsSuccess);
  m->stop();
  EXPECT_EQ(m->begin("late"), tpsInvalidUsage);
  std::vector<MeterWindow> ws = m->windows();
  ASSERT_EQ(ws.size(), 2u);
  EXPECT_EQ(ws[1].name, "x");
  EXPECT_TRUE(ws[1].complete) << "stop() takes a read after closing open windows";
  EXPECT_TRUE(ws[0].cells[0][0].bytes);
  EXPECT_FALSE(ws[0].cells[0][0].mean_mbps) << "zero-length window";
}

TEST(MeterSampler, DmonMethodRunsBesideTheCounters) {
  FakeGpuScript s;
  s.background_bytes_per_s = {5e9, 0, 0, 0, 0, 0};
  s.dmon_window_ns = 5000000;
  MeterOptions o;
  o.method = MeterMethod::kBoth;
  o.dmon_period_ms = 0;  // back to back
  auto m = startFake({s}, o);
  ASSERT_EQ(m->begin("w"), tpsSuccess);
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_EQ(m->end("w"), tpsSuccess);
  m->stop();
  MeterWindow w = m->windows().at(0);
  EXPECT_GT(w.cells[0][0].dmon_samples, 5);
  EXPECT_NEAR(*w.cells[0][0].dmon_mbps, 5000, 50);
  EXPECT_NEAR(*w.cells[0][0].mean_mbps, 5000, 50);
  EXPECT_FALSE(m->dmonSamples().empty());
  EXPECT_TRUE(m->latestDmon(0, MeterCounter::kPcieRx));
}

TEST(MeterSampler, QuiesceFailsOnTrafficAndOnAStrangerAndIsRecorded) {
  std::vector<FakeGpuScript> s(2);
  s[1].background_bytes_per_s[1] = 500e6;  // GPU1 receives 500 MB/s
  s[0].pids = {999999};
  auto m = startFake(s);
  QuiesceOptions q;
  q.idle_ms = 100;
  QuiesceRecord rec;
  ASSERT_EQ(m->quiesce(q, &rec), tpsSuccess);
  EXPECT_FALSE(rec.passed);
  EXPECT_NE(rec.reason.find("GPU 1 pcie_rx"), std::string::npos) << rec.reason;
  EXPECT_NE(rec.reason.find("process 999999 uses GPU 0"), std::string::npos) << rec.reason;
  EXPECT_NEAR(*rec.idle_mbps[1][1], 500, 10);
  q.threshold_mbps = 1000;
  q.check_processes = false;
  ASSERT_EQ(m->quiesce(q, &rec), tpsSuccess);
  EXPECT_TRUE(rec.passed) << rec.reason;
  EXPECT_FALSE(rec.processes_checked);
  EXPECT_EQ(m->quiesceRecords().size(), 2u);
}

TEST(MeterSampler, OptionsOutOfRangeAreRefused) {
  MeterOptions o;
  std::string reason;
  o.period_us = 60000;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsInvalidArgument);
  EXPECT_NE(reason.find("wrap"), std::string::npos);
  o.period_us = 50;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsInvalidArgument);
  o.period_us = 0;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsSuccess);
  EXPECT_EQ(o.period_us, kDefaultPeriodUs);
}

}  // namespace
}  // namespace tpscope::detail
