// SPDX-License-Identifier: Apache-2.0
// meter_window_test - unwrap, interpolation, proration, bounds, peak, dmon figure, spread, quiescing; the
// sources' counts by bisection against a pass over the data.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "meter/sampler.h"
#include "meter/unwrap.h"
#include "meter/window.h"

namespace tpscope::detail {
namespace {

constexpr int64_t kMs = 1000000;
const MeterCounter kTx = MeterCounter::kPcieTx;

// A series of one counter (pcie_tx) from (time ms, cumulative bytes) points.
Series series(const std::vector<std::pair<double, uint64_t>>& points) {
  Series s;
  for (const auto& [t_ms, bytes] : points) {
    MeterSample m;
    m.t_before_ns = m.t_after_ns = static_cast<int64_t>(t_ms * kMs);
    m.t_ns.fill(m.t_before_ns);
    m.bytes[0] = bytes;
    s.push_back(m);
  }
  return s;
}

TEST(MeterUnwrap, ThirtyTwoBitCounterAcrossSeveralWraps) {
  Unwrapper u(32);
  EXPECT_EQ(u.push(0xFFFFFF00u), 0u);
  EXPECT_EQ(u.push(0x00000100u), 0x200u);  // wrap 1
  EXPECT_EQ(u.push(0x80000100u), 0x80000200u);
  EXPECT_EQ(u.push(0x00000000u), 0x100000100u);  // wrap 2: one full turn plus the first 0x100
  EXPECT_EQ(u.push(0xFFFFFFFFu), 0x1FFFFFFFFu + 0x100u);
  EXPECT_EQ(u.push(0x00000004u), 0x200000104u);  // wrap 3
  EXPECT_EQ(u.push(0x00000004u), 0x200000104u);  // no traffic: no change
  EXPECT_EQ(u.total(), 0x200000104u);
}

TEST(MeterUnwrap, UpperBitsOfA32BitValueAreIgnored) {
  Unwrapper u(32);
  u.push(0x1'0000'0010ull);  // a driver that fills 64 bits with garbage above bit 31
  EXPECT_EQ(u.push(0x2'0000'0020ull), 0x10u);
}

TEST(MeterUnwrap, SixtyFourBitCounterIsPlainDifference) {
  Unwrapper u(64);
  u.push(1000);
  EXPECT_EQ(u.push(5000), 4000u);
  EXPECT_EQ(u.push(uint64_t{1} << 40), (uint64_t{1} << 40) - 1000);
}

TEST(MeterWindow, ReadsOnTheEdgesGiveTheExactDifference) {
  Series s = series({{0, 0}, {10, 1000}, {20, 3000}, {30, 6000}});
  MeterCell c = computeCell(s, kTx, 10 * kMs, 30 * kMs, 10, std::nullopt);
  ASSERT_TRUE(c.bytes);
  EXPECT_DOUBLE_EQ(*c.bytes, 5000);
  EXPECT_DOUBLE_EQ(*c.bytes_low, 5000);
  EXPECT_DOUBLE_EQ(*c.bytes_high, 5000);
  EXPECT_EQ(c.samples, 3);
  EXPECT_DOUBLE_EQ(*c.mean_mbps, 5000 / 0.020 / 1e6);
}

TEST(MeterWindow, EdgeIntervalsAreProratedByTime) {
  Series s = series({{0, 0}, {10, 1000}, {20, 3000}, {30, 6000}});
  // [5, 25]: half of 0-10 (500) + 10-20 (2000) + half of 20-30 (1500).
  MeterCell c = computeCell(s, kTx, 5 * kMs, 25 * kMs, 10, std::nullopt);
  EXPECT_DOUBLE_EQ(*c.bytes, 4000);
  EXPECT_DOUBLE_EQ(*c.bytes_low, 2000);   // reads inside: 10 and 20
  EXPECT_DOUBLE_EQ(*c.bytes_high, 6000);  // reads bracketing: 0 and 30
  EXPECT_EQ(c.samples, 2);
  EXPECT_LE(*c.bytes_low, *c.bytes);
  EXPECT_GE(*c.bytes_high, *c.bytes);
}

TEST(MeterWindow, WindowWithNoReadInsideTakesItsShareOfOneInterval) {
  Series s = series({{0, 0}, {10, 1000}, {20, 3000}});
  MeterCell c = computeCell(s, kTx, 12 * kMs, 17 * kMs, 10, std::nullopt);
  EXPECT_EQ(c.samples, 0);
  EXPECT_DOUBLE_EQ(*c.bytes, 1000);  // 5 ms of a 10 ms interval that carried 2000
  EXPECT_DOUBLE_EQ(*c.bytes_low, 0);
  EXPECT_DOUBLE_EQ(*c.bytes_high, 2000);
  EXPECT_DOUBLE_EQ(*c.mean_mbps, 1000 / 0.005 / 1e6);
}

TEST(MeterWindow, ZeroLengthWindowHasZeroBytesAndNoRate) {
  Series s = series({{0, 0}, {10, 1000}});
  MeterCell c = computeCell(s, kTx, 5 * kMs, 5 * kMs, 10, 100.0);
  ASSERT_TRUE(c.bytes);
  EXPECT_DOUBLE_EQ(*c.bytes, 0);
  EXPECT_FALSE(c.mean_mbps);  // bytes over zero seconds is not a number
  EXPECT_FALSE(c.peak_mbps);
  EXPECT_FALSE(c.share_of_ceiling);
}

TEST(MeterWindow, WindowOutsideTheRecordedSpanIsNA) {
  Series s = series({{10, 0}, {20, 1000}});
  EXPECT_FALSE(computeCell(s, kTx, 5 * kMs, 15 * kMs, 10, std::nullopt).bytes);   // starts before the first read
  EXPECT_FALSE(computeCell(s, kTx, 15 * kMs, 25 * kMs, 10, std::nullopt).bytes);  // ends after the last read
  EXPECT_FALSE(computeCell(Series{}, kTx, 0, kMs, 10, std::nullopt).bytes);       // nothing recorded
  EXPECT_TRUE(computeCell(s, kTx, 10 * kMs, 20 * kMs, 10, std::nullopt).bytes);
}

TEST(MeterWindow, FailedReadsAreSkippedNotTakenAsZero) {
  Series s = series({{0, 0}, {10, 1000}, {20, 2000}, {30, 3000}});
  s[2].bytes[0].reset();  // the read at 20 ms failed
  MeterCell c = computeCell(s, kTx, 15 * kMs, 25 * kMs, 10, std::nullopt);
  ASSERT_TRUE(c.bytes);
  EXPECT_DOUBLE_EQ(*c.bytes, 1000);  // interpolated across 10..30
  EXPECT_EQ(c.samples, 0);
}

TEST(MeterWindow, UnsupportedCounterIsNAInTheWindowNeverZero) {
  Series s = series({{0, 0}, {10, 1000}});
  MeterGpu g;
  g.supported[0] = true;  // pcie_tx only; NVLink N/A (a GeForce card)
  MeterWindow w = computeWindow("w", 0, 0, 10 * kMs, {s}, {g}, {}, 10);
  EXPECT_TRUE(w.cells[0][0].bytes);
  for (int c = 1; c < kMeterCounters; ++c) {
    EXPECT_FALSE(w.cells[0][c].bytes) << c;
    EXPECT_FALSE(w.cells[0][c].mean_mbps) << c;
  }
}

TEST(MeterWindow, ShareOfTheRightCeiling) {
  // 63,015 MB/s PCIe Gen5 x16 ceiling; 6,301.5 MB/s is 10 %.
  Series s = series({{0, 0}, {1000, 6301500000ull}});
  for (int c = 0; c < kMeterCounters; ++c) {
    s[0].bytes[c] = 0;
    s[1].bytes[c] = 6301500000ull;
  }
  MeterGpu g;
  g.supported.fill(true);
  g.pcie_ceiling_mbps = 63015;
  g.nvlink_ceiling_mbps = 630150;
  MeterWindow w = computeWindow("w", 0, 0, 1000 * kMs, {s}, {g}, {}, 10);
  EXPECT_NEAR(*w.cells[0][static_cast<int>(MeterCounter::kPcieRx)].share_of_ceiling, 0.10, 1e-12);
  EXPECT_NEAR(*w.cells[0][static_cast<int>(MeterCounter::kNvlinkTx)].share_of_ceiling, 0.01, 1e-12);
  g.nvlink_ceiling_mbps.reset();
  w = computeWindow("w", 0, 0, 1000 * kMs, {s}, {g}, {}, 10);
  EXPECT_FALSE(w.cells[0][static_cast<int>(MeterCounter::kNvlinkTx)].share_of_ceiling);
  EXPECT_TRUE(w.cells[0][static_cast<int>(MeterCounter::kNvlinkTx)].mean_mbps);
}

TEST(MeterWindow, PeakIsTheBurstNotTheMean) {
  // Idle, then a 10 ms burst of 10 MB, then idle: mean over 40 ms is 250 MB/s, the peak 1000 MB/s.
  Series s = series({{0, 0}, {10, 0}, {15, 5000000}, {20, 10000000}, {30, 10000000}, {40, 10000000}});
  MeterCell c = computeCell(s, kTx, 0, 40 * kMs, 10, std::nullopt);
  EXPECT_DOUBLE_EQ(*c.mean_mbps, 250);
  EXPECT_DOUBLE_EQ(*c.peak_mbps, 1000);
  // A span of 20 ms cannot see more than 10 MB per 20 ms.
  EXPECT_DOUBLE_EQ(*computeCell(s, kTx, 0, 40 * kMs, 20, std::nullopt).peak_mbps, 500);
}

TEST(MeterWindow, DmonFigureIsTheMeanOfItsReadingsInsideAndNAWithout) {
  std::vector<MeterDmonSample> d(3);
  d[0] = {0, MeterCounter::kPcieTx, 0, 20 * kMs, 60000.0};        // midpoint 10 ms: inside
  d[1] = {0, MeterCounter::kPcieTx, 980 * kMs, 1000 * kMs, 0.0};  // midpoint 990 ms: inside
  d[2] = {0, MeterCounter::kPcieRx, 0, 20 * kMs, 5.0};            // other direction
  SourceFigure f = dmonFigure(d, 0, MeterCounter::kPcieTx, 0, 1000 * kMs);
  EXPECT_EQ(f.samples, 2);
  EXPECT_DOUBLE_EQ(*f.mean_mbps, 30000);
  EXPECT_FALSE(f.bytes);                                              // a rate, no bytes
  f = dmonFigure(d, 0, MeterCounter::kPcieTx, 100 * kMs, 900 * kMs);  // the 0.8 s between them
  EXPECT_EQ(f.samples, 0);
  EXPECT_FALSE(f.mean_mbps);  // the dmon method did not look: N/A, not 0
}

// ---- what the sources count by bisection is what a pass over the data counts ------------------------

// A GPU's series as the sampler builds it (SeriesBuilder): PCIe reads every 1-8 ms and slow NVLink reads
// back to back, drained in batches of either group, one read in seven without a value for a counter.
Series sampledSeries(std::mt19937_64& rng) {
  MeterGpu g;
  g.supported = {true, true, true, true, false, false};
  SeriesBuilder builder(0, g, {32, 32, 64, 64, 64, 64});
  std::array<std::vector<Reading>, 2> reads;  // [group], each in time order
  std::array<uint64_t, kMeterCounters> raw{};
  for (int grp = 0; grp < 2; ++grp)
    for (int64_t t = 0; t < 2000 * kMs;) {
      Reading r;
      r.t_before_ns = t + static_cast<int64_t>(rng() % (grp == 0 ? 7 * kMs : 100000)) + kMs / 10;
      r.t_after_ns = r.t_before_ns + static_cast<int64_t>(rng() % (grp == 0 ? 400000 : 15 * kMs));
      t = r.t_after_ns;
      for (int c = grp * 2; c < grp * 2 + 2; ++c) {
        raw[c] += rng() % 100000000;
        r.raw[c] = grp == 0 ? raw[c] & 0xFFFFFFFF : raw[c];
        r.t_ns[c] = readMidNs(r.t_before_ns, r.t_after_ns);
        if (rng() % 7 != 0) r.valid |= 1u << c;
      }
      reads[grp].push_back(r);
    }
  Series s;
  std::array<size_t, 2> next = {0, 0};
  while (next[0] < reads[0].size() || next[1] < reads[1].size()) {
    const int grp = static_cast<int>(rng() % 2);
    for (size_t n = rng() % 12; n > 0 && next[grp] < reads[grp].size(); --n)
      builder.append(grp == 0 ? MeterGroup::kPcie : MeterGroup::kNvlink, reads[grp][next[grp]++], &s);
  }
  return s;
}

// Windows whose edges are the instants the counts turn on (read midpoints, read times), random ones,
// zero-length ones and empty ones (start one past end, as Meter::ownBytes asks for a zero-length span).
std::vector<std::pair<int64_t, int64_t>> edgyWindows(const std::vector<int64_t>& instants, std::mt19937_64& rng) {
  std::vector<std::pair<int64_t, int64_t>> out = {{-kMs, 3000 * kMs}, {-kMs, 0}, {2900 * kMs, 3000 * kMs}};
  for (size_t i = 0; i < instants.size(); ++i) {
    const int64_t a = instants[i], b = instants[rng() % instants.size()];
    out.push_back({std::min(a, b), std::max(a, b)});
    out.push_back({a, a});
    out.push_back({a + 1, a});
    out.push_back({a, a + static_cast<int64_t>(rng() % (40 * kMs))});
    out.push_back({a - static_cast<int64_t>(rng() % (40 * kMs)), a});
  }
  return out;
}

// The PCIe spaces that could hide a wrap, by their definition: every pair of consecutive values.
int wrapGapsOfEveryPair(const Series& s, int64_t start, int64_t end, double ceiling_mbps) {
  const double wrap_ns = 4294967296.0 / (ceiling_mbps * 1e6) * 1e9;
  int gaps = 0;
  for (int c : {0, 1}) {
    std::optional<int64_t> prev;
    for (const MeterSample& m : s) {
      if (!m.bytes[c]) continue;
      if (prev && m.t_ns[c] - *prev >= wrap_ns && *prev < end && m.t_ns[c] > start) ++gaps;
      prev = m.t_ns[c];
    }
  }
  return gaps;
}

TEST(MeterWindow, ReadsAndWrapGapsFoundByBisectionAreWhatAPassOverTheSeriesFinds) {
  std::mt19937_64 rng(39);
  const Series s = sampledSeries(rng);
  ASSERT_GT(s.size(), 600u);
  const ReadIndex index = indexReads(s);
  // Added in any order, the index is the same: each read at its sorted place.
  std::vector<size_t> order(s.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  ReadIndex shuffled;
  for (size_t i : order)
    shuffled.add(s[i].group == MeterGroup::kPcie ? MeterReadKind::kPcie : MeterReadKind::kNvlink,
                 readMidNs(s[i].t_before_ns, s[i].t_after_ns));
  EXPECT_EQ(shuffled.mids, index.mids);

  std::vector<int64_t> instants;
  for (size_t i = 0; i < s.size(); i += 2) {
    instants.push_back(readMidNs(s[i].t_before_ns, s[i].t_after_ns));
    instants.push_back(s[i].t_ns[0]);
  }
  int reads_seen = 0, gaps_seen = 0;
  for (const auto& [a, b] : edgyWindows(instants, rng)) {
    const auto want = readsInside(s, {}, 0, a, b);
    ASSERT_EQ(readsInside(index, a, b), want) << "[" << a << ", " << b << "]";
    // 2^32 bytes in 4 ms: some spaces between PCIe reads could hide a wrap, others not.
    const int gaps = wrapGapsOfEveryPair(s, a, b, 1.07e6);
    ASSERT_EQ(wrapGapsIn(s, a, b, 1.07e6), gaps) << "[" << a << ", " << b << "]";
    reads_seen += want[0] > 0 && want[1] > 0;
    gaps_seen += gaps > 0;
  }
  EXPECT_GT(reads_seen, 500);
  EXPECT_GT(gaps_seen, 500);
}

TEST(MeterWindow, DmonReadingsFoundByBisectionAreWhatAPassFinds) {
  // Two GPUs, both directions, one call after the other as the dmon thread makes them; some without a value.
  std::mt19937_64 rng(40);
  std::vector<MeterDmonSample> d;
  int64_t t = 0;
  for (int i = 0; i < 800; ++i) {
    MeterDmonSample x;
    x.gpu = (i / 2) % 2;
    x.counter = i % 2 ? MeterCounter::kPcieTx : MeterCounter::kPcieRx;
    x.t_before_ns = t + static_cast<int64_t>(rng() % kMs);
    x.t_after_ns = x.t_before_ns + static_cast<int64_t>(rng() % (5 * kMs));
    t = x.t_after_ns;
    if (rng() % 9 != 0) x.mbps = static_cast<double>(rng() % 100000) / 7;
    d.push_back(x);
  }
  std::vector<int64_t> instants;
  for (const MeterDmonSample& x : d) instants.push_back(readMidNs(x.t_before_ns, x.t_after_ns));
  int seen = 0;
  for (const auto& [a, b] : edgyWindows(instants, rng)) {
    const DmonRange r = dmonReadingsIn(d, a, b);
    for (int gpu : {0, 1}) {
      ASSERT_EQ(dmonCalls(r, gpu), readsInside({}, d, gpu, a, b)[static_cast<int>(MeterReadKind::kDmon)]);
      for (MeterCounter c : {MeterCounter::kPcieTx, MeterCounter::kPcieRx}) {
        const SourceFigure got = dmonFigure(r, gpu, c), want = dmonFigure(d, gpu, c, a, b);
        ASSERT_EQ(got.samples, want.samples) << "[" << a << ", " << b << "]";
        ASSERT_EQ(got.mean_mbps, want.mean_mbps) << "[" << a << ", " << b << "]";
        seen += want.samples > 1;
      }
    }
  }
  EXPECT_GT(seen, 500);
}

TEST(MeterSpread, MedianMinMaxOverPresentValues) {
  auto s = meterSpread({5.0, std::nullopt, 1.0, 3.0});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->n, 3);
  EXPECT_DOUBLE_EQ(s->median, 3);
  EXPECT_DOUBLE_EQ(s->min, 1);
  EXPECT_DOUBLE_EQ(s->max, 5);
  auto even = meterSpread({4.0, 1.0, 2.0, 10.0});
  EXPECT_DOUBLE_EQ(even->median, 3);  // mean of the two middle values
  EXPECT_FALSE(meterSpread({std::nullopt, std::nullopt}));
  EXPECT_FALSE(meterSpread({}));
}

TEST(MeterQuiesce, PassesWhenIdleAndAlone) {
  MeterGpu g;
  g.index = 3;
  g.supported.fill(true);
  MeterWindow idle = computeWindow("q", 0, 0, 1000 * kMs, {series({{0, 0}, {1000, 5000000}})}, {g}, {}, 10);
  QuiesceRecord q = evaluateQuiesce(idle, {g}, 100, {std::vector<unsigned>{42}}, {42u});
  EXPECT_TRUE(q.passed) << q.reason;
  EXPECT_TRUE(q.processes_checked);
  EXPECT_TRUE(q.other_pids.empty());
  EXPECT_DOUBLE_EQ(*q.idle_mbps[0][0], 5);
}

TEST(MeterQuiesce, FailsOnTrafficOrAnotherProcessAndSaysWhy) {
  MeterGpu g;
  g.index = 1;
  g.supported[0] = true;
  MeterWindow busy = computeWindow("q", 0, 0, 1000 * kMs, {series({{0, 0}, {1000, 500000000}})}, {g}, {}, 10);
  QuiesceRecord q = evaluateQuiesce(busy, {g}, 100, {std::vector<unsigned>{42, 77}}, {42u});
  EXPECT_FALSE(q.passed);
  EXPECT_NE(q.reason.find("GPU 1 pcie_tx averaged 500.0 MB/s"), std::string::npos) << q.reason;
  EXPECT_NE(q.reason.find("process 77 uses GPU 1"), std::string::npos) << q.reason;
  EXPECT_EQ(q.other_pids, std::vector<unsigned>{77});
  // Process list unavailable: not a failure, but recorded as unchecked.
  MeterWindow idle = computeWindow("q", 0, 0, 1000 * kMs, {series({{0, 0}, {1000, 0}})}, {g}, {}, 10);
  QuiesceRecord u = evaluateQuiesce(idle, {g}, 100, {std::nullopt}, {42u});
  EXPECT_TRUE(u.passed);
  EXPECT_FALSE(u.processes_checked);
}

}  // namespace
}  // namespace tpscope::detail
