// SPDX-License-Identifier: Apache-2.0
// report.h - the study's tables from a run folder: the figures (report_render.h renders them).
//
// Statistics (docs/METHOD.md): per repetition the mean inside the phase window (bytes over time; never
// a median of samples, which throws the bursts away, as the seed study's medians did); across
// repetitions the median with min–max and the number of repetitions. Only repetitions whose baseline
// passed count; the others are listed, never dropped silently. "rx per card" in the summary is the
// mean over the arm's GPUs of each GPU's median, as the study reports it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiment/run_folder.h"
#include "meter/meter.h"

namespace tpscope::experiment {

// One arm, one phase, one GPU.
struct ReportCell {
  std::string arm, phase;
  int gpu = 0;
  std::optional<MeterSpread> rx_mbps, tx_mbps;            // PCIe counters
  std::optional<MeterSpread> dmon_rx_mbps, dmon_tx_mbps;  // the dmon method, same windows
  std::optional<MeterSpread> nvlink_rx_mbps, nvlink_tx_mbps;
  std::vector<int> samples;       // PCIe reads inside the window, per repetition
  std::vector<int> dmon_samples;  // dmon-method snapshots inside the window, per repetition
  std::optional<double> ceiling_mbps;
  std::optional<double> share_of_ceiling;      // max(rx, tx median) / ceiling
  std::optional<MeterSpread> library_rx_mbps;  // the AllReduce library's rx bytes / duration
  std::optional<MeterSpread> library_tx_mbps;
};

// One arm, one phase.
struct ReportArmPhase {
  std::string arm, phase;
  // tok_s: the engine's own figure where it reports one (llama-server's timings, the study's figure),
  // else the client's; client_tok_s: tokens over the window on the client's clock, always.
  std::optional<MeterSpread> tok_s, step_ms, client_tok_s;
  std::optional<MeterSpread> engine_ms, window_ms;
  std::optional<MeterSpread> draft_acceptance;  // drafted tokens the target accepted (speculative decoding)
  std::optional<double> rx_per_card_mbps, tx_per_card_mbps;  // mean over GPUs of the medians
  std::optional<MeterSpread> allreduce_calls;                // per repetition
  std::optional<double> allreduce_bytes_per_call;            // payload bytes per call (median rep)
  std::optional<double> allreduce_calls_per_token;
  std::vector<std::string> paths;  // paths that carried calls
};

struct ReportArm {
  std::string name, split, devices, backend;  // backend: allreduce_backend ("none" unless tensor)
  int gpu_count = 1;                          // distinct GPUs
  int positions = 1;  // the split's positions (devices listed): more than gpu_count where positions share a GPU
  int tokens_per_step = 1;
  double acceptance = 1;
  std::string speculative;     // a server's drafting ("draft self, up to 3"); "" when none
  std::string wire = "exact";  // the AllReduce's wire (the setting "wire"; "none" where no tpscope AllReduce runs)
  // The error of the arm's decode output (PhaseResult::output) against its reference's: the first arm in
  // spec order on the exact wire whose settings are otherwise this arm's (output_reference; "" for the
  // reference itself, and where there is none or no output was recorded). Per valid repetition, against
  // the reference's repetition of the same number (else its first valid one): the relative RMS error
  // sqrt(sum (y - y_ref)^2 / sum y_ref^2), as median (min–max) over the repetitions.
  std::string output_reference;
  std::optional<MeterSpread> output_error;
  int valid_repetitions = 0, attempts = 0;
  // Not measured in this run: shown from a recorded run (withRecordedArms), on the machine named here.
  std::string recorded_on;
};

// Tensor minus layer, per card.
struct NetCost {
  std::string phase, tensor_arm, layer_arm;
  double tensor_rx_mbps = 0, layer_rx_mbps = 0, net_rx_mbps = 0, ratio = 0;
};

struct BusiestCell {
  std::string arm, phase, direction;  // "rx" | "tx"
  int gpu = 0;
  double mbps = 0, share = 0, ceiling_mbps = 0;
};

// One arm's decode step on the bus, one GPU (meter source pm or both): the step every valid repetition
// recorded (PmStep), its figures as median (min–max) over those repetitions.
struct ReportPmStep {
  std::string arm;
  int gpu = 0;
  int64_t interval_us = 0;
  std::optional<MeterSpread> step_ms, records;
  std::optional<MeterSpread> tx_bytes, rx_bytes;  // the records' bytes, the two edge records prorated to the step
  std::optional<MeterSpread> bursts;              // under the meter's kStepBurstRule (meter/pm_bursts.h)
  std::optional<MeterSpread> allreduce_calls;     // the library's calls per step
  std::optional<MeterSpread> bursts_per_call;     // per repetition: bursts / calls
  // The first valid repetition's step, record by record (what the plot draws).
  int repetition = 0;
  int64_t step_ns = 0;
  std::vector<PmStepSample> samples;
  std::vector<std::string> notes;  // "repetition N: why its step is not whole"
};

struct Report {
  std::string experiment, start_time, recording, machine;
  std::string engine;  // "" for the synthetic engine; else one line: engine, build, model, flags
  std::vector<std::string> phases;
  std::vector<ReportArm> arms;
  std::vector<ReportArmPhase> arm_phases;  // arm-major, phases in spec order
  std::vector<ReportCell> cells;           // arm, phase, GPU
  std::vector<NetCost> net;
  std::optional<BusiestCell> busiest;
  std::vector<std::string> failed;  // one line per repetition attempt whose baseline failed
  // What the meter's own reads added, per GPU over every valid phase window, subtracted from every
  // figure: "the meter's own reads: 1.02 MB/s rx, 1.10 MB/s tx on GPU 0"; empty for runs recorded
  // before the meter was calibrated. own_note says when some windows were not made net.
  std::vector<std::string> own;
  std::string own_note;
  std::vector<std::string> meaning;                  // "what this means", generated from the numbers
  std::string meter_source;                          // the run's meter_source setting; "" when not recorded (NVML)
  std::vector<ReportPmStep> pm_steps;                // arm by arm, GPU by GPU; empty without PM
  nlohmann::json windows = nlohmann::json::array();  // {arm, repetition, phase, start_ns, end_ns} for plots
  // withRecordedArms: the recorded run the arms with recorded_on come from, and its machine
  // ("examples/recorded/h200x2-quick: Recorded run: 2026-11-29 on 2x NVIDIA H200 ..."); "" otherwise.
  std::string recorded_from;
};

// The statistics of a run folder; report_render.h writes them out.
Report buildReport(const RunRecord& run);

// `measured` with the arms `arms` of the recorded run `recording` (read from the folder `source`) added
// after its own, each marked with the recording's machine (ReportArm::recorded_on): their rows of every
// table, the net costs between two of them, and the recording's own "what this means" lines, said to be
// the recording's. Figures are never mixed across the two: a net cost or a comparison takes both arms
// from one run. For a box with fewer GPUs than some arms need (`tpscope arms`).
Report withRecordedArms(Report measured, const RunRecord& recording, const std::vector<std::string>& arms,
                        const std::string& source);

}  // namespace tpscope::experiment
