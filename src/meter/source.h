// SPDX-License-Identifier: Apache-2.0
// source.h - where the meter's figures come from: sources behind one interface, over one platform.
//
// A platform is what the machine gives the meter: its GPUs with their link ceilings, and per GPU a
// reader of each kind of counter (nvml_platform.cc: NVML's counters and its dmon call, CUPTI's PM
// sampling; fake_platform.cc: the same three, scripted, for tests and CI). A source turns one kind of
// reading into figures (sources/, one file each: nvml_source.cc, dmon_source.cc, pm_source.cc). It
// samples on threads of its own from start() to stop(), keeps its series, and answers for any window
// and counter: the bytes it counted, the bounds they lie within, its samples, whether it covered the
// window and why not, and what its own reads added to the link. The window code (window.h) turns those
// answers into MB/s, net figures and shares of the ceiling once, for every source;
// sources/source_registry.cc lists them by name.
//
// Readers are called from their sampling threads only (a CounterReader from its GPU's two group
// threads, each group its own state), so they need no locking; read() must not allocate or print
// (it runs on the sampling path).
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meter/meter.h"
#include "meter/pm.h"

namespace tpscope::detail {

class Sampler;

inline int64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// ---- readers: what a platform gives per GPU ----------------------------------------------------

// One read of one counter group as the hardware returns it, before unwrapping. Plain data: it
// travels through the ring.
struct Reading {
  int64_t t_before_ns = 0, t_after_ns = 0;
  int64_t nvml_timestamp_us = 0;               // NVML's stamp of the first field; 0 when none
  std::array<uint64_t, kMeterCounters> raw{};  // PCIe as read (may wrap); NVLink in bytes
  std::array<int64_t, kMeterCounters> t_ns{};  // per-counter read time (monotonic)
  uint32_t valid = 0;                          // bit c: raw[c] is good in this read
  // Why a supported counter has no value in this read: the source's text for its first failed field
  // (a static string, e.g. nvmlErrorString's); nullptr when every supported counter was read.
  const char* error = nullptr;
};

// Cumulative counters of one GPU.
class CounterReader {
 public:
  virtual ~CounterReader() = default;
  // Counters this GPU supports (bit per MeterCounter); decided once, at creation.
  virtual uint32_t supported() const = 0;
  // Width in bits of counter c before unwrapping: 32 for PCIe on today's drivers, 64 for NVLink.
  virtual int widthBits(MeterCounter c) const = 0;
  // NVLink links whose counters a read sums (0: none).
  virtual int nvlinkLinks() const = 0;
  // Reads the supported counters of `group` (nothing else). Fills t_before/t_after and t_ns; sets
  // the `valid` bits of the values read. Returns false when nothing could be read. May run
  // concurrently for different groups, never for the same group.
  virtual bool read(MeterGroup group, Reading* out) = 0;
};

// The dmon method for one GPU: the 20 ms PCIe throughput snapshot. Blocks ~20 ms per call on real
// hardware, so it lives on its own thread, never on the counter path.
class DmonReader {
 public:
  virtual ~DmonReader() = default;
  // One call: t_before_ns and t_after_ns bracket it on the monotonic clock, whether it succeeds or
  // not (the dmon source keeps its readings in time order and finds a window's by bisection).
  virtual bool read(MeterCounter direction, MeterDmonSample* out) = 0;
};

// The meter's own NVML calls on each GPU, counted by kind, and what one call of each kind adds to the
// counters (MeterCalibration, measured once at start by the source that reads the cumulative counters,
// before any source samples). Every source whose calls cross the link (NVML reads, dmon calls) counts
// them here, so that each can be subtracted wherever it lands.
class CallLedger {
 public:
  explicit CallLedger(size_t gpus) : n_(gpus), counts_(new std::atomic<int64_t>[gpus * kMeterReadKinds + 1]()) {}
  void count(size_t gpu, MeterReadKind k) { slot(gpu, k).fetch_add(1, std::memory_order_relaxed); }
  int64_t calls(size_t gpu, MeterReadKind k) const {
    return gpu < n_ ? slot(gpu, k).load(std::memory_order_relaxed) : 0;
  }
  std::array<int64_t, kMeterReadKinds> calls(size_t gpu) const {
    return {calls(gpu, MeterReadKind::kPcie), calls(gpu, MeterReadKind::kNvlink), calls(gpu, MeterReadKind::kDmon)};
  }
  // Written once, at start, before any source samples; read-only after.
  MeterCalibration calibration;

 private:
  std::atomic<int64_t>& slot(size_t gpu, MeterReadKind k) const {
    return counts_[gpu * kMeterReadKinds + static_cast<int>(k)];
  }
  size_t n_;
  std::unique_ptr<std::atomic<int64_t>[]> counts_;
};

// The machine's GPUs and their readers: the hardware (nvml_platform.cc) or a script (fake_platform.cc).
// Each call makes a new reader; a source owns what it asked for.
class Platform {
 public:
  virtual ~Platform() = default;
  // The metered GPUs, in MeterOptions::devices order; `supported` all false until the sources say
  // what they measure.
  virtual const std::vector<MeterGpu>& gpus() const = 0;
  // Readers for GPU position k. nullptr with *reason (one sentence) when this platform cannot.
  virtual std::unique_ptr<CounterReader> counterReader(size_t k, std::string* reason) = 0;
  virtual std::unique_ptr<DmonReader> dmonReader(size_t k, std::string* reason) = 0;
  // A PM-sampling reader per GPU: tpsUnavailable with *reason when PM cannot run (no CUPTI, no
  // profiling rights, another profiler holds the device).
  virtual tpsResult_t pmReaders(std::vector<std::unique_ptr<PmReader>>* out, std::string* reason) = 0;
  // PIDs with a compute context on GPU position k; nullopt when the platform cannot say.
  virtual std::optional<std::vector<unsigned>> processes(size_t k) = 0;
  // The PCIe link of GPU position k as it trained now; all N/A when the platform cannot say.
  virtual MeterPcieLink pcieLink(size_t k) = 0;
};

// The real GPUs through NVML and CUDA (nvml_platform.cc). Errors as Meter::start documents them.
tpsResult_t openNvmlPlatform(const MeterOptions& options, std::unique_ptr<Platform>* out, std::string* reason);
// Every metric PM sampling offers on CUDA device `device` (first line: "# chip NAME, LIBRARY"); empty
// with *reason when CUPTI is unavailable (pm_cupti.cc).
std::vector<std::string> listCuptiPmMetrics(int device, std::string* reason);
// A CUPTI PM-sampling reader per GPU of `gpus` (pm_cupti.cc).
tpsResult_t openCuptiPmReaders(const MeterOptions& options, const std::vector<MeterGpu>& gpus,
                               std::vector<std::unique_ptr<PmReader>>* out, std::string* reason);
// Two scripted GPUs for tests and CI (fake_platform.cc), chosen by MeterOptions::fake_gpus.
tpsResult_t openFakePlatform(const MeterOptions& options, std::unique_ptr<Platform>* out, std::string* reason);

// ---- sources: readings into figures ------------------------------------------------------------

// One source's answer for one GPU, one counter, one window, as it counted (nothing subtracted yet).
struct SourceFigure {
  std::optional<double> bytes;      // counted across [start, end], the edges prorated; nullopt: N/A
  std::optional<double> low, high;  // bounds of the counted bytes (nullopt: the source has none)
  std::optional<double> mean_mbps;  // a source of rates, not bytes (dmon): the mean it read
  std::optional<double> peak_mbps;  // highest counted rate over any span >= peak_span_ms inside
  int samples = 0;                  // reads or records inside the window
  bool complete = true;             // the source covered the window on this GPU
  std::string why;                  // why not, in words ("a gap between PM records"); may be ""
};

// What a source's own reads added to one counter over a window: expected, least and most.
struct OwnBytes {
  double bytes = 0, low = 0, high = 0;
};

class Source {
 public:
  virtual ~Source() = default;
  virtual const char* name() const = 0;
  // Starts sampling. Sources start in registry order (sources/source_registry.cc says why that order).
  virtual tpsResult_t start(std::string* reason) = 0;
  // Takes one last read after the call began and stops; idempotent. Sources stop in reverse order.
  virtual void stop() = 0;
  // A window edge was just marked: read now, where the period adapts.
  virtual void wake() {}
  // Whether this source measures counter c on GPU position k.
  virtual bool measures(size_t k, MeterCounter c) const = 0;
  virtual SourceFigure figure(size_t k, MeterCounter c, int64_t start_ns, int64_t end_ns,
                              double peak_span_ms) const = 0;
  // What this source's own reads, calls or records added to counter c of GPU k in [start, end];
  // nullopt when not known (not calibrated, not measured): then nothing is subtracted for it.
  virtual std::optional<OwnBytes> own(size_t k, MeterCounter c, int64_t start_ns, int64_t end_ns) const = 0;
  // False for a source reported as read (dmon, like nvidia-smi): its figures are not made net.
  virtual bool net() const { return true; }
  // Has this source read every GPU at or after t (a window ending at t is then bracketed)?
  virtual bool readAfter(int64_t t_ns) const = 0;
  // Whether its figures can miss a window (not bracketed, a gap): then each window carries its verdict.
  // False for a source of rates, whose readings have no edge to miss (dmon).
  virtual bool canMiss() const { return true; }
  // Spaces between its reads inside [start, end] wide enough to hide traffic from it, over every GPU
  // (NVML: a 32-bit PCIe counter could wrap unseen at line rate); 0 where it has none.
  virtual int gapsIn(int64_t /*start_ns*/, int64_t /*end_ns*/) const { return 0; }
  // What it says of its run under a report; nullopt for a source with nothing to add.
  virtual std::optional<MeterSourceStatus> status() const { return std::nullopt; }
  // Its series, by shape (empty where the source has no series of that shape).
  virtual std::vector<MeterSample> samples() const { return {}; }       // cumulative reads (nvml)
  virtual std::vector<MeterDmonSample> readings() const { return {}; }  // rate readings (dmon)
  virtual std::vector<MeterRecord> records() const { return {}; }       // interval records (pm)
  // The sampler of a source that reads cumulative counters: live rows, cadence and calibration.
  virtual const Sampler* sampler() const { return nullptr; }
};

// What a source is opened with. gpus is the meter's list, in which a source marks the counters it
// measures (MeterGpu::supported) and what it learns of the links (nvlink_links).
struct SourceContext {
  const MeterOptions& options;
  Platform& platform;
  std::vector<MeterGpu>& gpus;
  CallLedger& ledger;
};

// One registered source: its name, one line for --help, and how it opens (nullptr with *reason and
// the tpsResult_t of Meter::start when it cannot run here).
struct SourceEntry {
  const char* name;
  const char* help;
  tpsResult_t (*open)(SourceContext& ctx, std::unique_ptr<Source>* out, std::string* reason);
};

// Every registered source, in the order they start (sources/source_registry.cc).
const std::vector<const SourceEntry*>& sourceRegistry();
const SourceEntry* findSource(const std::string& name);

}  // namespace tpscope::detail
