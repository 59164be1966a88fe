// SPDX-License-Identifier: Apache-2.0
// The runner end to end on fake phases and the fake meter: run folder, report, retried baselines,
// and the guards refusing before any arm runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "experiment/report_render.h"
#include "experiment/runner.h"
#include "experiment_fixture.h"
#include "meter/fake_platform.h"
#include "meter/meter_internal.h"

namespace tpscope::testing {
namespace {

using namespace tpscope::experiment;

// 2 arms x 2 repetitions, 0.2 s idle. The fake meter's GPU 0 idles at 2000 MB/s over NVLink, so the
// threshold sits above that: the baseline passes unless a test scripts it to fail.
const char* kSpec = R"(
[experiment]
name = "tiny-two"
preset = "tiny"
prompt_tokens = 64
decode_tokens = 16
context = 256
repetitions = 2
idle_seconds = 0.2
baseline_threshold_mbps = 5000
baseline_retries = 1
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

class Runner : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tempDir("runner");
    c_.start_meter = [](const MeterOptions& o, std::unique_ptr<Meter>* out, std::string* reason) {
      MeterOptions fake = o;
      fake.fake_gpus = true;  // two scripted GPUs
      return Meter::start(fake, out, reason);
    };
    c_.spec = parseSpec(kSpec, "tiny-two.toml");
    c_.box.gpu_count = 2;
    c_.box.backends = {tpsBackendHost};
    c_.box.backend_reasons = {{tpsBackendNccl, "NCCL did not load (libnccl.so.2 not found)"}};
    c_.box.split_modes = {"none", "layer", "tensor"};
    c_.check_processes = false;
    c_.out_dir = dir_;
    c_.progress = &progress_;
    c_.make_phases = [this](const EffectiveSettings& arm) {
      ++phases_made_;
      return makeFakeArmPhases(arm, 0.01);
    };
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  RunnerConfig c_;
  std::ostringstream progress_;
  int phases_made_ = 0;
};

TEST_F(Runner, WritesTheRunFolderAndRendersTheReport) {
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  EXPECT_EQ(o.attempts, 4);
  EXPECT_EQ(o.failed_attempts, 0);
  for (const char* f : {"manifest.json", "results.jsonl", "samples.jsonl"})
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/" + f)) << f;
  const RunRecord run = readRun(dir_);
  EXPECT_EQ(run.manifest.experiment, "tiny-two");
  EXPECT_EQ(run.manifest.arms, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(run.manifest.effective.size(), 2u);
  EXPECT_NE(run.manifest.spec_toml.find("tiny-two"), std::string::npos);
  ASSERT_EQ(run.repetitions.size(), 4u);
  for (const RepetitionResult& r : run.repetitions) {
    EXPECT_TRUE(r.valid);
    EXPECT_TRUE(r.quiesce.passed);
    ASSERT_EQ(r.phases.size(), 2u);
    EXPECT_EQ(r.phases[0].phase, "prefill");
    EXPECT_EQ(r.phases[1].phase, "decode");
    EXPECT_GT(r.phases[1].tok_s, 0);
    EXPECT_EQ(r.phases[0].gpus.size(), r.arm == "A" ? 1u : 2u);  // the arm's devices only
  }
  EXPECT_FALSE(run.samples.empty());
  EXPECT_GT(run.repetitions[0].phases[0].gpus[0].samples, 0);  // the window the phases marked on the meter
  const Report rep = buildReport(run);
  EXPECT_EQ(rep.arms.size(), 2u);
  EXPECT_EQ(rep.arms[1].valid_repetitions, 2);
  EXPECT_NE(o.report_markdown.find("tiny-two"), std::string::npos) << o.report_markdown;
  EXPECT_EQ(o.report_markdown, formatMarkdown(rep));
  const std::string p = progress_.str();
  EXPECT_NE(p.find("arm B rep 2/2: quiescing 0.2 s"), std::string::npos) << p;
  EXPECT_NE(p.find("decode "), std::string::npos) << p;
  EXPECT_NE(p.find(" tok/s"), std::string::npos) << p;
}

TEST_F(Runner, FailedBaselineIsRetriedAndRecorded) {
  int calls = 0;
  // Arm A's first repetition fails its first baseline; arm B's second repetition fails every try.
  c_.quiesce = [&calls](Meter& m, const QuiesceOptions& o, QuiesceRecord* r) {
    const tpsResult_t rc = m.quiesce(o, r);
    ++calls;
    // Call order: A r1 (fail, retry pass), A r2, B r1, B r2 (fail, fail).
    if (calls == 1 || calls == 5 || calls == 6) {
      r->passed = false;
      r->reason = "scripted: another process on GPU 1";
    }
    return rc;
  };
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  EXPECT_EQ(calls, 6);
  EXPECT_EQ(o.attempts, 6);
  EXPECT_EQ(o.failed_attempts, 3);
  EXPECT_EQ(o.failed_repetitions, 1);
  const RunRecord run = readRun(dir_);
  ASSERT_EQ(run.repetitions.size(), 6u);  // every attempt, failed ones included
  EXPECT_EQ(run.repetitions[0].arm, "A");
  EXPECT_FALSE(run.repetitions[0].valid);
  EXPECT_EQ(run.repetitions[0].attempt, 0);
  EXPECT_TRUE(run.repetitions[0].phases.empty());  // nothing ran on a failed baseline
  EXPECT_EQ(run.repetitions[0].quiesce.reason, "scripted: another process on GPU 1");
  EXPECT_TRUE(run.repetitions[1].valid);
  EXPECT_EQ(run.repetitions[1].repetition, 0);
  EXPECT_EQ(run.repetitions[1].attempt, 1);
  EXPECT_FALSE(run.repetitions[4].valid);
  EXPECT_FALSE(run.repetitions[5].valid);
  EXPECT_EQ(run.repetitions[5].attempt, 1);
  const Report rep = buildReport(run);
  EXPECT_EQ(rep.failed.size(), 3u);
  EXPECT_EQ(rep.arms[0].valid_repetitions, 2);
  EXPECT_EQ(rep.arms[1].valid_repetitions, 1);
  EXPECT_NE(progress_.str().find("baseline failed"), std::string::npos);
  EXPECT_NE(progress_.str().find("retrying"), std::string::npos);
  EXPECT_NE(progress_.str().find("reported as failed"), std::string::npos);
}

TEST_F(Runner, UndeclaredDifferenceIsRefusedBeforeAnyArmRuns) {
  // An undeclared difference: an automatic decision that comes out differently per arm.
  c_.decide = [](const EffectiveSettings& e) {
    return std::vector<Setting>{{"cuda_graph", e.arm == "A" ? "on" : "off", SettingSource::kAuto}};
  };
  const RunOutcome o = runExperiment(c_);
  EXPECT_EQ(o.status, RunOutcome::Status::kRefused);
  EXPECT_NE(o.message.find("cuda_graph"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("on"), std::string::npos);
  EXPECT_NE(o.message.find("off"), std::string::npos);
  EXPECT_NE(o.message.find("nothing was run"), std::string::npos);
  EXPECT_EQ(phases_made_, 0);
  EXPECT_EQ(o.attempts, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_));
  EXPECT_EQ(progress_.str(), "");
}

TEST_F(Runner, UnavailableBackendIsRefusedBeforeAnyArmRuns) {
  c_.spec = parseSpec(std::string(kSpec) +
                          "\n[[arm]]\nname = \"C\"\ndevices = [0, 1]\nsplit = \"tensor\"\n"
                          "backend = \"nccl\"\n",
                      "tiny-three.toml");
  const RunOutcome o = runExperiment(c_);
  EXPECT_EQ(o.status, RunOutcome::Status::kRefused);
  EXPECT_NE(o.message.find("arm C"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("nccl"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("libnccl.so.2 not found"), std::string::npos) << o.message;
  EXPECT_EQ(phases_made_, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_));
}

TEST_F(Runner, WorkloadDecisionThatDiffersFromTheGuardsStopsTheRun) {
  class Deciding : public ArmPhases {
   public:
    tpsResult_t prepare(const EffectiveSettings&, std::vector<Setting>* d, std::string*) override {
      *d = {{"cuda_graph", "off", SettingSource::kAuto}};
      return tpsSuccess;
    }
    tpsResult_t runPhases(const std::vector<std::string>&, std::vector<PhaseOutcome>*, std::string*) override {
      return tpsSuccess;
    }
  };
  c_.decide = [](const EffectiveSettings&) { return std::vector<Setting>{{"cuda_graph", "on", SettingSource::kAuto}}; };
  c_.make_phases = [](const EffectiveSettings&) { return std::make_unique<Deciding>(); };
  const RunOutcome o = runExperiment(c_);
  EXPECT_EQ(o.status, RunOutcome::Status::kFailed);
  EXPECT_NE(o.message.find("cuda_graph = off"), std::string::npos) << o.message;
}

// An engine that decides a setting for itself once started, as llama-server decides its context: with
// RunnerConfig::probe every arm's engine is started once and what it reports (source kEngine) joins the
// arm's settings; arms whose engines decided differently are refused before anything is measured.
class SelfDeciding : public ArmPhases {
 public:
  SelfDeciding(const EffectiveSettings& arm, std::string n_ctx, int* prepared, int* ran)
      : inner_(makeFakeArmPhases(arm, 0.01)), n_ctx_(std::move(n_ctx)), prepared_(prepared), ran_(ran) {}
  tpsResult_t prepare(const EffectiveSettings&, std::vector<Setting>* d, std::string*) override {
    ++*prepared_;
    *d = {{"server_n_ctx", n_ctx_, SettingSource::kEngine}};
    return tpsSuccess;
  }
  tpsResult_t runPhases(const std::vector<std::string>& p, std::vector<PhaseOutcome>* out, std::string* r) override {
    ++*ran_;
    return inner_->runPhases(p, out, r);
  }

 private:
  std::unique_ptr<ArmPhases> inner_;
  std::string n_ctx_;
  int* prepared_;
  int* ran_;
};

// The setting the engine reported for `arm` in the run folder's manifest ("" where there is none).
std::string engineSettingInManifest(const std::string& dir, const std::string& arm, const std::string& key) {
  for (const EffectiveSettings& e : readRun(dir).manifest.effective)
    if (const Setting* s = e.find(key); e.arm == arm && s && s->source == SettingSource::kEngine) return s->value;
  return "";
}

TEST_F(Runner, EnginesThatDecideDifferentlyAreRefusedBeforeAnythingIsMeasured) {
  int prepared = 0, ran = 0;
  c_.probe = true;
  c_.make_phases = [&](const EffectiveSettings& arm) {
    return std::make_unique<SelfDeciding>(arm, arm.arm == "A" ? "32768" : "16384", &prepared, &ran);
  };
  const RunOutcome o = runExperiment(c_);
  EXPECT_EQ(o.status, RunOutcome::Status::kRefused) << o.message;
  EXPECT_NE(o.message.find("the arms' engines decided differently in settings no arm declares; nothing was measured"),
            std::string::npos)
      << o.message;
  EXPECT_NE(o.message.find("server_n_ctx  A    32768  engine"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("              B    16384  engine"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("the engine decided the settings above for itself"), std::string::npos) << o.message;
  EXPECT_EQ(prepared, 2);  // every arm's engine started once to read what it decides
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(o.attempts, 0);
  // The manifest keeps what each engine decided, so the refused run folder says why.
  EXPECT_EQ(engineSettingInManifest(dir_, "A", "server_n_ctx"), "32768");
  EXPECT_EQ(engineSettingInManifest(dir_, "B", "server_n_ctx"), "16384");
}

TEST_F(Runner, EnginesThatDecideAlikeRunAndTheManifestSaysWhatTheyDecided) {
  int prepared = 0, ran = 0;
  c_.probe = true;
  c_.make_phases = [&](const EffectiveSettings& arm) {
    return std::make_unique<SelfDeciding>(arm, "32768", &prepared, &ran);
  };
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  EXPECT_EQ(o.attempts, 4);
  EXPECT_EQ(ran, 4);
  EXPECT_EQ(prepared, 4);  // the probe's start per arm, then the measured one
  EXPECT_EQ(engineSettingInManifest(dir_, "A", "server_n_ctx"), "32768");
  EXPECT_EQ(engineSettingInManifest(dir_, "B", "server_n_ctx"), "32768");
}

// An engine that says another client used it in a repetition: the attempt is recorded as disturbed,
// retried, and listed in the report; the retry counts.
TEST_F(Runner, DisturbedRepetitionIsRecordedAndRetried) {
  class Disturbed : public ArmPhases {
   public:
    explicit Disturbed(EffectiveSettings arm) : inner_(makeFakeArmPhases(arm, 0.01)) {}
    tpsResult_t prepare(const EffectiveSettings& a, std::vector<Setting>* d, std::string* r) override {
      return inner_->prepare(a, d, r);
    }
    tpsResult_t runPhases(const std::vector<std::string>& p, std::vector<PhaseOutcome>* out, std::string* r) override {
      const tpsResult_t rc = inner_->runPhases(p, out, r);
      if (calls_++ == 0) (*out)[0].disturbed = "the server processed 512 prompt tokens beyond the rig's request";
      return rc;
    }

   private:
    std::unique_ptr<ArmPhases> inner_;
    int calls_ = 0;
  };
  c_.make_phases = [](const EffectiveSettings& arm) { return std::make_unique<Disturbed>(arm); };
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  EXPECT_EQ(o.attempts, 6);  // 2 arms x 2 repetitions, plus one retry per arm
  EXPECT_EQ(o.failed_attempts, 2);
  EXPECT_EQ(o.failed_repetitions, 0);
  const RunRecord run = readRun(dir_);
  ASSERT_EQ(run.repetitions.size(), 6u);
  EXPECT_FALSE(run.repetitions[0].valid);
  EXPECT_EQ(run.repetitions[0].disturbed, "the server processed 512 prompt tokens beyond the rig's request");
  EXPECT_TRUE(run.repetitions[1].valid);
  EXPECT_EQ(run.repetitions[1].attempt, 1);
  EXPECT_NE(o.report_markdown.find("arm A repetition 1 attempt 1: the server processed 512 prompt tokens"),
            std::string::npos)
      << o.report_markdown;
  EXPECT_NE(progress_.str().find("disturbed (the server processed"), std::string::npos) << progress_.str();
}

// Traffic after the phases ended (the fake meter's GPUs never go quiet) marks the repetition, and with
// no retries left it is reported as failed, never dropped.
TEST_F(Runner, TrafficAfterThePhasesMarksTheRepetition) {
  c_.tail_seconds = 0.1;
  c_.spec.shared.baseline_retries = 0;
  c_.spec.shared.baseline_threshold_mbps = 5000;  // idle passes; the fake GPU 0 sends 2000 MB/s over NVLink only
  c_.spec.shared.repetitions = 1;
  RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  EXPECT_EQ(o.failed_attempts, 0) << "PCIe below the threshold after the phases: nothing marked";
  std::filesystem::remove_all(dir_);
  c_.spec.shared.baseline_threshold_mbps = 100;
  c_.quiesce = [](Meter& m, const QuiesceOptions& q, QuiesceRecord* r) {
    QuiesceOptions loose = q;
    loose.threshold_mbps = 1e9;  // the idle interval passes; only the window after the phases is judged
    return m.quiesce(loose, r);
  };
  o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  EXPECT_EQ(o.failed_repetitions, 2);
  const RunRecord run = readRun(dir_);
  ASSERT_FALSE(run.repetitions.empty());
  EXPECT_NE(run.repetitions[0].disturbed.find("traffic went on after the phases ended: GPU 0 pcie_"), std::string::npos)
      << run.repetitions[0].disturbed;
}

// A run folder reproduces its own windows: every phase's PCIe bytes recompute from samples.jsonl, as
// the meter computed them, exactly (the samples keep each value's read time, not only the read's midpoint).
TEST_F(Runner, EveryWindowRecomputesFromItsSamples) {
  // Quiet scripted GPUs whose every read adds traffic of its own, as NVML reads do: the meter
  // calibrates, and every window is recorded net, with what the meter's reads added beside it.
  c_.start_meter = [](const MeterOptions& options, std::unique_ptr<Meter>* out, std::string* reason) {
    MeterOptions o = options;
    if (tpsResult_t r = detail::resolveOptions(&o, reason); r != tpsSuccess) return r;
    std::vector<detail::FakeGpuScript> scripts(o.devices.empty() ? 2 : o.devices.size());
    for (detail::FakeGpuScript& s : scripts) {
      s.supported = 0x03;
      s.background_bytes_per_s = {3e6, 2e6, 0, 0, 0, 0};
      s.bytes_per_read[0] = {27000, 24000, 0, 0, 0, 0};  // a PCIe read: tx, rx
      s.bytes_per_read[2] = {5000, 4000, 0, 0, 0, 0};    // a dmon call
      s.dmon_window_ns = 2000000;
    }
    return detail::createMeter(o, detail::makeFakePlatform(scripts), out, reason);
  };
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  const RunRecord run = readRun(dir_);
  int checked = 0;
  for (const RepetitionResult& r : run.repetitions) {
    if (!r.valid) continue;
    for (const PhaseResult& p : r.phases)
      for (const GpuTraffic& g : p.gpus)
        for (auto [c, recorded] :
             {std::pair{MeterCounter::kPcieRx, g.rx_bytes}, std::pair{MeterCounter::kPcieTx, g.tx_bytes}}) {
          ASSERT_TRUE(recorded);
          // The counter difference as counted is the net figure plus what the meter's own reads added.
          const std::optional<double> own = c == MeterCounter::kPcieRx ? g.own_rx_bytes : g.own_tx_bytes;
          ASSERT_TRUE(own) << "the runner's meter was calibrated, so every window carries its own bytes";
          recorded = *recorded + *own;
          const std::optional<double> again =
              windowBytesFromSamples(run, r.arm, r.repetition, g.gpu, c, p.start_ns, p.end_ns);
          ASSERT_TRUE(again) << r.arm << " " << p.phase << " GPU " << g.gpu;
          EXPECT_NEAR(*again, *recorded, 1e-9 * std::max(1.0, *recorded))
              << r.arm << " " << p.phase << " GPU " << g.gpu;
          ++checked;
        }
  }
  EXPECT_EQ(checked, 24);  // 2 repetitions x 2 phases x 2 counters x (1 GPU in arm A + 2 in arm B)
}

// meter_source = "pm" on scripted GPUs, tensor positions sharing GPU 0: PM alone meters the phases (no
// NVML read, no dmon call), the baseline is judged on PM, and one decode step comes back in the record
// and in the report's section, beside the library's calls per step.
TEST_F(Runner, PmSourceRecordsOneDecodeStepAndTheReportShowsIt) {
  c_.spec = parseSpec(R"(
[experiment]
name = "pm-one"
preset = "tiny"
prompt_tokens = 64
decode_tokens = 16
context = 256
phases = ["decode"]
repetitions = 1
idle_seconds = 0.2
baseline_threshold_mbps = 5000
meter_source = "pm"
pm_interval_us = 100
devices = [0, 0]
split = "tensor"
backend = "host"

[[arm]]
name = "T"
)",
                      "pm-one.toml");
  std::vector<MeterOptions> asked;
  c_.start_meter = [&asked](const MeterOptions& options, std::unique_ptr<Meter>* out, std::string* reason) {
    asked.push_back(options);
    MeterOptions o = options;
    if (tpsResult_t r = detail::resolveOptions(&o, reason); r != tpsSuccess) return r;
    o.pm_calibrate_ms = 100;
    std::vector<detail::FakeGpuScript> scripts(o.devices.size());
    for (detail::FakeGpuScript& s : scripts) s.background_bytes_per_s = {2e9, 1e6, 0, 0, 0, 0};  // tx > 1024 MB/s
    return detail::createMeter(o, detail::makeFakePlatform(scripts, o.pm_interval_us), out, reason);
  };
  c_.make_phases = [](const EffectiveSettings& arm) { return makeFakeArmPhases(arm, 0.05); };
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].devices, std::vector<int>{0});             // each GPU once: one PM session per GPU
  EXPECT_EQ(asked[0].sources, std::vector<std::string>{"pm"});  // no dmon calls beside PM alone
  EXPECT_EQ(asked[0].pm_interval_us, 100);
  const RunRecord run = readRun(dir_);
  EXPECT_EQ(run.manifest.effective[0].value("meter_source"), "pm");
  EXPECT_EQ(run.manifest.effective[0].value("pm_interval_us"), "100");
  ASSERT_EQ(run.repetitions.size(), 1u);
  const RepetitionResult& r = run.repetitions[0];
  EXPECT_TRUE(r.valid) << r.disturbed;
  EXPECT_TRUE(r.quiesce.passed) << r.quiesce.reason;
  EXPECT_EQ(r.meter["options"]["source"], "pm");
  EXPECT_EQ(r.meter["options"]["pm_interval_us"], 100);
  EXPECT_TRUE(run.samples.empty());  // NVML was not read
  ASSERT_EQ(r.phases.size(), 1u);
  ASSERT_TRUE(r.phases[0].pm_step);
  const PmStep& st = *r.phases[0].pm_step;
  EXPECT_EQ(st.interval_us, 100);
  EXPECT_EQ(st.step, 8);  // the middle of 16 steps
  EXPECT_TRUE(st.complete) << st.note;
  ASSERT_TRUE(st.allreduce_calls_per_step);
  EXPECT_DOUBLE_EQ(*st.allreduce_calls_per_step, 64);  // the fake workload's 2 calls x 32 layers per step
  ASSERT_EQ(st.gpus.size(), 1u);
  EXPECT_EQ(st.gpus[0].gpu, 0);
  EXPECT_GE(st.gpus[0].samples.size(), static_cast<size_t>((st.end_ns - st.start_ns) / 100000));
  EXPECT_LE(st.gpus[0].samples.front().t_ns, 0);
  EXPECT_NE(o.report_markdown.find("\n## One decode step on the bus (PM sampling, 100 µs)\n"), std::string::npos)
      << o.report_markdown;
  // tx never drops below the threshold: the step is one burst against 64 calls.
  EXPECT_NE(o.report_markdown.find(" | 1 | 64 | 0.02 |\n"), std::string::npos) << o.report_markdown;
  EXPECT_NE(o.report_markdown.find("| T | 0 | "), std::string::npos) << o.report_markdown;
}

// The fixture's spec, metered by NVML: no step is taken, and the report has no such section.
TEST_F(Runner, NvmlSourceTakesNoStep) {
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  for (const RepetitionResult& r : readRun(dir_).repetitions)
    for (const PhaseResult& p : r.phases) EXPECT_FALSE(p.pm_step) << p.phase;
  EXPECT_EQ(o.report_markdown.find("One decode step on the bus"), std::string::npos);
}

// ---- a box with fewer GPUs than some arms need ---------------------------------------------------------

TEST_F(Runner, ABoxWithTooFewGpusRunsTheArmsThatFitWhenAsked) {
  c_.box.gpu_count = 1;
  RunOutcome o = runExperiment(c_);  // not asked: refused, as before
  EXPECT_EQ(o.status, RunOutcome::Status::kRefused);
  EXPECT_NE(o.message.find("arm B: devices 0,1 need GPU 1, this box has 1 GPU"), std::string::npos) << o.message;
  EXPECT_FALSE(std::filesystem::exists(dir_));
  c_.run_what_fits = true;
  o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  ASSERT_EQ(o.left_out.size(), 1u);
  EXPECT_EQ(o.left_out[0].arm, "B");
  EXPECT_TRUE(o.left_out[0].needs_more_gpus);
  const RunRecord run = readRun(dir_);
  EXPECT_EQ(run.manifest.arms, std::vector<std::string>{"A"});
  EXPECT_EQ(run.manifest.invocation["left_out"][0]["arm"], "B");
  EXPECT_EQ(run.repetitions.size(), 2u);
  EXPECT_EQ(o.report.arms.size(), 1u);
}

TEST_F(Runner, ArmsRefusedForMoreThanGpusStillStopTheRun) {
  c_.box.gpu_count = 1;
  c_.run_what_fits = true;
  c_.spec = parseSpec(std::string(kSpec) + "\n[[arm]]\nname = \"R\"\ndevices = [0, 1]\nsplit = \"row\"\n", "t.toml");
  RunOutcome o = runExperiment(c_);  // R's split is no box's: refused, whatever the GPUs
  EXPECT_EQ(o.status, RunOutcome::Status::kRefused) << o.message;
  EXPECT_NE(o.message.find("arm R: split mode \"row\" is not implemented"), std::string::npos) << o.message;
  // Every arm beyond the box: nothing to run, refused.
  c_.spec = parseSpec(
      "[experiment]\nname = \"two\"\npreset = \"tiny\"\n[[arm]]\nname = \"B\"\ndevices = [0, 1]\nsplit = \"layer\"\n",
      "t.toml");
  o = runExperiment(c_);
  EXPECT_EQ(o.status, RunOutcome::Status::kRefused) << o.message;
  EXPECT_FALSE(std::filesystem::exists(dir_));
}

// ---- interrupted and resumed ------------------------------------------------------------------------

// Every number of a report, with its sign, as '#': what two runs of the fake workload share (their tok/s follow the
// host's clock), so that the comparison below is of everything else, row by row. Whether the dmon
// method's once-a-second snapshot fell inside a window of a few ms is chance too: "no sample" is a '#'; so
// is which of equally loaded cells is the busiest: those lines are left out.
std::string masked(std::string report) {
  for (size_t at; (at = report.find("no sample")) != std::string::npos;) report.replace(at, 9, "0");
  const std::string note = " \"#\": the window is shorter";
  std::string out;
  for (size_t i = 0; i < report.size();) {
    const bool sign = (report[i] == '-' || report[i] == '+') && i + 1 < report.size() &&
                      std::isdigit(static_cast<unsigned char>(report[i + 1]));
    if (sign || std::isdigit(static_cast<unsigned char>(report[i]))) {
      if (sign) ++i;
      while (i < report.size() &&
             (std::isdigit(static_cast<unsigned char>(report[i])) || report[i] == '.' || report[i] == ','))
        ++i;
      out += '#';
    } else {
      out += report[i++];
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

std::vector<std::string> lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

const char* kThreeArms = "\n[[arm]]\nname = \"C\"\ndevices = [0, 1]\nsplit = \"tensor\"\nbackend = \"host\"\n";

// A run stopped after its second arm (the interrupt comes during the third arm's first baseline) and
// resumed: no repetition runs twice, the folder ends as an uninterrupted run's does, and the report is
// the same one (every figure in place; the fake workload's tok/s differ run to run, so numbers are masked).
TEST_F(Runner, AnInterruptedRunResumesWithoutRepeatingARepetition) {
  c_.spec = parseSpec(std::string(kSpec) + kThreeArms, "tiny-three.toml");
  // Tensor split clearly the fastest, so that the report's "which split wins" line is the same in both runs.
  c_.make_phases = [this](const EffectiveSettings& arm) {
    ++phases_made_;
    const std::string split = arm.value("split");
    return makeFakeArmPhases(arm, split == "tensor" ? 0.005 : split == "layer" ? 0.02 : 0.01);
  };
  std::atomic<int> stop{0};
  int quiesced = 0;
  c_.interrupt = &stop;
  c_.quiesce = [&](Meter& m, const QuiesceOptions& q, QuiesceRecord* r) {
    if (++quiesced == 5) stop = 1;  // arms A and B: two repetitions each
    return m.quiesce(q, r);
  };
  RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kInterrupted) << o.message;
  EXPECT_EQ(o.attempts, 4);
  const std::vector<std::string> before = lines(dir_ + "/results.jsonl");
  ASSERT_EQ(before.size(), 4u);
  RunRecord folder = readRun(dir_);  // what `tpscope report` and `--resume` read
  EXPECT_TRUE(folder.notes.empty());
  EXPECT_EQ(buildReport(folder).arms[2].valid_repetitions, 0);

  RunnerConfig again = c_;
  again.resume = folder;
  stop = 0;
  quiesced = 0;
  phases_made_ = 0;
  o = runExperiment(again);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  EXPECT_EQ(quiesced, 2);      // arm C's two repetitions, nothing else
  EXPECT_EQ(phases_made_, 1);  // arms A and B are not even prepared again
  EXPECT_EQ(o.skipped_repetitions, 4);
  EXPECT_EQ(o.attempts, 6);
  const std::vector<std::string> after = lines(dir_ + "/results.jsonl");
  ASSERT_EQ(after.size(), 6u);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], before[i]) << "line " << i + 1;
  const RunRecord resumed = readRun(dir_);
  std::set<std::pair<std::string, int>> seen;
  for (const RepetitionResult& r : resumed.repetitions) EXPECT_TRUE(seen.insert({r.arm, r.repetition}).second);
  EXPECT_EQ(resumed.manifest.invocation["resumed"].size(), 1u);

  // The same spec uninterrupted, in a folder of its own.
  RunnerConfig whole = c_;
  whole.interrupt = nullptr;
  whole.quiesce = nullptr;
  whole.out_dir = dir_ + "-whole";
  const RunOutcome w = runExperiment(whole);
  ASSERT_EQ(w.status, RunOutcome::Status::kDone) << w.message;
  EXPECT_EQ(masked(o.report_markdown), masked(w.report_markdown));
  const nlohmann::json a = toJson(o.report), b = toJson(w.report);
  ASSERT_EQ(a["arms"].size(), b["arms"].size());
  for (size_t i = 0; i < a["arms"].size(); ++i) {
    EXPECT_EQ(a["arms"][i]["valid_repetitions"], b["arms"][i]["valid_repetitions"]);
    EXPECT_EQ(a["arms"][i]["attempts"], b["arms"][i]["attempts"]);
  }
  EXPECT_EQ(a["cells"].size(), b["cells"].size());
  EXPECT_EQ(a["windows"].size(), b["windows"].size());
  std::filesystem::remove_all(whole.out_dir);

  // Resumed once more, there is nothing left to run.
  again.resume = readRun(dir_);
  quiesced = 0;
  o = runExperiment(again);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  EXPECT_EQ(quiesced, 0);
  EXPECT_EQ(lines(dir_ + "/results.jsonl").size(), 6u);
}

// An engine whose call would run long (a server's request of 20,000 tokens) is told to stop when the run
// is: the call fails at once, the attempt is not recorded, the run ends interrupted.
TEST_F(Runner, AStopEndsAnEnginesLongCallAtOnce) {
  class Long : public ArmPhases {
   public:
    explicit Long(std::atomic<int>* interrupts) : interrupts_(interrupts) {}
    tpsResult_t prepare(const EffectiveSettings&, std::vector<Setting>*, std::string*) override { return tpsSuccess; }
    tpsResult_t runPhases(const std::vector<std::string>&, std::vector<PhaseOutcome>*, std::string* r) override {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(20), [this] { return stopped_; })) return tpsSuccess;
      *r = "the server went away";
      return tpsSystemError;
    }
    void interrupt() override {
      ++*interrupts_;
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      cv_.notify_all();
    }

   private:
    std::atomic<int>* interrupts_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stopped_ = false;
  };
  std::atomic<int> stop{0}, interrupts{0};
  c_.interrupt = &stop;
  c_.make_phases = [&](const EffectiveSettings&) { return std::make_unique<Long>(&interrupts); };
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // after the 0.2 s baseline: in the call
    stop = 1;
  });
  const auto t0 = std::chrono::steady_clock::now();
  const RunOutcome o = runExperiment(c_);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stopper.join();
  EXPECT_EQ(o.status, RunOutcome::Status::kInterrupted) << o.message;
  EXPECT_EQ(interrupts, 1);
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(lines(dir_ + "/results.jsonl").size(), 0u);
}

// A repetition whose baseline failed before the interrupt goes on from its next attempt; one that used
// every attempt stays failed.
TEST_F(Runner, AResumedRepetitionGoesOnFromItsNextAttempt) {
  std::atomic<int> stop{0};
  int quiesced = 0;
  c_.interrupt = &stop;
  c_.quiesce = [&](Meter& m, const QuiesceOptions& q, QuiesceRecord* r) {
    const tpsResult_t rc = m.quiesce(q, r);
    ++quiesced;
    if (quiesced == 1) r->passed = false, r->reason = "scripted";  // A r1 attempt 1 fails
    if (quiesced == 1) stop = 1;                                   // and the run stops there
    return rc;
  };
  RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kInterrupted);
  EXPECT_EQ(lines(dir_ + "/results.jsonl").size(), 0u);  // interrupted after the baseline: not an attempt
  stop = 0;
  quiesced = 0;
  c_.quiesce = [&](Meter& m, const QuiesceOptions& q, QuiesceRecord* r) {
    const tpsResult_t rc = m.quiesce(q, r);
    if (++quiesced == 1) r->passed = false, r->reason = "scripted";
    if (quiesced == 2) stop = 1;
    return rc;
  };
  o = runExperiment([&] {
    RunnerConfig c = c_;
    c.resume = readRun(dir_);
    return c;
  }());
  ASSERT_EQ(o.status, RunOutcome::Status::kInterrupted);
  // A r1: attempt 1 failed (recorded), attempt 2's baseline interrupted.
  RunRecord run = readRun(dir_);
  ASSERT_EQ(run.repetitions.size(), 1u);
  EXPECT_EQ(run.repetitions[0].attempt, 0);
  stop = 0;
  quiesced = 0;
  c_.quiesce = nullptr;
  RunnerConfig c = c_;
  c.resume = run;
  o = runExperiment(c);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  run = readRun(dir_);
  ASSERT_EQ(run.repetitions.size(), 5u);
  EXPECT_EQ(run.repetitions[1].arm, "A");
  EXPECT_EQ(run.repetitions[1].repetition, 0);
  EXPECT_EQ(run.repetitions[1].attempt, 1);  // the next attempt, not the first again
  EXPECT_TRUE(run.repetitions[1].valid);
}

// The guards apply to a resume: another spec, build or machine than the folder's is refused, and nothing
// is appended.
TEST_F(Runner, AResumeOfAnotherRunIsRefused) {
  ASSERT_EQ(runExperiment(c_).status, RunOutcome::Status::kDone);
  const RunRecord folder = readRun(dir_);
  const size_t lines_before = lines(dir_ + "/results.jsonl").size();
  auto refusal = [&](RunnerConfig c) {
    c.resume = folder;
    const RunOutcome o = runExperiment(c);
    EXPECT_EQ(o.status, RunOutcome::Status::kRefused);
    EXPECT_EQ(lines(dir_ + "/results.jsonl").size(), lines_before);
    return o.message;
  };
  RunnerConfig c = c_;
  c.spec.shared.decode_tokens = 32;
  EXPECT_NE(refusal(c).find("is not the run this spec, build and box make (arm A: decode_tokens = 32 here, 16 when "
                            "the run started); nothing was run"),
            std::string::npos)
      << refusal(c);
  c = c_;
  c.versions = {{"tpscope", "9.9.9"}};
  c.resume = folder;
  c.resume->manifest.versions = {{"tpscope", "0.1.0"}};
  {
    const RunOutcome o = runExperiment(c);
    EXPECT_EQ(o.status, RunOutcome::Status::kRefused);
    EXPECT_NE(o.message.find("it was started by tpscope \"0.1.0\", this is \"9.9.9\""), std::string::npos) << o.message;
  }
  c = c_;
  c.machine = {{"description", "1x other GPU (elsewhere)"}};
  c.resume = folder;
  c.resume->manifest.machine = {{"description", "2x NVIDIA H200 (here)"}};
  {
    const RunOutcome o = runExperiment(c);
    EXPECT_EQ(o.status, RunOutcome::Status::kRefused);
    EXPECT_NE(
        o.message.find("it was started on \"2x NVIDIA H200 (here)\", this machine is \"1x other GPU (elsewhere)\""),
        std::string::npos)
        << o.message;
  }
  c = c_;
  c.spec = parseSpec(std::string(kSpec) + kThreeArms, "tiny-three.toml");
  EXPECT_NE(refusal(c).find("its arms are A, B, this spec and box run A, B, C"), std::string::npos);
}

// A new run never writes over a folder that holds one.
TEST_F(Runner, ANewRunIntoAFolderThatHoldsOneIsRefused) {
  ASSERT_EQ(runExperiment(c_).status, RunOutcome::Status::kDone);
  const std::vector<std::string> before = lines(dir_ + "/results.jsonl");
  const RunOutcome o = runExperiment(c_);
  EXPECT_EQ(o.status, RunOutcome::Status::kFailed);
  EXPECT_NE(o.message.find("holds a run already: continue it with `tpscope arms --resume"), std::string::npos)
      << o.message;
  EXPECT_EQ(lines(dir_ + "/results.jsonl"), before);
}

// Arms that differ only in their wire run (a declared delta); each decode records its output, and the
// report sets every arm's output against the exact arm's (the fake workload carries its made-up output
// through the arm's wire with the codec's CPU reference, so the error is a real quantisation error).
TEST_F(Runner, WireArmsRecordTheirOutputAndTheReportGivesTheError) {
  c_.spec = parseSpec(std::string(R"(
[experiment]
name = "wires"
preset = "tiny"
prompt_tokens = 64
decode_tokens = 16
context = 256
repetitions = 2
idle_seconds = 0.2
baseline_threshold_mbps = 5000
devices = [0, 1]
split = "tensor"
backend = "host"

[[arm]]
name = "int8"
wire = "int8"

[[arm]]
name = "exact"

[[arm]]
name = "int4"
wire = "int4"
)"),
                      "wires.toml");
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  const RunRecord run = readRun(dir_);
  EXPECT_EQ(run.manifest.effective[0].value("wire"), "int8");
  EXPECT_EQ(run.manifest.effective[1].value("wire"), "exact");
  for (const RepetitionResult& r : run.repetitions) {
    EXPECT_TRUE(r.phases[0].output.empty()) << "prefill has no output";
    EXPECT_EQ(r.phases[1].output.size(), 256u) << r.arm;
  }
  const Report rep = buildReport(run);
  ASSERT_EQ(rep.arms.size(), 3u);
  // The reference is the exact arm, though it is listed second.
  EXPECT_EQ(rep.arms[0].output_reference, "exact");
  EXPECT_EQ(rep.arms[2].output_reference, "exact");
  EXPECT_FALSE(rep.arms[1].output_error);
  ASSERT_TRUE(rep.arms[0].output_error && rep.arms[2].output_error);
  EXPECT_EQ(rep.arms[0].output_error->n, 2);
  EXPECT_GT(rep.arms[0].output_error->median, 1e-4);
  EXPECT_LT(rep.arms[0].output_error->median, 2e-2);
  EXPECT_GT(rep.arms[2].output_error->median, rep.arms[0].output_error->median);  // int4 is coarser
  EXPECT_NE(o.report_markdown.find("\n## Wires\n"), std::string::npos) << o.report_markdown;
  EXPECT_NE(o.report_markdown.find("| exact | exact | "), std::string::npos) << o.report_markdown;
  EXPECT_NE(o.report_markdown.find("| reference | - |"), std::string::npos) << o.report_markdown;
  EXPECT_NE(o.report_markdown.find("| int8 | int8 | "), std::string::npos) << o.report_markdown;
  EXPECT_NE(o.report_markdown.find("2 GPUs, tensor, host, wire int8"), std::string::npos) << o.report_markdown;
  const nlohmann::json j = toJson(rep);
  EXPECT_EQ(j["arms"][0]["wire"], "int8");
  EXPECT_EQ(j["arms"][0]["output_error"]["reference"], "exact");
  EXPECT_EQ(j["arms"][0]["output_error"]["rel_rms"]["n"], 2);
  EXPECT_TRUE(j["arms"][1]["output_error"].is_null());
}

// An arm whose settings differ in more than its wire has no reference: its error is not a wire's.
TEST_F(Runner, TheReferenceDiffersFromAnArmInItsWireOnly) {
  c_.spec = parseSpec(std::string(R"(
[experiment]
preset = "tiny"
prompt_tokens = 64
decode_tokens = 16
context = 256
repetitions = 1
idle_seconds = 0.2
baseline_threshold_mbps = 5000
devices = [0, 1]
split = "tensor"
backend = "host"

[[arm]]
name = "exact"

[[arm]]
name = "fp8-4"
wire = "fp8"
tokens_per_step = 4
)"),
                      "ref.toml");
  const RunOutcome o = runExperiment(c_);
  ASSERT_EQ(o.status, RunOutcome::Status::kDone) << o.message;
  const Report rep = buildReport(readRun(dir_));
  EXPECT_FALSE(rep.arms[1].output_error);
  EXPECT_NE(o.report_markdown.find("| fp8-4 | fp8 | "), std::string::npos) << o.report_markdown;
  EXPECT_NE(o.report_markdown.find(" | N/A | - |"), std::string::npos) << o.report_markdown;
}

TEST(RunnerQuick, ShrinksTheSharedSettingsOnly) {
  const ExperimentSpec s = quickSpec(loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/four-arms.toml"));
  EXPECT_EQ(s.shared.repetitions, 2);
  EXPECT_EQ(s.shared.idle_seconds, 2);
  EXPECT_EQ(s.shared.prompt_tokens, 1024);
  EXPECT_EQ(s.shared.decode_tokens, 64);
  EXPECT_EQ(s.shared.context, 4096);
  EXPECT_EQ(s.arms.size(), 4u);
  EXPECT_TRUE(undeclaredDifferences(effectiveSettings(s)).empty());
}

}  // namespace
}  // namespace tpscope::testing
