// SPDX-License-Identifier: Apache-2.0
// spec.h - the experiment spec: shared settings once, each arm as a delta (docs/cli.md, "Spec format").
//
// A spec is TOML: one [experiment] table with the settings every arm shares, and one [[arm]] table per
// arm with only what that arm changes (devices, split mode, backend, wire, tokens per step, acceptance; for
// a llama-server engine: devices, split, allreduce, wire, draft, draft_max).
// Parsing is strict on purpose: an unknown key anywhere is an error, because a typo that is silently
// ignored leaves an arm on a default nobody chose (an undeclared difference starts exactly like that).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "meter/meter.h"
#include "workload/model_config.h"

namespace tpscope::experiment {

// The split an arm declares: the workload's modes (workload::SplitMode, which names them) and `row`, a
// mode an engine may have (llama-server's --split-mode row) and the synthetic workload does not.
enum class SplitMode { kNone, kLayer, kTensor, kRow };
// The workload's mode for `m`; nullopt for kRow. The one conversion between the two types.
std::optional<workload::SplitMode> workloadSplit(SplitMode m);
const char* splitModeName(SplitMode m);  // the workload's names ("none", "layer", "tensor"), and "row"
// Accepts every mode a user may write, implemented here or not ("row", listed but not implemented in
// the seed study's build, is refused later by the availability check, with its reason, not by the parser).
std::optional<SplitMode> parseSplitMode(const std::string& text);

// The ranges a spec takes, which a run folder's manifest is held to as well: arms per spec, GPUs per arm,
// a GPU's CUDA ordinal, tokens per decode step.
constexpr size_t kMaxArms = 64;
constexpr size_t kMaxArmDevices = 8;
constexpr int kMaxDeviceIndex = 63;
constexpr int kMaxTokensPerStep = 16;
// The largest spec file loadSpec() reads (a spec is a page of TOML; its text goes into every manifest).
constexpr size_t kMaxSpecBytes = size_t{1} << 20;

// The settings an arm may change. Unset here: the [experiment] value, else the built-in default.
struct ArmDelta {
  std::optional<std::vector<int>> devices;  // CUDA ordinals
  std::optional<SplitMode> split;
  std::optional<std::string> backend;  // host | p2p | nccl | auto (AllReduce; tensor split only)
  std::optional<int> tokens_per_step;  // tokens one decode step proposes (1 + drafts), 1..16
  std::optional<double> acceptance;    // share of drafted tokens accepted, (0, 1]
  // Synthetic engine: the decode kernel choices (workload::DecodeKernels; `tpscope tp --reduction` etc.).
  std::optional<workload::Reduction> reduction;
  std::optional<workload::RopeKernel> rope_kernel;
  std::optional<workload::AttentionPdl> attention_pdl;
  // The AllReduce's wire (tpsWire_t): exact | bf16 | int8 | fp8 | int4 | auto:BUDGET. Synthetic engine: its
  // tensor split's communicator; llama-server: TPSCOPE_WIRE under allreduce = "tpscope". Default exact.
  std::optional<std::string> wire;
  // llama-server only.
  std::optional<std::string> allreduce;  // GGML_CUDA_ALLREDUCE: internal | nccl | none | tpscope (tensor split only)
  // TPSCOPE_ALLREDUCE under allreduce = "tpscope": host | p2p | nccl | auto.
  std::optional<std::string> tpscope_backend;
  std::optional<std::string> draft;      // speculative decoding: a draft GGUF, "self" (the model), or "none"
  std::optional<std::string> spec_type;  // --spec-type, e.g. "ngram-simple" or "draft-mtp"; "none": off
  std::optional<int> draft_max;          // tokens drafted per step, 1..16 (--spec-draft-n-max)
};

// What runs the arms: tpscope's synthetic transformer, llama.cpp's llama-server, or any program that
// marks its phases through the meter's control pipe.
enum class Engine { kSynthetic, kLlamaServer, kCommand };
const char* engineName(Engine e);  // "synthetic", "llama-server", "command"

struct EngineSettings {
  Engine engine = Engine::kSynthetic;
  std::string server;                // llama-server binary; "": $TPSCOPE_LLAMA_SERVER
  std::string model;                 // GGUF the server loads
  std::string flags;                 // the shared flag string, shell words, the same for every arm
  std::vector<std::string> command;  // engine "command": the program and its arguments
  int port = 0;                      // 0: a free port is picked per arm
  double start_timeout_s = 600;      // a server must be ready (model loaded) within this
  double request_timeout_s = 300;    // longest silence inside one request
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
  double meter_period_ms = 2;            // counter read period while a link moves
  double meter_idle_period_ms = 25;      // counter read period while a link is quiet (= meter_period_ms: fixed)
  int baseline_retries = 2;              // a repetition whose baseline fails is retried this often, then reported
  // Where the phases' figures come from (MeterOptions::sources, as meterSourcesText writes the list):
  // "nvml" (NVML's counters), "pm" (CUPTI's PM sampling: the GPU counts PCIe bytes itself per interval;
  // needs profiling rights), "both", or any list of registered sources. With PM the report also shows
  // one decode step record by record.
  std::string meter_source = "nvml";
  int pm_interval_us = 100;  // PM's sampling interval (MeterOptions::pm_interval_us), 10..1000000
  ArmDelta base;             // arm settings given once in [experiment], overridden per arm
  EngineSettings engine;
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
// name, duplicate arm names, a value of the wrong type or out of range, a key the engine does not
// take, and an experiment or arm name that could leave the run folder (a '/', "." or "..": names
// become file and folder names).
ExperimentSpec parseSpec(const std::string& text, const std::string& source = "<string>");
// Reads `path` and parses it; SpecError (line 0) when the file cannot be read. Resolves recorded_run,
// server, model, a draft file and a command's program given as relative paths against the spec's folder.
ExperimentSpec loadSpec(const std::string& path);
// parseSpec() of `text` as the file at `path` holds it, with loadSpec()'s paths resolved against that
// file's folder: how `tpscope arms --resume` reads the spec a run folder's manifest keeps verbatim.
ExperimentSpec parseSpecFile(const std::string& text, const std::string& path);

}  // namespace tpscope::experiment
