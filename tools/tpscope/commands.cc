// SPDX-License-Identifier: Apache-2.0
// commands.cc - the list of subcommands, in the order `tpscope --help` shows them.
#include "arms/arms_command.h"
#include "bench/allreduce.h"
#include "cli.h"
#include "meter/meter_command.h"
#include "report/report_command.h"
#include "topo/topo_command.h"
#include "tp/tp_command.h"

namespace tpscope::cli {

std::vector<std::unique_ptr<Command>> registerCommands(CLI::App& app) {
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(makeTopoCommand(app));
  commands.push_back(makeMeterCommand(app));
  commands.push_back(makeBenchAllReduceCommand(app));
  commands.push_back(makeBenchAllReduceRankCommand(app));
  commands.push_back(makeTpCommand(app));
  commands.push_back(makeArmsCommand(app));
  commands.push_back(makeReportCommand(app));
  return commands;
}

}  // namespace tpscope::cli
