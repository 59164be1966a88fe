// SPDX-License-Identifier: Apache-2.0
// meter_sampler_test - the whole Meter (threads, rings, collector, windows) on scripted GPUs, and the
// merge of a GPU's PCIe and NVLink streams into one series.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "meter/fake_platform.h"
#include "meter/meter_internal.h"
#include "meter/sampler.h"

namespace tpscope::detail {
namespace {

using std::chrono::milliseconds;

// Scripts run from the moment the sources are made, so the tests that time bursts do not calibrate
// (the calibration would take the first half second); the calibration tests turn it on.
std::unique_ptr<Meter> startFake(const std::vector<FakeGpuScript>& scripts, MeterOptions o = {},
                                 bool calibrate = false) {
  o.calibrate = calibrate;
  std::string reason;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsSuccess) << reason;
  std::unique_ptr<Meter> m;
  EXPECT_EQ(createMeter(o, makeFakePlatform(scripts), &m, &reason), tpsSuccess) << reason;
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
  ASSERT_EQ(cad.size(), 2u) << "PCIe and NVLink threads";
  for (const MeterCadence& c : cad) {
    EXPECT_EQ(c.dropped, 0);
    EXPECT_EQ(c.wrap_gaps, 0);
    EXPECT_GE(c.period_p50_ms, 1.9);
    EXPECT_LT(c.period_p50_ms, 4.0);
  }
  EXPECT_EQ(cad[0].group, MeterGroup::kPcie);
  EXPECT_EQ(cad[1].group, MeterGroup::kNvlink);
}

// H200's shape at a smaller scale: a PCIe read costs 0.2 ms, an NVLink read 15 ms. Each group keeps
// its own cadence, and windows, samples and latest() treat the counters apart.
TEST(MeterSampler, PcieKeepsItsPeriodWhileSlowNvlinkReadsRunBackToBack) {
  FakeGpuScript s;
  s.nvlink_read_cost_ns = 15000000;
  s.background_bytes_per_s = {5e9, 1e6, 0, 2e6, 0, 0};
  s.bursts.push_back({0.30, 0.31, MeterCounter::kNvlinkTx, 10e9});  // 100 MB in 10 ms
  const int64_t t0 = Meter::now();                                  // the script's time 0 is a few us later
  MeterOptions fixed;  // a fixed period: the burst window below is added afterwards, with no edge reads
  fixed.period_us = fixed.idle_period_us = 2000;
  auto m = startFake({s}, fixed);
  ASSERT_EQ(m->begin("steady"), tpsSuccess);
  std::this_thread::sleep_for(milliseconds(600));
  ASSERT_EQ(m->end("steady"), tpsSuccess);
  // The burst with idle guards of 4 NVLink periods each side, as the GPU tests do.
  ASSERT_EQ(m->addWindow("burst", t0 + 240 * 1000000, t0 + 370 * 1000000), tpsSuccess);
  m->stop();

  std::vector<MeterCadence> cad = m->cadence();
  ASSERT_EQ(cad.size(), 2u);
  const MeterCadence &pcie = cad[0], &nvl = cad[1];
  ASSERT_EQ(pcie.group, MeterGroup::kPcie);
  ASSERT_EQ(nvl.group, MeterGroup::kNvlink);
  EXPECT_LT(pcie.period_p50_ms, 4.0) << "PCIe waits on nothing but its period";
  EXPECT_GT(pcie.reads, 150);
  EXPECT_GE(nvl.period_p50_ms, 14.9) << "NVLink runs back to back at its read cost";
  EXPECT_LT(nvl.period_p50_ms, 30.0);
  EXPECT_GE(nvl.read_cost_mean_ms, 14.9);
  EXPECT_GT(nvl.reads, 15);
  EXPECT_EQ(pcie.dropped + nvl.dropped, 0);

  const std::vector<MeterWindow> ws = m->windows();
  ASSERT_EQ(ws.size(), 2u);
  const MeterWindow& w = ws[0];
  EXPECT_TRUE(w.complete);
  const double dur = (w.end_ns - w.start_ns) * 1e-9;
  EXPECT_NEAR(*w.cells[0][0].bytes / (5e9 * dur), 1.0, 0.01);
  EXPECT_NEAR(*w.cells[0][3].bytes / (2e6 * dur), 1.0, 0.02);
  EXPECT_GT(w.cells[0][0].samples, 150);
  EXPECT_GT(w.cells[0][2].samples, 15);
  EXPECT_LT(w.cells[0][2].samples, w.cells[0][0].samples / 3) << "each counter counts its own reads";
  const MeterWindow& b = ws[1];
  EXPECT_NEAR(*b.cells[0][2].bytes, 100e6, 0.5e6) << "the burst, whole: its edges fall in idle NVLink time";
  EXPECT_LT((*b.cells[0][2].bytes_high - *b.cells[0][2].bytes_low) / *b.cells[0][2].bytes, 0.01);

  // Per counter, times never go back along the GPU's merged samples; each row has one group's values.
  const std::vector<MeterSample> all = m->samples();
  std::array<int64_t, kMeterCounters> last{};
  int nvlink_rows = 0;
  for (const MeterSample& x : all) {
    for (int c = 0; c < kMeterCounters; ++c) {
      EXPECT_GE(x.t_ns[c], last[c]) << meterCounterName(static_cast<MeterCounter>(c));
      last[c] = x.t_ns[c];
      if (x.bytes[c]) EXPECT_EQ(groupOf(static_cast<MeterCounter>(c)), x.group);
    }
    nvlink_rows += x.group == MeterGroup::kNvlink;
  }
  EXPECT_EQ(nvlink_rows, nvl.reads);
  std::optional<MeterSample> latest = m->latest(0);
  ASSERT_TRUE(latest);
  for (int c = 0; c < 4; ++c) EXPECT_TRUE(latest->bytes[c]) << "latest() holds every counter's newest value";
}

// The merge itself, without threads: reads of two groups, collected out of time order across groups.
TEST(MeterSeriesBuilder, MergesTwoStreamsByCounterWithTimesSortedPerCounter) {
  MeterGpu g;
  for (int c = 0; c < 4; ++c) g.supported[c] = true;
  g.pcie_ceiling_mbps = 63015.4;
  SeriesBuilder b(0, g, {32, 32, 64, 64, 64, 64});
  Series s;
  auto read = [](MeterGroup group, int64_t t, uint64_t v) {
    Reading r;
    r.t_before_ns = t - 1;
    r.t_after_ns = t + 1;
    for (int c = 0; c < 4; ++c) {
      if (groupOf(static_cast<MeterCounter>(c)) != group) continue;
      r.raw[c] = v;
      r.t_ns[c] = t;
      r.valid |= 1u << c;
    }
    return r;
  };
  const int64_t ms = 1000000;
  b.append(MeterGroup::kPcie, read(MeterGroup::kPcie, 10 * ms, 0xFFFFFFF0u), &s);
  b.append(MeterGroup::kPcie, read(MeterGroup::kPcie, 12 * ms, 0x10u), &s);    // wrapped: +0x20
  b.append(MeterGroup::kNvlink, read(MeterGroup::kNvlink, 5 * ms, 1000), &s);  // a slow read, collected late
  b.append(MeterGroup::kPcie, read(MeterGroup::kPcie, 14 * ms, 0x30u), &s);
  Reading failed = read(MeterGroup::kPcie, 16 * ms, 0);
  failed.valid = 0;
  failed.error = "Unknown Error";
  b.append(MeterGroup::kPcie, failed, &s);
  b.append(MeterGroup::kNvlink, read(MeterGroup::kNvlink, 27 * ms, 23000), &s);
  b.append(MeterGroup::kPcie, read(MeterGroup::kPcie, 200 * ms, 0x40u), &s);  // a gap a wrap could hide in
  ASSERT_EQ(s.size(), 7u);
  for (int c = 0; c < kMeterCounters; ++c)
    for (size_t i = 1; i < s.size(); ++i) EXPECT_GE(s[i].t_ns[c], s[i - 1].t_ns[c]) << "counter " << c << " row " << i;
  EXPECT_EQ(*s[1].bytes[0], 0x20u);
  EXPECT_EQ(*s[3].bytes[0], 0x40u);
  EXPECT_FALSE(s[2].bytes[0]) << "an NVLink row has no PCIe value";
  EXPECT_EQ(s[2].t_ns[0], 12 * ms) << "it carries PCIe's latest time";
  EXPECT_EQ(s[3].t_ns[2], 5 * ms) << "a PCIe row carries NVLink's latest time, not its own";
  EXPECT_FALSE(s[4].bytes[0]) << "a failed read has no value";
  EXPECT_EQ(*s[5].bytes[2], 22000u);
  EXPECT_EQ(s[2].group, MeterGroup::kNvlink);
  EXPECT_EQ(b.wrapGaps(), 2) << "186 ms between PCIe values at 63 GB/s, on each PCIe counter";
  EXPECT_EQ(b.failedReads(MeterGroup::kPcie), 1);
  EXPECT_STREQ(b.lastError(MeterGroup::kPcie), "Unknown Error");
  EXPECT_EQ(b.failedReads(MeterGroup::kNvlink), 0) << "a row of one group is no failure of the other";
  EXPECT_EQ(b.lastError(MeterGroup::kNvlink), nullptr);
  // The newest good read per group, with its own bracket: what a window edge in idle time waits for.
  ASSERT_TRUE(b.latestRead(MeterGroup::kNvlink));
  EXPECT_EQ(b.latestRead(MeterGroup::kNvlink)->t_before_ns, 27 * ms - 1);
  ASSERT_TRUE(b.latestRead(MeterGroup::kPcie));
  EXPECT_EQ(b.latestRead(MeterGroup::kPcie)->t_before_ns, 200 * ms - 1);
  // The window code sees each counter's own reads: NVLink interpolates between its two rows.
  EXPECT_DOUBLE_EQ(*cumulativeAt(s, MeterCounter::kNvlinkTx, 16 * ms), 11000.0);
  EXPECT_DOUBLE_EQ(*cumulativeAt(s, MeterCounter::kPcieTx, 13 * ms), 0x30);
  MeterGpu info = g;
  EXPECT_TRUE(readAfter(s, info, 27 * ms));
  EXPECT_FALSE(readAfter(s, info, 28 * ms)) << "PCIe has read after 28 ms, NVLink has not";
  ASSERT_TRUE(b.latest());
  EXPECT_EQ(*b.latest()->bytes[2], 22000u);
  EXPECT_EQ(b.latest()->t_ns[2], 27 * ms);
  EXPECT_EQ(*b.latest()->bytes[0], 0x50u);
  EXPECT_EQ(b.latest()->t_ns[0], 200 * ms);
}

TEST(MeterSeriesBuilder, AFailedReadIsNeverTheLatestGoodRead) {
  MeterGpu g;
  for (int c = 0; c < 4; ++c) g.supported[c] = true;
  SeriesBuilder b(0, g, {32, 32, 64, 64, 64, 64});
  Series s;
  Reading ok;
  ok.t_before_ns = 10, ok.t_after_ns = 30;
  ok.t_ns[2] = ok.t_ns[3] = 20;
  ok.valid = 0x0c;
  b.append(MeterGroup::kNvlink, ok, &s);
  Reading half = ok;  // one NVLink counter failed (a link answered Not Supported): no good read
  half.t_before_ns = 40, half.t_after_ns = 60, half.t_ns[2] = half.t_ns[3] = 50;
  half.valid = 0x04;
  half.error = "Not Supported";
  b.append(MeterGroup::kNvlink, half, &s);
  ASSERT_TRUE(b.latestRead(MeterGroup::kNvlink));
  EXPECT_EQ(b.latestRead(MeterGroup::kNvlink)->t_before_ns, 10);
  EXPECT_FALSE(b.latestRead(MeterGroup::kPcie)) << "no PCIe read yet";
  EXPECT_EQ(b.failedReads(MeterGroup::kNvlink), 1);
  EXPECT_STREQ(b.lastError(MeterGroup::kNvlink), "Not Supported");
}

TEST(MeterSampler, BurstLandsInItsWindowAndOnItsGpu) {
  // GPU1 moves 100 MB in a 50 ms burst starting 0.2 s after the meter starts; GPU0 stays idle.
  std::vector<FakeGpuScript> s(2);
  s[1].bursts.push_back({0.2, 0.25, MeterCounter::kNvlinkRx, 2e9});
  // A fixed period: the peak of a 50 ms burst needs reads inside it, and a quiet link on the default
  // adaptive period is read every 25 ms (NVLink every 100 ms) until a read sees it move.
  MeterOptions fixed;
  fixed.period_us = fixed.idle_period_us = 2000;
  auto m = startFake(s, fixed);
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
  o.sources = {"nvml", "dmon"};
  o.dmon_period_ms = 0;  // back to back
  auto m = startFake({s}, o);
  ASSERT_EQ(m->begin("w"), tpsSuccess);
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_EQ(m->end("w"), tpsSuccess);
  m->stop();
  MeterWindow w = m->windows().at(0);
  const MeterCell::Beside* dmon = w.cells[0][0].from("dmon");
  ASSERT_TRUE(dmon);
  EXPECT_GT(dmon->figure.samples, 5);
  EXPECT_NEAR(*dmon->figure.mean_mbps, 5000, 50);
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
  o.idle_period_us = 0;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsSuccess);
  EXPECT_EQ(o.period_us, kDefaultPeriodUs);
  EXPECT_EQ(o.idle_period_us, kDefaultIdlePeriodUs) << "the default period adapts";
  EXPECT_EQ(o.nvlink_links_per_call, kDefaultNvlinkLinksPerCall);
  o.nvlink_links_per_call = 65;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsInvalidArgument);
  EXPECT_NE(reason.find("links per call"), std::string::npos) << reason;
  o.nvlink_links_per_call = 0;  // every link in one call
  EXPECT_EQ(resolveOptions(&o, &reason), tpsSuccess);
  EXPECT_EQ(o.nvlink_links_per_call, 0);
}

}  // namespace

TEST(MeterSampler, AChosenPeriodIsFixedUnlessAnIdlePeriodIsChosenToo) {
  MeterOptions o;
  std::string reason;
  o.period_us = 5000;
  ASSERT_EQ(resolveOptions(&o, &reason), tpsSuccess) << reason;
  EXPECT_EQ(o.idle_period_us, 5000);
  o.idle_period_us = 20000;
  ASSERT_EQ(resolveOptions(&o, &reason), tpsSuccess) << reason;
  EXPECT_EQ(o.idle_period_us, 20000);
  o.idle_period_us = 4000;  // quieter links read more often than busy ones: refused
  EXPECT_EQ(resolveOptions(&o, &reason), tpsInvalidArgument);
  EXPECT_NE(reason.find("idle period"), std::string::npos) << reason;
  o.idle_period_us = 60000;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsInvalidArgument);
  EXPECT_NE(reason.find("wrap"), std::string::npos) << reason;
}

// A quiet GPU whose every read adds its own traffic, as an NVML read does on H200 (~25 KB).
FakeGpuScript selfMeasuringGpu() {
  FakeGpuScript s;
  s.background_bytes_per_s = {3e6, 2e6, 1e6, 1e6, 0, 0};
  s.bytes_per_read[0] = {27000, 24000, 0, 0, 0, 0};    // a PCIe read
  s.bytes_per_read[1] = {400000, 300000, 0, 0, 0, 0};  // an NVLink read (36 NVML calls)
  s.bytes_per_read[2] = {5000, 4000, 0, 0, 0, 0};      // a dmon call
  s.dmon_window_ns = 5000000;
  return s;
}

TEST(MeterCalibration, FindsWhatEachKindOfReadAddsToEachCounter) {
  MeterOptions o;
  o.sources = {"nvml", "dmon"};
  auto m = startFake({selfMeasuringGpu()}, o, true);
  const MeterCalibration& c = m->calibration();
  ASSERT_TRUE(c.calibrated) << c.note;
  ASSERT_EQ(c.gpus.size(), 1u);
  const MeterGpuCalibration& g = c.gpus[0];
  EXPECT_GE(g.rounds, 3);
  const int tx = static_cast<int>(MeterCounter::kPcieTx), rx = static_cast<int>(MeterCounter::kPcieRx);
  const auto& pcie = g.cost[static_cast<int>(MeterReadKind::kPcie)];
  const auto& nvl = g.cost[static_cast<int>(MeterReadKind::kNvlink)];
  const auto& dmon = g.cost[static_cast<int>(MeterReadKind::kDmon)];
  ASSERT_TRUE(pcie.bytes[tx] && pcie.bytes[rx] && nvl.bytes[tx] && dmon.bytes[rx]);
  EXPECT_GT(pcie.reads, 100);  // 5 rounds x 60 ms at the 2 ms period
  // The background (3 MB/s) is solved for with the costs: within 3 %.
  EXPECT_NEAR(*pcie.bytes[tx], 27000, 800);
  EXPECT_NEAR(*pcie.bytes[rx], 24000, 800);
  EXPECT_NEAR(*nvl.bytes[tx], 400000, 12000);
  EXPECT_NEAR(*dmon.bytes[rx], 4000, 800);
  EXPECT_LE(*pcie.low[tx], *pcie.bytes[tx]);
  EXPECT_GE(*pcie.high[tx], *pcie.bytes[tx]);
  ASSERT_TRUE(g.quiet_mbps[tx]);
  EXPECT_NEAR(*g.quiet_mbps[tx], 3.0, 0.5);
}

TEST(MeterCalibration, WindowsAreNetOfTheMetersOwnReads) {
  MeterOptions fast;  // a fixed 0.5 ms period: ~2000 reads/s x 27 KB = ~54 MB/s of the meter's own
  fast.period_us = 500;
  fast.nvlink = false;
  FakeGpuScript s = selfMeasuringGpu();
  s.supported = 0x03;
  for (bool calibrate : {true, false}) {
    auto m = startFake({s}, fast, calibrate);
    ASSERT_EQ(m->begin("w"), tpsSuccess);
    std::this_thread::sleep_for(milliseconds(300));
    ASSERT_EQ(m->end("w"), tpsSuccess);
    m->stop();
    const MeterWindow w = m->windows().at(0);
    const MeterCell& tx = w.cells[0][static_cast<int>(MeterCounter::kPcieTx)];
    const double seconds = (w.end_ns - w.start_ns) * 1e-9;
    ASSERT_TRUE(tx.bytes && tx.counted_bytes);
    EXPECT_GT(*tx.counted_bytes, 3e6 * seconds + 100 * 27000) << "the meter's reads are in the counters";
    if (calibrate) {
      ASSERT_TRUE(tx.own_bytes);
      EXPECT_DOUBLE_EQ(*tx.bytes + *tx.own_bytes, *tx.counted_bytes);
      // Net: the GPU's own 3 MB/s, within two reads at each edge.
      EXPECT_NEAR(*tx.bytes, 3e6 * seconds, 4 * 27000 + 0.03 * *tx.own_bytes);
      EXPECT_NEAR(*tx.mean_mbps, 3.0, 1.0);
      ASSERT_TRUE(tx.bytes_low && tx.bytes_high);
      EXPECT_LE(*tx.bytes_low, *tx.bytes);
      EXPECT_GE(*tx.bytes_high, *tx.bytes);
      const auto own = m->ownMBps();
      ASSERT_TRUE(own.at(0)[static_cast<int>(MeterCounter::kPcieTx)]);
      EXPECT_GT(*own[0][static_cast<int>(MeterCounter::kPcieTx)], 20.0);
    } else {
      EXPECT_FALSE(tx.own_bytes);
      EXPECT_DOUBLE_EQ(*tx.bytes, *tx.counted_bytes) << "not calibrated: reported as counted";
      EXPECT_NE(m->calibration().note.find("turned off"), std::string::npos) << m->calibration().note;
    }
  }
}

TEST(MeterCalibration, ABusyGpuIsNotCalibratedAndSaysSo) {
  FakeGpuScript s;
  s.background_bytes_per_s = {1e9, 1e9, 0, 0, 0, 0};  // someone else moves 1 GB/s the whole time
  s.supported = 0x03;
  auto m = startFake({s}, {}, true);
  EXPECT_FALSE(m->calibration().calibrated);
  EXPECT_NE(m->calibration().note.find("GPU 0"), std::string::npos) << m->calibration().note;
  ASSERT_EQ(m->begin("w"), tpsSuccess);
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_EQ(m->end("w"), tpsSuccess);
  m->stop();
  EXPECT_FALSE(m->windows().at(0).cells[0][0].own_bytes);
}

TEST(MeterCalibration, TheMetersOwnReadsDoNotFailTheQuiescingCheck) {
  MeterOptions fast;  // ~54 MB/s of the meter's own at 0.5 ms, against a 20 MB/s threshold
  fast.period_us = 500;
  fast.nvlink = false;
  FakeGpuScript s = selfMeasuringGpu();
  s.supported = 0x03;
  QuiesceOptions q;
  q.idle_ms = 200;
  q.threshold_mbps = 20;
  q.check_processes = false;
  for (bool calibrate : {true, false}) {
    auto m = startFake({s}, fast, calibrate);
    QuiesceRecord rec;
    ASSERT_EQ(m->quiesce(q, &rec), tpsSuccess);
    EXPECT_EQ(rec.passed, calibrate) << rec.reason;
  }
}

TEST(MeterSampler, AQuietLinkIsReadSeldomAndABusyOneAtThePeriod) {
  // Quiet for 0.5 s, then 1 GB/s of PCIe TX for 0.5 s.
  FakeGpuScript s;
  s.supported = 0x03;
  s.bursts.push_back({0.5, 1.0, MeterCounter::kPcieTx, 1e9});
  auto m = startFake({s});  // the default: 2 ms busy, 25 ms quiet
  std::this_thread::sleep_for(milliseconds(950));
  m->stop();
  // Read periods while quiet (0.2-0.45 s, after the first 100 ms busy start) and while busy (0.6-0.95 s).
  const int64_t t0 = m->samples().front().t_before_ns;
  std::vector<double> quiet, busy;
  int64_t prev = 0;
  for (const MeterSample& x : m->samples()) {
    if (x.group != MeterGroup::kPcie) continue;
    const double at = (x.t_before_ns - t0) * 1e-9;
    const double period_ms = (x.t_before_ns - prev) * 1e-6;
    if (prev && at > 0.2 && at < 0.45) quiet.push_back(period_ms);
    if (prev && at > 0.6 && at < 0.95) busy.push_back(period_ms);
    prev = x.t_before_ns;
  }
  ASSERT_FALSE(quiet.empty());
  ASSERT_FALSE(busy.empty());
  std::sort(quiet.begin(), quiet.end());
  std::sort(busy.begin(), busy.end());
  EXPECT_NEAR(quiet[quiet.size() / 2], 25.0, 5.0) << "quiet: the idle period";
  EXPECT_NEAR(busy[busy.size() / 2], 2.0, 1.0) << "busy: the period";
  const std::vector<MeterCadence> cad = m->cadence();
  EXPECT_DOUBLE_EQ(cad.at(0).idle_period_ms, 25.0);
  EXPECT_EQ(cad.at(0).wrap_gaps, 0);
}

TEST(MeterSampler, WindowEdgesAreReadAtOnceWhenThePeriodAdapts) {
  FakeGpuScript s;
  s.supported = 0x03;
  for (bool adaptive : {true, false}) {
    MeterOptions o;
    if (!adaptive) o.period_us = o.idle_period_us = 25000;  // fixed: reads only on the period
    auto m = startFake({s}, o);
    std::this_thread::sleep_for(milliseconds(300));  // quiet: on the idle period by now
    const int64_t begin = Meter::now();
    ASSERT_EQ(m->begin("w"), tpsSuccess);
    std::this_thread::sleep_for(milliseconds(40));
    m->stop();
    bool read_at_edge = false;
    for (const MeterSample& x : m->samples())
      read_at_edge = read_at_edge || (x.t_before_ns >= begin && x.t_before_ns < begin + 3000000);
    if (adaptive) {
      EXPECT_TRUE(read_at_edge) << "a read within 3 ms of begin()";
      EXPECT_GE(m->cadence().at(0).edge_reads, 1);
    } else {
      EXPECT_EQ(m->cadence().at(0).edge_reads, 0);
    }
  }
}

// A meter that serves for days keeps history_s of samples; the counters and read counts stay whole.
TEST(MeterSampler, HistoryBoundsTheSamplesButNotTheCounters) {
  FakeGpuScript s;
  s.background_bytes_per_s = {1e9, 0, 0, 0, 0, 0};
  s.supported = 0x03;
  MeterOptions o;
  o.history_s = 0.1;
  const int64_t t0 = Meter::now();
  auto m = startFake({s}, o);
  std::this_thread::sleep_for(milliseconds(600));
  const std::optional<MeterSample> last = m->latest(0);
  const std::vector<MeterSample> kept = m->samples();
  ASSERT_TRUE(last && last->bytes[0]);
  ASSERT_FALSE(kept.empty());
  EXPECT_LE(kept.back().t_after_ns - kept.front().t_after_ns, 250000000) << "at most 2 x history_s (+ one drain)";
  // Cumulative since the first read: ~1 GB/s x the time since the meter started.
  EXPECT_NEAR(*last->bytes[0] / ((last->t_ns[0] - t0) * 1e-9), 1e9, 0.05e9);
  EXPECT_GT(m->reads(0, MeterReadKind::kPcie), static_cast<int64_t>(kept.size()));
}

TEST(MeterCalibration, OwnBytesSoFarIsReadsTimesTheCalibratedCost) {
  auto m = startFake({selfMeasuringGpu()}, {}, true);
  ASSERT_TRUE(m->calibration().calibrated) << m->calibration().note;
  std::this_thread::sleep_for(milliseconds(100));
  m->stop();
  const int tx = static_cast<int>(MeterCounter::kPcieTx);
  const MeterGpuCalibration& g = m->calibration().gpus[0];
  double want = 0;
  for (int k = 0; k < kMeterReadKinds; ++k)
    if (const int64_t n = m->reads(0, static_cast<MeterReadKind>(k)))
      want += std::max(0.0, g.cost[k].bytes[tx].value_or(0)) * static_cast<double>(n);
  const std::optional<double> own = m->ownBytesSoFar(0, MeterCounter::kPcieTx);
  ASSERT_TRUE(own);
  EXPECT_GT(*own, 0);
  EXPECT_DOUBLE_EQ(*own, want);
}

// A command that marks 200,000 windows: each window costs the reads around it, not a pass over (and,
// as it did, a copy of) every GPU's whole series, so the windows of a long run come out in a blink.
TEST(MeterSampler, ManyWindowsCostTheReadsAroundEachNotTheWholeSeries) {
  std::vector<FakeGpuScript> s(2);
  for (FakeGpuScript& g : s) {
    g.background_bytes_per_s = {5e9, 5e9, 0, 0, 0, 0};  // busy: read at the period
    g.read_cost_ns = g.nvlink_read_cost_ns = 20000;     // quick reads: a long series in two seconds
  }
  MeterOptions o;
  o.period_us = 250;
  auto m = startFake(s, o);
  const int64_t t0 = Meter::now();
  std::this_thread::sleep_for(milliseconds(2000));
  const int64_t t1 = Meter::now();
  m->stop();
  const size_t rows = m->samples().size();
  ASSERT_GT(rows, 20000u);
  const int kWindows = 10000;
  for (int i = 0; i < kWindows; ++i) {
    const int64_t a = t0 + (t1 - t0) * i / kWindows;
    ASSERT_EQ(m->addWindow("w", a, a + (t1 - t0) / kWindows), tpsSuccess);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<MeterWindow> ws = m->windows();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(ws.size(), static_cast<size_t>(kWindows));
  // A pass over (and a copy of) each series per window is 10,000 x 2 GPUs x about 15,000 rows: seconds;
  // the reads around each window are a handful: milliseconds.
  EXPECT_LT(took, 1.0) << rows << " rows";
  // The windows tile the run: their bytes add up to the run's.
  double sum = 0;
  for (const MeterWindow& w : ws) sum += w.cells[0][0].counted_bytes.value_or(0);
  EXPECT_NEAR(sum, 5e9 * (t1 - t0) * 1e-9, 0.02 * 5e9 * (t1 - t0) * 1e-9);
}

// The first field in which two windows differ, in words; "" when none. Doubles compare exactly: both
// sides do the same arithmetic on the same reads.
std::string firstDifference(const MeterWindow& a, const MeterWindow& b) {
  auto show = [](const std::optional<double>& v) {
    std::ostringstream o;
    o.precision(17);
    if (v) o << *v;
    return v ? o.str() : std::string("N/A");
  };
  auto figure = [&](const MeterFigure& x, const MeterFigure& y, const std::string& where) -> std::string {
    const std::pair<const char*, std::optional<double> MeterFigure::*> fields[] = {
        {"bytes", &MeterFigure::bytes},           {"counted_bytes", &MeterFigure::counted_bytes},
        {"own_bytes", &MeterFigure::own_bytes},   {"bytes_low", &MeterFigure::bytes_low},
        {"bytes_high", &MeterFigure::bytes_high}, {"mean_mbps", &MeterFigure::mean_mbps},
        {"peak_mbps", &MeterFigure::peak_mbps},   {"share_of_ceiling", &MeterFigure::share_of_ceiling}};
    for (const auto& [name, field] : fields)
      if (x.*field != y.*field) return where + " " + name + ": " + show(x.*field) + " vs " + show(y.*field);
    if (x.samples != y.samples)
      return where + " samples: " + std::to_string(x.samples) + " vs " + std::to_string(y.samples);
    return "";
  };
  if (a.complete != b.complete) return "complete";
  if (a.verdicts.size() != b.verdicts.size()) return "verdicts";
  for (size_t i = 0; i < a.verdicts.size(); ++i)
    if (a.verdicts[i].source != b.verdicts[i].source || a.verdicts[i].complete != b.verdicts[i].complete ||
        a.verdicts[i].why != b.verdicts[i].why)
      return "verdict of " + a.verdicts[i].source;
  if (a.cells.size() != b.cells.size()) return "GPUs";
  for (size_t k = 0; k < a.cells.size(); ++k)
    for (int c = 0; c < kMeterCounters; ++c) {
      const MeterCell &x = a.cells[k][c], &y = b.cells[k][c];
      const std::string where = "GPU " + std::to_string(k) + " " + meterCounterName(static_cast<MeterCounter>(c));
      if (std::string d = figure(x, y, where); !d.empty()) return d;
      if (x.beside.size() != y.beside.size()) return where + " beside";
      for (size_t i = 0; i < x.beside.size(); ++i) {
        if (x.beside[i].source != y.beside[i].source) return where + " beside";
        if (std::string d = figure(x.beside[i].figure, y.beside[i].figure, where + " " + x.beside[i].source);
            !d.empty())
          return d;
        if (x.beside[i].ratio != y.beside[i].ratio) return where + " ratio";
      }
    }
  return "";
}

// What Meter::windows() answers from the sources' indexes (the sampler's ReadIndex, the dmon readings
// and the NVML wrap gaps found by bisection) is, window by window, what a pass over the whole recording
// gives for that window alone (computeWindow over samples() and dmonSamples(), a run folder's replay):
// at every kind of edge (inside, on a read's midpoint, zero-length, before the kept history, past the
// last read), over series trimmed to their history (and indexed again) during the run.
TEST(MeterSampler, WindowsFromTheIndexesAreWhatTheWholeRecordingGivesEachWindow) {
  std::vector<FakeGpuScript> s(2, selfMeasuringGpu());
  for (FakeGpuScript& g : s) {
    g.pcie_ceiling_mbps = 1e6;  // 2^32 bytes in 4.3 ms: the idle period's spaces could hide a wrap, the busy's not
    g.bursts.push_back({1.0, 1.3, MeterCounter::kPcieTx, 8e9});  // after the calibration: busy reads
  }
  s[1].bursts.push_back({1.1, 1.2, MeterCounter::kNvlinkRx, 20e9});
  MeterOptions o;
  o.sources = {"nvml", "dmon"};
  o.dmon_period_ms = 0;             // back to back
  o.history_s = 0.45;               // trimmed at least once over the run below
  const int64_t t0 = Meter::now();  // the script's time 0 is a few us later
  auto m = startFake(s, o, true);
  ASSERT_TRUE(m->calibration().calibrated) << m->calibration().note;
  // Stopped at the script's 1.6 s (0.65 s after the calibration where that ends late): the 0.45 s kept then
  // hold the burst's last 0.15 s of busy reads, its end and 0.3 s of idle reads (the period turns idle up to
  // 0.1 s after the burst under a sanitizer, so a stop 0.1 s after it once kept no idle spaces), however
  // long the calibration took or the sleep overran (a fixed sleep after the calibration once kept too few
  // busy reads).
  const int64_t stop_at = std::max<int64_t>(t0 + 1600000000, m->calibration().end_ns + 650000000);
  std::this_thread::sleep_for(std::chrono::nanoseconds(std::max<int64_t>(0, stop_at - Meter::now())));
  m->stop();

  const std::vector<MeterGpu>& gpus = m->gpus();
  std::vector<Series> series(gpus.size());
  for (const MeterSample& x : m->samples()) series.at(x.gpu).push_back(x);
  const std::vector<MeterDmonSample> dmon = m->dmonSamples();
  ASSERT_GT(series[0].size(), 50u);
  ASSERT_GT(dmon.size(), 20u);
  ASSERT_GT(series[0].front().t_before_ns, m->calibration().end_ns + 100000000) << "the history was trimmed";

  // Edges: every kind of instant the figures turn on, and a few at random.
  std::vector<int64_t> at;
  for (const Series& x : series)
    for (size_t i = 0; i < x.size(); i += 3) {
      at.push_back(readMidNs(x[i].t_before_ns, x[i].t_after_ns));
      at.push_back(x[i].t_ns[static_cast<int>(MeterCounter::kPcieTx)]);
      at.push_back(x[i].t_ns[static_cast<int>(MeterCounter::kNvlinkRx)]);
    }
  for (const MeterDmonSample& d : dmon) at.push_back(readMidNs(d.t_before_ns, d.t_after_ns));
  const int64_t from = series[0].front().t_before_ns - 50000000, to = series[0].back().t_after_ns + 50000000;
  std::mt19937_64 rng(39);
  for (int i = 0; i < 300; ++i) at.push_back(from + static_cast<int64_t>(rng() % static_cast<uint64_t>(to - from)));
  std::vector<std::pair<int64_t, int64_t>> spans = {{from, to}, {from - 1000000000, from}, {to, to + 1000}};
  for (size_t i = 0; i < at.size(); ++i) {
    const int64_t a = at[i], b = at[rng() % at.size()];
    spans.push_back({std::min(a, b), std::max(a, b)});
    spans.push_back({a, a});                                           // zero-length
    spans.push_back({a, a + static_cast<int64_t>(rng() % 30000000)});  // up to 30 ms
  }
  for (const auto& [a, b] : spans) ASSERT_EQ(m->addWindow("w", a, b), tpsSuccess);
  const std::vector<MeterWindow> ws = m->windows();
  ASSERT_EQ(ws.size(), spans.size());

  int gaps_seen = 0, own_seen = 0;
  for (const MeterWindow& w : ws) {
    const MeterWindow want = computeWindow(w.name, w.repetition, w.start_ns, w.end_ns, series, gpus, dmon,
                                           o.peak_span_ms, &m->calibration());
    ASSERT_EQ(firstDifference(w, want), "") << "window [" << w.start_ns - from << ", " << w.end_ns - from << "] ns";
    int gaps = 0;
    for (size_t k = 0; k < gpus.size(); ++k) gaps += wrapGapsIn(series[k], w.start_ns, w.end_ns, 1e6);
    ASSERT_EQ(w.verdict("nvml")->gaps, gaps);
    gaps_seen += gaps > 0;
    own_seen += w.cells[1][0].own_bytes.value_or(0) > 0;
  }
  // The comparison saw what it is about: windows with the meter's own reads and calls in them, and gaps.
  EXPECT_GT(own_seen, 100);
  EXPECT_GT(gaps_seen, 100);
}

TEST(MeterFakeScript, BurstsCountFromTheEpochAndBadScriptsSayWhy) {
  std::vector<FakeGpuScript> g;
  std::string reason;
  const std::string text = R"({"epoch_unix_s": 1000.0, "gpus": [{"uuid": "GPU-x", "nvlink": false,
      "background_bytes_per_s": {"pcie_rx": 5},
      "bursts": [{"counter": "pcie_tx", "from_s": 2, "to_s": 4, "bytes_per_s": 10}],
      "pcie_link": {"gen_current": 4, "gen_max": 5}}]})";
  ASSERT_EQ(parseFakeScript(text, 1001.5, &g, &reason), tpsSuccess) << reason;
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].uuid, "GPU-x");
  EXPECT_EQ(g[0].supported, 0x03u);
  EXPECT_EQ(g[0].background_bytes_per_s[static_cast<int>(MeterCounter::kPcieRx)], 5);
  ASSERT_EQ(g[0].bursts.size(), 1u);
  EXPECT_DOUBLE_EQ(g[0].bursts[0].from_s, 0.5);  // 1000 + 2 is 0.5 s after 1001.5
  EXPECT_DOUBLE_EQ(g[0].bursts[0].to_s, 2.5);
  EXPECT_TRUE(g[0].pcie_link.belowMax());
  EXPECT_FALSE(g[0].pcie_link.width_max);
  for (const char* bad :
       {"", "{}", R"({"gpus": []})", R"({"gpus": [{"bursts": [{"counter": "pcie"}]}]})",
        R"({"gpus": [{"background_bytes_per_s": {"nope": 1}}]})",
        R"({"gpus": [{"bursts": [{"counter": "pcie_tx", "from_s": 3, "to_s": 1, "bytes_per_s": 1}]}]})"}) {
    EXPECT_EQ(parseFakeScript(bad, 0, &g, &reason), tpsInvalidArgument) << bad;
    EXPECT_NE(reason.find("fake meter script"), std::string::npos) << reason;
  }
  // A script is outside input too: nested too deep, it is refused like any other JSON from outside.
  const std::string deep = R"({"gpus": [{"name": )" + std::string(100000, '[') + std::string(100000, ']') + "}]}";
  EXPECT_EQ(parseFakeScript(deep, 0, &g, &reason), tpsInvalidArgument);
  EXPECT_NE(reason.find("nested deeper than 64 levels"), std::string::npos) << reason;
}

}  // namespace tpscope::detail
