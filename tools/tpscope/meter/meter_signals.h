// SPDX-License-Identifier: Apache-2.0
// meter/meter_signals.h - SIGINT and SIGTERM while `tpscope meter` runs, for each of its modes.
//
// The handlers count the signals, from before the meter starts until the outputs are written, so that
// an interrupt at any moment ends the run cleanly with its summary and --out. A terminal's Ctrl-C
// reaches a wrapped command too (same process group), so a signal is forwarded to it only when it was
// sent to tpscope alone (si_code SI_USER or SI_QUEUE: `kill PID`).
#pragma once

#include <signal.h>
#include <sys/types.h>

namespace tpscope::cli {

// Installs the handlers for its lifetime (no SA_RESTART: waits and sleeps return EINTR) and starts the
// count at zero.
class MeterSignals {
 public:
  MeterSignals();
  ~MeterSignals();
  MeterSignals(const MeterSignals&) = delete;
  MeterSignals& operator=(const MeterSignals&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// How many SIGINT/SIGTERM came since the handlers were installed.
int meterInterrupts();
// The wrapped command, to which a signal sent to tpscope alone is forwarded; 0: none.
void setMeterChild(pid_t pid);

}  // namespace tpscope::cli
