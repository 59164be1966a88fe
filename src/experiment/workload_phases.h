// SPDX-License-Identifier: Apache-2.0
// workload_phases.h - the ArmPhases that runs an arm on the synthetic transformer (src/workload).
//
// Maps an arm's effective settings to the workload: preset, split, devices, backend and wire (tensor only),
// tokens per step, acceptance, the decode kernel choices (reduction, rope_kernel, attention_pdl), prompt
// tokens (prefill), decode tokens and context (decode). Each decode phase also returns the last step's
// output (PhaseOutcome::output), read after its window. Its automatic decisions (workloadDecisions) are
// what the guards see before anything runs.
#pragma once

#include <memory>
#include <vector>

#include "experiment/arm_phases.h"
#include "experiment/guards.h"

namespace tpscope::experiment {

// The workload's automatic decisions for an arm: cuda_graph ("on": decode runs as a CUDA graph where
// capture works; "off" for tensor positions that share a GPU, which decode eagerly), prefill_ubatch
// (micro-batch tokens), prefill_attention ("cudnn" where cuDNN loads, else "kernel"). The same for every
// arm whose positions each have their own GPU; an arm whose positions share one decodes without a graph,
// which the guards then show as a difference against arms that do not. The decode kernel choices are not decisions
// but settings of the spec (effectiveSettings), by default the model's.
std::vector<Setting> workloadDecisions(const EffectiveSettings& arm);

std::unique_ptr<ArmPhases> makeWorkloadArmPhases();

}  // namespace tpscope::experiment
