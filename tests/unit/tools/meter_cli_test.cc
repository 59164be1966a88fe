// SPDX-License-Identifier: Apache-2.0
// meter_cli_test - `tpscope meter` end to end on scripted GPUs (TPSCOPE_METER_FAKE=1): wrapped mode
// and its control pipe, exit codes, --out, errors, SIGINT. Runs the built binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "cli_runner.h"

namespace {

using Result = tpscope::testing::CliResult;
using tpscope::testing::lineCount;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Whether process `pid` has a handler for `sig` (SigCgt in /proc/PID/status).
bool catches(pid_t pid, int sig) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1;
  return false;
}

// Runs tpscope with `args` and extra environment entries; sends `sig` to it (alone) `sig_ms` after it
// installed its handler for it (a slow start, as under a sanitizer, must not turn the signal into a kill).
Result tpscope(std::vector<std::string> args, std::vector<std::string> env = {"TPSCOPE_METER_FAKE=1"}, int sig = 0,
               int sig_ms = 0) {
  const std::string base = ::testing::TempDir() + "tpscope_meter_cli_" + std::to_string(getpid());
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, (base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, (base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  args.insert(args.begin(), TPSCOPE_CLI_PATH);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("TPSCOPE_", 0) != 0) envs.push_back(*e);
  for (const std::string& e : env) envs.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  Result r;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) return r;
  posix_spawn_file_actions_destroy(&fa);
  if (sig) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    siginfo_t done{};
    while (!catches(pid, sig) && std::chrono::steady_clock::now() < give_up &&
           waitid(P_PID, pid, &done, WEXITED | WNOHANG | WNOWAIT) == 0 && done.si_pid == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(sig_ms));
    kill(pid, sig);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

const char* kMarks =
    "echo 'begin a' > \"$TPSCOPE_METER_PIPE\"; sleep 0.2; echo 'end a' > \"$TPSCOPE_METER_PIPE\"; "
    "echo 'bogus line' > \"$TPSCOPE_METER_PIPE\"; exit 3";

TEST(MeterCli, WrappedCommandMarksWindowsAndItsExitCodeIsReturned) {
  Result r = tpscope({"meter", "--format", "json", "--", "sh", "-c", kMarks});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  // The malformed line is one warning, not a crash.
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown command 'bogus'"), std::string::npos) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["context"]["exit_code"], 3);
  ASSERT_EQ(doc["windows"].size(), 2u);
  EXPECT_EQ(doc["windows"][0]["name"], "a");
  EXPECT_EQ(doc["windows"][1]["name"], "command");
  const auto& a = doc["windows"][0];
  EXPECT_GE(a["duration_ms"].get<double>(), 195);
  EXPECT_TRUE(a["complete"].get<bool>());
  // The fake GPU0 sends 1000 MB/s over PCIe and 2000 MB/s over NVLink; GPU1 receives the NVLink.
  EXPECT_NEAR(a["gpus"][0]["counters"]["pcie_tx"]["mean_mbps"].get<double>(), 1000, 1);
  EXPECT_NEAR(a["gpus"][1]["counters"]["nvlink_rx"]["mean_mbps"].get<double>(), 2000, 2);
  const double bytes = a["gpus"][0]["counters"]["pcie_tx"]["bytes"];
  EXPECT_NEAR(bytes, 1e9 * a["duration_ms"].get<double>() / 1000, 1e6);
}

TEST(MeterCli, PmSourceWritesPmFiguresAndATimelineOfEachWindow) {
  const std::string path = ::testing::TempDir() + "meter_tl_" + std::to_string(getpid()) + ".jsonl";
  Result r = tpscope({"meter", "--source", "pm", "--format", "json", "--timeline", path, "--", "sh", "-c",
                      "echo 'begin a' > \"$TPSCOPE_METER_PIPE\"; sleep 0.1; echo 'end a' > \"$TPSCOPE_METER_PIPE\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["context"]["options"]["source"], "pm");
  ASSERT_EQ(doc["windows"].size(), 2u);
  const auto& a = doc["windows"][0];
  EXPECT_TRUE(a["complete"].get<bool>()) << a.dump();
  EXPECT_FALSE(a.contains("sources")) << "one source, nothing to say";
  const auto& tx = a["gpus"][0]["counters"]["pcie_tx"];
  EXPECT_FALSE(a["gpus"][0]["counters"].contains("nvlink_tx"));  // PM counts PCIe only
  // The fake GPU0 sends 1000 MB/s; the sampler's own traffic, measured while it did, is not subtracted.
  EXPECT_NEAR(tx["counted_bytes"].get<double>(), 1e9 * a["duration_ms"].get<double>() / 1e3, 0.01 * 1e8);
  EXPECT_FALSE(tx.contains("pm_bytes")) << "PM's figures are the cell's own, not a twin beside them";
  EXPECT_TRUE(doc["pm"]["ended"].get<std::string>().empty());
  EXPECT_EQ(doc["pm"]["dropped"], 2);  // the first record of each GPU's session
  std::ifstream f(path);
  std::string first;
  ASSERT_TRUE(std::getline(f, first));
  const nlohmann::json rule = nlohmann::json::parse(first);  // the meter's burst rule, then the records
  EXPECT_EQ(rule["type"], "timeline_rule");
  EXPECT_EQ(rule["direction"], "tx");
  EXPECT_EQ(rule["threshold_mbps"], 1024);
  int n = 0, gpu0 = 0;
  double last_us = -1e9, covered_to = 0;
  for (std::string l; std::getline(f, l); ++n) {
    const nlohmann::json j = nlohmann::json::parse(l);
    EXPECT_EQ(j["type"], "timeline");
    EXPECT_TRUE(j["burst"].is_null()) << "1000 MB/s stays under the default 1024 MB/s: no burst";
    EXPECT_EQ(j["window"], "a") << "the whole-command window is left out when the command marks windows";
    if (j["gpu"] != 0) continue;
    ++gpu0;
    EXPECT_GT(j["t_us"].get<double>(), last_us);  // time order
    if (last_us > -1e9) EXPECT_NEAR(j["t_us"].get<double>(), covered_to, 1e-3) << "records back to back";
    last_us = j["t_us"];
    covered_to = last_us + j["dur_us"].get<double>();
  }
  std::remove(path.c_str());
  EXPECT_GE(gpu0, static_cast<int>(a["duration_ms"].get<double>() * 10));  // 100 us records over the window
  EXPECT_GE(covered_to, a["duration_ms"].get<double>() * 1e3);
  // GPU 1 has as many records over the window, give or take the one its own phase puts at an edge.
  EXPECT_NEAR(n - gpu0, gpu0, 1);
}

// The meter decides which records are bursts (meter/pm_bursts.h): each record carries the burst it
// belongs to, so a plot or a count of the timeline needs no rule of its own.
TEST(MeterCli, TimelineLabelsEachRecordWithTheBurstTheMeterCounts) {
  const std::string path = ::testing::TempDir() + "meter_bursts_" + std::to_string(getpid()) + ".jsonl";
  Result r = tpscope({"meter", "--source", "pm", "--timeline", path, "--burst-rule", "tx:500:25", "--", "sh", "-c",
                      "echo 'begin a' > \"$TPSCOPE_METER_PIPE\"; sleep 0.05; echo 'end a' > \"$TPSCOPE_METER_PIPE\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream f(path);
  std::map<int, std::set<std::string>> labels;  // by GPU
  for (std::string l; std::getline(f, l);) {
    const nlohmann::json j = nlohmann::json::parse(l);
    if (j["type"] == "timeline_rule") {
      EXPECT_EQ(j["threshold_mbps"], 500);
      continue;
    }
    labels[j["gpu"].get<int>()].insert(j["burst"].dump());
  }
  std::remove(path.c_str());
  // GPU0 sends 1000 MB/s without a pause: one burst over the window; GPU1's 10 MB/s is none.
  EXPECT_EQ(labels[0], std::set<std::string>{"0"});
  EXPECT_EQ(labels[1], std::set<std::string>{"null"});
  Result bad = tpscope({"meter", "--source", "pm", "--timeline", path, "--burst-rule", "tx:fast", "--", "true"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("DIRECTION:MBPS:GAP_US"), std::string::npos) << bad.err;
}

// Sources by name from the meter's registry, alone or several: the first one's figures fill the table.
TEST(MeterCli, SourcesAreTheMetersRegisteredOnesInAnyOrder) {
  Result r = tpscope({"meter", "--source", "pm,nvml", "--format", "json", "--", "sleep", "0.05"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["context"]["options"]["source"], "pm,nvml");
  const auto& w = doc["windows"][0];
  ASSERT_EQ(w["sources"].size(), 2u);
  EXPECT_EQ(w["sources"][0]["source"], "pm");
  EXPECT_EQ(w["sources"][1]["source"], "nvml");
  const auto& tx = w["gpus"][0]["counters"]["pcie_tx"];
  EXPECT_TRUE(tx.contains("nvml_bytes") && tx.contains("nvml_ratio")) << tx.dump();
  Result bad = tpscope({"meter", "--source", "nvml,sysfs", "--", "true"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("use one or more of pm, nvml, dmon"), std::string::npos) << bad.err;
}

TEST(MeterCli, PmOptionsAreCheckedAndAMissingCuptiSaysWhy) {
  for (std::vector<std::string> args : {std::vector<std::string>{"meter", "--timeline", "x.jsonl", "--", "true"},
                                        {"meter", "--source", "pm", "--timeline", "x.jsonl"},
                                        {"meter", "--source", "pm", "--pm-interval-us", "5", "--", "true"},
                                        {"meter", "--source", "cupti", "--", "true"}}) {
    Result r = tpscope(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
  }
  Result r = tpscope({"meter", "--list-pm-metrics"}, {"TPSCOPE_CUPTI_LIBRARY=/nonexistent/libcupti.so"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("libcupti not found (tried /nonexistent/libcupti.so)"), std::string::npos) << r.err;
}

TEST(MeterCli, SummaryTableHasOneRowPerWindowGpuAndCounter) {
  Result r = tpscope({"meter", "--no-nvlink", "--", "sh", "-c", kMarks});
  EXPECT_EQ(r.exit_code, 3);
  int rows = 0;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] != '#') ++rows;
  EXPECT_EQ(rows, 2 /*windows*/ * 2 /*GPUs*/ * 2 /*pcie tx, rx*/) << r.out;
  EXPECT_NE(r.out.find("exit code 3"), std::string::npos);
  EXPECT_EQ(r.out.find("nvlink"), std::string::npos) << "--no-nvlink drops the NVLink rows";
}

TEST(MeterCli, OutWritesEverySampleAndWindowAsJsonl) {
  const std::string path = ::testing::TempDir() + "meter_out_" + std::to_string(getpid()) + ".jsonl";
  Result r = tpscope({"meter", "--out", path, "--", "sh", "-c", kMarks});
  EXPECT_EQ(r.exit_code, 3);
  std::ifstream f(path);
  std::map<std::string, int> types;
  std::map<std::string, int> groups;
  for (std::string l; std::getline(f, l);) {
    const nlohmann::json j = nlohmann::json::parse(l);
    types[j["type"]]++;
    if (j["type"] == "sample" || j["type"] == "cadence")
      groups[j["type"].get<std::string>() + " " + j["group"].get<std::string>()]++;
    // A sample carries its own group's counters only.
    if (j["type"] == "sample") EXPECT_NE(j.contains("pcie_tx_bytes"), j.contains("nvlink_tx_bytes")) << l;
  }
  std::remove(path.c_str());
  EXPECT_EQ(types["meter"], 1);
  EXPECT_GT(groups["sample pcie"], 2 * 50);    // 2 GPUs, 2 ms period, > 0.2 s
  EXPECT_GT(groups["sample nvlink"], 2 * 50);  // the fake's NVLink read is as fast as its PCIe read
  EXPECT_EQ(types["window"], 2);
  EXPECT_EQ(groups["cadence pcie"], 2);  // one per GPU and group
  EXPECT_EQ(groups["cadence nvlink"], 2);
}

TEST(MeterCli, OutAsCsvWritesSamplesAndWindowsFiles) {
  const std::string base = ::testing::TempDir() + "meter_out_" + std::to_string(getpid());
  Result r = tpscope({"meter", "--out", base + ".csv", "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string samples = slurp(base + ".csv"), windows = slurp(base + ".windows.csv");
  std::remove((base + ".csv").c_str());
  std::remove((base + ".windows.csv").c_str());
  EXPECT_EQ(samples.rfind("gpu,group,t_before_ns,", 0), 0u);
  EXPECT_GT(lineCount(samples), 2);
  EXPECT_EQ(windows.rfind("window,repetition,", 0), 0u);
  EXPECT_EQ(lineCount(windows), 1 + 2 * 4) << windows;  // the whole command: 2 GPUs x 4 counters
}

TEST(MeterCli, CommandNotFoundIsOneLineAndExit127WithTheSummaryKept) {
  Result r = tpscope({"meter", "--", "/nonexistent/tpscope-no-such-command"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("cannot run '/nonexistent/tpscope-no-such-command'"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("did not run"), std::string::npos) << r.out;
}

TEST(MeterCli, UnwritableOutFailsBeforeMeasuring) {
  Result r = tpscope({"meter", "--out", "/nonexistent/dir/x.jsonl", "--", "true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("cannot write --out /nonexistent/dir/x.jsonl"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(MeterCli, UnknownGpuIsAUsageError) {
  Result r = tpscope({"meter", "-i", "0,7", "-c", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("GPU index 7 does not exist"), std::string::npos) << r.err;
}

TEST(MeterCli, BadOptionsAreUsageErrors) {
  for (std::vector<std::string> args : {std::vector<std::string>{"meter", "-o", "X"},
                                        {"meter", "--method", "smi"},
                                        {"meter", "--period-us", "10"},
                                        {"meter", "--no-nvlink", "--nvlink-raw"}}) {
    Result r = tpscope(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
  }
}

TEST(MeterCli, WithoutNvmlItSaysWhyAndExits1) {
  Result r = tpscope({"meter", "-c", "1"}, {"TPSCOPE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(MeterCli, LiveModePrintsDmonShapedRows) {
  Result r = tpscope({"meter", "-c", "2", "-d", "50"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::vector<std::string> ls;
  for (std::string l; std::getline(in, l);) ls.push_back(l);
  ASSERT_EQ(ls.size(), 2u + 2 * 2) << r.out;
  EXPECT_EQ(ls[0], "# gpu  rxpci  txpci  nvlrx  nvltx");
  EXPECT_EQ(ls[1], "# Idx   MB/s   MB/s   MB/s   MB/s");
  EXPECT_EQ(ls[2], "    0    250   1000      0   2000");
  EXPECT_EQ(ls[5], "    1     10     10   2000      0");
}

TEST(MeterCli, SigintStopsTheWrappedCommandAndStillWritesTheSummary) {
  // SIGINT sent to tpscope alone (not to the process group) is forwarded to the command.
  Result r = tpscope({"meter", "--", "sleep", "10"}, {"TPSCOPE_METER_FAKE=1"}, SIGINT, 700);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_NE(r.out.find("(interrupted)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" command "), std::string::npos) << r.out;
}

TEST(MeterCli, SigintWhileQuiescingDoesNotStartTheCommand) {
  Result r = tpscope({"meter", "--quiesce", "1000", "--", "echo", "RAN"}, {"TPSCOPE_METER_FAKE=1"}, SIGINT, 700);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_NE(r.out.find("did not run (interrupted)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nRAN\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# quiesce: FAILED"), std::string::npos) << "the fake GPUs are busy: " << r.out;
}

TEST(MeterCli, SigintEndsLiveModeCleanly) {
  // The meter calibrates first (the fake GPUs are busy: it gives up after three rounds), then rows.
  Result r = tpscope({"meter", "-d", "50"}, {"TPSCOPE_METER_FAKE=1"}, SIGINT, 700);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(lineCount(r.out), 2 + 2 * 3);
}

}  // namespace
