// SPDX-License-Identifier: Apache-2.0
// report.h - `tpscope report RUN_DIR`: the study's tables from a recorded run, markdown or JSON, and plots.
#pragma once

#include <memory>
#include <string>

#include "cli.h"

namespace tpscope::cli {

std::unique_ptr<Command> makeReportCommand(CLI::App& app);

// scripts/plot_report.py: TPSCOPE_PLOT_SCRIPT when set, else beside the binary's build tree
// (build/bin/../../scripts), else the source tree this binary was built from. "" when none exists.
std::string plotScriptPath();

}  // namespace tpscope::cli
