// SPDX-License-Identifier: Apache-2.0
// bench/allreduce.h - `tpscope bench allreduce` (docs/cli.md describes flags, columns and formulas).
#pragma once

#include <memory>

#include "cli.h"

namespace tpscope::cli {

std::unique_ptr<Command> makeBenchAllReduceCommand(CLI::App& app);
// The hidden `tpscope bench allreduce-rank`: one rank of `bench allreduce --procs` (bench/procs.h).
std::unique_ptr<Command> makeBenchAllReduceRankCommand(CLI::App& app);

}  // namespace tpscope::cli
