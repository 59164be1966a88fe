// SPDX-License-Identifier: Apache-2.0
// meter/meter_command.h - `tpscope meter`: live PCIe/NVLink rates like `nvidia-smi dmon -s t`, or the bytes
// of a wrapped command and of the windows it marks through the control pipe, or the counters served
// for Prometheus. One file per mode: meter_live.cc, meter_wrapped.cc, meter_serve.cc; the command's
// options, the meter's start and the --out file in meter_command.cc; the text shapes in meter_format.cc;
// the signals every mode heeds in meter_signals.cc.
#pragma once

#include <cstdio>
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
  std::vector<MeterSourceStatus> sources;  // Meter::sourceStatus()
  std::optional<int> exit_code;            // nullopt: the command did not run
  bool interrupted = false;
};
std::string summaryTable(const MeterSummary& s);
std::string summaryCsv(const MeterSummary& s);
nlohmann::json summaryJson(const MeterSummary& s);
// summaryJson(s).dump(2) and a newline, written to `out` one window at a time: the same bytes without a
// document of every window in memory (a command that marks 200,000 windows made one of 5 GB).
void writeSummaryJson(const MeterSummary& s, std::FILE* out);

// ---- the modes, run on a started meter (meter_command.cc starts it) ----------------------------
// The options the modes read.
struct MeterArgs {
  std::string format = "table";      // table, csv, json
  std::string stamp;                 // live: -o T, D or DT
  int64_t delay_ms = 1000;           // live: between rows
  int64_t count = 0;                 // live: rows per GPU (0: until interrupted)
  std::vector<std::string> command;  // wrapped: CMD ARGS
  int64_t quiesce_ms = 0;            // wrapped: idle GPUs required first (0: skip)
  double quiesce_mbps = 100;
};
// Each returns the exit code, and leaves the meter stopped.
int runLive(Meter& meter, const MeterArgs& args);     // meter_live.cc
int runWrapped(Meter& meter, const MeterArgs& args);  // meter_wrapped.cc
int runServing(Meter& meter);                         // meter_serve.cc: until SIGINT/SIGTERM, exit 0

// SIGINT/SIGTERM while a mode runs (meter_command.cc installs the handlers for the whole command): how
// many came, and the wrapped command's pid, to which a signal sent to tpscope alone is forwarded.
int meterInterrupts();
void setMeterChild(pid_t pid);  // 0: none

}  // namespace tpscope::cli
