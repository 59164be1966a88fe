// SPDX-License-Identifier: Apache-2.0
// meter.h - the interconnect meter: exact PCIe and NVLink bytes per named window (C++ API).
//
// A Meter runs one or more sources over the GPUs (MeterOptions::sources): by default NVML's cumulative
// byte counters (PCIe TX/RX, NVLink data TX/RX summed over the links that are up), read in two groups
// by a thread per GPU each: PCIe every period, NVLink back to back (docs/METHOD.md gives what a read
// costs), so the PCIe cadence does not depend on the NVLink read cost. Beside it, or instead, the
// "dmon method" (the 20 ms throughput snapshot `nvidia-smi dmon -s t` prints) and CUPTI's PM sampling
// (the GPU counts PCIe bytes per interval itself). It turns what they read into bytes, mean rate and
// share of the link ceiling for windows the caller marks by name. docs/METHOD.md says how the numbers
// are made and how far to trust them.
//
// Conventions:
//  - Time is CLOCK_MONOTONIC in nanoseconds (Meter::now()); every window edge and sample uses it.
//  - Bytes are link bytes as the GPU counts them: PCIe includes packet headers (8-17% over the
//    payload on H200), NVLink "data" excludes protocol, "raw" includes it. MB = 10^6 bytes.
//  - TX and RX are from the GPU's point of view: a D2H copy is PCIe TX of that GPU.
//  - A value the GPU cannot give is std::nullopt (N/A, JSON null), never 0.
//  - Thread safety: begin/end/addWindow/windows/samples may be called from any thread, concurrently.
//    start/stop/quiesce from one controlling thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope {

enum class MeterCounter : int { kPcieTx = 0, kPcieRx, kNvlinkTx, kNvlinkRx, kNvlinkRawTx, kNvlinkRawRx };
constexpr int kMeterCounters = 6;
// "pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx", "nvlink_raw_tx", "nvlink_raw_rx".
const char* meterCounterName(MeterCounter c);
inline bool isPcie(MeterCounter c) { return c == MeterCounter::kPcieTx || c == MeterCounter::kPcieRx; }

// The counters a sampler thread reads together, in one pass of NVML calls.
enum class MeterGroup : int { kPcie = 0, kNvlink };
constexpr int kMeterGroups = 2;
inline MeterGroup groupOf(MeterCounter c) { return isPcie(c) ? MeterGroup::kPcie : MeterGroup::kNvlink; }
// Bit c set for every counter c of group g.
inline uint32_t groupMask(MeterGroup g) { return g == MeterGroup::kPcie ? 0x03u : 0x3cu; }
const char* meterGroupName(MeterGroup g);  // "pcie", "nvlink"

// Where the figures come from: sources by name, one file each in src/meter/sources/: "nvml" (NVML's
// cumulative PCIe and NVLink counters, read every period), "dmon" (the ~20 ms PCIe throughput snapshot
// `nvidia-smi dmon -s t` prints), "pm" (CUPTI's PM sampling: the GPU counts PCIe bytes itself per
// interval, 10 us - 1 ms, on its own clock; PCIe only). Every source asked for runs on the same GPUs
// and windows; a window's cells carry the first one's figures and the others' beside them.
std::vector<std::string> meterSourceNames();  // every registered source, in the order they start
// "nvml", "pm", "nvml,dmon", "both" (= "nvml,pm"): the sources in order. nullopt with *error (one
// sentence naming the registered sources) for an unknown or repeated name.
std::optional<std::vector<std::string>> parseMeterSources(const std::string& text, std::string* error);
// The list as records and settings write it: "both" for nvml,pm, else the names joined by ','.
std::string meterSourcesText(const std::vector<std::string>& sources);

struct MeterOptions {
  std::vector<int> devices;  // CUDA ordinals; empty: every GPU
  // Period between reads of one GPU's counter group while its counters move (the busy period).
  // 0: TPSCOPE_METER_PERIOD_US (a fixed period), else the built-in default (2 ms; docs/METHOD.md says
  // why). A read that takes longer than the period stretches it: NVLink reads (one field per link, far
  // slower than a PCIe read: docs/METHOD.md section 2) then run back to back, on their own thread.
  int64_t period_us = 0;  // 100..50000: longer and a 32-bit PCIe counter could wrap unseen
  // Period while the GPU's link is quiet (net of the meter's own reads, below busy_mbps): every read
  // adds traffic of its own to the link it measures, so a quiet link is read seldom. 0: 25 ms when
  // period_us is the default, else period_us (a fixed period). At most 50 ms, so that a 32-bit PCIe
  // counter cannot wrap unseen between two reads even if the link jumps to its line rate; NVLink
  // counters (64-bit) are read 4x less often than this while quiet. With a period that adapts, the
  // meter also reads right after every begin() and end(), so that window edges stay sharp.
  int64_t idle_period_us = 0;
  double busy_mbps = 100;  // a link moving more than this (any counter, net of the meter) is read every period_us
  // Learn what one read adds to each counter before sampling (MeterCalibration), so that windows are
  // reported net of the meter's own traffic. About 0.5 s with PCIe only, ~1.5 s with NVLink and dmon.
  bool calibrate = true;
  bool nvlink = true;       // read NVLink data TX/RX (one field per link)
  bool nvlink_raw = false;  // also read the raw NVLink counters (data + protocol)
  // NVLink links per NVML call within one NVLink read. -1: TPSCOPE_METER_NVLINK_LINKS_PER_CALL, else
  // 1. 0: every link in one call. Short calls bound how long one call can hold the driver, in case
  // NVML serialises calls to a device and a PCIe read would wait behind a whole NVLink read.
  int nvlink_links_per_call = -1;
  // The sources to run, by name (meterSourceNames()); the first one's figures fill the cells.
  std::vector<std::string> sources = {"nvml"};
  bool runs(std::string_view source) const {
    for (const std::string& s : sources)
      if (s == source) return true;
    return false;
  }
  // PM sampling: the GPU's sampling interval (10..1000000 us; 100 us: edges within ~5 us and the
  // sampler's own traffic ~0.3 / 1.4 MB/s on H200, docs/METHOD.md), how often the records are
  // decoded off the hardware buffer, and how long the sampler's own traffic is measured at start.
  int64_t pm_interval_us = 100;
  int64_t pm_decode_ms = 50;
  int64_t pm_calibrate_ms = 500;
  int64_t dmon_period_ms = 1000;  // the dmon method's cadence (nvidia-smi dmon's default is 1 s)
  double peak_span_ms = 10;       // sub-window length for the peak rate
  // Keep samples for windows only this long (seconds, 0: all of them). A meter that runs for days
  // (`tpscope meter --serve`) keeps its memory bounded this way; windows, samples() and cadence()
  // then see only the recent past, while latest(), reads() and ownBytesSoFar() stay exact.
  double history_s = 0;
  // Two scripted GPUs with steady traffic instead of the hardware (tests and CI; `tpscope` sets it
  // under TPSCOPE_METER_FAKE=1).
  bool fake_gpus = false;
  // With fake_gpus: a JSON script of the GPUs' traffic (src/meter/fake_platform.h says its form)
  // instead of the steady default; `tpscope` reads it from TPSCOPE_METER_FAKE_SCRIPT.
  std::string fake_script;
};

// A GPU's PCIe link as it trained: generation and width now and at most (N/A where NVML cannot say).
// A link below its maximum (a card in a narrower slot, a riser, power saving on an idle link) caps
// what the PCIe counters can show.
struct MeterPcieLink {
  std::optional<int> gen_current, gen_max, width_current, width_max;
  // True when the generation or the width is known to be below its maximum.
  bool belowMax() const {
    return (gen_current && gen_max && *gen_current < *gen_max) ||
           (width_current && width_max && *width_current < *width_max);
  }
};

// One GPU as the meter sees it.
struct MeterGpu {
  int index = 0;  // CUDA ordinal
  std::string name, bus_id;
  std::string uuid;                              // "GPU-8c1b..." as nvidia-smi prints it; empty when unknown
  std::array<bool, kMeterCounters> supported{};  // counter read on this GPU; false: N/A
  int nvlink_links = 0;                          // links whose counters are summed
  std::optional<double> pcie_ceiling_mbps;       // per direction
  std::optional<double> nvlink_ceiling_mbps;     // per direction
  std::optional<double> ceilingMBps(MeterCounter c) const {
    return isPcie(c) ? pcie_ceiling_mbps : nvlink_ceiling_mbps;
  }
};

// One read of one counter group of one GPU. A GPU's samples interleave its groups' reads, so a
// sample has values for its own group's counters only.
struct MeterSample {
  int gpu = 0;                              // position in Meter::gpus()
  MeterGroup group = MeterGroup::kPcie;     // the counters this read covered
  int64_t t_before_ns = 0, t_after_ns = 0;  // the clock just before and after the read
  int64_t nvml_timestamp_us = 0;            // NVML's own stamp of the first field (wall clock); 0: none
  // Cumulative bytes since the meter's first read, unwrapped; nullopt when unsupported, not in this
  // read's group, or the read failed.
  std::array<std::optional<uint64_t>, kMeterCounters> bytes{};
  // When each value was read, in the monotonic clock: NVML's per-field stamp mapped into
  // [t_before, t_after] (fields are read one after another within a call), else the midpoint. For a
  // counter without a value here: the time of its latest earlier value (0 before the first), so
  // that t_ns[c] never decreases along a GPU's samples, whichever group they come from.
  std::array<int64_t, kMeterCounters> t_ns{};
};

// One interval record of a source that counts per interval (PM sampling): the bytes one GPU's PCIe
// link carried in [t_start, t_end], in the meter's monotonic clock (mapped once from the GPU's clock
// at start).
struct MeterRecord {
  int gpu = 0;
  int64_t t_start_ns = 0, t_end_ns = 0;
  std::array<double, 2> bytes{};  // [0] PCIe TX (the GPU sends), [1] PCIe RX (it receives)
};

// One reading of the dmon method: PCIe throughput over the driver's ~20 ms window.
struct MeterDmonSample {
  int gpu = 0;
  MeterCounter counter = MeterCounter::kPcieTx;  // kPcieTx or kPcieRx
  int64_t t_before_ns = 0, t_after_ns = 0;
  std::optional<double> mbps;
};

// One source's figures for one GPU, one counter, one window. Net of the meter's own traffic (every
// source's reads, calls and records that the sources measured): bytes = counted_bytes - own_bytes.
struct MeterFigure {
  std::optional<double> bytes;          // counter difference across the window, edge intervals prorated, net
  std::optional<double> counted_bytes;  // the counter difference as the GPU counted it (gross)
  // What the meter's own traffic inside the window added (NVML: reads x calibrated bytes per read; PM:
  // its sampler's rate measured at start x the window's length); nullopt when no source measured its
  // own, and then bytes = counted_bytes.
  std::optional<double> own_bytes;
  // Bounds the true (net) bytes must lie within: reads strictly inside the window (low) and the reads
  // bracketing it (high), less the most and least the meter's own traffic can have added (the
  // calibration's spread). Their gap is the edge error; it shrinks when the edges fall in idle time.
  std::optional<double> bytes_low, bytes_high;
  std::optional<double> mean_mbps;         // bytes / duration (a source of rates: the mean it read)
  std::optional<double> peak_mbps;         // highest counted rate over any span >= peak_span_ms inside
  std::optional<double> share_of_ceiling;  // mean_mbps / ceiling (0.5 = half the link per direction)
  int samples = 0;                         // reads or records inside [start, end]
};

// One GPU, one counter, one window: the first source's figures, and every other source's beside them.
struct MeterCell : MeterFigure {
  struct Beside {
    std::string source;
    MeterFigure figure;
    std::optional<double> ratio;  // figure.bytes / the first source's bytes; nullopt where either has none
  };
  std::vector<Beside> beside;  // in source order
  const Beside* from(const std::string& source) const {
    for (const Beside& b : beside)
      if (b.source == source) return &b;
    return nullptr;
  }
};

// One source's word on one window, over every GPU.
struct MeterVerdict {
  std::string source;
  bool complete = true;  // its figures cover the window on every GPU
  std::string why;       // why not ("GPU 1: a gap between PM records"); "" where no read after the end is why
  int gaps = 0;          // spaces between its reads inside the window wide enough to hide traffic from it
                         // (NVML: a 32-bit PCIe counter could wrap unseen at the link's line rate)
};

struct MeterWindow {
  std::string name;
  int repetition = 0;  // 0 for the first window of this name, 1 for the next, ...
  int64_t start_ns = 0, end_ns = 0;
  // The first source covered the window on every GPU (NVML: every counter has a value read after
  // end_ns, true after stop()).
  bool complete = false;
  std::vector<MeterVerdict> verdicts;                        // each source's that can miss one, in source order
  std::vector<std::array<MeterCell, kMeterCounters>> cells;  // [gpu position][counter]
  const MeterVerdict* verdict(const std::string& source) const {
    for (const MeterVerdict& v : verdicts)
      if (v.source == source) return &v;
    return nullptr;
  }
};

// What a source says of its run, for the lines under a report (PM sampling: its records, the gaps in
// them and its own traffic, measured at start and subtracted).
struct MeterSourceStatus {
  std::string source;
  std::string how;                   // one line: how it sampled
  int64_t records = 0, dropped = 0;  // records kept; dropped (PM: the session's first, which predates it)
  int64_t gaps = 0;                  // spaces in its series
  std::string ended;                 // why it stopped early; "" when it did not
  // Its own traffic per GPU position and counter, MB/s, as subtracted; nullopt where not measured.
  std::vector<std::array<std::optional<double>, kMeterCounters>> own_mbps;
};

// What the meter's own reads cost the links they measure. An NVML counter read travels over the GPU's
// PCIe link (a few tens of KB on H200), so a meter that reads often reports its own traffic. Measured
// at start, per GPU: a quiet interval without reads against an equally long burst of reads,
// alternated; the difference over the burst's reads is the cost of one read, per counter.
enum class MeterReadKind : int { kPcie = 0, kNvlink, kDmon };  // a PCIe read, an NVLink read, a dmon call
constexpr int kMeterReadKinds = 3;
const char* meterReadKindName(MeterReadKind k);  // "pcie_read", "nvlink_read", "dmon_call"

struct MeterReadCost {
  int reads = 0;  // reads of this kind the calibration made (0: not measured, e.g. no NVLink)
  // Bytes one read adds to counter c of its GPU: median over the rounds, and the lowest and highest round.
  std::array<std::optional<double>, kMeterCounters> bytes{}, low{}, high{};
};

struct MeterGpuCalibration {
  std::array<MeterReadCost, kMeterReadKinds> cost{};  // [MeterReadKind]
  // The link's own traffic without reads while calibrating (median of the quiet intervals), MB/s.
  std::array<std::optional<double>, kMeterCounters> quiet_mbps{};
  int rounds = 0;  // rounds used (a round whose quiet interval was busy is discarded)
};

struct MeterCalibration {
  bool calibrated = false;  // false: not asked for, or the GPUs were too busy to measure; note says which
  std::string note;
  int64_t start_ns = 0, end_ns = 0;
  std::vector<MeterGpuCalibration> gpus;  // [gpu position]
};

// The median of repetitions with min and max: how results across repetitions are reported.
struct MeterSpread {
  double median = 0, min = 0, max = 0;
  int n = 0;
};
// Over the values that are present; nullopt when none is.
std::optional<MeterSpread> meterSpread(const std::vector<std::optional<double>>& values);

struct QuiesceOptions {
  int64_t idle_ms = 8000;          // how long the GPUs must stay idle
  double threshold_mbps = 100;     // highest mean rate any counter of any GPU may show meanwhile
  bool check_processes = true;     // fail when another process has a compute context on a GPU
  std::vector<unsigned> own_pids;  // processes of the measurement (a server under test); this one always counts
};

// The record of one quiescing attempt; part of any result measured after it.
struct QuiesceRecord {
  bool passed = false;
  int64_t start_ns = 0, end_ns = 0;
  double threshold_mbps = 0;
  std::vector<std::array<std::optional<double>, kMeterCounters>> idle_mbps;  // [gpu position][counter]
  std::vector<unsigned> other_pids;  // processes other than this one on the metered GPUs
  bool processes_checked = false;    // false when NVML could not list them
  std::string reason;                // why it failed; empty when passed
};

// How one sampler thread (one GPU, one counter group) kept up.
struct MeterCadence {
  int gpu = 0;
  MeterGroup group = MeterGroup::kPcie;
  int64_t reads = 0;
  double period_target_ms = 0;  // the configured (busy) period; a group whose read is slower runs back to back
  double idle_period_ms = 0;    // the period while the link is quiet (= period_target_ms when fixed)
  int64_t edge_reads = 0;       // reads made at once because a window opened or closed
  // What this group's reads added to each counter of the GPU over the run, MB/s (calibrated cost x
  // reads / time); nullopt when not calibrated.
  std::array<std::optional<double>, kMeterCounters> own_mbps{};
  double period_mean_ms = 0, period_p50_ms = 0, period_p99_ms = 0, period_max_ms = 0;
  double read_cost_mean_ms = 0, read_cost_p99_ms = 0;  // t_after - t_before
  int64_t dropped = 0;                                 // reads lost because the ring was full (should be 0)
  int64_t wrap_gaps = 0;     // PCIe: gaps long enough for a 32-bit counter to wrap unseen (always 0 for NVLink)
  int64_t failed_reads = 0;  // reads that returned no value for a counter the GPU supports
  std::string last_error;    // the source's reason for the latest failed read ("" when none failed)
};

class Meter {
 public:
  // Starts sampling on options.devices. Errors, with *reason set to one sentence:
  // tpsInvalidArgument (a GPU index that does not exist, bad options), tpsUnavailable (no GPU, no
  // driver, NVML missing), tpsSystemError (a thread could not start). A GPU that answers none of
  // the counters is metered anyway, all N/A, with a warning. options.fake_gpus replaces the hardware
  // with two scripted GPUs (tests, CI).
  static tpsResult_t start(const MeterOptions& options, std::unique_ptr<Meter>* out, std::string* reason);
  ~Meter();  // stops
  Meter(const Meter&) = delete;
  Meter& operator=(const Meter&) = delete;

  // The meter's clock: CLOCK_MONOTONIC in nanoseconds.
  static int64_t now();

  // Opens the window `name` now. tpsInvalidUsage when a window of that name is already open or the
  // meter is stopped; tpsInvalidArgument for an empty name. Repeating a name after end() is a new
  // repetition of it.
  tpsResult_t begin(const std::string& name);
  // Closes the open window `name` now. tpsInvalidUsage when none of that name is open.
  tpsResult_t end(const std::string& name);
  // Asks every sampler for a read now, when the period adapts (begin() and end() do it themselves): a
  // caller that keeps its own window book calls it at each edge it marks, so the edge is read at once.
  void readNow();
  // A window from the caller's own readings of now(). tpsInvalidArgument when end_ns < start_ns.
  tpsResult_t addWindow(const std::string& name, int64_t start_ns, int64_t end_ns);

  // Waits opts.idle_ms while sampling and checks the GPUs were idle and unshared (see QuiesceOptions).
  // The idle rates are the first source's figures (with pm alone: PM's PCIe figures, NVLink N/A).
  // Returns tpsSuccess whether or not it passed: the verdict is in *out; tpsInvalidUsage after stop().
  tpsResult_t quiesce(const QuiesceOptions& opts, QuiesceRecord* out);

  // Takes one last read of every GPU, stops the threads. Windows still open are closed at the stop.
  void stop();

  const std::vector<MeterGpu>& gpus() const;
  const MeterOptions& options() const;  // with defaults filled in
  // Windows in the order they closed, computed from the samples so far.
  std::vector<MeterWindow> windows() const;
  // Every GPU's cumulative reads (the nvml source's), GPU by GPU, each GPU's in the order they were
  // collected: per counter, in time order (t_ns); the two groups' reads interleave.
  std::vector<MeterSample> samples() const;
  // The readings of the source of rates (dmon), in the order they were made; empty without one.
  std::vector<MeterDmonSample> dmonSamples() const;
  // The interval records of the first source that counts per interval (pm), GPU by GPU, in time
  // order; empty without one.
  std::vector<MeterRecord> records() const;
  // What each source says of its run (records kept, gaps, its own traffic), in source order.
  std::vector<MeterSourceStatus> sourceStatus() const;
  // The newest value of every counter of GPU position `gpu`, each with its own t_ns (the groups are
  // read at different cadences); t_before/t_after/group are those of the newest read. nullopt
  // before the first read.
  std::optional<MeterSample> latest(int gpu) const;
  // The newest read of `group` on GPU position `gpu` that gave every supported counter of the group
  // a value: its row, with the read's bracket [t_before, t_after]. A caller that needs the counters
  // read entirely after some moment (a window edge in idle time) checks t_before_ns against it.
  std::optional<MeterSample> latestRead(int gpu, MeterGroup group) const;
  std::optional<MeterDmonSample> latestDmon(int gpu, MeterCounter counter) const;
  std::vector<MeterCadence> cadence() const;    // per GPU and counter group read
  const MeterCalibration& calibration() const;  // what one read costs (measured at start)
  // The meter's own traffic per GPU position and counter over the span of its counter reads so far,
  // MB/s (every source's reads, calls and records); nullopt where no source measured its own.
  std::vector<std::array<std::optional<double>, kMeterCounters>> ownMBps() const;
  // What the meter's own traffic on GPU position `gpu` in (start_ns, end_ns] added to counter c, in
  // bytes (every source's; reads by their midpoint); nullopt when no source measured its own. A live
  // rate between two reads subtracts it.
  std::optional<double> ownBytes(int gpu, MeterCounter c, int64_t start_ns, int64_t end_ns) const;
  std::vector<QuiesceRecord> quiesceRecords() const;  // every quiesce() so far, in order
  // Reads of kind k made so far on GPU position `gpu` (dmon: calls), calibration excluded.
  int64_t reads(int gpu, MeterReadKind k) const;
  // What every read so far on GPU position `gpu` added to counter c (reads x calibrated cost per
  // read, a cost below zero counted as zero so that the total never decreases); nullopt when not
  // calibrated. Exact over any history_s: it comes from the read counts, not the samples.
  std::optional<double> ownBytesSoFar(int gpu, MeterCounter c) const;
  // The PCIe link of GPU position `gpu` now: asks the driver (a few microseconds), so call it seldom.
  MeterPcieLink pcieLink(int gpu) const;

  struct Impl;  // src/meter/meter_impl.cc

 private:
  explicit Meter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend struct MeterFactory;
};

}  // namespace tpscope
