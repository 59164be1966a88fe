// SPDX-License-Identifier: Apache-2.0
// `tpscope arms`: usage and runtime errors in one line, no GPU said so, and a fake run end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "experiment/workload_phases.h"
#include "experiment_fixture.h"

namespace tpscope::testing {
namespace {

const char* kSpec = R"([experiment]
name = "cli-two"
preset = "tiny"
prompt_tokens = 64
decode_tokens = 16
context = 256
repetitions = 2
idle_seconds = 0.2
baseline_threshold_mbps = 5000
meter_period_ms = 2

[[arm]]
name = "A"
devices = [0]
split = "none"

[[arm]]
name = "B"
devices = [0, 1]
split = "layer"
)";

class ArmsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tempDir("arms_cli");
    std::filesystem::create_directories(dir_);
    spec_ = dir_ + "/spec.toml";
    std::ofstream(spec_) << kSpec;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, spec_;
};

TEST_F(ArmsCli, FakeRunWritesTheFolderAndPrintsTheReport) {
  const std::string run = dir_ + "/run";
  const CliResult r = runTpscope("arms " + spec_ + " --fake-workload --out " + run, "TPSCOPE_METER_FAKE=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cli-two"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("arm B rep 2/2: quiescing 0.2 s"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(run + "/manifest.json"));
  // The folder renders the same report again.
  const CliResult again = runTpscope("report " + run);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);
}

// The manifest says how the run was asked for and where it ran: the command line, --quick and --arms
// as given, and the machine (here the fake GPUs, never just a host name).
TEST_F(ArmsCli, ManifestRecordsTheInvocationAndTheMachine) {
  const std::string run = dir_ + "/run";
  const CliResult r =
      runTpscope("arms " + spec_ + " --fake-workload --quick --arms B --out " + run, "TPSCOPE_METER_FAKE=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream f(run + "/manifest.json");
  const nlohmann::json m = nlohmann::json::parse(f);
  const nlohmann::json& inv = m.at("invocation");
  EXPECT_EQ(inv.at("quick"), true);
  EXPECT_EQ(inv.at("arms"), nlohmann::json::array({"B"}));
  const std::vector<std::string> argv = inv.at("argv").get<std::vector<std::string>>();
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[1], "arms");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--quick"), argv.end());
  EXPECT_EQ(m.at("machine").at("description"), "fake GPUs (--fake-workload)");
  EXPECT_FALSE(m.at("machine").at("hostname").get<std::string>().empty());
  EXPECT_FALSE(m.at("machine").at("os").get<std::string>().empty());
}

// The synthetic workload's automatic decisions, which every arm's settings carry. The decode kernel choices
// are not among them: they are spec settings (experiment_guards_test).
TEST(ArmsWorkload, DecisionsAreTheAutomaticOnes) {
  std::map<std::string, std::string> got;
  for (const experiment::Setting& s : experiment::workloadDecisions(experiment::EffectiveSettings{}))
    got[s.key] = s.value;
  EXPECT_EQ(got["cuda_graph"], "on");
  EXPECT_EQ(got["prefill_ubatch"], "512");
  EXPECT_TRUE(got["prefill_attention"] == "cudnn" || got["prefill_attention"] == "kernel") << got["prefill_attention"];
  EXPECT_EQ(got.count("reduction"), 0u);
}

TEST_F(ArmsCli, UnknownKeyIsAUsageError) {
  std::ofstream(spec_, std::ios::app) << "\n[[arm]]\nname = \"C\"\nsplitt = \"tensor\"\n";
  const CliResult r = runTpscope("arms " + spec_ + " --fake-workload", "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("splitt"), std::string::npos) << r.err;
}

TEST_F(ArmsCli, UnavailableArmIsRefusedInOneErrorLine) {
  std::ofstream(spec_, std::ios::app) << "\n[[arm]]\nname = \"R\"\ndevices = [0, 1]\nsplit = \"row\"\n";
  const std::string run = dir_ + "/run";
  const CliResult r = runTpscope("arms " + spec_ + " --fake-workload --out " + run, "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("arm R: split mode \"row\" is not implemented"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tpscope: error: "), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(run));
}

TEST_F(ArmsCli, UsageErrors) {
  EXPECT_EQ(runTpscope("arms").exit_code, 2);
  const CliResult r = runTpscope("arms /nonexistent/spec.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_EQ(runTpscope("arms " + spec_ + " --bogus").exit_code, 2);
}

TEST_F(ArmsCli, WithoutGpusSaysSoInOneLine) {
  // CUDA_VISIBLE_DEVICES="" hides any GPU, so this holds on GPU machines too.
  const CliResult r = runTpscope("arms " + spec_ + " --out " + dir_ + "/run", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("needs GPUs"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(ArmsCli, FakeArmsNeedTheFakeMeter) {
  const CliResult r = runTpscope("arms " + spec_ + " --fake-workload", "TPSCOPE_METER_FAKE=0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
}

}  // namespace
}  // namespace tpscope::testing
