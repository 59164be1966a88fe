// SPDX-License-Identifier: Apache-2.0
// command.h - any program as a workload: it marks its own phases through the meter's control pipe.
//
// The program runs once per repetition with TPSCOPE_METER_PIPE naming a FIFO; it writes `begin NAME`
// and `end NAME` lines there around each phase (src/meter/control.h has the protocol; `tpscope meter
// -- CMD` speaks the same). The windows are the times tpscope read those lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/llama_server.h"
#include "tpscope/tpscope.h"

namespace tpscope::engine {

struct CommandOptions {
  std::vector<std::string> argv;
  KeyValues env;         // over tpscope's environment (TPSCOPE_METER_PIPE is added)
  std::string log_path;  // its stdout and stderr
  double timeout_s = 3600;
};

struct MarkedWindow {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;  // Meter::now()
};

// Runs the program to its end. tpsSuccess only when it exits 0 and every window it began it also
// ended; otherwise the reason names what went wrong, with the end of its log.
tpsResult_t runMarkedCommand(const CommandOptions& options, std::vector<MarkedWindow>* windows, std::string* reason);

}  // namespace tpscope::engine
