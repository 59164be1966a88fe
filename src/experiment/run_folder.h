// SPDX-License-Identifier: Apache-2.0
// run_folder.h - the run folder: everything `tpscope arms` measured, enough to re-render the report anywhere.
//
//   RUN_DIR/manifest.json   spec (verbatim TOML), effective settings per arm, versions, topology,
//                           start time, machine; "format": kRunFormat
//   RUN_DIR/results.jsonl   one line per repetition attempt: quiesce record, per phase tok/s, time per
//                           step, AllReduce calls and bytes per path (the library's accounting), meter
//                           windows per GPU (rx/tx bytes and MB/s, samples, the dmon figure), and for
//                           the synthetic engine's decode the last step's output
//   RUN_DIR/samples.jsonl   one line per counter read: arm, repetition, GPU, time, cumulative bytes
//   RUN_DIR/recording.txt   optional, only in a shipped recording (examples/recorded/): one line naming
//                           the machine and command it was made with. It lives beside the data so that
//                           a new recording replaces the three files above by a plain copy.
//
// Keys are snake_case with the unit in the key; a value the GPU could not give is null, never 0.
// Attempts whose baseline failed are recorded too (valid = false): none is silently dropped.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiment/guards.h"
#include "meter/meter.h"

namespace tpscope::experiment {

constexpr const char* kRunFormat = "tpscope-run/1";

// A value the GPU or the engine could not give, as the records write it: null, never 0.
template <typename T>
nlohmann::json jsonOrNull(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

struct Manifest {
  std::string format = kRunFormat;
  std::string spec_path;
  std::string spec_toml;            // verbatim
  std::string experiment;           // spec name
  std::vector<std::string> arms;    // in spec order
  std::vector<std::string> phases;  // in spec order
  std::vector<EffectiveSettings> effective;
  nlohmann::json versions = nlohmann::json::object();    // tpscope, git_sha, cuda, driver, nccl
  nlohmann::json topology = nlohmann::json::object();    // `tpscope topo --format json`
  nlohmann::json machine = nlohmann::json::object();     // hostname, os, cpu, gpus, description
  nlohmann::json invocation = nlohmann::json::object();  // argv, quick, arms: how the run was asked for
  std::string start_time;                                // ISO 8601 UTC
  // Non-empty for a shipped recording, printed as is: "Recorded run: 2026-11-29 on 2x NVIDIA H200 ...".
  std::string recording;
};

// One GPU in one phase window of one repetition.
struct GpuTraffic {
  int gpu = 0;                               // CUDA ordinal
  std::optional<double> rx_bytes, tx_bytes;  // PCIe, counter difference across the window, net of the meter
  // What the meter's own reads inside the window added (subtracted from rx/tx_bytes); nullopt when the
  // meter was not calibrated. rx_bytes + own_rx_bytes is the counter difference as counted.
  std::optional<double> own_rx_bytes, own_tx_bytes;
  std::optional<double> rx_mbps, tx_mbps;  // mean inside the window: bytes / duration
  std::optional<double> nvlink_rx_mbps, nvlink_tx_mbps;
  int samples = 0;                                   // PCIe reads inside the window
  std::optional<double> dmon_rx_mbps, dmon_tx_mbps;  // the dmon method, same window
  int dmon_samples = 0;
  std::optional<double> ceiling_mbps;  // PCIe per direction
};

// The library's accounting for one path in one phase (tpsCommGetPathStats over the window).
struct PathCalls {
  std::string path;  // tpsPathName: "host-kernel", "p2p-two-shot", ...
  uint64_t calls = 0;
  uint64_t payload_bytes = 0;
  std::vector<uint64_t> tx_bytes, rx_bytes;  // per GPU position
};

// One decode step's PCIe traffic record by record, as PM sampling saw it (meter source pm or both): the
// step in the middle of the decode window, so that the report can set the bursts on the bus beside the
// library's AllReduce calls. One step per phase keeps the record small (hundreds of records per GPU at
// 10 us for a step of a few ms).
struct PmStepSample {
  int64_t t_ns = 0;  // the record's start minus the step's start (the first one may start before it)
  double tx_bytes = 0, rx_bytes = 0;
};
struct PmStepGpu {
  int gpu = 0;                        // CUDA ordinal
  std::vector<PmStepSample> samples;  // every record overlapping the step, in time order
};
struct PmStep {
  int64_t interval_us = 0;                         // PM's sampling interval: every record lasts this long
  int64_t step = 0;                                // which step of the window, from 0
  int64_t start_ns = 0, end_ns = 0;                // the step: window start + step x (window length / steps)
  std::optional<double> allreduce_calls_per_step;  // the library's calls in the window / steps; nullopt: none made
  // The records cover the step on every GPU with no space between them; note says why not.
  bool complete = true;
  std::string note;
  std::vector<PmStepGpu> gpus;
};
// Records a step keeps per GPU; beyond them (a step of a second at 10 us) the rest is left out and the
// step marked incomplete.
constexpr size_t kPmStepMaxRecords = 20000;
// AllReduce paths one phase may list: the library has a dozen (tpsPathName), a run folder no more.
constexpr size_t kMaxRecordedPaths = 64;

struct PhaseResult {
  std::string phase;  // "prefill" | "decode"
  int64_t start_ns = 0, end_ns = 0;
  int64_t tokens = 0, steps = 0;
  double tok_s = 0;    // tokens / window duration (the client's clock)
  double step_ms = 0;  // window duration / steps
  // The engine's own figures (llama-server's timings), when it reports them: tokens/s, ms, raw.
  std::optional<double> engine_tok_s, engine_ms;
  nlohmann::json engine = nullptr;
  std::vector<PathCalls> allreduce;
  std::vector<GpuTraffic> gpus;
  std::optional<PmStep> pm_step;  // decode with PM sampling only
  // Decode with the synthetic engine: the final hidden state (after the final RMSNorm) of the last step's
  // last token, bfloat16 values as floats, so the report can set one arm's result against another's (a
  // compressed wire against the exact one). Recorded as "output_bf16", the values' bit patterns; empty
  // (and absent from the record) where the engine exposes none.
  std::vector<float> output;
  double seconds() const { return (end_ns - start_ns) * 1e-9; }
};

struct RepetitionResult {
  std::string arm;
  int repetition = 0;     // 0-based
  int attempt = 0;        // 0 first try; >0 retries after a failed baseline
  bool valid = true;      // false: baseline failed (quiesce.reason says why) or the run was disturbed; kept,
                          // not used in statistics
  std::string disturbed;  // why a repetition whose baseline passed is invalid (work that was not the rig's)
  QuiesceRecord quiesce;
  // The repetition's meter: {"options": ..., "calibration": ...} (src/meter/record.h's shapes), so the
  // bytes per read every window was made net with travel with the figures.
  nlohmann::json meter = nullptr;
  std::vector<int> devices;  // CUDA ordinals of quiesce.idle_mbps rows
  std::vector<PhaseResult> phases;
};

struct SampleRow {
  std::string arm;
  int repetition = 0;
  int gpu = 0;                                                                             // CUDA ordinal
  int64_t t_ns = 0;                                                                        // the read's midpoint
  std::optional<uint64_t> pcie_rx_bytes, pcie_tx_bytes, nvlink_rx_bytes, nvlink_tx_bytes;  // cumulative
  // When each value was read (MeterSample::t_ns, the times the windows prorate at); absent in runs
  // recorded before they were kept, where t_ns stands in.
  std::optional<int64_t> pcie_rx_t_ns, pcie_tx_t_ns, nvlink_rx_t_ns, nvlink_tx_t_ns;
};

struct RunRecord {
  Manifest manifest;
  std::vector<RepetitionResult> repetitions;
  std::vector<SampleRow> samples;
  // What the reader left out and why, one line each ("results.jsonl:9: the last line was cut off ...");
  // readers print them on stderr.
  std::vector<std::string> notes;
};

// The most bytes readRun() reads of each file of a run folder: far above what an hour's study writes
// (two GPUs' samples at a 2 ms period are about 1 GB per hour of phases), far below what would exhaust a machine's
// memory.
constexpr size_t kMaxManifestBytes = size_t{64} << 20;
constexpr size_t kMaxResultsBytes = size_t{1} << 30;
constexpr size_t kMaxSamplesBytes = size_t{4} << 30;
constexpr size_t kMaxRecordingBytes = size_t{64} << 10;

// A run folder that cannot be read: what() is one sentence naming the file (and line for JSONL).
struct RecordError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Now as ISO 8601 UTC ("2026-12-01T15:58:06Z"), the run folder's time stamps.
std::string isoTimeUtc();

nlohmann::json toJson(const Manifest& m);
nlohmann::json toJson(const RepetitionResult& r);
nlohmann::json toJson(const SampleRow& s);
Manifest manifestFromJson(const nlohmann::json& j);  // throws RecordError
RepetitionResult repetitionFromJson(const nlohmann::json& j);
SampleRow sampleFromJson(const nlohmann::json& j);

// Writes a run folder as the run goes: the manifest first, then one line per repetition and per sample,
// flushed as written so an interrupted run leaves everything measured so far.
class RunWriter {
 public:
  enum class Mode {
    kNew,       // a new run: `dir` must not hold one already (a manifest.json), it is created with parents
    kContinue,  // `tpscope arms --resume`: appends to the folder's files, first cutting a last line that
                // was left without its newline (the write that was interrupted)
  };
  // Writes manifest.json (replacing it whole for kContinue). Throws RecordError.
  RunWriter(const std::string& dir, const Manifest& manifest, Mode mode = Mode::kNew);
  void append(const RepetitionResult& r);
  void append(const std::vector<SampleRow>& samples);
  // Writes manifest.json again (the engines' own settings are known only once they started).
  void rewrite(const Manifest& manifest);

 private:
  std::string dir_;
  std::ofstream results_, samples_;
};

// Reads a run folder. Throws RecordError: a missing folder or manifest, a file that is not a regular
// file or is larger than its cap above, corrupt JSON (with the line; nested deeper than kMaxJsonDepth
// is corrupt too), an unknown format, an arm or phase listed twice, an attempt recorded twice. A last
// line of a JSONL file cut off without its newline (a run stopped while writing it) is left out with a
// note in RunRecord::notes. When the manifest has no `recording` and RUN_DIR/recording.txt exists, `recording`
// becomes "Recorded run: DATE on LINE" (DATE from start_time, LINE the file's first line).
RunRecord readRun(const std::string& dir);
// The files of a run folder as text, parsed as readRun() parses them (`dir` names them in messages):
// results, samples and recording are nullopt where the folder has no such file. Throws RecordError.
RunRecord parseRun(const std::string& dir, const std::string& manifest, const std::optional<std::string>& results,
                   const std::optional<std::string>& samples, const std::optional<std::string>& recording);

// Fills a phase's traffic from the meter's window for it: PCIe and NVLink cells per GPU.
// `devices` maps meter GPU positions to CUDA ordinals.
std::vector<GpuTraffic> trafficFromWindow(const MeterWindow& w, const std::vector<MeterGpu>& gpus);

// The bytes counter `c` counted on GPU `gpu` (CUDA ordinal) in [start_ns, end_ns] of one repetition
// (before the meter's own reads are subtracted), recomputed from the run's samples as the meter
// computed its windows; nullopt where the samples do not
// span the window. A run folder reproduces its own windows this way (tests check it does, exactly).
std::optional<double> windowBytesFromSamples(const RunRecord& run, const std::string& arm, int repetition, int gpu,
                                             MeterCounter c, int64_t start_ns, int64_t end_ns);

// The step in the middle of the window [start_ns, end_ns] cut into `steps` equal steps, with every PM
// record of `samples` (Meter::records(); positions mapped to CUDA ordinals through `gpus`) that
// overlaps it, and the library's calls per step from `allreduce`. nullopt when steps < 1 or the
// window is empty. Pure: the runner calls it for a decode phase when PM ran.
std::optional<PmStep> pmStepFromSamples(int64_t start_ns, int64_t end_ns, int64_t steps,
                                        const std::vector<PathCalls>& allreduce,
                                        const std::vector<MeterRecord>& samples, const std::vector<MeterGpu>& gpus,
                                        int64_t interval_us);

// The samples of one repetition as rows (PCIe reads only carry PCIe values, NVLink reads NVLink).
std::vector<SampleRow> rowsFromSamples(const std::string& arm, int repetition, const std::vector<MeterSample>& s,
                                       const std::vector<MeterGpu>& gpus);

}  // namespace tpscope::experiment
