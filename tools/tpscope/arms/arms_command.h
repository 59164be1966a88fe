// SPDX-License-Identifier: Apache-2.0
// arms/arms_command.h - `tpscope arms SPEC.toml [--out RUN_DIR] [--quick]`: the experiment, its run folder and report.
#pragma once

#include <memory>

#include "cli.h"

namespace tpscope::cli {

std::unique_ptr<Command> makeArmsCommand(CLI::App& app);

}  // namespace tpscope::cli
