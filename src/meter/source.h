// SPDX-License-Identifier: Apache-2.0
// source.h - where counter values come from: one reader per GPU, behind a small interface.
//
// Readers: NVML field values (nvml_source.cc), the dmon method (dmon_source.cc), and scripted fakes
// for tests (fake_source.cc). A CounterReader is called from its GPU's two sampler threads, one per
// counter group, each with its own state, so it needs no locking; read() must not allocate or print
// (it runs on the sampling path).
#pragma once

#include <time.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meter/meter.h"
#include "meter/pm.h"

namespace tpscope::detail {

inline int64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

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
  virtual bool read(MeterCounter direction, MeterDmonSample* out) = 0;
};

// What a platform gives the meter: GPUs with ceilings, and a reader per GPU.
struct SourceSet {
  std::vector<MeterGpu> gpus;
  std::vector<std::unique_ptr<CounterReader>> counters;  // empty when the method is dmon only
  std::vector<std::unique_ptr<DmonReader>> dmon;         // empty when the method is counters only
  std::vector<std::unique_ptr<PmReader>> pm;             // per GPU with source pm/both; else empty
  // PIDs with a compute context on GPU position `gpu`; nullopt when the platform cannot say.
  std::function<std::optional<std::vector<unsigned>>(int gpu)> processes;
  // The PCIe link of GPU position `gpu` as it trained now; all N/A when the platform cannot say.
  std::function<MeterPcieLink(int gpu)> pcie_link;
};

// The real GPUs through NVML (nvml_source.cc). Errors as Meter::start documents them.
tpsResult_t openNvmlSources(const MeterOptions& options, SourceSet* out, std::string* reason);
// A CUPTI PM-sampling reader per GPU of `gpus` (pm_cupti.cc): tpsUnavailable with *reason when
// CUPTI is missing, lacks rights, or another profiler holds the device.
tpsResult_t openCuptiPmReaders(const MeterOptions& options, const std::vector<MeterGpu>& gpus,
                               std::vector<std::unique_ptr<PmReader>>* out, std::string* reason);
// Every metric PM sampling offers on CUDA device `device` (first line: "# chip NAME, LIBRARY"); empty
// with *reason when CUPTI is unavailable.
std::vector<std::string> listCuptiPmMetrics(int device, std::string* reason);
// Two scripted GPUs for tests and CI (fake_source.cc), chosen by MeterOptions::fake_gpus.
tpsResult_t openFakeSources(const MeterOptions& options, SourceSet* out, std::string* reason);

}  // namespace tpscope::detail
