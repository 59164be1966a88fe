// SPDX-License-Identifier: Apache-2.0
// phases.h - the timed phases of the workload: prefill and decode, with tokens/s and AllReduce traffic.
//
// Timer: the host's steady clock around enqueue-to-synchronise of the whole phase (all GPUs), after
// one untimed warm-up. The window of each timed phase is marked on the meter when one is given.
#pragma once

#include <string>
#include <vector>

#include "tpscope/tpscope.hpp"
#include "workload/model.h"
#include "workload/profile.h"

namespace tpscope {
class Meter;
}

namespace tpscope::workload {

struct PrefillOptions {
  int prompt = 512;  // T tokens
  int ubatch = 512;  // U tokens per micro-batch
};

struct DecodeOptions {
  int tokens = 128;         // n tokens to emit
  int ctx = 1024;           // context length c the steps attend to
  int tokens_per_step = 1;  // k tokens verified per forward
  double accept = 0;        // acceptance rate of the k-1 drafted tokens, in [0, 1]
  bool graph = true;        // run each step as a CUDA graph where capture works
  // `tensor` only: time the same steps again with the AllReduces skipped, to give their share.
  bool allreduce_share = true;
};

// Expected tokens emitted per step: 1 + accept x (k - 1).
double emittedPerStep(const DecodeOptions& o);
// Steps needed to emit o.tokens: ceil(tokens / emittedPerStep).
int decodeSteps(const DecodeOptions& o);

struct PhaseResult {
  std::string phase;   // "prefill" or "decode"
  double seconds = 0;  // the timed window
  int steps = 0;       // forwards (prefill: micro-batches)
  int tokens_per_forward = 0;
  double tokens = 0;  // prompt tokens, or emitted tokens (steps x emittedPerStep)
  double tokens_per_s = 0;
  double ms_per_step = 0;
  bool graph = false;                                           // decode ran as a CUDA graph
  std::string graph_note;                                       // why not, when it was asked for and did not work
  unsigned long long allreduce_calls = 0, allreduce_bytes = 0;  // payload bytes per GPU, summed over calls
  // Decode's memory roofline, filled in by the caller when measured (0: not measured): the slowest
  // GPU's weight bytes over its measured copy rate is the shortest a step can take.
  double copy_gbps = 0, roofline_ms_per_step = 0;
  // Decode in `tensor`: the step time with the AllReduces skipped (0: not measured), and the
  // AllReduces' share of a step, 1 - that / ms_per_step.
  double ms_per_step_without_allreduce = 0, allreduce_share = 0;
  // The library's statistics for the timed window (tensor split; zero otherwise). A decode graph is
  // counted once, at capture: then these are one step's, and stats_scale is the steps replayed.
  std::vector<PathStats> allreduce_stats;  // by path number (tpsCommGetPathStats)
  int allreduce_ranks = 0;                 // the communicator's ranks in this process: tx/rx entries per cell
  int stats_scale = 1;
  // `tpscope tp --profile`: one forward of this phase's shape timed op by op (Model::profileForward),
  // per GPU position; empty when not asked for.
  std::vector<std::vector<OpTime>> profile;
  int profile_pos0 = 0;  // the position of the profiled forward's first token
};

tpsResult_t runPrefill(Model& model, const PrefillOptions& o, Meter* meter, PhaseResult* out, std::string* reason);
tpsResult_t runDecode(Model& model, const DecodeOptions& o, Meter* meter, PhaseResult* out, std::string* reason);

}  // namespace tpscope::workload
