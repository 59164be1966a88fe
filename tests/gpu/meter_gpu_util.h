// SPDX-License-Identifier: Apache-2.0
// meter_gpu_util.h - a known-size transfer inside a meter window whose edges fall in idle time.
//
// The window opens, the GPUs idle for a guard interval, the transfer runs and is synchronised, the
// GPUs idle again, the window closes. With guards several sampling periods long the edge intervals
// carry only background traffic (a few MB/s), so proration error is negligible and the window's
// bytes are the transfer's link bytes (docs/METHOD.md, "Edges").
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "tpscope/meter.h"

namespace tpscope::testing {

constexpr int kGuardMs = 30;  // 15 periods at the 2 ms default

inline MeterWindow meterTransfer(Meter& meter, const std::string& name, const std::function<void()>& transfer) {
  EXPECT_EQ(meter.begin(name), tpsSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(kGuardMs));
  transfer();
  std::this_thread::sleep_for(std::chrono::milliseconds(kGuardMs));
  EXPECT_EQ(meter.end(name), tpsSuccess);
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
