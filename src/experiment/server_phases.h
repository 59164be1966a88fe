// SPDX-License-Identifier: Apache-2.0
// server_phases.h - the ArmPhases that run an arm on llama-server or on a marked command (src/engine).
//
// llama-server: the arm's delta maps to the server as the study ran it: devices -> CUDA_VISIBLE_DEVICES,
// split -> -sm, allreduce -> GGML_CUDA_ALLREDUCE (removed from the environment when the spec does not
// set it), draft / spec_type / draft_max -> -md, --spec-type, --spec-draft-n-max. prepare() starts the
// server with the shared flags and the model, waits for /health, reads what the server decided (its
// /props and its startup log: context, batch sizes, offload, flash attention, KV types, what --fit
// did) as settings of source kEngine, refuses an AllReduce or speculation that is not the one asked
// for, and warms up once. Per repetition: one streamed request whose token stream gives the windows
// (prefill = sent -> first token, decode = first -> last token) and whose `timings` are the server's
// own figures; /metrics before and after tells whether another client used the server meanwhile. The
// server's log goes to RUN_DIR/server-ARM.log; the server stops when the ArmPhases is destroyed.
//
// command: the program runs once per repetition; its `begin`/`end` marks on the control pipe are the
// windows. It reports no tokens, so its tok/s is N/A.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/llama_server.h"
#include "experiment/arm_phases.h"
#include "experiment/guards.h"
#include "experiment/spec.h"

namespace tpscope::experiment {

// `run_dir`: where the server's log (or the command's) goes. `visible_devices`: the parent's
// CUDA_VISIBLE_DEVICES entries, so that spec ordinal i names the same GPU for the server as for the
// meter; empty: ordinals are the devices themselves.
std::unique_ptr<ArmPhases> makeServerArmPhases(const EngineSettings& engine, const std::string& run_dir,
                                               std::vector<std::string> visible_devices = {});
std::unique_ptr<ArmPhases> makeCommandArmPhases(const EngineSettings& engine, const std::string& run_dir);

// The server's command line and environment for an arm (exposed for tests): args after the binary,
// environment to set, variables to remove. Errors (a flag string that is not shell words) in *error.
struct ServerLaunch {
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> unset;
};
bool serverLaunch(const EngineSettings& engine, const EffectiveSettings& arm,
                  const std::vector<std::string>& visible_devices, ServerLaunch* out, std::string* error);

// What prepare() takes from a started server: its /props (propsFromBodies) and its startup log, read
// for an arm launched with `launch`. Fills *decisions (the engine's settings, source kEngine) and
// *vocab (the model's vocabulary, 32000 when /props names none). tpsUnavailable when the log shows the
// server is not running what the arm asked for (an AllReduce fallback, no tensor split, no
// speculation), tpsInvalidArgument when the request does not fit one slot's context; *reason says why.
tpsResult_t serverDecisions(const EffectiveSettings& arm, const ServerLaunch& launch, const nlohmann::json& props,
                            const std::string& log, std::vector<Setting>* decisions, int64_t* vocab,
                            std::string* reason);

// One repetition's phase windows from its streamed request and the server's /metrics counters before
// and after it (prefill: sent -> first token; decode: first -> last token), each marked disturbed when
// the counters show another client's work. tpsInvalidArgument for a phase other than prefill and decode.
tpsResult_t phasesFromRequest(const EffectiveSettings& arm, const std::vector<std::string>& phases,
                              const engine::Completion& c, std::map<std::string, double> before,
                              std::map<std::string, double> after, std::vector<PhaseOutcome>* out, std::string* reason);

// A file name for an arm's logs: the name with anything but letters, digits, '-', '_', '.' and '\''
// replaced by '_'.
std::string armFileName(const std::string& arm);

}  // namespace tpscope::experiment
