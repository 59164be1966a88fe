// SPDX-License-Identifier: Apache-2.0
// guards.h - what must hold before any arm runs.
//
// 1. Every arm's effective settings: every setting that affects the measurement, after defaults and
//    after every automatic decision (the workload's, the library's, the box's), including settings no
//    arm declares. Arms may differ only in their declared delta and what follows from it; anything
//    else is an undeclared difference (the seed study's auto-tuning flag that decided differently per
//    arm) and refuses the run.
// 2. Availability: an arm whose split mode, backend, device set or preset this build and box do not
//    offer is refused up front with the reason, never started (the seed study's row split: listed in
//    help, not implemented).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "experiment/spec.h"
#include "tpscope/tpscope.h"

namespace tpscope::experiment {

// kEngine: what an engine reported about itself once started (a server's context, batch, offload).
enum class SettingSource { kDefault, kShared, kArm, kDerived, kAuto, kEngine };
const char* settingSourceName(SettingSource s);  // "default", "shared", "arm", "derived", "auto", "engine"

struct Setting {
  std::string key;    // snake_case, e.g. "split", "allreduce_backend", "cuda_graph"
  std::string value;  // as printed
  SettingSource source = SettingSource::kDefault;
};

struct EffectiveSettings {
  std::string arm;
  std::vector<Setting> settings;  // in a fixed order: the manifest and the difference table use it
  const Setting* find(const std::string& key) const;
  std::string value(const std::string& key) const;  // "" when absent
  std::vector<int> devices() const;                 // the "devices" value as CUDA ordinals
  void set(const Setting& s);                       // replaces the setting of that key, or adds it last
};

// True when a GPU appears more than once in `devices`: tensor positions that share it.
bool sharesGpu(const std::vector<int>& devices);

// "0,1" -> {0, 1}: a device list as the effective settings print it. Throws std::invalid_argument on
// an item that is not a number.
std::vector<int> parseDeviceList(const std::string& csv);

// The keys an arm may declare, and the keys that follow from them (gpu_count from devices,
// allreduce_backend from split and backend, expected_tokens_per_step from tokens and acceptance; for a
// server: the speculation in effect and its command line).
const std::vector<std::string>& deltaKeys();
const std::vector<std::string>& derivedKeys();

// Automatic decisions made on an arm's behalf, given its settings so far; each returned setting is
// added (or replaces one) with source kAuto (kEngine stays kEngine). The runner plugs in the workload's (e.g. whether
// decode runs as a CUDA graph, the dtype, what `backend = "auto"` resolves to); tests plug in scripted ones.
using AutoDecider = std::function<std::vector<Setting>(const EffectiveSettings&)>;

std::vector<EffectiveSettings> effectiveSettings(const ExperimentSpec& spec, const AutoDecider& decide = {});

// One setting on which arms differ although no arm's delta explains it.
struct Difference {
  std::string setting;
  std::vector<std::pair<std::string, std::string>> values;  // (arm, value), every arm
  std::vector<std::string> sources;                         // per arm, settingSourceName
};

// Settings outside deltaKeys()/derivedKeys() whose values differ between arms. Empty: the arms are
// one condition apart from their deltas.
std::vector<Difference> undeclaredDifferences(const std::vector<EffectiveSettings>& arms);
// "setting | arm | value | source" table, one row per arm per differing setting, and a last line
// saying what to do.
std::string formatDifferences(const std::vector<Difference>& diffs);

// What this build and box offer.
struct Availability {
  int gpu_count = 0;
  std::vector<tpsBackend_t> backends;                   // usable AllReduce backends (never tpsBackendAuto)
  std::map<tpsBackend_t, std::string> backend_reasons;  // why a backend is missing (from topo's media)
  std::vector<std::string> split_modes;                 // implemented by the engine: "none", "layer", "tensor"
  std::vector<std::string> presets;                     // empty: not checked
  // Host staging can run tensor positions that share a GPU here (every GPU maps pinned host memory and
  // is compute capability 7.0+): the media's check, which wants two GPUs, cannot say so on a box of one.
  bool host_on_shared_gpu = false;
};

struct Refusal {
  std::string arm;
  std::string reason;  // one sentence
  // The arm's devices name a GPU beyond this box's count (and nothing else was checked): a box with
  // more GPUs can run it.
  bool needs_more_gpus = false;
};

// Every arm that cannot run here, with why. Empty: all can.
std::vector<Refusal> checkAvailability(const std::vector<EffectiveSettings>& arms, const Availability& box);

}  // namespace tpscope::experiment
