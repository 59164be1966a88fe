// SPDX-License-Identifier: Apache-2.0
// `tpscope report RUN_DIR`: tables on stdout, one-line errors with the right exit code, plots.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "experiment_fixture.h"
#include "fixtures.h"

namespace tpscope::testing {
namespace {

class ReportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tempDir("report_cli");
    writeStudyRun(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ReportCli, MarkdownMatchesTheLibrary) {
  const CliResult r = runTpscope("report " + dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, readFile(std::string(TPSCOPE_SOURCE_DIR) + "/tests/unit/golden/report_study.md"));
  EXPECT_EQ(r.err, "");
}

TEST_F(ReportCli, Json) {
  const CliResult r = runTpscope("report " + dir_ + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["arms"].size(), 4u);
  EXPECT_EQ(j["busiest"]["arm"], "C");
  EXPECT_EQ(j["windows"].size(), 24u);  // 4 arms x 3 repetitions x 2 phases
}

TEST(ReportCliErrors, MissingFolderIsAUsageError) {
  const CliResult r = runTpscope("report /nonexistent/run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("tpscope: error: run folder /nonexistent/run does not exist"), std::string::npos) << r.err;
  EXPECT_EQ(runTpscope("report").exit_code, 2);
  EXPECT_EQ(runTpscope("report /tmp --format xml").exit_code, 2);
}

TEST_F(ReportCli, CorruptManifestIsARuntimeError) {
  std::ofstream(dir_ + "/manifest.json") << "{\"format\": ";
  const CliResult r = runTpscope("report " + dir_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("manifest.json is not valid JSON"), std::string::npos) << r.err;
}

// A run folder that needs more memory than the process may use (here 40 results lines, each keeping an
// engine record of a million numbers, under a 600 MB data limit) is one line and exit 1, never an abort:
// freeing a parsed document allocates, and a failure there aborted the process.
TEST(ReportCliErrors, RunningOutOfMemoryIsOneLineAndExitOne) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)  // clang names them so
#define TPS_UNDER_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(TPS_UNDER_SANITIZER)  // gcc's
  GTEST_SKIP() << "a sanitizer's shadow memory does not start under a 600 MB data limit (scripts/sanitize)";
#endif
  const std::string dir = tempDir("report_oom");
  writeStudyRun(dir);
  const std::string limit = "ulimit -d 600000 &&";
  const CliResult fits = runTpscope("report " + dir + " --format json", limit);  // the limit leaves room to run
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  {
    std::ifstream in(dir + "/results.jsonl");
    std::string first;
    std::getline(in, first);
    nlohmann::json rep = nlohmann::json::parse(first);
    std::string numbers = "[0";
    for (int i = 1; i < 1000000; ++i) numbers += ",0";
    numbers += "]";
    std::ofstream f(dir + "/results.jsonl", std::ios::app);
    for (int k = 0; k < 40; ++k) {
      rep["repetition"] = 100 + k;
      rep["phases"][0]["engine"] = "X";
      std::string line = rep.dump();
      line.replace(line.find("\"X\""), 3, numbers);
      f << line << "\n";
    }
  }
  const CliResult r = runTpscope("report " + dir + " --format json", limit);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("tpscope: error: out of memory: the input needs more memory than this process may use"),
            std::string::npos)
      << r.err;
  std::filesystem::remove_all(dir);
}

TEST_F(ReportCli, PlotsArePngsWhenMatplotlibIsThere) {
  if (!haveMatplotlib()) GTEST_SKIP() << noMatplotlibReason();
  const std::string plots = dir_ + "/plots";
  const CliResult r = runTpscope("report " + dir_ + " --plots --plot-dir " + plots);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("plots written to"), std::string::npos) << r.err;
  for (const char* name : {"traffic.png", "arms.png"}) {
    const std::string path = plots + "/" + name;
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    EXPECT_GT(std::filesystem::file_size(path), 1000u) << path;
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {};
    f.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  }
}

TEST_F(ReportCli, PlotsSaySoWhenMatplotlibIsMissing) {
  // A python without matplotlib: the tables still print, stderr says why no plots.
  const std::string bin = dir_ + "/fakebin";
  std::filesystem::create_directories(bin);
  std::ofstream(bin + "/python3") << "#!/bin/sh\nexit 1\n";
  std::filesystem::permissions(bin + "/python3", std::filesystem::perms::owner_all);
  const CliResult r = runTpscope("report " + dir_ + " --plots", "TPSCOPE_PYTHON=" + bin + "/python3");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("## Per arm"), std::string::npos);
  EXPECT_NE(r.err.find("plots skipped: python3 with matplotlib is not available"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tpscope::testing
