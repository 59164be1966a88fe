// SPDX-License-Identifier: Apache-2.0
// report/report_command.h - `tpscope report RUN_DIR`: the study's tables from a recorded run, markdown or JSON, and
// plots.
#pragma once

#include <memory>
#include <string>

#include "cli.h"
#include "experiment/report.h"

namespace tpscope::cli {

std::unique_ptr<Command> makeReportCommand(CLI::App& app);

// Draws traffic.png and arms.png into `plot_dir` (created), with the report.json they are drawn from and
// RUN_DIR/samples.jsonl, by scripts/plot_report.py. Without the script or a python3 with matplotlib it
// says why on stderr and returns kExitOk (the tables are what counts); a failing script: one error line,
// kExitRuntime. `tpscope report --plots` and `tpscope arms` share it.
int writePlots(const experiment::Report& report, const std::string& run_dir, const std::string& plot_dir);

// scripts/plot_report.py: TPSCOPE_PLOT_SCRIPT when set, else beside the binary's build tree
// (build/bin/../../scripts), else the source tree this binary was built from. "" when none exists.
std::string plotScriptPath();

}  // namespace tpscope::cli
