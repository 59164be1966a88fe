// SPDX-License-Identifier: Apache-2.0
// The run folder: written as the run goes, read back identically; corrupt folders fail with the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "experiment/arm_phases.h"
#include "experiment/record.h"
#include "experiment_fixture.h"

namespace tpscope::experiment {
namespace {

using tpscope::testing::tempDir;
using tpscope::testing::writeStudyRun;

TEST(ExperimentRecord, RoundTrip) {
  const std::string dir = tempDir("record");
  const RunRecord written = writeStudyRun(dir, /*failed_attempt=*/true);
  const RunRecord read = readRun(dir);
  EXPECT_EQ(toJson(read.manifest), toJson(written.manifest));
  ASSERT_EQ(read.repetitions.size(), written.repetitions.size());
  EXPECT_EQ(read.repetitions.size(), 13u);  // 12 + one failed attempt, kept
  for (size_t i = 0; i < read.repetitions.size(); ++i)
    EXPECT_EQ(toJson(read.repetitions[i]), toJson(written.repetitions[i])) << i;
  ASSERT_EQ(read.samples.size(), written.samples.size());
  for (size_t i = 0; i < read.samples.size(); i += 97) EXPECT_EQ(toJson(read.samples[i]), toJson(written.samples[i]));
  EXPECT_EQ(read.manifest.effective.size(), 4u);
  EXPECT_EQ(read.manifest.effective[3].value("tokens_per_step"), "4");
  EXPECT_EQ(read.manifest.effective[3].find("tokens_per_step")->source, SettingSource::kArm);
  const RepetitionResult& failed = read.repetitions[7];
  EXPECT_EQ(failed.arm, "C");
  EXPECT_FALSE(failed.valid);
  EXPECT_FALSE(failed.quiesce.passed);
  EXPECT_EQ(failed.quiesce.other_pids, std::vector<unsigned>{4242});
  EXPECT_DOUBLE_EQ(*failed.quiesce.idle_mbps[1][1], 152.0);
  EXPECT_FALSE(failed.quiesce.idle_mbps[1][2].has_value());  // NVLink: N/A stays null, not 0
  std::filesystem::remove_all(dir);
}

TEST(ExperimentRecord, NullStaysNull) {
  RepetitionResult r;
  r.arm = "A";
  PhaseResult p;
  p.phase = "decode";
  GpuTraffic g;
  g.rx_mbps = 12.5;
  p.gpus.push_back(g);
  r.phases.push_back(p);
  const nlohmann::json j = toJson(r);
  EXPECT_TRUE(j["phases"][0]["gpus"][0]["pcie_tx_mbps"].is_null());
  EXPECT_TRUE(j["phases"][0]["gpus"][0]["dmon_rx_mbps"].is_null());
  const RepetitionResult back = repetitionFromJson(j);
  EXPECT_FALSE(back.phases[0].gpus[0].tx_mbps);
  EXPECT_DOUBLE_EQ(*back.phases[0].gpus[0].rx_mbps, 12.5);
}

void expectReadError(const std::string& dir, const std::string& part) {
  try {
    readRun(dir);
    FAIL() << "read " << dir;
  } catch (const RecordError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST(ExperimentRecord, CorruptFolders) {
  expectReadError("/nonexistent/run", "does not exist");
  const std::string dir = tempDir("corrupt");
  std::filesystem::create_directories(dir);
  expectReadError(dir, "manifest.json is missing");
  std::ofstream(dir + "/manifest.json") << "{ not json";
  expectReadError(dir, "manifest.json is not valid JSON");
  std::ofstream(dir + "/manifest.json") << R"({"format": "tpscope-run/99", "arms": [], "phases": []})";
  expectReadError(dir, "format \"tpscope-run/99\"");
  std::ofstream(dir + "/manifest.json") << R"({"format": "tpscope-run/1"})";
  expectReadError(dir, "missing a field");
  writeStudyRun(dir);
  std::ofstream(dir + "/results.jsonl", std::ios::app) << "{\"arm\": \"A\", truncated\n";
  expectReadError(dir, "results.jsonl:13: corrupt record");
  std::filesystem::remove(dir + "/results.jsonl");
  expectReadError(dir, "results.jsonl is missing");
  std::filesystem::remove_all(dir);
}

TEST(ExperimentRecord, TrafficFromMeterWindow) {
  MeterGpu g0, g1;
  g0.index = 2;
  g1.index = 5;
  g0.pcie_ceiling_mbps = g1.pcie_ceiling_mbps = 63015;
  MeterWindow w;
  w.name = "decode";
  w.cells.resize(2);
  MeterCell& rx = w.cells[1][static_cast<int>(MeterCounter::kPcieRx)];
  rx.bytes = 4e6;
  rx.mean_mbps = 2.0;
  rx.samples = 900;
  rx.dmon_mbps = 1.5;
  rx.dmon_samples = 90;
  w.cells[1][static_cast<int>(MeterCounter::kNvlinkTx)].mean_mbps = 77;
  const auto t = trafficFromWindow(w, {g0, g1});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].gpu, 2);
  EXPECT_FALSE(t[0].rx_mbps);
  EXPECT_EQ(t[1].gpu, 5);
  EXPECT_DOUBLE_EQ(*t[1].rx_mbps, 2.0);
  EXPECT_EQ(t[1].samples, 900);
  EXPECT_DOUBLE_EQ(*t[1].dmon_rx_mbps, 1.5);
  EXPECT_DOUBLE_EQ(*t[1].nvlink_tx_mbps, 77);
  EXPECT_DOUBLE_EQ(*t[1].ceiling_mbps, 63015);
}

TEST(ExperimentRecord, RowsFromSamplesMapGpuAndMidpoint) {
  MeterGpu g;
  g.index = 3;
  MeterSample s;
  s.gpu = 0;
  s.t_before_ns = 100;
  s.t_after_ns = 300;
  s.bytes[static_cast<int>(MeterCounter::kPcieRx)] = 42;
  const auto rows = rowsFromSamples("C", 1, {s}, {g});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].gpu, 3);
  EXPECT_EQ(rows[0].t_ns, 200);
  EXPECT_EQ(*rows[0].pcie_rx_bytes, 42u);
  EXPECT_FALSE(rows[0].nvlink_rx_bytes);
}

TEST(ExperimentRecord, PhaseResultFromOutcome) {
  PhaseOutcome o;
  o.phase = "decode";
  o.start_ns = 1'000'000'000;
  o.end_ns = 3'000'000'000;
  o.tokens = 100;
  o.steps = 40;
  const PhaseResult p = makePhaseResult(o, {});
  EXPECT_DOUBLE_EQ(p.tok_s, 50);
  EXPECT_DOUBLE_EQ(p.step_ms, 50);
}

}  // namespace
}  // namespace tpscope::experiment
