// SPDX-License-Identifier: Apache-2.0
// meter_window_test - unwrap, interpolation, proration, bounds, peak, dmon figure, spread, quiescing.
#include <gtest/gtest.h>

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
