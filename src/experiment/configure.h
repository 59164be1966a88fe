// SPDX-License-Identifier: Apache-2.0
// configure.h - the study's composition: from a spec and what the command line says, the runner's whole
// configuration (runner.h's RunnerConfig).
//
// configure() decides which engine runs the arms and how (the synthetic workload on the GPUs, a fake one
// on none, llama-server, a marked command); what this box can run (its GPUs, the AllReduce backends its
// media allow, the engine's split modes and presets); the machine and topology records of the manifest;
// and what must hold before anything starts: the llama-server binary (the spec's, else
// TPSCOPE_LLAMA_SERVER), the model and draft GGUF files. The CLI only reads its flags and renders.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "experiment/runner.h"
#include "experiment/spec.h"

namespace tpscope::experiment {

struct ConfigureOptions {
  std::string out_dir;         // the run folder
  bool fake_meter = false;     // the meter's two scripted GPUs (TPSCOPE_METER_FAKE=1)
  bool fake_workload = false;  // `--fake-workload`: no GPU work (makeFakeArmPhases)
  int fake_gpus = 2;           // the GPUs the fake workload's box has (tests of a box with fewer than an arm needs)
  nlohmann::json versions = nlohmann::json::object();    // tpscope's own; the engine's is added
  nlohmann::json invocation = nlohmann::json::object();  // Manifest::invocation
  std::ostream* progress = nullptr;                      // RunnerConfig::progress
};

struct Configuration {
  enum class Status {
    kReady,  // config runs the spec
    kNoGpu,  // no GPU is visible: message says why; nothing can be measured here
    kUsage,  // the spec or the options cannot run as given: message, one sentence
  };
  Status status = Status::kUsage;
  std::string message;
  RunnerConfig config;  // kReady; its spec is the spec as it runs (the llama-server binary filled in)
};

Configuration configure(const ExperimentSpec& spec, const ConfigureOptions& options);

}  // namespace tpscope::experiment
