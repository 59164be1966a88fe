// SPDX-License-Identifier: Apache-2.0
// The report on a synthetic run whose numbers are the seed study's: the study's figures come back out.
#include <gtest/gtest.h>

#include <filesystem>

#include "experiment/report_render.h"
#include "experiment_fixture.h"
#include "fixtures.h"

namespace tpscope::experiment {
namespace {

using tpscope::testing::tempDir;
using tpscope::testing::writeStudyRun;

class StudyReport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tempDir("report");
    writeStudyRun(dir_);
    report_ = buildReport(readRun(dir_));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  Report report_;
};

// The spread across repetitions, on window means this test states: written in an order where the median is
// neither the first, the middle nor the last repetition, then with an even count.
TEST(ExperimentReport, MedianAcrossRepetitionsOfWindowMeans) {
  const std::string dir = tempDir("report_median");
  RunRecord run = writeStudyRun(dir);
  std::filesystem::remove_all(dir);
  const double rx[3] = {40, 10, 16}, tx[3] = {9, 7, 8};  // arm C, prefill, GPU 0, repetitions 1, 2, 3
  int rep = 0;
  for (RepetitionResult& r : run.repetitions) {
    if (r.arm != "C") continue;
    for (PhaseResult& p : r.phases)
      for (GpuTraffic& g : p.gpus)
        if (p.phase == "prefill" && g.gpu == 0) g.rx_mbps = rx[rep], g.tx_mbps = tx[rep];
    ++rep;
  }
  ASSERT_EQ(rep, 3);
  auto cellOf = [](const Report& report) {
    for (const ReportCell& c : report.cells)
      if (c.arm == "C" && c.phase == "prefill" && c.gpu == 0) return c;
    throw std::runtime_error("no cell");
  };
  const ReportCell c = cellOf(buildReport(run));
  ASSERT_TRUE(c.rx_mbps && c.tx_mbps);
  EXPECT_DOUBLE_EQ(c.rx_mbps->median, 16);
  EXPECT_DOUBLE_EQ(c.rx_mbps->min, 10);
  EXPECT_DOUBLE_EQ(c.rx_mbps->max, 40);
  EXPECT_EQ(c.rx_mbps->n, 3);
  EXPECT_DOUBLE_EQ(c.tx_mbps->median, 8);

  // Without the third repetition: the median of two is their mean.
  for (auto r = run.repetitions.rbegin(); r != run.repetitions.rend(); ++r)
    if (r->arm == "C") {
      run.repetitions.erase(std::next(r).base());
      break;
    }
  const ReportCell two = cellOf(buildReport(run));
  EXPECT_DOUBLE_EQ(two.rx_mbps->median, 25);
  EXPECT_DOUBLE_EQ(two.tx_mbps->median, 8);
  EXPECT_EQ(two.rx_mbps->n, 2);
}

TEST_F(StudyReport, StudySummaryFigures) {
  auto ap = [&](const std::string& arm, const std::string& phase) {
    for (const ReportArmPhase& a : report_.arm_phases)
      if (a.arm == arm && a.phase == phase) return a;
    throw std::runtime_error("no arm phase");
  };
  EXPECT_DOUBLE_EQ(ap("C", "decode").tok_s->median, 37.7);
  EXPECT_DOUBLE_EQ(*ap("C", "decode").rx_per_card_mbps, 89);
  EXPECT_DOUBLE_EQ(*ap("C", "prefill").rx_per_card_mbps, 1045);
  EXPECT_DOUBLE_EQ(*ap("B", "decode").rx_per_card_mbps, 22);
  EXPECT_DOUBLE_EQ(*ap("C'", "decode").rx_per_card_mbps, 146);
  ASSERT_EQ(report_.net.size(), 4u);  // C and C' against B, per phase
  EXPECT_EQ(report_.net[2].phase, "decode");
  EXPECT_DOUBLE_EQ(report_.net[2].net_rx_mbps, 67);
  EXPECT_NEAR(report_.net[2].ratio, 4.05, 0.01);
  EXPECT_DOUBLE_EQ(report_.net[0].net_rx_mbps, 973.5);
  ASSERT_TRUE(report_.busiest);
  EXPECT_EQ(report_.busiest->arm, "C");
  EXPECT_EQ(report_.busiest->direction, "tx");
  EXPECT_DOUBLE_EQ(report_.busiest->mbps, 1265);
  EXPECT_NEAR(report_.busiest->share, 0.0803, 0.0001);
}

TEST_F(StudyReport, WhatThisMeans) {
  ASSERT_GE(report_.meaning.size(), 5u);
  EXPECT_EQ(report_.meaning[0].rfind("Prefill-heavy work (long prompt, short answer): layer split wins", 0), 0u)
      << report_.meaning[0];
  EXPECT_EQ(report_.meaning[1].rfind("Decode-heavy work (long generation): tensor split wins", 0), 0u)
      << report_.meaning[1];
  EXPECT_NE(report_.meaning[1].find("47% faster"), std::string::npos) << report_.meaning[1];
  EXPECT_NE(report_.meaning[2].find("+18% over C"), std::string::npos) << report_.meaning[2];
  EXPECT_NE(report_.meaning[3].find("far from its ceiling"), std::string::npos) << report_.meaning[3];
}

TEST_F(StudyReport, GoldenMarkdown) { tpscope::testing::expectGolden("report_study.md", formatMarkdown(report_)); }

TEST_F(StudyReport, GoldenJson) {
  nlohmann::json j = toJson(report_);
  j.erase("windows");  // timing detail for the plots; pinned by the record round trip
  tpscope::testing::expectGolden("report_study.json", j.dump(2) + "\n");
}

TEST(ExperimentReport, FailedBaselineIsListedAndExcluded) {
  const std::string dir = tempDir("report_failed");
  writeStudyRun(dir, /*failed_attempt=*/true);
  const Report r = buildReport(readRun(dir));
  ASSERT_EQ(r.failed.size(), 1u);
  EXPECT_EQ(r.failed[0],
            "arm C repetition 2 attempt 1: GPU 1 pcie_rx idled at 152 MB/s (threshold 100) and process "
            "4242 has a context on it");
  for (const ReportArm& a : r.arms)
    if (a.name == "C") {
      EXPECT_EQ(a.valid_repetitions, 3);
      EXPECT_EQ(a.attempts, 4);
    }
  for (const ReportCell& c : r.cells)
    if (c.arm == "C" && c.phase == "prefill" && c.gpu == 0) EXPECT_EQ(c.rx_mbps->n, 3);
  const std::string md = formatMarkdown(r);
  EXPECT_NE(md.find("## Repetitions that failed their baseline"), std::string::npos);
  EXPECT_NE(md.find("1 attempt failed the idle baseline"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// A window's mean, not its median of samples: the mean keeps the burst that the median would throw away.
TEST(ExperimentReport, BurstsSurviveBecausePerRepetitionValuesAreWindowMeans) {
  const std::vector<double> samples = {13, 13, 12, 11, 13, 15, 13, 0, 1111, 10, 0, 70};
  double sum = 0;
  for (double s : samples) sum += s;
  const double mean = sum / samples.size();  // what the meter's window gives: bytes / duration
  EXPECT_NEAR(mean, 106, 1);
  RunRecord run;
  run.manifest.arms = {"B"};
  run.manifest.phases = {"prefill"};
  EffectiveSettings e;
  e.arm = "B";
  e.settings = {{"devices", "0,1", SettingSource::kArm}, {"split", "layer", SettingSource::kArm}};
  run.manifest.effective = {e};
  for (int rep = 0; rep < 3; ++rep) {
    RepetitionResult r;
    r.arm = "B";
    r.repetition = rep;
    PhaseResult p;
    p.phase = "prefill";
    p.end_ns = 12'000'000'000;
    GpuTraffic g;
    g.gpu = 1;
    g.rx_mbps = mean;
    g.samples = 12;
    p.gpus.push_back(g);
    r.phases.push_back(p);
    run.repetitions.push_back(r);
  }
  const Report rep = buildReport(run);
  ASSERT_EQ(rep.cells.size(), 2u);
  EXPECT_NEAR(rep.cells[1].rx_mbps->median, 106, 1);
  EXPECT_FALSE(rep.cells[0].rx_mbps);  // GPU 0 had no data: N/A, not 0
  EXPECT_NE(formatMarkdown(rep).find("| B | prefill | 0 | N/A | N/A |"), std::string::npos);
}

// Tensor positions that share a GPU (devices 0,0) are one card: one row per GPU, the library's bytes of
// both positions on its link, the arm described as what it is.
TEST(ExperimentReport, PositionsSharingAGpuAreOneCard) {
  RunRecord run;
  run.manifest.arms = {"T"};
  run.manifest.phases = {"decode"};
  EffectiveSettings e;
  e.arm = "T";
  e.settings = {{"devices", "0,0", SettingSource::kArm},
                {"split", "tensor", SettingSource::kArm},
                {"allreduce_backend", "host", SettingSource::kDerived}};
  run.manifest.effective = {e};
  RepetitionResult r;
  r.arm = "T";
  PhaseResult p;
  p.phase = "decode";
  p.end_ns = 1'000'000'000;
  p.allreduce = {{"host-kernel", 10, 4000, {1'000'000, 1'000'000}, {1'000'000, 2'000'000}}};
  GpuTraffic g;
  g.gpu = 0;
  g.rx_mbps = 5;
  p.gpus = {g};
  r.phases = {p};
  run.repetitions = {r};
  const Report rep = buildReport(run);
  ASSERT_EQ(rep.arms.size(), 1u);
  EXPECT_EQ(rep.arms[0].gpu_count, 1);
  EXPECT_EQ(rep.arms[0].positions, 2);
  ASSERT_EQ(rep.cells.size(), 1u);
  EXPECT_DOUBLE_EQ(rep.cells[0].library_rx_mbps->median, 3);  // 1 + 2 MB over 1 s
  EXPECT_DOUBLE_EQ(rep.cells[0].library_tx_mbps->median, 2);
  EXPECT_NE(formatMarkdown(rep).find("| T | 2 positions on 1 GPU, tensor, host |"), std::string::npos)
      << formatMarkdown(rep);
  const nlohmann::json j = toJson(rep);
  EXPECT_EQ(j["arms"][0]["gpu_count"], 1);
  EXPECT_EQ(j["arms"][0]["positions"], 2);
}

}  // namespace
}  // namespace tpscope::experiment
