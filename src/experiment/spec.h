// SPDX-License-Identifier: Apache-2.0
// spec.h - the experiment spec: shared settings once, each arm as a delta (docs/cli.md, "Spec format").
//
// A spec is TOML: one [experiment] table with the settings every arm shares, and one [[arm]] table per
// arm with only what that arm changes (devices, split mode, backend, tokens per step, acceptance).
// Parsing is strict on purpose: an unknown key anywhere is an error, because a typo that is silently
// ignored leaves an arm on a default nobody chose (the study's trap 1 starts exactly like that).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpscope::experiment {

enum class SplitMode { kNone, kLayer, kTensor, kRow };
const char* splitModeName(SplitMode m);  // "none", "layer", "tensor", "row"
// Accepts every mode a user may write, implemented here or not ("row": the study's trap 2 is refused
// later by the availability check, with its reason, not by the parser).
std::optional<SplitMode> parseSplitMode(const std::string& text);

// The settings an arm may change. Unset here: the [experiment] value, else the built-in default.
struct ArmDelta {
  std::optional<std::vector<int>> devices;  // CUDA ordinals
  std::optional<SplitMode> split;
  std::optional<std::string> backend;  // host | p2p | nccl | auto (AllReduce; tensor split only)
  std::optional<int> tokens_per_step;  // tokens one decode step proposes (1 + drafts), 1..16
  std::optional<double> acceptance;    // share of drafted tokens accepted, (0, 1]
};

struct ArmSpec {
  std::string name;
  int line = 0;    // where its [[arm]] table starts
  ArmDelta delta;  // what this arm declares
};

// Every setting shared by all arms, with the built-in defaults.
struct SharedSettings {
  std::string preset = "8b";  // synthetic model shape (tpscope tp --preset)
  int prompt_tokens = 2048;   // prefill length
  int decode_tokens = 256;    // tokens generated per decode phase
  int context = 16384;        // KV capacity; equal in every arm (arm A must fit on one GPU)
  std::vector<std::string> phases = {"prefill", "decode"};
  int repetitions = 3;
  double idle_seconds = 8;               // idle, metered, before every repetition
  double baseline_threshold_mbps = 100;  // highest idle rate of any counter that still passes
  double meter_period_ms = 2;            // counter read period
  int baseline_retries = 2;              // a repetition whose baseline fails is retried this often, then reported
  ArmDelta base;                         // arm settings given once in [experiment], overridden per arm
};

struct ExperimentSpec {
  std::string name;    // [experiment] name; default: the file's stem
  std::string source;  // file path (or "<string>") for messages
  std::string text;    // the TOML as read, kept verbatim in the run manifest
  // [experiment] recorded_run: a run folder recorded from this spec on real GPUs, which `tpscope arms`
  // renders instead on a machine without GPUs. As written by parseSpec; loadSpec resolves a relative
  // path against the spec file's folder. "" when the spec names none.
  std::string recorded_run;
  SharedSettings shared;
  std::vector<ArmSpec> arms;
};

// A spec that cannot be used: what() reads "FILE:LINE: message" (LINE omitted when 0).
struct SpecError : std::runtime_error {
  SpecError(const std::string& source, int line, const std::string& message);
  int line;
  std::string message;
};

// Parses and validates. Throws SpecError for malformed TOML, an unknown key, no arms, an arm with no
// name, duplicate arm names, a value of the wrong type or out of range.
ExperimentSpec parseSpec(const std::string& text, const std::string& source = "<string>");
// Reads `path` and parses it; SpecError (line 0) when the file cannot be read. Resolves recorded_run.
ExperimentSpec loadSpec(const std::string& path);

}  // namespace tpscope::experiment
