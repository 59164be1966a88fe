// SPDX-License-Identifier: Apache-2.0
// meter/meter_command.h - `tpscope meter`: live PCIe/NVLink rates like `nvidia-smi dmon -s t`, or the bytes of a
// wrapped command and of the windows it marks through the control pipe.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "meter/meter.h"

namespace tpscope::cli {

std::unique_ptr<Command> makeMeterCommand(CLI::App& app);

// ---- live mode: one row per GPU per interval ---------------------------------------------------
struct LiveLayout {
  bool date = false, time = false;  // -o D / -o T
  bool counters = true;             // rxpci/txpci from the byte counters (else from the dmon method)
  bool nvlink = true;               // nvlrx/nvltx columns
  bool dmon_beside = false;         // --method both: rxdmn/txdmn columns from the dmon method
};
struct LiveRow {
  std::string date, time;  // "20261129", "19:42:13"
  double t_s = 0;          // seconds since the meter started
  int gpu = 0;
  std::optional<double> rxpci, txpci, nvlrx, nvltx, rxdmn, txdmn;  // MB/s
};
// format: "table" (two '#' lines like dmon), "csv" (one line), "json" (nothing: JSONL has no header).
std::string liveHeader(const LiveLayout& layout, const std::string& format);
std::string liveRow(const LiveLayout& layout, const LiveRow& row, const std::string& format);

// ---- wrapped mode: the per-window summary ------------------------------------------------------
struct MeterSummary {
  std::vector<MeterGpu> gpus;
  MeterOptions options;
  std::vector<MeterWindow> windows;
  std::vector<MeterCadence> cadence;
  std::vector<QuiesceRecord> quiesce;
  MeterCalibration calibration;
  std::vector<std::array<std::optional<double>, kMeterCounters>> own_mbps;  // [gpu position]: Meter::ownMBps()
  std::vector<std::string> command;
  Meter::PmStatus pm;            // source pm/both: Meter::pmStatus()
  std::optional<int> exit_code;  // nullopt: the command did not run
  bool interrupted = false;
};
std::string summaryTable(const MeterSummary& s);
std::string summaryCsv(const MeterSummary& s);
nlohmann::json summaryJson(const MeterSummary& s);

}  // namespace tpscope::cli
