// SPDX-License-Identifier: Apache-2.0
// meter_pm_edges_test - a transfer's edges placed inside the records by the share of the full rate
// their bytes fill; the sampler's trickle, other GPUs and directions ignored.
#include <gtest/gtest.h>

#include "meter/pm_edges.h"
#include "time_units.h"

namespace tpscope::detail {
namespace {

using tpscope::testing::kUs;

// Back-to-back records of 10 us over [0, 500) us on `gpu`; a transfer at `bps` in direction `dir`
// over [from_ns, to_ns), plus `trickle` bytes per record in both directions.
std::vector<MeterRecord> series(int gpu, int dir, double bps, int64_t from_ns, int64_t to_ns, double trickle = 16) {
  std::vector<MeterRecord> out;
  for (int64_t t = 0; t < 500 * kUs; t += 10 * kUs) {
    MeterRecord m;
    m.gpu = gpu;
    m.t_start_ns = t, m.t_end_ns = t + 10 * kUs;
    m.bytes = {trickle, trickle};
    const int64_t a = std::max(from_ns, m.t_start_ns), b = std::min(to_ns, m.t_end_ns);
    if (b > a) m.bytes[dir] += bps * static_cast<double>(b - a) / 1e9;
    out.push_back(m);
  }
  return out;
}

TEST(MeterPmEdges, SteadyTransferEdgesInsideTheirRecords) {
  const auto s = series(0, 1, 50e9, 103 * kUs + 400, 287 * kUs + 250);
  const PmEdges e = pmTrafficEdges(s, 0, 1, 0, 500 * kUs);
  ASSERT_TRUE(e.rise_ns && e.fall_ns);
  // The trickle rides on every record, so the full rate is 50e9 plus 1.6 MB/s: edges within 1 ns.
  EXPECT_NEAR(static_cast<double>(*e.rise_ns), 103 * kUs + 400, 1);
  EXPECT_NEAR(static_cast<double>(*e.fall_ns), 287 * kUs + 250, 1);
  EXPECT_NEAR(e.full_bps, 50e9, 50e9 * 1e-4);
  EXPECT_EQ(e.records, 19);  // 100-110 us ... 280-290 us
}

TEST(MeterPmEdges, OtherDirectionAndGpuAndQuietRecordsIgnored) {
  auto s = series(0, 0, 50e9, 103 * kUs, 287 * kUs);  // TX only
  const auto other = series(1, 1, 50e9, 10 * kUs, 400 * kUs);
  s.insert(s.end(), other.begin(), other.end());
  EXPECT_FALSE(pmTrafficEdges(s, 0, 1, 0, 500 * kUs).rise_ns);  // RX on GPU 0 is the trickle alone (1.6 MB/s)
  const PmEdges tx = pmTrafficEdges(s, 0, 0, 0, 500 * kUs);
  ASSERT_TRUE(tx.rise_ns);
  EXPECT_NEAR(static_cast<double>(*tx.rise_ns), 103 * kUs, 1);
  // Restricted to a span: only the records touching it count.
  const PmEdges late = pmTrafficEdges(s, 1, 1, 350 * kUs, 500 * kUs);
  ASSERT_TRUE(late.rise_ns && late.fall_ns);
  EXPECT_EQ(*late.rise_ns, 350 * kUs);  // the span's first record (350-360 us) is full: the edge is its start
  EXPECT_NEAR(static_cast<double>(*late.fall_ns), 400 * kUs, 1);
}

TEST(MeterPmEdges, NoRecordsOrNoBytesGiveNoEdges) {
  EXPECT_FALSE(pmTrafficEdges({}, 0, 0, 0, 1).rise_ns);
  const auto idle = series(0, 0, 0, 0, 0, 0);
  const PmEdges e = pmTrafficEdges(idle, 0, 0, 0, 500 * kUs);
  EXPECT_FALSE(e.rise_ns);
  EXPECT_FALSE(e.fall_ns);
}

TEST(MeterPmEdges, ShortTransferStaysInsideItsRecord) {
  // 4 us inside one record: no inner records, the busiest record's rate places both edges at its bounds.
  const auto s = series(0, 0, 50e9, 203 * kUs, 207 * kUs);
  const PmEdges e = pmTrafficEdges(s, 0, 0, 0, 500 * kUs);
  ASSERT_TRUE(e.rise_ns && e.fall_ns);
  EXPECT_EQ(*e.rise_ns, 200 * kUs);
  EXPECT_EQ(*e.fall_ns, 210 * kUs);
  EXPECT_EQ(e.records, 1);
}

}  // namespace
}  // namespace tpscope::detail
