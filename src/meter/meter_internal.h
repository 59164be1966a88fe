// SPDX-License-Identifier: Apache-2.0
// meter_internal.h - building a Meter from any SourceSet (the tests inject scripted sources).
#pragma once

#include "meter/source.h"
#include "tpscope/meter.h"

namespace tpscope::detail {

// The period used when neither MeterOptions::period_us nor TPSCOPE_METER_PERIOD_US is set.
// 2 ms: one H200 read of PCIe + 18 links' NVLink fields costs ~1.4 ms (H200-FACTS.md), so 2 ms
// leaves the thread idle a quarter of the time, and the 32-bit PCIe counters (wrap ~68 ms) are
// read 30x per wrap. docs/METHOD.md has the measured cadence and overhead.
constexpr int64_t kDefaultPeriodUs = 2000;

// Fills in defaults and checks options; tpsInvalidArgument with *reason when one is out of range.
tpsResult_t resolveOptions(MeterOptions* options, std::string* reason);

// Starts a meter on `sources` (already opened for `options`).
tpsResult_t createMeter(const MeterOptions& options, SourceSet sources, std::unique_ptr<Meter>* out,
                        std::string* reason);

}  // namespace tpscope::detail
