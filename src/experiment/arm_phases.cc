// SPDX-License-Identifier: Apache-2.0
// arm_phases.cc - pairing a workload phase with its meter window.
#include "experiment/arm_phases.h"

namespace tpscope::experiment {

PhaseResult makePhaseResult(const PhaseOutcome& o, const std::vector<GpuTraffic>& traffic) {
  PhaseResult p;
  p.phase = o.phase;
  p.start_ns = o.start_ns;
  p.end_ns = o.end_ns;
  p.tokens = o.tokens;
  p.steps = o.steps;
  const double s = p.seconds();
  p.tok_s = s > 0 ? o.tokens / s : 0;
  p.step_ms = o.steps > 0 ? s * 1e3 / o.steps : 0;
  p.allreduce = o.allreduce;
  p.engine_tok_s = o.engine_tok_s;
  p.engine_ms = o.engine_ms;
  p.engine = o.engine;
  p.gpus = traffic;
  p.output = o.output;
  return p;
}

}  // namespace tpscope::experiment
