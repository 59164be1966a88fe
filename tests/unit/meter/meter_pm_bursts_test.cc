// SPDX-License-Identifier: Apache-2.0
// meter_pm_bursts_test - bursts of PM records: the threshold's edge, gaps shorter, equal to and longer
// than the minimum, the direction that decides, empty input, each record's label (what a timeline
// carries), the rule's text, and a step's figures.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "meter/pm_bursts.h"
#include "time_units.h"

namespace tpscope::detail {
namespace {

using tpscope::testing::kUs;

// Back-to-back 10 us records from t = 0, one per (tx, rx) pair, bytes per record.
std::vector<MeterRecord> run10us(const std::vector<std::pair<double, double>>& bytes) {
  std::vector<MeterRecord> out;
  int64_t t = 0;
  for (const auto& [tx, rx] : bytes) {
    MeterRecord s;
    s.t_start_ns = t;
    s.t_end_ns = t + 10 * kUs;
    s.bytes = {tx, rx};
    out.push_back(s);
    t += 10 * kUs;
  }
  return out;
}

// 10 us records: 20480 B is 2048 MB/s, 512 B is 51.2 MB/s.
constexpr double kBusy = 20480, kQuiet = 512;
const PmBurstRule kTx1024{1024, 25, PmDirection::kTx};

TEST(MeterPmBursts, EmptyInputHasNone) {
  EXPECT_TRUE(pmBursts({}, kTx1024).empty());
  EXPECT_TRUE(pmBursts(run10us({{kQuiet, kQuiet}, {kQuiet, kQuiet}}), kTx1024).empty());
}

TEST(MeterPmBursts, ThresholdIsExclusive) {
  // 10240 B in 10 us is exactly 1024 MB/s: not above the threshold, so not busy; one byte more is.
  EXPECT_TRUE(pmBursts(run10us({{10240, 0}}), kTx1024).empty());
  const std::vector<PmBurst> b = pmBursts(run10us({{10241, 0}}), kTx1024);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].start_ns, 0);
  EXPECT_EQ(b[0].end_ns, 10 * kUs);
  EXPECT_DOUBLE_EQ(b[0].tx_bytes, 10241);
}

TEST(MeterPmBursts, GapShorterThanTheMinimumMerges) {
  // busy, 2 quiet records (a 20 us dip < 25 us), busy: one burst, its bytes the busy records' only.
  const std::vector<PmBurst> b =
      pmBursts(run10us({{kBusy, 1}, {kQuiet, 2}, {kQuiet, 3}, {kBusy, 4}, {kQuiet, 5}}), kTx1024);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].start_ns, 0);
  EXPECT_EQ(b[0].end_ns, 40 * kUs);
  EXPECT_DOUBLE_EQ(b[0].tx_bytes, 2 * kBusy);
  EXPECT_DOUBLE_EQ(b[0].rx_bytes, 1 + 4);
}

TEST(MeterPmBursts, GapOfTheMinimumOrLongerSplits) {
  // A 30 us dip (3 records) splits at a 25 us minimum; so does a dip exactly as long as the minimum.
  EXPECT_EQ(pmBursts(run10us({{kBusy, 0}, {kQuiet, 0}, {kQuiet, 0}, {kQuiet, 0}, {kBusy, 0}}), kTx1024).size(), 2u);
  const PmBurstRule gap20{1024, 20, PmDirection::kTx};
  EXPECT_EQ(pmBursts(run10us({{kBusy, 0}, {kQuiet, 0}, {kQuiet, 0}, {kBusy, 0}}), gap20).size(), 2u);
  const PmBurstRule gap21{1024, 21, PmDirection::kTx};
  EXPECT_EQ(pmBursts(run10us({{kBusy, 0}, {kQuiet, 0}, {kQuiet, 0}, {kBusy, 0}}), gap21).size(), 1u);
}

TEST(MeterPmBursts, MissingRecordsCountAsGap) {
  // Two busy records 40 us apart with nothing recorded between them (a hole): two bursts.
  std::vector<MeterRecord> r = run10us({{kBusy, 0}, {kBusy, 0}});
  r[1].t_start_ns += 30 * kUs;
  r[1].t_end_ns += 30 * kUs;
  EXPECT_EQ(pmBursts(r, kTx1024).size(), 2u);
}

TEST(MeterPmBursts, ZeroLengthRecordIsNeverBusy) {
  std::vector<MeterRecord> r = run10us({{kBusy, kBusy}});
  r[0].t_end_ns = r[0].t_start_ns;
  EXPECT_TRUE(pmBursts(r, {0, 25, PmDirection::kEither}).empty());
}

TEST(MeterPmBursts, DirectionDecidesWhichBytesAreRead) {
  const std::vector<MeterRecord> r =
      run10us({{kBusy, kQuiet}, {kQuiet, kQuiet}, {kQuiet, kQuiet}, {kQuiet, kQuiet}, {kQuiet, kBusy}});
  EXPECT_EQ(pmBursts(r, {1024, 25, PmDirection::kTx}).size(), 1u);
  EXPECT_EQ(pmBursts(r, {1024, 25, PmDirection::kRx}).size(), 1u);
  EXPECT_EQ(pmBursts(r, {1024, 25, PmDirection::kEither}).size(), 2u);
  EXPECT_EQ(pmBursts(r, {1024, 25, PmDirection::kRx})[0].start_ns, 40 * kUs);
}

// Bursts on tx while rx never rests (the host kernel path's flag polls); tx counts the 30 calls, rx and
// either see one long burst.
TEST(MeterPmBursts, TheDirectionDecidesWhatIsABurst) {
  std::vector<std::pair<double, double>> bytes;
  for (int burst = 0; burst < 30; ++burst)
    for (int k = 0; k < 10; ++k) bytes.emplace_back(k < 3 ? 20480.0 : 512.0, 40960.0);
  const std::vector<MeterRecord> r = run10us(bytes);
  EXPECT_EQ(pmBursts(r, {1024, 25, PmDirection::kTx}).size(), 30u);
  EXPECT_EQ(pmBursts(r, {1024, 25, PmDirection::kRx}).size(), 1u);
  EXPECT_EQ(pmBursts(r, {1024, 25, PmDirection::kEither}).size(), 1u);
}

TEST(MeterPmBursts, EachRecordIsLabelledWithItsBurstOrNone) {
  // busy, dip of 20 us (merged: its records carry the burst), busy, 30 us quiet (split), busy.
  const std::vector<MeterRecord> r = run10us({{kQuiet, 0},
                                              {kBusy, 0},
                                              {kQuiet, 0},
                                              {kQuiet, 0},
                                              {kBusy, 0},
                                              {kQuiet, 0},
                                              {kQuiet, 0},
                                              {kQuiet, 0},
                                              {kBusy, 0}});
  EXPECT_EQ(burstLabels(r, kTx1024), (std::vector<int>{-1, 0, -1, -1, 0, -1, -1, -1, 1}));
  EXPECT_EQ(burstLabels({}, kTx1024), std::vector<int>{});
  // The labels and the bursts are one rule: as many bursts as labels.
  EXPECT_EQ(pmBursts(r, kTx1024).size(), 2u);
}

TEST(MeterPmBursts, RuleTextRoundTrips) {
  std::string error;
  const std::optional<PmBurstRule> r = parseBurstRule("rx:819.2:15", &error);
  ASSERT_TRUE(r) << error;
  EXPECT_EQ(r->direction, PmDirection::kRx);
  EXPECT_DOUBLE_EQ(r->threshold_mbps, 819.2);
  EXPECT_DOUBLE_EQ(r->min_gap_us, 15);
  EXPECT_EQ(burstRuleText(*r), "rx:819.2:15");
  EXPECT_EQ(burstRuleText(kStepBurstRule), "tx:1024:25");
  for (const char* bad : {"", "tx", "tx:1024", "tx:1024:25:1", "up:1024:25", "tx:fast:25", "tx:-1:25", "tx:1024:2x"}) {
    EXPECT_FALSE(parseBurstRule(bad, &error)) << bad;
    EXPECT_NE(error.find("DIRECTION:MBPS:GAP_US"), std::string::npos) << error;
  }
}

TEST(MeterPmBursts, AStepsFiguresProrateTheEdgesAndNameAGap) {
  // 10 us records from 0 to 100 us, 1000 B tx each; the step [5, 95) us holds 8 whole records and
  // half of each edge record: 9000 B. Records 3 and 4 are busy: one burst.
  std::vector<std::pair<double, double>> bytes(10, {1000, 10});
  bytes[3].first = bytes[4].first = kBusy;
  std::vector<MeterRecord> r = run10us(bytes);
  PmStepFigures f = pmStepFigures(r, 5 * kUs, 95 * kUs, 10, kTx1024);
  EXPECT_EQ(f.records, 10);
  EXPECT_DOUBLE_EQ(f.tx_bytes, 7000 + 2 * kBusy);
  EXPECT_DOUBLE_EQ(f.rx_bytes, 90);
  EXPECT_EQ(f.bursts, 1);
  EXPECT_TRUE(f.complete) << f.why;
  // A record missing in the middle is a gap (longer than half an interval); one missing at the end
  // leaves the step uncovered.
  std::vector<MeterRecord> gap = r;
  gap.erase(gap.begin() + 5);
  f = pmStepFigures(gap, 5 * kUs, 95 * kUs, 10, kTx1024);
  EXPECT_FALSE(f.complete);
  EXPECT_EQ(f.why, "a gap between PM records");
  r.pop_back();
  f = pmStepFigures(r, 5 * kUs, 95 * kUs, 10, kTx1024);
  EXPECT_EQ(f.why, "PM records do not cover the step");
}

TEST(MeterPmBursts, DirectionNames) {
  EXPECT_STREQ(pmDirectionName(PmDirection::kTx), "tx");
  EXPECT_STREQ(pmDirectionName(PmDirection::kRx), "rx");
  EXPECT_STREQ(pmDirectionName(PmDirection::kEither), "either");
}

}  // namespace
}  // namespace tpscope::detail
