// SPDX-License-Identifier: Apache-2.0
// fake_platform.h - scripted GPUs for tests and CI: counters that grow at rates the test chooses, read
// by every source as the real GPUs would be (the platform of source.h).
//
// A script gives each counter a constant background rate plus bursts [from, to) at extra rates,
// relative to the moment the reader is created. PCIe values are returned modulo 2^32 from a start
// just below the wrap, so every test run crosses a wrap as real H200 counters do every ~70 ms.
//
// `tpscope` takes a script from a JSON file (TPSCOPE_METER_FAKE_SCRIPT, with TPSCOPE_METER_FAKE=1), so
// that a test outside the process knows the bytes to expect, across restarts of the meter too:
//   {"epoch_unix_s": 1764650000.0,          optional: bursts count from this wall-clock time (default:
//                                            the meter's start), so a restarted meter plays the same script
//    "gpus": [{"name": "Fake H200", "uuid": "GPU-...", "nvlink": true,
//              "background_bytes_per_s": {"pcie_rx": 1e6},      from the meter's start
//              "bursts": [{"counter": "pcie_rx", "from_s": 2, "to_s": 4, "bytes_per_s": 1e9}],
//              "pcie_link": {"gen_current": 4, "gen_max": 5, "width_current": 16, "width_max": 16}}]}
// Counter names are meterCounterName()'s.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "meter/source.h"

namespace tpscope::detail {

struct FakeBurst {
  double from_s = 0, to_s = 0;
  MeterCounter counter = MeterCounter::kPcieTx;
  double bytes_per_s = 0;
};

struct FakeGpuScript {
  std::string name = "Fake H200";
  uint32_t supported = 0x0f;  // PCIe and NVLink data; raw N/A
  std::array<double, kMeterCounters> background_bytes_per_s{};
  std::vector<FakeBurst> bursts;
  int64_t read_cost_ns = 200000;         // each PCIe read sleeps this long, like an NVML call
  int64_t nvlink_read_cost_ns = 200000;  // each NVLink read (far slower on real GPUs: docs/METHOD.md)
  int64_t dmon_window_ns = 20000000;     // the dmon call blocks this long and reports the mean over it
  // What each read adds to each counter of this GPU, as a real NVML read adds its own PCIe traffic
  // (by kind: a PCIe read, an NVLink read, a dmon call); counted right after the read's values.
  std::array<std::array<double, kMeterCounters>, kMeterReadKinds> bytes_per_read{};
  std::optional<double> pcie_ceiling_mbps = 63015.4, nvlink_ceiling_mbps = 478116;
  int nvlink_links = 18;
  std::vector<unsigned> pids;  // what the process check reports
  // PM sampling (the pm source): what the sampler itself adds per direction ([0] TX, [1] RX,
  // bytes/s), spans [from, to) in seconds where the hardware drops records (a gap), and the moment
  // its buffer overflows (the session ends); < 0: never.
  std::array<double, 2> pm_own_bytes_per_s{};
  std::vector<std::pair<double, double>> pm_gaps;
  double pm_overflow_at_s = -1;
  std::string uuid;  // empty: one made from the GPU's position
  MeterPcieLink pcie_link{5, 5, 16, 16};
};

// The GPUs of a JSON script (the form above), bursts shifted from its epoch to `now_unix_s`, the moment
// the sources are made. tpsInvalidArgument with a one-sentence *reason for a script that does not parse.
tpsResult_t parseFakeScript(const std::string& text, double now_unix_s, std::vector<FakeGpuScript>* out,
                            std::string* reason);

// Cumulative bytes of counter c after `t_s` seconds of the script (exact integral).
double fakeCumulative(const FakeGpuScript& s, MeterCounter c, double t_s);

// A platform from scripts; time 0 of every script is the call to this function. Its PM readers' records
// last pm_interval_us, on a clock kFakePmClockOffsetNs ahead of the monotonic one. The readers of one
// GPU share what each read adds (FakeGpuScript::bytes_per_read), as one real GPU's do.
std::unique_ptr<Platform> makeFakePlatform(const std::vector<FakeGpuScript>& scripts, int64_t pm_interval_us = 100);
constexpr int64_t kFakePmClockOffsetNs = 1700000000LL * 1000000000LL;

}  // namespace tpscope::detail
