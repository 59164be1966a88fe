// SPDX-License-Identifier: Apache-2.0
// calibrate.h - what one read of the counters adds to the counters it reads (the observer effect).
//
// An NVML read travels over the GPU's own PCIe link, so every read the meter makes shows up in the
// PCIe counters it reports (tens of KB per read on H200: 10-14 MB/s at a 2 ms period on an idle
// GPU). The calibration measures it per GPU and kind of read, before the sampler threads start:
// rounds of a quiet interval without reads against a burst of back-to-back reads, each bracketed
// by the same reads, so that the brackets' own cost cancels. The burst's extra bytes over the
// quiet rate, divided by its reads, is the cost of one read; the rounds' median is the estimate and
// their lowest and highest the bound. A round whose quiet interval is busy (someone else moves
// data) is discarded; with fewer than kMinRounds left the GPU is not calibrated, and the meter
// says so instead of subtracting a guess.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "meter/meter.h"
#include "meter/source.h"

namespace tpscope::detail {

struct CalibrationPlan {
  int rounds = 5;
  int min_rounds = 3;
  int64_t quiet_ns = 60000000;  // < 67 ms: a 32-bit PCIe counter cannot wrap unseen within one interval
  int64_t burst_ns = 60000000;  // PCIe reads for this long, one every pcie_spacing_ns
  // How far apart the burst's PCIe reads start: the meter's own busy period. On H200 a read costs
  // less back to back (13.3 KB rx, 16.7 KB tx) than 2 ms apart (~15.6 KB rx, ~21 KB tx): the link
  // seems to pay for waking between spaced reads. So the calibration reads at the spacing it
  // corrects for (clamped to 0.35-5 ms so that a burst holds enough reads).
  int64_t pcie_spacing_ns = 2000000;
  int nvlink_reads = 2;    // NVLink reads per burst (each a slow one: docs/METHOD.md section 2)
  int dmon_calls = 2;      // dmon calls per burst (rx and tx, ~20 ms each)
  double busy_mbps = 100;  // a quiet interval faster than this on any counter is discarded
};

// Calibrates one GPU through its readers (dmon may be null). Blocks for the plan's rounds.
MeterGpuCalibration calibrateGpu(CounterReader& counters, DmonReader* dmon, const MeterGpu& info,
                                 const CalibrationPlan& plan);

// Every GPU in parallel (one thread each), through counters[k] and, where given, dmon[k] (empty: the
// dmon call is not measured). Sets calibrated and note.
MeterCalibration calibrateAll(std::vector<std::unique_ptr<CounterReader>>& counters,
                              std::vector<std::unique_ptr<DmonReader>>& dmon, const std::vector<MeterGpu>& gpus,
                              const CalibrationPlan& plan);

// The bytes counter c of a GPU gained from `reads` reads of kind k; nullopt when k's cost for c is
// unknown and reads > 0. which: 0 median, -1 lowest round, +1 highest round.
std::optional<double> ownBytes(const MeterGpuCalibration& g, MeterReadKind k, int c, int64_t reads, int which = 0);
// The same over every kind: reads[k] reads of kind k; nullopt when any kind read has no cost for c.
std::optional<double> ownBytes(const MeterGpuCalibration& g, int c, const std::array<int64_t, kMeterReadKinds>& reads,
                               int which = 0);

}  // namespace tpscope::detail
