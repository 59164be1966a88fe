// SPDX-License-Identifier: Apache-2.0
// engine = "command": a program that marks its phases on the meter's pipe is a workload of `tpscope arms`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"
#include "experiment_fixture.h"

namespace tpscope::testing {
namespace {

class CommandEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tempDir("command_engine");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string script(const std::string& name, const std::string& body) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body;
    chmod(path.c_str(), 0755);
    return path;
  }
  std::string spec(const std::string& program) {
    const std::string path = dir_ + "/spec.toml";
    std::ofstream(path) << "[experiment]\nname = \"cmd\"\nengine = \"command\"\ncommand = [\"" << program
                        << "\"]\nrepetitions = 2\nidle_seconds = 0.1\nbaseline_threshold_mbps = 100000\n"
                        << "[[arm]]\nname = \"A\"\ndevices = [0]\n[[arm]]\nname = \"B\"\ndevices = [0, 1]\n"
                        << "split = \"layer\"\n";
    return path;
  }
  std::string dir_;
};

TEST_F(CommandEngine, TheProgramsMarksAreTheWindows) {
  const std::string p = script("work.sh",
                               "echo \"arm $TPSCOPE_ARM on $TPSCOPE_DEVICES\"\n"
                               "echo begin prefill > \"$TPSCOPE_METER_PIPE\"; sleep 0.1\n"
                               "echo end prefill > \"$TPSCOPE_METER_PIPE\"\n"
                               "echo begin decode > \"$TPSCOPE_METER_PIPE\"; sleep 0.2\n"
                               "echo end decode > \"$TPSCOPE_METER_PIPE\"\n");
  const std::string run = dir_ + "/run";
  const CliResult r = runTpscope("arms " + spec(p) + " --out " + run, "TPSCOPE_METER_FAKE=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Engine: command"), std::string::npos) << r.out;
  std::ifstream f(run + "/results.jsonl");
  int n = 0;
  for (std::string line; std::getline(f, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const double prefill = (j["phases"][0]["end_ns"].get<double>() - j["phases"][0]["start_ns"].get<double>()) * 1e-9;
    const double decode = (j["phases"][1]["end_ns"].get<double>() - j["phases"][1]["start_ns"].get<double>()) * 1e-9;
    EXPECT_NEAR(prefill, 0.1, 0.08) << line;
    EXPECT_NEAR(decode, 0.2, 0.08) << line;
  }
  EXPECT_EQ(n, 4);
  std::stringstream log;
  log << std::ifstream(run + "/command-B.log").rdbuf();
  EXPECT_NE(log.str().find("arm B on 0,1"), std::string::npos) << log.str();
}

TEST_F(CommandEngine, AProgramThatFailsOrMarksNothingIsAClearError) {
  CliResult r = runTpscope("arms " + spec(script("fail.sh", "echo broken >&2; exit 4\n")) + " --out " + dir_ + "/r1",
                           "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the command exited with status 4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("broken"), std::string::npos) << r.err;
  r = runTpscope("arms " + spec(script("quiet.sh", "true\n")) + " --out " + dir_ + "/r2", "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("marked no window \"prefill\""), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tpscope::testing
