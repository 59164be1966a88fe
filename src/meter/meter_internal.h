// SPDX-License-Identifier: Apache-2.0
// meter_internal.h - building a Meter from any SourceSet (the tests inject scripted sources).
#pragma once

#include "meter/meter.h"
#include "meter/source.h"

namespace tpscope::detail {

// The period used when neither MeterOptions::period_us nor TPSCOPE_METER_PERIOD_US is set.
// 2 ms: a PCIe read (2 fields) costs ~0.68 ms on H200 (meter_accuracy, driver 580), so the PCIe
// thread idles two thirds of the time and the 32-bit PCIe counters (wrap ~68 ms) are read 30x per
// wrap. NVLink reads cost ~22 ms (36 per-link fields at ~0.6 ms) and run back to back on their own
// thread: no period can make them faster. docs/METHOD.md has the measured cadence and overhead.
constexpr int64_t kDefaultPeriodUs = 2000;
// The period while a link is quiet, when the period is not fixed: a read adds ~15 KB rx and ~21 KB tx
// of PCIe traffic on H200, so 25 ms keeps the meter's own traffic under 1 MB/s per direction, and 25 ms at the
// Gen5 line rate (~1.6 GB) stays far from the 4.29 GB that would wrap a 32-bit counter unseen.
constexpr int64_t kDefaultIdlePeriodUs = 25000;
// One link (2 fields, ~1.2 ms) per NVML call: a PCIe read waits at most that long should NVML
// serialise calls to one device; the calls' own overhead is small (22 ms / 36 fields ~ 0.6 ms per
// field, against 0.68 ms for a whole 2-field PCIe call).
constexpr int kDefaultNvlinkLinksPerCall = 1;

// Fills in defaults and checks options; tpsInvalidArgument with *reason when one is out of range.
tpsResult_t resolveOptions(MeterOptions* options, std::string* reason);

// Starts a meter on `sources` (already opened for `options`).
tpsResult_t createMeter(const MeterOptions& options, SourceSet sources, std::unique_ptr<Meter>* out,
                        std::string* reason);

}  // namespace tpscope::detail
