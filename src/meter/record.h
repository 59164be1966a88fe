// SPDX-License-Identifier: Apache-2.0
// record.h - the meter's data as JSON (one object per sample, window, ...) and CSV rows.
//
// One place that turns meter results into records, shared by `tpscope meter --out`, the accuracy
// benchmark and later the experiment runner. Keys are snake_case with the unit in the key; N/A is
// null in JSON and "N/A" in CSV, never 0.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meter/meter.h"
#include "meter/pm_bursts.h"

namespace tpscope {

nlohmann::json toJson(const MeterGpu& g);
nlohmann::json toJson(const MeterOptions& o);
// "type": "sample"; the counters of the sample's group that the GPU supports (null: the read failed).
nlohmann::json toJson(const MeterSample& s, const std::vector<MeterGpu>& gpus);
nlohmann::json toJson(const MeterDmonSample& d, const std::vector<MeterGpu>& gpus);  // "type": "dmon"
nlohmann::json toJson(const MeterRecord& p, const std::vector<MeterGpu>& gpus);      // "type": "pm_sample"
// "type": "window"; `counters` selects which cells appear (the others were not asked for). A cell carries
// the first source's figures and, keyed by source, the others': "pm_bytes", "pm_ratio", "dmon_mbps" ...
// (dmon_mbps and dmon_samples always, as the first records did); "sources" gives each source's verdict
// where there is more than one or one has something to say.
nlohmann::json toJson(const MeterWindow& w, const std::vector<MeterGpu>& gpus,
                      const std::vector<MeterCounter>& counters);
nlohmann::json toJson(const QuiesceRecord& q, const std::vector<MeterGpu>& gpus);  // "type": "quiesce"
nlohmann::json toJson(const MeterCadence& c, const std::vector<MeterGpu>& gpus);   // "type": "cadence"
// Bytes per read by GPU and kind of read, with the round spread and the quiet background.
nlohmann::json toJson(const MeterCalibration& c, const std::vector<MeterGpu>& gpus);
MeterCalibration calibrationFromJson(const nlohmann::json& j, const std::vector<MeterGpu>& gpus);
// The lines every report prints under its table, one per GPU ('#' comments): what the meter's own
// reads added, in MB/s over the run (own_mbps[gpu position], Meter::ownMBps()), and the calibrated
// cost per read they were subtracted at; or why nothing was subtracted.
std::string ownTrafficLines(const MeterCalibration& c,
                            const std::vector<std::array<std::optional<double>, kMeterCounters>>& own_mbps,
                            const std::vector<MeterGpu>& gpus);

// The sources' lines under a report ('#' comments): how each sampled, its records kept and dropped, its
// own traffic per GPU as subtracted (or why not), and whether it ended early.
std::string sourceLines(const std::vector<MeterSourceStatus>& status, const std::vector<MeterGpu>& gpus);

// `tpscope meter --timeline`: one object per interval record per window it touches ("type": "timeline"),
// GPU by GPU: the window, the record's times (also relative to the window's start, us), its bytes per
// direction, and "burst": the index of the burst it belongs to in its window and GPU under `rule`
// (pm_bursts.h), null where it is in none. The 'command' window only when no other was marked. First
// a "timeline_rule" object that says the rule.
std::vector<nlohmann::json> timelineJson(const std::vector<MeterWindow>& windows,
                                         const std::vector<MeterRecord>& records, const std::vector<MeterGpu>& gpus,
                                         const detail::PmBurstRule& rule);

// The counters a set of options asks for, in report order.
std::vector<MeterCounter> reportedCounters(const MeterOptions& o);

// CSV: a header line and one line per sample / per window cell. A sample line leaves the other
// group's counter columns empty.
std::string samplesCsvHeader();
std::string toCsv(const MeterSample& s, const std::vector<MeterGpu>& gpus);
std::string windowsCsvHeader();
std::string toCsv(const MeterWindow& w, const std::vector<MeterGpu>& gpus, const std::vector<MeterCounter>& counters);

}  // namespace tpscope
