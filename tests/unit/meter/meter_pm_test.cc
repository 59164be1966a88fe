// SPDX-License-Identifier: Apache-2.0
// meter_pm_test - PM-sampling records: clock mapping, first record dropped, holes, proration with the
// edge bound, the sampler's own rate, applying PM to a window, NVML wrap gaps per window.
#include <gtest/gtest.h>

#include <climits>
#include <random>
#include <thread>

#include "meter/fake_platform.h"
#include "meter/meter_internal.h"
#include "meter/pm.h"
#include "meter/window.h"
#include "time_units.h"

namespace tpscope::detail {
namespace {

using tpscope::testing::kUs;
// The source clock runs this far ahead of the monotonic one (CUPTI: CLOCK_REALTIME).
constexpr int64_t kOffset = 1700000000LL * 1000000000LL;

// Back-to-back records of `n` x `interval` us from source time `t0_us`, `tx`/`rx` bytes each.
PmBatch records(int64_t t0_us, int n, int64_t interval_us, double tx, double rx) {
  PmBatch b;
  for (int i = 0; i < n; ++i)
    b.records.push_back(
        {kOffset + (t0_us + i * interval_us) * kUs, kOffset + (t0_us + (i + 1) * interval_us) * kUs, {tx, rx}});
  return b;
}

PmSeries build(const std::vector<PmBatch>& batches, int64_t gap_us = 5) {
  PmSeriesBuilder b(0, ClockMap{kOffset}, gap_us * kUs);
  PmSeries s;
  for (const PmBatch& x : batches) b.append(x, &s);
  return s;
}

TEST(MeterPm, ClockMapTakesTheTightestBracket) {
  // Monotonic reads: the second try brackets the source read within 2 ns, the others within 100 ns.
  std::vector<int64_t> mono = {1000, 1100, 2000, 2002, 3000, 3100};
  std::vector<int64_t> src = {5050, 7001, 8050};
  size_t mi = 0, si = 0;
  ClockMap m = ClockMap::measure([&] { return src[si++]; }, [&] { return mono[mi++]; }, 3);
  EXPECT_EQ(m.offset_ns, 7001 - 2001);
  EXPECT_EQ(m.toMonotonic(7001), 2001);
}

TEST(MeterPm, FirstRecordIsDroppedAndTimesMapped) {
  PmSeriesBuilder b(1, ClockMap{kOffset}, 5 * kUs);
  PmSeries s;
  b.append(records(0, 3, 100, 1000, 2000), &s);
  ASSERT_EQ(s.samples.size(), 2u);
  EXPECT_EQ(b.dropped(), 1);
  EXPECT_EQ(s.samples[0].gpu, 1);
  EXPECT_EQ(s.samples[0].t_start_ns, 100 * kUs);
  EXPECT_EQ(s.samples[1].t_end_ns, 300 * kUs);
  b.append(records(300, 2, 100, 1, 1), &s);  // only the session's first is dropped
  EXPECT_EQ(s.samples.size(), 4u);
  EXPECT_TRUE(s.holes.empty());
}

TEST(MeterPm, ProratesEdgesWithBound) {
  // Records of 100 us, 1000 B TX each, from 100 us on (the first, 0-100, is dropped).
  PmSeries s = build({records(0, 11, 100, 1000, 10)});
  // [150, 450]: half of 100-200, all of 200-300 and 300-400, half of 400-500.
  PmFigure f = computePm(s, kPmTx, 150 * kUs, 450 * kUs);
  EXPECT_TRUE(f.complete) << f.why;
  EXPECT_DOUBLE_EQ(f.bytes, 3000);
  EXPECT_DOUBLE_EQ(f.low, 2000);
  EXPECT_DOUBLE_EQ(f.high, 4000);
  EXPECT_DOUBLE_EQ(f.edge_bytes, 1000);
  EXPECT_EQ(f.samples, 4);
  // Edges on record boundaries: exact, no edge error.
  PmFigure g = computePm(s, kPmRx, 200 * kUs, 500 * kUs);
  EXPECT_DOUBLE_EQ(g.bytes, 30);
  EXPECT_DOUBLE_EQ(g.edge_bytes, 0);
  EXPECT_EQ(g.samples, 3);
}

TEST(MeterPm, WindowOutsideTheRecordsIsIncomplete) {
  PmSeries s = build({records(0, 5, 100, 1000, 0)});                 // records cover 100..500 us
  EXPECT_FALSE(computePm(s, kPmTx, 50 * kUs, 300 * kUs).complete);   // starts before the first kept record
  EXPECT_FALSE(computePm(s, kPmTx, 200 * kUs, 600 * kUs).complete);  // ends after the last
  EXPECT_TRUE(computePm(s, kPmTx, 100 * kUs, 500 * kUs).complete);
  EXPECT_FALSE(computePm(PmSeries{}, kPmTx, 0, 10).complete);
}

TEST(MeterPm, GapMarksEveryWindowItTouches) {
  // 100..500, then records resume at 800 (a 300 us gap), to 1200.
  PmSeries s = build({records(0, 5, 100, 1000, 0), records(800, 4, 100, 1000, 0)});
  ASSERT_EQ(s.holes.size(), 1u);
  EXPECT_EQ(s.holes[0].from_ns, 500 * kUs);
  EXPECT_EQ(s.holes[0].to_ns, 800 * kUs);
  PmFigure across = computePm(s, kPmTx, 400 * kUs, 900 * kUs);
  EXPECT_FALSE(across.complete);
  EXPECT_NE(across.why.find("gap"), std::string::npos);
  EXPECT_FALSE(computePm(s, kPmTx, 600 * kUs, 700 * kUs).complete);  // inside the gap
  EXPECT_TRUE(computePm(s, kPmTx, 100 * kUs, 500 * kUs).complete);   // ends where it begins
  EXPECT_TRUE(computePm(s, kPmTx, 800 * kUs, 1100 * kUs).complete);
  // A space within the tolerance (records 2 us apart) is no hole.
  PmSeries t = build({records(0, 3, 100, 1, 1), records(302, 2, 100, 1, 1)});
  EXPECT_TRUE(t.holes.empty());
}

TEST(MeterPm, OverflowEndsTheSessionAndMarksLaterWindows) {
  PmBatch a = records(0, 5, 100, 1000, 0);
  PmBatch b = records(500, 3, 100, 1000, 0);
  b.overflow = true;  // the records before the overflow are good; nothing after it
  PmBatch c = records(800, 3, 100, 1000, 0);
  PmSeries s = build({a, b, c});
  EXPECT_TRUE(s.ended);
  EXPECT_EQ(s.samples.back().t_end_ns, 800 * kUs);  // c never enters
  EXPECT_TRUE(computePm(s, kPmTx, 100 * kUs, 800 * kUs).complete);
  PmFigure late = computePm(s, kPmTx, 700 * kUs, 2000 * kUs);
  EXPECT_FALSE(late.complete);
  EXPECT_NE(late.why.find("overflow"), std::string::npos);
  EXPECT_FALSE(computePm(s, kPmTx, 5000 * kUs, 6000 * kUs).complete);
  // A failed decode ends it the same way, with the source's reason.
  PmBatch d;
  d.error = "CUPTI_ERROR_UNKNOWN";
  PmSeries e = build({a, d});
  PmFigure f = computePm(e, kPmTx, 400 * kUs, 600 * kUs);
  EXPECT_FALSE(f.complete);
  EXPECT_NE(f.why.find("CUPTI_ERROR_UNKNOWN"), std::string::npos);
}

// A window touched by a hole is found by bisection among the holes: the same hole, and the same reason,
// as a pass over every hole finds, over a session with many gaps and an overflow at its end.
TEST(MeterPm, TheHoleFoundByBisectionIsTheFirstThatTouchesTheWindow) {
  std::mt19937_64 rng(41);
  std::vector<PmBatch> batches;
  int64_t t_us = 0;
  for (int i = 0; i < 300; ++i) {
    const int n = 1 + static_cast<int>(rng() % 6);
    batches.push_back(records(t_us, n, 100, 1000, 500));
    t_us += n * 100 + (rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 400));  // back to back, or a gap
  }
  batches.back().overflow = true;
  const PmSeries s = build(batches);
  ASSERT_GT(s.holes.size(), 150u);
  ASSERT_TRUE(s.ended);
  // Edges on the holes' own edges (a window that ends where a hole begins, or begins where one ends, is
  // not touched by it), and anywhere.
  std::vector<int64_t> instants;
  for (const PmHole& h : s.holes) instants.insert(instants.end(), {h.from_ns, h.to_ns == INT64_MAX ? 0 : h.to_ns});
  int holes_seen = 0;
  for (int i = 0; i < 5000; ++i) {
    const int64_t any = static_cast<int64_t>(rng() % static_cast<uint64_t>((t_us + 1000) * kUs)) - 500 * kUs;
    const int64_t len = static_cast<int64_t>(rng() % (i % 2 ? 300 * kUs : 3000 * kUs));
    const int64_t edge = instants[rng() % instants.size()];
    const int64_t a = i % 3 == 0 ? edge : i % 3 == 1 ? edge - len : any, b = a + len;
    std::string want;
    for (const PmHole& h : s.holes)
      if (h.from_ns < b && h.to_ns > a) {
        want = h.why == "gap" ? "a gap between PM records" : "PM sampling ended (" + h.why + ")";
        break;
      }
    const PmFigure f = computePm(s, kPmTx, a, b);
    if (want.empty()) {
      ASSERT_TRUE(f.why.empty() || f.why.rfind("PM records do not cover", 0) == 0) << f.why;
    } else {
      ASSERT_EQ(f.why, want) << "[" << a << ", " << b << "]";
      ASSERT_FALSE(f.complete);
      ++holes_seen;
    }
  }
  EXPECT_GT(holes_seen, 1000);
}

TEST(MeterPm, QuietRateIsTheMedianSlice) {
  // 10 B per 100 us = 100 kB/s on TX, with one busy record in one slice.
  PmBatch b = records(0, 101, 100, 10, 20);
  b.records[50].bytes[kPmTx] = 1e6;
  PmSeries s = build({b});
  auto r = pmQuietRate(s, 100 * kUs, 10100 * kUs, 5);
  ASSERT_TRUE(r[kPmTx] && r[kPmRx]);
  EXPECT_NEAR(*r[kPmTx], 1e5, 1);
  EXPECT_NEAR(*r[kPmRx], 2e5, 1);
  EXPECT_FALSE(pmQuietRate(s, 0, 10100 * kUs)[kPmTx]);  // not covered
}

TEST(MeterPm, PeakIsTheBusiestRunOfTheSpan) {
  // 100 us records of 100 B (1 MB/s) with 5 records of 1000 B (10 MB/s) from 1000 us on.
  PmBatch b = records(0, 31, 100, 100, 0);
  for (int i = 11; i < 16; ++i) b.records[i].bytes[kPmTx] = 1000;
  PmSeries s = build({b});
  // Spans of at least 0.5 ms: the five busy records alone.
  EXPECT_NEAR(*pmPeakMBps(s, kPmTx, 100 * kUs, 3100 * kUs, 0.5), 10.0, 1e-9);
  // 1 ms spans: five busy and five quiet records at best.
  EXPECT_NEAR(*pmPeakMBps(s, kPmTx, 100 * kUs, 3100 * kUs, 1.0), 5.5, 1e-9);
  EXPECT_FALSE(pmPeakMBps(s, kPmTx, 100 * kUs, 400 * kUs, 1.0));  // no run that long inside
}

// Recorded PM records as a source, their own traffic at a measured rate per direction (nullopt:
// not measured): what sources/pm.cc answers, over a series built here.
class RecordedPm : public Source {
 public:
  RecordedPm(PmSeries s, std::array<std::optional<double>, 2> own_bps) : s_(std::move(s)), own_bps_(own_bps) {}
  const char* name() const override { return "pm"; }
  tpsResult_t start(std::string*) override { return tpsSuccess; }
  void stop() override {}
  bool measures(size_t, MeterCounter c) const override { return isPcie(c); }
  SourceFigure figure(size_t, MeterCounter c, int64_t a, int64_t b, double) const override {
    const PmFigure p = computePm(s_, c == MeterCounter::kPcieTx ? kPmTx : kPmRx, a, b);
    SourceFigure f;
    f.bytes = p.bytes, f.low = p.low, f.high = p.high, f.samples = p.samples, f.complete = p.complete, f.why = p.why;
    return f;
  }
  std::optional<OwnBytes> own(size_t, MeterCounter c, int64_t a, int64_t b) const override {
    const std::optional<double> bps = isPcie(c) ? own_bps_[c == MeterCounter::kPcieTx ? kPmTx : kPmRx] : std::nullopt;
    if (!bps) return std::nullopt;
    return OwnBytes{*bps * (b - a) * 1e-9, *bps * (b - a) * 1e-9, *bps * (b - a) * 1e-9};
  }
  bool readAfter(int64_t) const override { return true; }

 private:
  PmSeries s_;
  std::array<std::optional<double>, 2> own_bps_;
};

// NVML's answer for PCIe TX, fixed: `counted` bytes, and its reads' `own`.
class FixedNvml : public Source {
 public:
  FixedNvml(double counted, double own) : counted_(counted), own_(own) {}
  const char* name() const override { return "nvml"; }
  tpsResult_t start(std::string*) override { return tpsSuccess; }
  void stop() override {}
  bool measures(size_t, MeterCounter c) const override { return c == MeterCounter::kPcieTx; }
  SourceFigure figure(size_t, MeterCounter, int64_t, int64_t, double) const override {
    SourceFigure f;
    f.bytes = f.low = f.high = counted_;
    return f;
  }
  std::optional<OwnBytes> own(size_t, MeterCounter c, int64_t, int64_t) const override {
    if (c != MeterCounter::kPcieTx) return std::nullopt;
    return OwnBytes{own_, own_, own_};
  }
  bool readAfter(int64_t) const override { return true; }

 private:
  double counted_, own_;
};

TEST(MeterPm, AWindowIsNetOfEverySourcesOwnTrafficWhicheverSourceComesFirst) {
  const RecordedPm pm(build({records(0, 11, 100, 1000, 500)}), {1e6, std::nullopt});  // 1 MB/s TX; RX unmeasured
  MeterGpu g;
  g.pcie_ceiling_mbps = 1000;
  g.supported[0] = g.supported[1] = true;
  // pm first: the cell's figures are PM's. 1000 us window: 10000 B TX counted, 1000 B its own.
  MeterWindow w = computeWindow("w", 0, 100 * kUs, 1100 * kUs, std::vector<const Source*>{&pm}, {g}, 0);
  const MeterCell& tx = w.cells[0][0];
  const MeterCell& rx = w.cells[0][1];
  EXPECT_TRUE(w.complete);
  EXPECT_DOUBLE_EQ(*tx.counted_bytes, 10000);
  EXPECT_DOUBLE_EQ(*tx.own_bytes, 1000);
  EXPECT_DOUBLE_EQ(*tx.bytes, 9000);
  EXPECT_DOUBLE_EQ(*tx.mean_mbps, 9);
  EXPECT_DOUBLE_EQ(*tx.share_of_ceiling, 0.009);
  EXPECT_FALSE(rx.own_bytes);  // unmeasured: gross
  EXPECT_DOUBLE_EQ(*rx.bytes, 5000);
  EXPECT_TRUE(tx.beside.empty());  // no twin of its own figures
  // nvml first, pm beside: each is net of both sources' own traffic (NVML's 500 B of reads and PM's
  // 1000 B of records cross the same link), and PM's ratio to NVML stands beside.
  const FixedNvml nvml(11400, 500);
  MeterWindow v = computeWindow("w", 0, 100 * kUs, 1100 * kUs, std::vector<const Source*>{&nvml, &pm}, {g}, 0);
  const MeterCell& vtx = v.cells[0][0];
  EXPECT_DOUBLE_EQ(*vtx.bytes, 9900);
  ASSERT_EQ(vtx.beside.size(), 1u);
  const MeterCell::Beside* b = vtx.from("pm");
  ASSERT_TRUE(b);
  EXPECT_DOUBLE_EQ(*b->figure.own_bytes, 1500);
  EXPECT_DOUBLE_EQ(*b->figure.bytes, 8500);
  EXPECT_NEAR(*b->ratio, 8500.0 / 9900, 1e-12);
  ASSERT_EQ(v.verdicts.size(), 2u);
  EXPECT_EQ(v.verdicts[1].source, "pm");
  // A window past the records: marked, with the reason.
  MeterWindow late = computeWindow("late", 0, 1000 * kUs, 3000 * kUs, std::vector<const Source*>{&pm}, {g}, 0);
  EXPECT_FALSE(late.complete);
  EXPECT_FALSE(late.verdicts[0].complete);
  EXPECT_NE(late.verdicts[0].why.find("cover"), std::string::npos) << late.verdicts[0].why;
}

TEST(MeterPm, NvmlWrapGapsCountedPerWindow) {
  // PCIe reads at 0, 10, 110, 120 ms; at 63 GB/s a 32-bit counter wraps in ~68 ms: one gap (10-110).
  std::vector<MeterSample> series;
  for (int64_t t_ms : {0, 10, 110, 120}) {
    MeterSample m;
    m.t_ns.fill(t_ms * 1000000);
    m.bytes[0] = m.bytes[1] = 1;
    series.push_back(m);
  }
  EXPECT_EQ(wrapGapsIn(series, 50 * 1000000, 60 * 1000000, 63015.4), 2);  // both directions
  EXPECT_EQ(wrapGapsIn(series, 0, 5 * 1000000, 63015.4), 0);
  EXPECT_EQ(wrapGapsIn(series, 115 * 1000000, 120 * 1000000, 63015.4), 0);
  EXPECT_EQ(wrapGapsIn(series, 0, 200 * 1000000, std::nullopt), 0);
}

// The meter end to end on scripted GPUs with a scripted PM source.
std::unique_ptr<Meter> startPm(const std::vector<FakeGpuScript>& scripts, std::vector<std::string> sources,
                               int64_t calibrate_ms = 200) {
  MeterOptions o;
  o.sources = sources;
  o.calibrate = false;
  o.pm_decode_ms = 10;
  o.pm_calibrate_ms = calibrate_ms;
  std::string reason;
  EXPECT_EQ(resolveOptions(&o, &reason), tpsSuccess) << reason;
  std::unique_ptr<Meter> m;
  EXPECT_EQ(createMeter(o, makeFakePlatform(scripts, o.pm_interval_us), &m, &reason), tpsSuccess) << reason;
  return m;
}

TEST(MeterPmSource, WindowsNetOfTheSamplersOwnTraffic) {
  // A quiet start (the sampler's own 2 MB/s TX is measured), then 1 GB/s TX from 0.5 s on.
  FakeGpuScript s;
  s.pm_own_bytes_per_s = {2e6, 0.5e6};
  s.bursts.push_back({0.5, 100, MeterCounter::kPcieTx, 1e9});
  auto m = startPm({s}, {"pm"});
  ASSERT_TRUE(m);
  const std::vector<MeterSourceStatus> st0 = m->sourceStatus();
  ASSERT_EQ(st0.size(), 1u);
  ASSERT_EQ(st0[0].own_mbps.size(), 1u);
  ASSERT_TRUE(st0[0].own_mbps[0][0]);
  EXPECT_NEAR(*st0[0].own_mbps[0][0], 2, 1e-2);  // MB/s, TX
  EXPECT_NEAR(*st0[0].own_mbps[0][1], 0.5, 1e-2);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // into the burst (start took ~0.25 s)
  const int64_t a = Meter::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int64_t b = Meter::now();
  ASSERT_EQ(m->addWindow("burst", a, b), tpsSuccess);
  m->stop();
  std::vector<MeterWindow> ws = m->windows();
  ASSERT_EQ(ws.size(), 1u);
  const MeterCell& tx = ws[0].cells[0][0];
  const double dur = (b - a) * 1e-9;
  EXPECT_TRUE(ws[0].complete);
  EXPECT_NEAR(*tx.own_bytes, 2e6 * dur, 2e6 * dur * 0.01);
  EXPECT_NEAR(*tx.bytes, 1e9 * dur, 1e9 * dur * 0.002);  // own traffic gone, edges prorated
  EXPECT_LE(std::max(*tx.bytes - *tx.bytes_low, *tx.bytes_high - *tx.bytes),
            2 * (1e9 * 100e-6 + 200));  // at most one record at each edge
  EXPECT_GE(tx.samples, 999);
  EXPECT_FALSE(ws[0].cells[0][2].bytes);  // NVLink: N/A with PM alone
  const MeterSourceStatus st = m->sourceStatus().at(0);
  EXPECT_EQ(st.source, "pm");
  EXPECT_EQ(st.dropped, 1);
  EXPECT_EQ(st.gaps, 0);
  EXPECT_TRUE(st.ended.empty());
  // Records come back in the meter's clock, back to back.
  std::vector<MeterRecord> ps = m->records();
  ASSERT_GT(ps.size(), 100u);
  EXPECT_LT(ps.front().t_start_ns, a);
  EXPECT_EQ(ps[1].t_start_ns, ps[0].t_end_ns);
}

TEST(MeterPmSource, OverflowMarksLaterWindowsIncomplete) {
  FakeGpuScript s;
  s.background_bytes_per_s = {1e8, 1e8, 0, 0, 0, 0};
  s.pm_overflow_at_s = 0.45;
  s.pm_gaps = {{0.30, 0.32}};
  auto m = startPm({s}, {"pm"}, 0);
  ASSERT_TRUE(m);
  const int64_t t0 = Meter::now();  // ~0 s of the script (no calibration wait)
  auto at = [t0](double s_) { return t0 + static_cast<int64_t>(s_ * 1e9); };
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_EQ(m->addWindow("before", at(0.1), at(0.2)), tpsSuccess);
  ASSERT_EQ(m->addWindow("gap", at(0.25), at(0.35)), tpsSuccess);
  ASSERT_EQ(m->addWindow("after", at(0.5), at(0.55)), tpsSuccess);
  m->stop();
  std::vector<MeterWindow> ws = m->windows();
  ASSERT_EQ(ws.size(), 3u);
  EXPECT_TRUE(ws[0].complete) << ws[0].verdicts[0].why;
  EXPECT_NEAR(*ws[0].cells[0][1].bytes, 1e7, 1e7 * 0.01);
  EXPECT_FALSE(ws[1].complete);
  EXPECT_NE(ws[1].verdicts[0].why.find("gap"), std::string::npos);
  EXPECT_FALSE(ws[2].complete);
  EXPECT_FALSE(ws[2].complete);
  EXPECT_NE(ws[2].verdicts[0].why.find("overflow"), std::string::npos);
  EXPECT_NE(m->sourceStatus().at(0).ended.find("overflow"), std::string::npos);
}

TEST(MeterPmSource, BothPutsPmAndTheRatioBesideNvml) {
  FakeGpuScript s;
  s.background_bytes_per_s = {5e8, 2e8, 0, 0, 0, 0};
  s.supported = 0x03;
  s.pm_own_bytes_per_s = {0, 0};
  auto m = startPm({s}, {"nvml", "pm"});
  ASSERT_TRUE(m);
  ASSERT_EQ(m->begin("w"), tpsSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(m->end("w"), tpsSuccess);
  m->stop();
  std::vector<MeterWindow> ws = m->windows();
  ASSERT_EQ(ws.size(), 1u);
  const MeterCell& tx = ws[0].cells[0][0];
  const MeterCell::Beside* pm = tx.from("pm");
  ASSERT_TRUE(tx.bytes && pm && pm->figure.bytes && pm->ratio);
  EXPECT_NEAR(*pm->ratio, 1.0, 0.01);  // the same script through both paths
  ASSERT_TRUE(ws[0].cells[0][1].from("pm"));
  EXPECT_NEAR(*ws[0].cells[0][1].from("pm")->ratio, 1.0, 0.01);
  EXPECT_FALSE(m->samples().empty());  // NVML still read
}

// With source pm nothing reads NVML, so the idle baseline is judged on PM's PCIe figures: a quiet GPU
// passes (the sampler's own traffic measured at start and subtracted), a busy one fails on pcie_tx.
TEST(MeterPmSource, QuiesceJudgesTheIdleIntervalOnPmAlone) {
  QuiesceOptions q;
  q.idle_ms = 100;
  q.threshold_mbps = 100;
  q.check_processes = false;
  FakeGpuScript quiet;
  quiet.pm_own_bytes_per_s = {2e6, 0.5e6};
  auto m = startPm({quiet}, {"pm"}, 100);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->samples().empty());  // no counter reader
  QuiesceRecord r;
  ASSERT_EQ(m->quiesce(q, &r), tpsSuccess);
  EXPECT_TRUE(r.passed) << r.reason;
  ASSERT_EQ(r.idle_mbps.size(), 1u);
  ASSERT_TRUE(r.idle_mbps[0][0]);
  EXPECT_LT(*r.idle_mbps[0][0], 1.0);  // 2 MB/s of the sampler's own, subtracted
  EXPECT_FALSE(r.idle_mbps[0][2]);     // NVLink: N/A with PM alone
  FakeGpuScript busy;
  busy.background_bytes_per_s = {300e6, 0, 0, 0, 0, 0};
  m = startPm({busy}, {"pm"}, 100);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->quiesce(q, &r), tpsSuccess);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.reason.find("GPU 0 pcie_tx averaged 30"), std::string::npos) << r.reason;
}

}  // namespace
}  // namespace tpscope::detail
