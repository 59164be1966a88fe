// SPDX-License-Identifier: Apache-2.0
// meter_format_test - golden tests for `tpscope meter` output shapes: live rows (table, CSV, JSON) and
// the wrapped-mode summary (table, CSV, JSON), N/A handling included, uncalibrated and calibrated (the
// own-bytes column, the subtracted line and the calibration JSON, from a calibration through the
// scripted counters).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fixtures.h"
#include "meter/calibrate.h"
#include "meter/fake_platform.h"
#include "meter/meter_command.h"
#include "meter/record.h"
#include "meter/window.h"

namespace tpscope {
namespace {

constexpr int64_t kMs = 1000000;

std::vector<MeterGpu> h200Gpus() {
  std::vector<MeterGpu> out;
  for (const GpuInfo& g : testing::h200Pair().gpus) {
    MeterGpu m;
    m.index = g.index;
    m.name = g.name;
    m.bus_id = g.bus_id;
    for (int c = 0; c < 4; ++c) m.supported[c] = true;  // data counters; raw not read
    m.nvlink_links = 18;
    m.pcie_ceiling_mbps = g.pcie_ceiling_mbps;
    m.nvlink_ceiling_mbps = g.nvlink_ceiling_mbps;
    out.push_back(m);
  }
  return out;
}

// Reads every 2 ms for 100 ms; GPU0 sends 1.1 GB over PCIe in 20..40 ms and 1 GB to GPU1 over
// NVLink in 60..63 ms; GPU1's PCIe RX read fails at 50 ms.
std::vector<detail::Series> recording() {
  std::vector<detail::Series> s(2);
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i <= 50; ++i) {
      const int64_t t = i * 2 * kMs;
      MeterSample m;
      m.gpu = g;
      m.t_before_ns = t - 700000;
      m.t_after_ns = t + 700000;
      m.t_ns.fill(t);
      auto ramp = [&](double a_ms, double b_ms, double bytes) {
        const double ms = t / 1e6;
        return static_cast<uint64_t>(bytes * std::clamp((ms - a_ms) / (b_ms - a_ms), 0.0, 1.0));
      };
      const uint64_t background = static_cast<uint64_t>(i) * 4000;  // 2 MB/s
      m.bytes[0] = background + (g == 0 ? ramp(20, 40, 1.1e9) : 0);
      m.bytes[1] = background;
      m.bytes[2] = g == 0 ? ramp(60, 63, 1e9) : 0;
      m.bytes[3] = g == 1 ? ramp(60, 63, 1e9) : 0;
      if (g == 1 && i == 25) m.bytes[1].reset();
      s[g].push_back(m);
    }
  }
  return s;
}

cli::MeterSummary summary() {
  cli::MeterSummary s;
  s.gpus = h200Gpus();
  s.options.period_us = 2000;
  s.options.sources = {"nvml", "dmon"};
  const std::vector<detail::Series> rec = recording();
  std::vector<MeterDmonSample> dmon = {{0, MeterCounter::kPcieTx, 25 * kMs, 45 * kMs, 41250.0},
                                       {0, MeterCounter::kPcieRx, 45 * kMs, 65 * kMs, 2.0}};
  s.windows.push_back(detail::computeWindow("copy d2h", 0, 15 * kMs, 45 * kMs, rec, s.gpus, dmon, 10));
  s.windows.push_back(detail::computeWindow("peer", 0, 55 * kMs, 70 * kMs, rec, s.gpus, dmon, 10));
  s.windows.push_back(detail::computeWindow("peer", 1, 57 * kMs, 67 * kMs, rec, s.gpus, dmon, 10));
  s.windows.push_back(detail::computeWindow("late", 0, 90 * kMs, 150 * kMs, rec, s.gpus, dmon, 10));
  s.windows.push_back(detail::computeWindow("command", 0, 1 * kMs, 99 * kMs, rec, s.gpus, dmon, 10));
  for (int g = 0; g < 2; ++g) {
    MeterCadence c;
    c.gpu = g;
    c.reads = 51;
    c.period_target_ms = 2;
    c.period_mean_ms = c.period_p50_ms = 2;
    c.period_p99_ms = 2.1;
    c.period_max_ms = 2.4;
    c.read_cost_mean_ms = 0.68;
    c.read_cost_p99_ms = 0.71;
    s.cadence.push_back(c);
    c.group = MeterGroup::kNvlink;  // back to back: the read is slower than the period
    c.reads = 5;
    c.period_mean_ms = c.period_p50_ms = 21.8;
    c.period_p99_ms = 24.2;
    c.period_max_ms = 29.8;
    c.read_cost_mean_ms = 21.6;
    c.read_cost_p99_ms = 24.1;
    if (g == 1) c.failed_reads = 2, c.last_error = "Unknown Error";  // said in the table and the JSON
    s.cadence.push_back(c);
  }
  MeterWindow idle = detail::computeWindow("quiesce", 0, 0, 10 * kMs, rec, s.gpus, {}, 10);
  s.quiesce.push_back(
      detail::evaluateQuiesce(idle, s.gpus, 100, {std::vector<unsigned>{}, std::vector<unsigned>{}}, {1u}));
  s.command = {"./run.sh", "--steps", "2"};
  s.exit_code = 0;
  return s;
}

TEST(MeterFormat, SummaryTableGolden) { testing::expectGolden("meter_summary_h200.txt", cli::summaryTable(summary())); }

TEST(MeterFormat, SummaryCsvGolden) { testing::expectGolden("meter_summary_h200.csv", cli::summaryCsv(summary())); }

TEST(MeterFormat, SummaryJsonGolden) {
  nlohmann::json doc = cli::summaryJson(summary());
  doc["context"]["tpscope_version"] = "X.Y.Z";
  testing::expectGolden("meter_summary_h200.json", doc.dump(2) + "\n");
}

// The JSON `tpscope meter --format json` prints, written window by window, is the document's own dump.
TEST(MeterFormat, SummaryJsonWrittenByWindowIsTheDocumentsDump) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4}}) {
    cli::MeterSummary s = summary();
    s.windows.resize(std::min(n, s.windows.size()));
    char* buf = nullptr;
    size_t len = 0;
    std::FILE* f = open_memstream(&buf, &len);
    cli::writeSummaryJson(s, f);
    std::fclose(f);
    const std::string written(buf, len);
    std::free(buf);
    EXPECT_EQ(written, cli::summaryJson(s).dump(2) + "\n") << n << " windows";
  }
}

TEST(MeterFormat, SummaryFiguresAreTheWindowMath) {
  cli::MeterSummary s = summary();
  const MeterCell& d2h = s.windows[0].cells[0][0];
  EXPECT_NEAR(*d2h.bytes, 1.1e9 + 30 * 2000, 1);  // the ramp plus 30 ms of 2 MB/s background
  EXPECT_NEAR(*d2h.peak_mbps, 55000 + 2, 1e-6);   // 1.1 GB in 20 ms, on 2 MB/s of background
  EXPECT_FALSE(s.windows[3].cells[0][0].bytes) << "a window past the last read is N/A";
  const std::string table = cli::summaryTable(s);
  EXPECT_NE(table.find("has no read after its end"), std::string::npos);
  EXPECT_NE(table.find("Across repetitions"), std::string::npos);
  nlohmann::json j = cli::summaryJson(s);
  EXPECT_TRUE(j["windows"][3]["gpus"][0]["counters"]["pcie_tx"]["bytes"].is_null());
  EXPECT_TRUE(j["windows"][1]["gpus"][0]["counters"]["nvlink_tx"]["dmon_mbps"].is_null());
  EXPECT_FALSE(j["windows"][0]["gpus"][0]["counters"].contains("nvlink_raw_tx")) << "raw was not asked for";
}

// What one read adds to each counter of the scripted GPUs below ([MeterReadKind][MeterCounter]; PCIe
// counters only, as an NVML read travels over PCIe): H200-like figures.
constexpr std::array<std::array<double, kMeterCounters>, kMeterReadKinds> kOwnPerRead = {{
    {27000, 24000, 0, 0, 0, 0},    // a PCIe read: tx, rx
    {400000, 300000, 0, 0, 0, 0},  // an NVLink read
    {5000, 4000, 0, 0, 0, 0},      // a dmon call
}};

// The calibration of two quiet scripted GPUs whose reads add kOwnPerRead. Quiet counters make every
// interval's bytes exact multiples of the costs, so the solve returns the script's costs up to
// rounding (checked, then rounded to the byte); the read counts are the plan's (a fixed number per
// burst), and only the wall-clock span is the machine's (fixed here).
MeterCalibration fakeCalibration() {
  std::vector<detail::FakeGpuScript> scripts(2);
  for (detail::FakeGpuScript& g : scripts) {
    g.bytes_per_read = kOwnPerRead;
    g.dmon_window_ns = 2 * kMs;
  }
  std::unique_ptr<detail::Platform> platform = detail::makeFakePlatform(scripts);
  std::vector<std::unique_ptr<detail::CounterReader>> counters;
  std::vector<std::unique_ptr<detail::DmonReader>> dmon;
  std::string reason;
  for (size_t k = 0; k < scripts.size(); ++k) {
    counters.push_back(platform->counterReader(k, &reason));
    dmon.push_back(platform->dmonReader(k, &reason));
  }
  MeterCalibration cal = detail::calibrateAll(counters, dmon, h200Gpus(), detail::CalibrationPlan{});
  EXPECT_TRUE(cal.calibrated) << cal.note;
  auto exact = [](std::optional<double>* v, double want) {
    ASSERT_TRUE(v->has_value());
    ASSERT_NEAR(**v, want, 1e-3);
    *v = want;
  };
  for (MeterGpuCalibration& g : cal.gpus) {
    EXPECT_EQ(g.rounds, 5);
    for (int c = 0; c < 4; ++c) exact(&g.quiet_mbps[c], 0);
    for (int k = 0; k < kMeterReadKinds; ++k)
      for (int c = 0; c < 4; ++c)
        for (std::optional<double>* v : {&g.cost[k].bytes[c], &g.cost[k].low[c], &g.cost[k].high[c]})
          exact(v, kOwnPerRead[k][c]);
  }
  cal.start_ns = 0;
  cal.end_ns = 1500 * kMs;
  return cal;
}

// recording() with the meter's own reads in the counters: each read adds kOwnPerRead[kPcie] after its
// values, each dmon call kOwnPerRead[kDmon] once it has returned.
std::vector<detail::Series> recordingWithOwnReads(const std::vector<MeterDmonSample>& dmon) {
  std::vector<detail::Series> rec = recording();
  for (size_t g = 0; g < rec.size(); ++g)
    for (size_t i = 0; i < rec[g].size(); ++i) {
      MeterSample& m = rec[g][i];
      for (int c = 0; c < 2; ++c) {
        if (!m.bytes[c]) continue;
        double own = i * kOwnPerRead[0][c];
        for (const MeterDmonSample& d : dmon)
          if (d.gpu == static_cast<int>(g) && d.t_after_ns <= m.t_before_ns) own += kOwnPerRead[2][c];
        *m.bytes[c] += static_cast<uint64_t>(own);
      }
    }
  return rec;
}

// summary() measured by a calibrated meter: the same windows with the meter's own reads in the counters,
// reported net of them, and the meter's own rate over the recording.
cli::MeterSummary calibratedSummary() {
  cli::MeterSummary s = summary();
  s.calibration = fakeCalibration();
  std::vector<MeterDmonSample> dmon = {{0, MeterCounter::kPcieTx, 25 * kMs, 45 * kMs, 41250.0},
                                       {0, MeterCounter::kPcieRx, 45 * kMs, 65 * kMs, 2.0}};
  const std::vector<detail::Series> rec = recordingWithOwnReads(dmon);
  const MeterCalibration* cal = &s.calibration;
  s.windows.clear();
  s.windows.push_back(detail::computeWindow("copy d2h", 0, 15 * kMs, 45 * kMs, rec, s.gpus, dmon, 10, cal));
  s.windows.push_back(detail::computeWindow("peer", 0, 55 * kMs, 70 * kMs, rec, s.gpus, dmon, 10, cal));
  s.windows.push_back(detail::computeWindow("peer", 1, 57 * kMs, 67 * kMs, rec, s.gpus, dmon, 10, cal));
  s.windows.push_back(detail::computeWindow("command", 0, 1 * kMs, 99 * kMs, rec, s.gpus, dmon, 10, cal));
  for (size_t k = 0; k < s.gpus.size(); ++k) {
    const auto reads = detail::readsInside(rec[k], dmon, static_cast<int>(k), 0, 100 * kMs);
    std::array<std::optional<double>, kMeterCounters> mbps{};
    for (int c = 0; c < 2; ++c)
      if (const auto own = detail::ownBytes(s.calibration.gpus[k], c, reads)) mbps[c] = *own / 0.1 / 1e6;
    s.own_mbps.push_back(mbps);
  }
  return s;
}

TEST(MeterFormat, CalibratedSummaryTableGolden) {
  testing::expectGolden("meter_summary_h200_calibrated.txt", cli::summaryTable(calibratedSummary()));
}

TEST(MeterFormat, CalibratedSummaryCsvGolden) {
  testing::expectGolden("meter_summary_h200_calibrated.csv", cli::summaryCsv(calibratedSummary()));
}

TEST(MeterFormat, CalibratedSummaryJsonGolden) {
  nlohmann::json doc = cli::summaryJson(calibratedSummary());
  doc["context"]["tpscope_version"] = "X.Y.Z";
  testing::expectGolden("meter_summary_h200_calibrated.json", doc.dump(2) + "\n");
}

// The goldens' figures mean what they say: net of the meter's reads, a window holds what the GPU moved
// (the uncalibrated recording's bytes, which has no reads of the meter in it), within a read at an edge.
TEST(MeterFormat, CalibratedWindowsAreTheRecordingNetOfTheReads) {
  const cli::MeterSummary plain = summary(), net = calibratedSummary();
  const MeterCell& gross = plain.windows[0].cells[0][0];
  const MeterCell& x = net.windows[0].cells[0][0];
  ASSERT_TRUE(x.bytes && x.own_bytes && x.counted_bytes && gross.bytes);
  EXPECT_DOUBLE_EQ(*x.bytes + *x.own_bytes, *x.counted_bytes);
  EXPECT_NEAR(*x.own_bytes, 15 * 27000 + 5000, 1e-6);  // 15 PCIe reads and one dmon call inside 15..45 ms
  EXPECT_NEAR(*x.bytes, *gross.bytes, 27000);
  const std::string table = cli::summaryTable(net);
  EXPECT_NE(table.find("# the meter's own reads: 12.32 MB/s rx, 13.87 MB/s tx on GPU 0; subtracted above"),
            std::string::npos)
      << table;
}

TEST(MeterFormat, LiveRowsLikeDmon) {
  cli::LiveLayout l;
  l.time = true;
  l.dmon_beside = true;
  cli::LiveRow r;
  r.time = "19:42:13";
  r.date = "20261129";
  r.t_s = 1.5;
  r.gpu = 1;
  r.rxpci = 12.4;
  r.txpci = 60388.2;
  r.nvlrx = 0;
  r.nvltx = 394000;
  r.rxdmn = std::nullopt;  // N/A, never 0
  r.txdmn = 0;
  std::string all;
  for (const char* f : {"table", "csv", "json"}) all += cli::liveHeader(l, f) + cli::liveRow(l, r, f);
  l = cli::LiveLayout{};
  l.nvlink = false;
  all += cli::liveHeader(l, "table") + cli::liveRow(l, r, "table");
  l.counters = false;  // --method dmon: exactly dmon's columns
  l.date = l.time = true;
  all += cli::liveHeader(l, "table") + cli::liveRow(l, r, "table");
  testing::expectGolden("meter_live.txt", all);
}

TEST(MeterFormat, SamplesAndWindowsAsRecords) {
  std::vector<MeterGpu> gpus = h200Gpus();
  gpus[1].supported[2] = gpus[1].supported[3] = false;  // GPU1 without NVLink counters
  MeterSample s;
  s.gpu = 1;
  s.bytes[0] = 42;
  s.t_ns[0] = 7;
  nlohmann::json j = toJson(s, gpus);
  EXPECT_EQ(j["type"], "sample");
  EXPECT_EQ(j["pcie_tx_bytes"], 42);
  EXPECT_TRUE(j["pcie_rx_bytes"].is_null()) << "a failed read is null";
  EXPECT_FALSE(j.contains("nvlink_tx_bytes")) << "a counter the GPU lacks is not a column of its samples";
  EXPECT_EQ(j["group"], "pcie");
  nlohmann::json j0 = toJson(s, {gpus[1], gpus[0]});  // GPU position 1 is now one with NVLink counters
  EXPECT_FALSE(j0.contains("nvlink_tx_bytes")) << "a PCIe read has no NVLink values: they come in NVLink rows";
  MeterSample n = s;
  n.group = MeterGroup::kNvlink;
  n.bytes[0].reset();
  n.bytes[2] = 9;
  j0 = toJson(n, {gpus[1], gpus[0]});
  EXPECT_EQ(j0["nvlink_tx_bytes"], 9);
  EXPECT_FALSE(j0.contains("pcie_tx_bytes"));
  EXPECT_TRUE(j["nvml_timestamp_us"].is_null());
  const std::string csv = toCsv(s, gpus);
  EXPECT_EQ(csv.rfind("1,pcie,0,0,0,42,7,N/A,0,,,,", 0), 0u) << csv << "NVLink columns empty in a PCIe row";
  const std::string header = samplesCsvHeader();
  EXPECT_EQ(std::count(csv.begin(), csv.end(), ','), std::count(header.begin(), header.end(), ','));
}

}  // namespace
}  // namespace tpscope
