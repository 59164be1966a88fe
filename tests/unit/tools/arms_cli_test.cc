// SPDX-License-Identifier: Apache-2.0
// `tpscope arms`: usage and runtime errors in one line, no GPU said so, and a fake run end to end.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
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

// ---- the main job on a box of one GPU ----------------------------------------------------------------

// examples/four-arms.toml with a short baseline, its recording by absolute path, written to `path`.
void writeFourArms(const std::string& path, bool with_recording) {
  std::ifstream in(std::string(TPSCOPE_SOURCE_DIR) + "/examples/four-arms.toml");
  std::string spec((std::istreambuf_iterator<char>(in)), {});
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = spec.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    spec.replace(at, from.size(), to);
  };
  replace("idle_seconds = 8", "idle_seconds = 0.2");
  replace("baseline_threshold_mbps = 100", "baseline_threshold_mbps = 5000");  // the fake GPU 0 idles at 2000
  replace("meter_period_ms = 2", "meter_period_ms = 5");
  replace("recorded_run = \"recorded/h200x2-quick\"",
          with_recording ? "recorded_run = \"" + std::string(TPSCOPE_SOURCE_DIR) + "/examples/recorded/h200x2-quick\""
                         : "");
  std::ofstream(path) << spec;
}

const char* kFakeEnv = "TPSCOPE_METER_FAKE=1 TPSCOPE_PLOT_SCRIPT=/nonexistent";

// The README's main command on a box of one GPU: arm A measured, B, C and C' from the recording beside
// it, marked so with the recording's machine, one line saying which is which, exit 0.
TEST_F(ArmsCli, OneGpuMeasuresWhatFitsAndShowsTheRecordingForTheRest) {
  writeFourArms(spec_, true);
  const std::string run = dir_ + "/run";
  const CliResult r = runTpscope("arms " + spec_ + " --quick --fake-workload --fake-gpus 1 --out " + run, kFakeEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string rec = std::string(TPSCOPE_SOURCE_DIR) + "/examples/recorded/h200x2-quick";
  EXPECT_NE(r.err.find("tpscope arms: this box has 1 GPU: arm A is measured here; arms B, C, C' are shown from the "
                       "recorded run " +
                       rec + ": Recorded run: 2026-11-29 on 2x NVIDIA H200 SXM"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("\n| A | single GPU | "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n| A | single GPU | N/A"), std::string::npos) << "arm A was measured: " << r.out;
  for (const char* arm : {"B", "C", "C'"})
    EXPECT_NE(r.out.find(std::string("\n| ") + arm + " (recorded) | 2 GPUs"), std::string::npos) << arm << r.out;
  EXPECT_NE(r.out.find("(recorded): an arm this box cannot run, not measured here but shown from " + rec +
                       ": Recorded run: 2026-11-29 on 2x NVIDIA H200 SXM"),
            std::string::npos)
      << r.out;
  // The recorded arms' figures are the recording's own: arm C's row as `tpscope report` gives it there.
  const CliResult recorded = runTpscope("report " + rec);
  const size_t c_row = recorded.out.find("\n| C | ");
  ASSERT_NE(c_row, std::string::npos);
  const std::string c_figures = recorded.out.substr(recorded.out.find(" | ", c_row + 5), 60);
  EXPECT_NE(r.out.find("\n| C (recorded) | 2 GPUs, tensor, host" + c_figures.substr(0, c_figures.find('\n'))),
            std::string::npos)
      << c_figures << "\n"
      << r.out;
  // The run folder holds what was measured: arm A, and which arms were left out and why.
  const nlohmann::json m = nlohmann::json::parse(std::ifstream(run + "/manifest.json"));
  EXPECT_EQ(m["arms"], nlohmann::json::array({"A"}));
  EXPECT_EQ(m["invocation"]["left_out"].size(), 3u);
  EXPECT_EQ(m["invocation"]["left_out"][0]["reason"], "devices 0,1 need GPU 1, this box has 1 GPU");
  const CliResult report = runTpscope("report " + run);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(report.out.find("(recorded)"), std::string::npos);
}

// Without a recording to show, an arm the box cannot run is refused as before: nothing runs.
TEST_F(ArmsCli, OneGpuWithoutARecordingRefusesTheArmsItCannotRun) {
  writeFourArms(spec_, false);
  const std::string run = dir_ + "/run";
  const CliResult r = runTpscope("arms " + spec_ + " --quick --fake-workload --fake-gpus 1 --out " + run, kFakeEnv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("arm B: devices 0,1 need GPU 1, this box has 1 GPU"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(run));
  EXPECT_EQ(r.out, "");
}

// ---- interrupted and resumed ------------------------------------------------------------------------

// Lines in a file (0 when it does not exist).
size_t fileLines(const std::string& path) {
  std::ifstream f(path);
  size_t n = 0;
  for (std::string l; std::getline(f, l);) ++n;
  return n;
}

// Every number (with its sign) as '#' (the fake workload's tok/s follow the host's clock), and whether the dmon
// method's once-a-second snapshot fell inside a window of a few ms (chance, run to run) as '#' too; the lines naming
// the busiest cell are left out.
std::string masked(std::string text) {
  for (size_t at; (at = text.find("no sample")) != std::string::npos;) text.replace(at, 9, "0");
  const std::string note = " \"#\": the window is shorter";
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const bool sign = (text[i] == '-' || text[i] == '+') && i + 1 < text.size() &&
                      std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (sign || std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (sign) ++i;
      while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' || text[i] == ','))
        ++i;
      out += '#';
    } else {
      out += text[i++];
    }
  }
  // The note under the dmon table, which says why a cell has no snapshot, only where one has none.
  if (const size_t at = out.find(note); at != std::string::npos) out.erase(at, out.find('\n', at) - at);
  // Which cell is the busiest, among cells the fake GPUs load at the same rate, is a coin toss too.
  std::string kept;
  for (size_t at = 0; at < out.size();) {
    const size_t nl = std::min(out.find('\n', at), out.size());
    if (out.substr(at, nl - at).find("usiest cell") == std::string::npos) kept += out.substr(at, nl - at + 1);
    at = nl + 1;
  }
  return kept;
}

const char* kThreeArms = R"([experiment]
name = "cli-three"
preset = "tiny"
prompt_tokens = 64
decode_tokens = 16
context = 256
repetitions = 2
idle_seconds = 0.2
baseline_threshold_mbps = 5000
meter_period_ms = 5

[[arm]]
name = "A"
devices = [0]
split = "none"

[[arm]]
name = "B"
devices = [0, 1]
split = "layer"

[[arm]]
name = "C"
devices = [1]
split = "none"
)";

// Ctrl-C during the third arm, as a user gives it: the run stops before its next attempt, says how to go
// on, and leaves a folder that `tpscope report` renders and `tpscope arms --resume` finishes, running no
// repetition twice; the report is then the one an uninterrupted run gives.
TEST_F(ArmsCli, CtrlCLeavesAFolderThatResumeFinishes) {
  std::ofstream(spec_) << kThreeArms;
  const std::string run = dir_ + "/run", out = dir_ + "/out", err = dir_ + "/err";
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("TPSCOPE_METER_FAKE", "1", 1);
    setenv("TPSCOPE_PLOT_SCRIPT", "/nonexistent", 1);
    (void)!freopen(out.c_str(), "w", stdout);
    (void)!freopen(err.c_str(), "w", stderr);
    execl(tpscopePath().c_str(), "tpscope", "arms", spec_.c_str(), "--fake-workload", "--out", run.c_str(), nullptr);
    _exit(127);
  }
  // After the second arm: its two repetitions are in results.jsonl.
  const auto t0 = std::chrono::steady_clock::now();
  while (fileLines(run + "/results.jsonl") < 4 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string stderr_text = [&] {
    std::ifstream f(err);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  }();
  ASSERT_TRUE(WIFEXITED(status)) << stderr_text;
  EXPECT_EQ(WEXITSTATUS(status), 130) << stderr_text;
  EXPECT_NE(stderr_text.find("continue with `tpscope arms --resume " + run + "`"), std::string::npos) << stderr_text;
  const size_t recorded = fileLines(run + "/results.jsonl");
  EXPECT_GE(recorded, 4u);
  EXPECT_LT(recorded, 6u) << "the run went on to its end";
  const CliResult partial = runTpscope("report " + run);
  EXPECT_EQ(partial.exit_code, 0) << partial.err;

  const CliResult resumed = runTpscope("arms --resume " + run + " --fake-workload", kFakeEnv);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find(std::to_string(recorded) + " repetitions recorded before the resume"), std::string::npos)
      << resumed.err;
  EXPECT_EQ(fileLines(run + "/results.jsonl"), 6u);
  const CliResult whole = runTpscope("arms " + spec_ + " --fake-workload --out " + dir_ + "/whole", kFakeEnv);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(masked(resumed.out), masked(whole.out));
  EXPECT_EQ(runTpscope("report " + run).out, resumed.out);
}

TEST_F(ArmsCli, ResumeTakesItsSpecAndOptionsFromTheFolder) {
  std::ofstream(spec_) << kThreeArms;
  const std::string run = dir_ + "/run";
  ASSERT_EQ(runTpscope("arms " + spec_ + " --fake-workload --arms A --out " + run, kFakeEnv).exit_code, 0);
  // Options that would change the run are usage errors; a spec other than the folder's is refused.
  CliResult r = runTpscope("arms --resume " + run + " --quick --fake-workload", kFakeEnv);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  std::ofstream(dir_ + "/other.toml") << std::string(kThreeArms) + "\n[[arm]]\nname = \"D\"\ndevices = [0]\n";
  r = runTpscope("arms " + dir_ + "/other.toml --resume " + run + " --fake-workload", kFakeEnv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not the spec " + run + " was started with"), std::string::npos) << r.err;
  // The same spec, given to check: nothing is left to run (--arms A was recorded whole).
  r = runTpscope("arms " + spec_ + " --resume " + run + " --fake-workload", kFakeEnv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("arm A: every repetition is recorded already"), std::string::npos) << r.err;
  EXPECT_EQ(fileLines(run + "/results.jsonl"), 2u);
  // Not a run folder.
  r = runTpscope("arms --resume " + dir_ + "/nothing", kFakeEnv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("there is no run to resume there"), std::string::npos) << r.err;
  // A new run into the folder is refused, pointing at --resume.
  r = runTpscope("arms " + spec_ + " --fake-workload --out " + run, kFakeEnv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("holds a run already: continue it with `tpscope arms --resume"), std::string::npos) << r.err;
}

TEST_F(ArmsCli, FakeArmsNeedTheFakeMeter) {
  const CliResult r = runTpscope("arms " + spec_ + " --fake-workload", "TPSCOPE_METER_FAKE=0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
}

}  // namespace
}  // namespace tpscope::testing
