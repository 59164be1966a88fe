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

namespace tpscope {

nlohmann::json toJson(const MeterGpu& g);
nlohmann::json toJson(const MeterOptions& o);
// "type": "sample"; the counters of the sample's group that the GPU supports (null: the read failed).
nlohmann::json toJson(const MeterSample& s, const std::vector<MeterGpu>& gpus);
nlohmann::json toJson(const MeterDmonSample& d, const std::vector<MeterGpu>& gpus);  // "type": "dmon"
nlohmann::json toJson(const MeterPmSample& p, const std::vector<MeterGpu>& gpus);    // "type": "pm_sample"
// "type": "window"; `counters` selects which cells appear (the others were not asked for).
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

// The PM sampler's lines under a report ('#' comments): its interval, its own traffic per GPU as
// subtracted (or why not), records kept and dropped, and whether the session ended early.
std::string pmLines(const MeterOptions& o, const Meter::PmStatus& st, const std::vector<MeterGpu>& gpus);

// The counters a set of options asks for, in report order.
std::vector<MeterCounter> reportedCounters(const MeterOptions& o);

// CSV: a header line and one line per sample / per window cell. A sample line leaves the other
// group's counter columns empty.
std::string samplesCsvHeader();
std::string toCsv(const MeterSample& s, const std::vector<MeterGpu>& gpus);
std::string windowsCsvHeader();
std::string toCsv(const MeterWindow& w, const std::vector<MeterGpu>& gpus, const std::vector<MeterCounter>& counters);

}  // namespace tpscope
