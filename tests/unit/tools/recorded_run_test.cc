// SPDX-License-Identifier: Apache-2.0
// The shipped recording (examples/recorded/h200x2-quick, a real 2xH200 run): `tpscope report` renders it
// on a CPU-only machine, and the README's first command (`tpscope arms examples/four-arms.toml --quick`)
// shows it, exit 0, where there is no GPU. The checks read the recording's own manifest, so a new
// recording copied over the old one passes them unchanged.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"
#include "experiment_fixture.h"
#include "fixtures.h"

namespace tpscope::testing {
namespace {

const std::string kSource = TPSCOPE_SOURCE_DIR;
const std::string kRecording = kSource + "/examples/recorded/h200x2-quick";
const std::vector<std::string> kArms = {"A", "B", "C", "C'"};

// "> Recorded run: DATE on MACHINE", from the manifest's start time and recording.txt.
std::string recordingLabel() {
  const nlohmann::json m = nlohmann::json::parse(readFile(kRecording + "/manifest.json"));
  std::string line = readFile(kRecording + "/recording.txt");
  line = line.substr(0, line.find('\n'));
  return "Recorded run: " + m.at("start_time").get<std::string>().substr(0, 10) + " on " + line;
}

void expectPngs(const std::string& dir) {
  for (const char* name : {"traffic.png", "arms.png"}) {
    const std::string path = dir + "/" + name;
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    EXPECT_GT(std::filesystem::file_size(path), 1000u) << path;
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {};
    f.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << path;
  }
}

TEST(RecordedRun, FolderIsComplete) {
  for (const char* f : {"manifest.json", "results.jsonl", "samples.jsonl", "recording.txt", "README.md"})
    EXPECT_TRUE(std::filesystem::exists(kRecording + "/" + f)) << f;
  EXPECT_NE(recordingLabel().find("H200"), std::string::npos) << recordingLabel();
}

TEST(RecordedRun, ReportRendersTheStudyTables) {
  const CliResult r = runTpscope("report " + kRecording);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind("# Experiment four-arms\n\n> " + recordingLabel() + "\n", 0), 0u) << r.out.substr(0, 400);
  for (const char* header :
       {"## Per arm\n\n| arm | setup | prefill tok/s | prefill rx MB/s | decode tok/s | decode rx MB/s |",
        "## Net AllReduce cost (tensor − layer, rx per card)\n\n"
        "| phase | tensor arm | layer arm | tensor rx | layer rx | net MB/s | ratio |",
        "## Per arm, phase and GPU\n\n| arm | phase | GPU | rx MB/s | tx MB/s | samples per rep | share of ceiling |",
        "## AllReduce: the library's bytes beside the counters", "## Counters beside the dmon method (rx MB/s)",
        "## What this means", "Busiest cell: arm "})
    EXPECT_NE(r.out.find(header), std::string::npos) << header;
  for (const char* row :
       {"\n| A | single GPU | ", "\n| B | 2 GPUs, layer | ", "\n| C | 2 GPUs, tensor, host | ",
        "\n| C' | 2 GPUs, tensor, host, 4 tokens/step | ", "\n| C | prefill | 1 | ", "\n| C' | decode | 0 | "})
    EXPECT_NE(r.out.find(row), std::string::npos) << row;
  // The "what this means" lines are made from measured numbers, for both kinds of work.
  EXPECT_NE(r.out.find("- Prefill-heavy work"), std::string::npos);
  EXPECT_NE(r.out.find("- Decode-heavy work"), std::string::npos);
}

TEST(RecordedRun, JsonHasEveryArmMeasured) {
  const CliResult r = runTpscope("report " + kRecording + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"experiment", "start_time", "recording", "machine", "phases", "arms", "cells",
                          "net_allreduce", "busiest", "failed_baselines", "meaning", "windows"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["experiment"], "four-arms");
  EXPECT_EQ(j["recording"], recordingLabel());
  EXPECT_EQ(j["phases"], nlohmann::json({"prefill", "decode"}));
  ASSERT_EQ(j["arms"].size(), kArms.size());
  for (size_t i = 0; i < kArms.size(); ++i) {
    const nlohmann::json& a = j["arms"][i];
    EXPECT_EQ(a["arm"], kArms[i]);
    EXPECT_GE(a["valid_repetitions"].get<int>(), 1) << kArms[i];
    for (const char* phase : {"prefill", "decode"}) {
      const nlohmann::json& p = a["phases"][phase];
      ASSERT_TRUE(p["tok_s"].is_object()) << kArms[i] << " " << phase;
      EXPECT_GT(p["tok_s"]["median"].get<double>(), 0) << kArms[i] << " " << phase;
      EXPECT_GT(p["rx_per_card_mbps"].get<double>(), 0) << kArms[i] << " " << phase;
    }
  }
  // The tensor arms moved AllReduce bytes through the host (the library's accounting), the others none.
  EXPECT_GT(j["arms"][2]["phases"]["prefill"]["allreduce_calls"]["median"].get<double>(), 0);
  EXPECT_EQ(j["arms"][2]["allreduce_backend"], "host");
  EXPECT_GE(j["net_allreduce"].size(), 2u);
  EXPECT_FALSE(j["cells"].empty());
  EXPECT_FALSE(j["meaning"].empty());
}

TEST(RecordedRun, PlotsArePngsWhenMatplotlibIsThere) {
  if (!haveMatplotlib()) GTEST_SKIP() << noMatplotlibReason();
  const std::string dir = tempDir("recorded_plots");
  const CliResult r = runTpscope("report " + kRecording + " --plots --plot-dir " + dir + "/plots");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("plots written to"), std::string::npos) << r.err;
  expectPngs(dir + "/plots");
  std::filesystem::remove_all(dir);
}

// The README's first command on a machine without GPUs (CUDA_VISIBLE_DEVICES="" hides any GPU, so this
// holds on GPU machines too): one line says so, the recording is rendered, exit 0, nothing is measured.
TEST(MainJob, WithoutGpusRendersTheRecording) {
  const std::string dir = tempDir("main_job");
  const CliResult r =
      runTpscope("arms " + kSource + "/examples/four-arms.toml --quick --out " + dir, "CUDA_VISIBLE_DEVICES=");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string first = r.err.substr(0, r.err.find('\n'));
  EXPECT_EQ(first.rfind("tpscope arms: no GPU here: ", 0), 0u) << r.err;
  EXPECT_NE(first.find("; nothing is measured, rendering the recorded run " + kRecording + " instead"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, runTpscope("report " + kRecording).out);
  EXPECT_FALSE(std::filesystem::exists(dir + "/manifest.json"));
  if (haveMatplotlib())
    expectPngs(dir + "/plots");
  else
    EXPECT_NE(r.err.find("plots skipped"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(MainJob, WithoutGpusAMissingRecordingIsAnError) {
  const std::string dir = tempDir("main_job_missing");
  std::filesystem::create_directories(dir);
  std::string spec = readFile(kSource + "/examples/four-arms.toml");
  const std::string key = "recorded_run = \"recorded/h200x2-quick\"";
  ASSERT_NE(spec.find(key), std::string::npos);
  spec.replace(spec.find(key), key.size(), "recorded_run = \"no-such-run\"");
  std::ofstream(dir + "/spec.toml") << spec;
  const CliResult r = runTpscope("arms " + dir + "/spec.toml --quick --out " + dir + "/run", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("needs GPUs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir + "/no-such-run"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpscope::testing

namespace tpscope::testing {
namespace {

// The llama-server recording (examples/recorded/h200-llama-a): rendered anywhere, labelled with the
// engine, and the engine's tok/s in the report is the median of the server's own timings in the folder.
TEST(RecordedLlamaRun, RendersWithTheServersTimings) {
  const std::string dir = kSource + "/examples/recorded/h200-llama-a";
  const CliResult r = runTpscope("report " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Engine: llama-server (build "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("## The engine's timings beside the client's clock"), std::string::npos) << r.out;
  std::vector<double> decode;
  std::istringstream results(readFile(dir + "/results.jsonl"));
  for (std::string line; std::getline(results, line);) {
    const nlohmann::json rep = nlohmann::json::parse(line);
    for (const auto& p : rep.at("phases"))
      if (p.at("phase") == "decode") decode.push_back(p.at("engine_tok_s").get<double>());
  }
  ASSERT_FALSE(decode.empty());
  std::sort(decode.begin(), decode.end());
  EXPECT_NE(r.out.find(fmt::format("| A | decode | {:.1f} |", decode[decode.size() / 2])), std::string::npos) << r.out;
  // Without GPUs (CUDA_VISIBLE_DEVICES="" hides any), `tpscope arms` on the spec renders it, exit 0.
  const std::string out = tempDir("llama_recorded");
  const CliResult arms =
      runTpscope("arms " + kSource + "/examples/llama-four-arms.toml --out " + out, "CUDA_VISIBLE_DEVICES=");
  std::filesystem::remove_all(out);
  EXPECT_EQ(arms.exit_code, 0) << arms.err;
  EXPECT_NE(arms.err.find("rendering the recorded run"), std::string::npos) << arms.err;
  EXPECT_EQ(arms.out, r.out);
}

}  // namespace
}  // namespace tpscope::testing
