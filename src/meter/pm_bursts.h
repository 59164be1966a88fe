// SPDX-License-Identifier: Apache-2.0
// pm_bursts.h - bursts in a run of PM-sampling records: what a record-by-record timeline shows as one
// AllReduce (or one copy) on the bus.
//
// A record is busy when its rate in the chosen direction (tx, rx, or the higher of the two) is above
// the threshold. A burst is a run of busy records; two busy records stay in one burst when the space
// from the end of the first to the start of the next is shorter than the minimum gap, so a dip of a
// record or two inside one call does not split it. The rule is scripts/plot_timeline.py's `--bursts`
// (its `bursts()`), record for record, so a count made here and one made from a timeline agree.
#pragma once

#include <cstdint>
#include <vector>

#include "meter/meter.h"

namespace tpscope::detail {

// Which direction decides whether a record is busy: MeterPmSample::bytes[0] (tx), [1] (rx), or either.
enum class PmDirection { kTx, kRx, kEither };
const char* pmDirectionName(PmDirection d);  // "tx", "rx", "either"

struct PmBurstRule {
  double threshold_mbps = 0;  // a record is busy above this rate (bytes / its length; MB = 10^6 B)
  double min_gap_us = 0;      // busy records closer than this belong to one burst
  PmDirection direction = PmDirection::kEither;
};

struct PmBurst {
  int64_t start_ns = 0, end_ns = 0;   // from the first busy record's start to the last one's end
  double tx_bytes = 0, rx_bytes = 0;  // the busy records' bytes (the dips merged across are not counted)
};

// The bursts of `records` (one GPU's, in time order) under `rule`. A record of zero length has no rate
// and is never busy. Pure: no clock, no state.
std::vector<PmBurst> pmBursts(const std::vector<MeterPmSample>& records, const PmBurstRule& rule);

}  // namespace tpscope::detail
