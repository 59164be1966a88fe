// SPDX-License-Identifier: Apache-2.0
// runner.h - `tpscope arms`: guards first, then per arm, per repetition: quiesce, run the phases with
// the meter marking each phase window, record everything to the run folder; at the end the report.
//
// Nothing here needs a GPU: the workload comes in through an ArmPhases factory (the GPU one is
// workload_phases.h; tests and `tpscope arms --fake-workload` use makeFakeArmPhases) and the meter through a
// factory (Meter::start; with MeterOptions::fake_gpus two scripted GPUs).
//
// One meter per repetition attempt, on the arm's devices: its quiesce() is the attempt's baseline,
// its samples are the attempt's samples.jsonl rows, its windows the phases' traffic. An attempt whose
// baseline fails, or that the engine or the tail check found disturbed by work that was not the rig's,
// is recorded (valid = false) and retried up to spec baseline_retries times; after that the repetition
// is reported as failed and the run goes on. None is silently dropped.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "experiment/arm_phases.h"
#include "experiment/guards.h"
#include "experiment/report.h"
#include "experiment/run_folder.h"
#include "experiment/spec.h"
#include "meter/meter.h"

namespace tpscope::experiment {

using PhasesFactory = std::function<std::unique_ptr<ArmPhases>(const EffectiveSettings&)>;
using MeterFactory = std::function<tpsResult_t(const MeterOptions&, std::unique_ptr<Meter>*, std::string*)>;
// How one baseline is taken; the default is Meter::quiesce. Tests wrap it to script failures.
using QuiesceFn = std::function<tpsResult_t(Meter&, const QuiesceOptions&, QuiesceRecord*)>;

struct RunnerConfig {
  ExperimentSpec spec;
  Availability box;
  AutoDecider decide;           // the automatic decisions the guards see (may be empty)
  PhasesFactory make_phases;    // required
  MeterFactory start_meter;     // empty: Meter::start
  QuiesceFn quiesce;            // empty: Meter::quiesce
  bool check_processes = true;  // QuiesceOptions::check_processes
  std::string out_dir;          // the run folder (created)
  nlohmann::json versions = nlohmann::json::object();
  nlohmann::json topology = nlohmann::json::object();
  nlohmann::json machine = nlohmann::json::object();
  nlohmann::json invocation = nlohmann::json::object();  // Manifest::invocation
  std::ostream* progress = nullptr;                      // progress lines; nullptr: none
  // Start every arm's engine once before anything is measured and add what it reports about itself
  // (settings of source kEngine) to the arms' effective settings before the guards compare them: a
  // server decides its context, batch sizes and offload only once started.
  bool probe = false;
  // After the last phase the meter runs this much longer; traffic above the baseline threshold then
  // (another client still at work) marks the repetition as disturbed. 0: no such check.
  double tail_seconds = 0;
  // Arms refused only because their devices name a GPU beyond this box's count are left out
  // (RunOutcome::left_out) and the others run; when every arm is refused, or one for another reason,
  // the run is refused as without it. For a box with fewer GPUs than some arms need.
  bool run_what_fits = false;
  // Continue this run folder (read from out_dir): the run it records must be this one (the arms' effective
  // settings, tpscope's version and the machine as recorded); its finished repetitions are not run
  // again (a valid attempt, or as many attempts as baseline_retries allow), the others go on from
  // their next attempt, appended to the folder.
  std::optional<RunRecord> resume;
  // Set (from a signal handler) to stop the run: checked before each attempt and between its baseline
  // and its phases; the attempt in progress is not recorded, the folder stays one `--resume` continues.
  const std::atomic<int>* interrupt = nullptr;
};

struct RunOutcome {
  // kInterrupted: RunnerConfig::interrupt stopped it; the folder holds every attempt finished so far.
  enum class Status { kDone, kRefused, kFailed, kInterrupted };
  Status status = Status::kFailed;
  // kRefused: the difference table or one line per refused arm; kFailed: one sentence.
  std::string message;
  Report report;                // kDone: the report of the run folder (for plots)
  std::string report_markdown;  // kDone: formatMarkdown(report)
  Manifest manifest;            // kDone: the run folder's manifest as read back
  // Over the whole run folder, a resumed run's earlier attempts included.
  int attempts = 0, failed_attempts = 0, failed_repetitions = 0;
  int skipped_repetitions = 0;    // finished before a resume, not run again
  std::vector<Refusal> left_out;  // run_what_fits: the arms this box has too few GPUs for
};

// Runs the experiment. Never throws for run-time problems: they come back as kFailed.
RunOutcome runExperiment(const RunnerConfig& config);

// `--quick`: at most 2 repetitions, 2 s idle, 1024 prompt tokens, 64 decode tokens, 4096 context.
ExperimentSpec quickSpec(ExperimentSpec spec);

// A workload that needs no GPU: each phase sleeps `seconds_per_phase` and reports made-up tokens
// (prefill: prompt_tokens; decode: decode_tokens), for tensor split AllReduce calls, and for decode a
// made-up output carried through the arm's wire (so a wire's error shows in the report).
std::unique_ptr<ArmPhases> makeFakeArmPhases(const EffectiveSettings& arm, double seconds_per_phase = 0.02);

}  // namespace tpscope::experiment
