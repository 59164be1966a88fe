// SPDX-License-Identifier: Apache-2.0
// arm_phases.h - what the runner (`tpscope arms`) needs from an engine: run one arm's phases.
//
// The runner owns the meter, the quiescing and the run folder; the engine (the synthetic workload in
// src/workload, a llama-server, a marked command) owns the model. Per arm the runner calls prepare() once, then per
// repetition: quiesce, runPhases(), and pairs every PhaseOutcome with the meter window of the same [start_ns, end_ns]
// (makePhaseResult). Nothing here depends on src/workload or src/engine; their adapters implement this interface
// (workload_phases.h, server_phases.h). An engine that holds a process stops it when destroyed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiment/guards.h"
#include "experiment/run_folder.h"
#include "tpscope/tpscope.h"

namespace tpscope::experiment {

// One phase as the workload ran it. Times are Meter::now() (CLOCK_MONOTONIC ns) read by the workload
// right after its streams were synchronised at both edges, so the window holds the phase's traffic only.
struct PhaseOutcome {
  std::string phase;  // "prefill" | "decode"
  int64_t start_ns = 0, end_ns = 0;
  int64_t tokens = 0;                // tokens produced (decode) or consumed (prefill)
  int64_t steps = 0;                 // forward passes
  std::vector<PathCalls> allreduce;  // the library's accounting across the phase, per path
  // An engine's own account of the phase (llama-server's `timings`): its tokens/s, milliseconds and
  // raw figures. The report gives its tok/s as the arm's (the study's figure) with the client's beside.
  std::optional<double> engine_tok_s, engine_ms;
  nlohmann::json engine = nullptr;
  // Not empty: the repetition saw work that was not the rig's (another client on the server); the
  // runner records it as invalid and retries it.
  std::string disturbed;
  // Decode, where the engine exposes it: what the last step computed (PhaseResult::output), read after
  // the window closed. Empty: not exposed.
  std::vector<float> output;
};

class ArmPhases {
 public:
  virtual ~ArmPhases() = default;
  // Builds the model for these effective settings (allocations, communicator, graphs), so failures
  // happen before any measurement. Also returns its automatic decisions (AutoDecider's contract).
  virtual tpsResult_t prepare(const EffectiveSettings& arm, std::vector<Setting>* decisions, std::string* reason) = 0;
  // The meter of the coming repetition (nullptr after it). A workload that marks its own phase
  // windows on it (begin/end around the synchronised edges) reports those edges in PhaseOutcome;
  // the runner adds a window only for a phase the workload did not mark.
  virtual void useMeter(Meter* /*meter*/) {}
  // Processes the engine runs on the GPUs (a server): quiescing does not count them as other users.
  virtual std::vector<unsigned> processes() const { return {}; }
  // Runs `phases` once, in order, with a synchronised edge between them.
  virtual tpsResult_t runPhases(const std::vector<std::string>& phases, std::vector<PhaseOutcome>* out,
                                std::string* reason) = 0;
  // Called from another thread while prepare() or runPhases() runs, when the run is being stopped
  // (`tpscope arms` got SIGINT or SIGTERM): ends what the engine does as soon as it can (a server is sent
  // SIGTERM), so that the call returns, failing, instead of finishing a long request. Safe beside those
  // calls. The default does nothing: the synthetic workload's phases last seconds.
  virtual void interrupt() {}
};

// The record of one phase: the workload's outcome with the meter's traffic for its window.
PhaseResult makePhaseResult(const PhaseOutcome& o, const std::vector<GpuTraffic>& traffic);

}  // namespace tpscope::experiment
