// SPDX-License-Identifier: Apache-2.0
// pm_bursts.h - bursts in a run of PM-sampling records (what a record-by-record timeline shows as one
// AllReduce, or one copy, on the bus), and the figures of one step of a window.
//
// A record is busy when its rate in the chosen direction (tx, rx, or the higher of the two) is above
// the threshold. A burst is a run of busy records; two busy records stay in one burst when the space
// from the end of the first to the start of the next is shorter than the minimum gap, so a dip of a
// record or two inside one call does not split it. This is the one home of the rule: `tpscope meter
// --timeline` writes each record's burst as decided here, the run report counts a decode step's bursts
// here, and scripts/plot_timeline.py draws and counts what the timeline says.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meter/meter.h"
#include "meter/pm.h"

namespace tpscope::detail {

// Which direction decides whether a record is busy: MeterRecord::bytes[0] (tx), [1] (rx), or either.
enum class PmDirection { kTx, kRx, kEither };
const char* pmDirectionName(PmDirection d);  // "tx", "rx", "either"

struct PmBurstRule {
  double threshold_mbps = 0;  // a record is busy above this rate (bytes / its length; MB = 10^6 B)
  double min_gap_us = 0;      // busy records closer than this belong to one burst
  PmDirection direction = PmDirection::kEither;
};

// The rule a decode step's bursts are counted with, in the run report and by default in a timeline: on
// tx, above 1024 MB/s, merged across dips shorter than 25 us; the rule docs/METHOD.md (section 6b)
// counts the host backend's calls with at 10 us. On tx because the host backend's waiting ranks poll
// their peers' flags in pinned host memory, several GB/s of rx that never pause, so rx shows one
// endless burst; 1024 MB/s lies far above the sampler's own and an idle link's few MB/s and below a
// call's rate; 25 us is longer than a dip inside one call and shorter than the space between two calls
// of a decode step. A constant, not a setting: a figure the report compares across runs is counted one way.
constexpr PmBurstRule kStepBurstRule{1024, 25, PmDirection::kTx};

// "tx:1024:25" (direction, MB/s, minimum gap in us); nullopt with *error (one sentence) otherwise.
std::optional<PmBurstRule> parseBurstRule(const std::string& text, std::string* error);
std::string burstRuleText(const PmBurstRule& rule);  // "tx:1024:25"

struct PmBurst {
  int64_t start_ns = 0, end_ns = 0;   // from the first busy record's start to the last one's end
  double tx_bytes = 0, rx_bytes = 0;  // the busy records' bytes (the dips merged across are not counted)
};

// The bursts of `records` (one GPU's, in time order) under `rule`. A record of zero length has no rate
// and is never busy. Pure: no clock, no state.
std::vector<PmBurst> pmBursts(const std::vector<MeterRecord>& records, const PmBurstRule& rule);
// Each record's burst under `rule`: its index among the bursts (from 0), or -1 for a record that is
// not busy (a dip merged into a burst is not busy either).
std::vector<int> burstLabels(const std::vector<MeterRecord>& records, const PmBurstRule& rule);

// One step [start, end] of one GPU's records (in time order; those that overlap it), every record
// lasting `interval_us`: its records, its bytes per direction with the edge records prorated (pm.h
// computePm), its bursts under `rule`, and whether the records cover it without a gap (pm.h pmGapNs).
struct PmStepFigures {
  int records = 0;
  double tx_bytes = 0, rx_bytes = 0;
  int bursts = 0;
  bool complete = true;
  std::string why;  // "PM records do not cover the step", "a gap between PM records", ...
};
PmStepFigures pmStepFigures(const std::vector<MeterRecord>& records, int64_t start_ns, int64_t end_ns,
                            int64_t interval_us, const PmBurstRule& rule);

}  // namespace tpscope::detail
