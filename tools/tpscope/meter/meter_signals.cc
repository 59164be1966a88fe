// SPDX-License-Identifier: Apache-2.0
// meter/meter_signals.cc - the signal handlers of `tpscope meter` (meter_signals.h).
#include "meter/meter_signals.h"

namespace tpscope::cli {

namespace {

volatile sig_atomic_t g_interrupts = 0;
volatile pid_t g_child = 0;

void onSignal(int sig, siginfo_t* info, void*) {
  g_interrupts = g_interrupts + 1;
  if (g_child > 0 && info != nullptr && (info->si_code == SI_USER || info->si_code == SI_QUEUE)) kill(g_child, sig);
}

}  // namespace

MeterSignals::MeterSignals() {
  g_interrupts = 0;
  struct sigaction sa {};
  sa.sa_sigaction = onSignal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

MeterSignals::~MeterSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int meterInterrupts() { return g_interrupts; }
void setMeterChild(pid_t pid) { g_child = pid; }

}  // namespace tpscope::cli
