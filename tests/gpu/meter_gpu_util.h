// SPDX-License-Identifier: Apache-2.0
// meter_gpu_util.h - a known-size transfer inside a meter window whose edges fall in idle time.
//
// The GPUs idle for a guard interval, the window opens, the GPUs idle again, the transfer runs and
// is synchronised, the GPUs idle, the window closes, and the GPUs idle once more. Proration is exact
// when the read interval around each edge holds no transfer, so every edge needs idle time of at
// least one read period on both sides: NVLink's period is ~22 ms on H200 (one read of 18 links'
// fields), so the guard is 60 ms, as in benchmarks/meter_accuracy. Without the guard outside the
// window, a transfer just before it lands partly inside: an NVLink read straddling a 2.7 ms peer
// copy sees some links before and some after it, and 1 GiB came out as 1.3-1.5x (docs/METHOD.md,
// "Edges").
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "meter/meter.h"

namespace tpscope::testing {

constexpr int kGuardMs = 60;  // > 2 NVLink read periods on H200 (~22 ms, max ~30 ms measured); 30 PCIe periods

// kGuardMs, or twice the slowest group's p99 read period so far where that is longer (a box whose
// NVLink reads are slower still gets idle edge intervals).
inline int guardMs(const Meter& meter) {
  double p99 = 0;
  for (const MeterCadence& c : meter.cadence()) p99 = std::max(p99, c.period_p99_ms);
  return std::max(kGuardMs, static_cast<int>(2 * p99) + 1);
}

inline MeterWindow meterTransfer(Meter& meter, const std::string& name, const std::function<void()>& transfer) {
  const int guard_ms = guardMs(meter);
  auto idle = [guard_ms] { std::this_thread::sleep_for(std::chrono::milliseconds(guard_ms)); };
  idle();  // whatever ran before (a warm-up copy) stays out of the window's first read interval
  EXPECT_EQ(meter.begin(name), tpsSuccess);
  idle();
  transfer();
  idle();
  EXPECT_EQ(meter.end(name), tpsSuccess);
  idle();  // and whatever runs next stays out of its last
  // Wait for a read after the end on every GPU, then take the window.
  for (int i = 0; i < 1000; ++i) {
    std::vector<MeterWindow> ws = meter.windows();
    if (!ws.empty() && ws.back().complete) return ws.back();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "window " << name << " never completed";
  return meter.windows().back();
}

// Bytes of `counter` on GPU position `gpu` over `payload`; -1 when N/A.
inline double ratio(const MeterWindow& w, int gpu, MeterCounter counter, double payload) {
  const auto& b = w.cells.at(gpu)[static_cast<int>(counter)].bytes;
  return b ? *b / payload : -1;
}

}  // namespace tpscope::testing
