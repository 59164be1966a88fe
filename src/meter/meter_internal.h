// SPDX-License-Identifier: Apache-2.0
// meter_internal.h - building a Meter on any platform (the tests inject scripted GPUs).
#pragma once

#include "meter/meter.h"
#include "meter/source.h"

namespace tpscope::detail {

// The period used when neither MeterOptions::period_us nor TPSCOPE_METER_PERIOD_US is set.
// 2 ms: the PCIe thread then idles most of the time (docs/METHOD.md section 2 gives what a read
// costs, "Why 2 ms" why this period) and the 32-bit PCIe counters (wrap ~68 ms at Gen5's line rate)
// are read 30x per wrap. NVLink reads (one field per link) run back to back on their own thread: no
// period can make them faster.
constexpr int64_t kDefaultPeriodUs = 2000;
// The period while a link is quiet, when the period is not fixed: a read adds ~15 KB rx and ~21 KB tx
// of PCIe traffic on H200, so 25 ms keeps the meter's own traffic under 1 MB/s per direction, and 25 ms at the
// Gen5 line rate (~1.6 GB) stays far from the 4.29 GB that would wrap a 32-bit counter unseen.
constexpr int64_t kDefaultIdlePeriodUs = 25000;
// One link (2 fields) per NVML call: a PCIe read waits at most that long should NVML serialise calls to
// one device, not a whole NVLink read; the calls' own overhead is small (docs/METHOD.md section 2).
constexpr int kDefaultNvlinkLinksPerCall = 1;

// Fills in defaults and checks options; tpsInvalidArgument with *reason when one is out of range.
tpsResult_t resolveOptions(MeterOptions* options, std::string* reason);

// Opens the sources options.sources names on `platform` and starts them (options already resolved).
tpsResult_t createMeter(const MeterOptions& options, std::unique_ptr<Platform> platform, std::unique_ptr<Meter>* out,
                        std::string* reason);

}  // namespace tpscope::detail
