// SPDX-License-Identifier: Apache-2.0
// meter/meter_live.cc - `tpscope meter` without a command: one row per GPU every -d ms, the rates between
// two reads of the byte counters (net of the meter's own reads), or the dmon method's latest readings.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "meter/meter_command.h"
#include "meter/meter_signals.h"

namespace tpscope::cli {

namespace {

std::string clockText(const char* fmt_str) {
  time_t now = time(nullptr);
  tm local{};
  localtime_r(&now, &local);
  char buf[32];
  strftime(buf, sizeof(buf), fmt_str, &local);
  return buf;
}

bool hasEveryCounter(const MeterSample& s, const MeterGpu& g) {
  for (int c = 0; c < kMeterCounters; ++c)
    if (g.supported[c] && !s.bytes[c]) return false;
  return true;
}

// MB/s of counter c between two Meter::latest() results. Each counter has its own time (PCIe and
// NVLink are read at different cadences); no newer value of c since `a` (a row shorter than
// NVLink's read period) is N/A, and the next row spans from a's value.
// Net of the meter's own traffic in between where it is measured (Meter::ownBytes).
std::optional<double> rate(const Meter& m, int gpu, const MeterSample& a, const MeterSample& b, MeterCounter c) {
  const int k = static_cast<int>(c);
  if (!a.bytes[k] || !b.bytes[k] || b.t_ns[k] <= a.t_ns[k]) return std::nullopt;
  const double own = m.ownBytes(gpu, c, a.t_ns[k], b.t_ns[k]).value_or(0);
  return (double(*b.bytes[k] - *a.bytes[k]) - own) / ((b.t_ns[k] - a.t_ns[k]) * 1e-9) / 1e6;
}

}  // namespace

int runLive(Meter& meter, const MeterArgs& args) {
  LiveLayout layout;
  layout.date = args.stamp.find_first_of("Dd") != std::string::npos;
  layout.time = args.stamp.find_first_of("Tt") != std::string::npos;
  const MeterOptions& o = meter.options();
  layout.counters = o.runs("nvml");
  layout.nvlink = o.nvlink;
  layout.dmon_beside = layout.counters && o.runs("dmon");
  const size_t n = meter.gpus().size();
  std::fputs(liveHeader(layout, args.format).c_str(), stdout);
  std::fflush(stdout);
  std::vector<std::optional<MeterSample>> prev(n);
  // The first row needs a baseline value of every counter of every GPU (the first NVML reads can
  // take a while, NVLink's most).
  for (int i = 0; i < 2000 && layout.counters && meterInterrupts() == 0; ++i) {
    bool all = true;
    for (size_t k = 0; k < n; ++k) {
      prev[k] = meter.latest(static_cast<int>(k));
      all = all && prev[k] && hasEveryCounter(*prev[k], meter.gpus()[k]);
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int64_t t0 = Meter::now();
  int64_t next = t0;
  for (int row = 0; args.count == 0 || row < args.count; ++row) {
    for (size_t k = 0; k < n; ++k)
      if (!prev[k]) prev[k] = meter.latest(static_cast<int>(k));
    next += args.delay_ms * 1000000;
    while (meterInterrupts() == 0 && Meter::now() < next)
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::min<int64_t>(20, (next - Meter::now()) / 1000000 + 1)));
    if (meterInterrupts()) break;
    for (size_t k = 0; k < n; ++k) {
      LiveRow lr;
      lr.gpu = meter.gpus()[k].index;
      lr.t_s = (Meter::now() - t0) * 1e-9;
      lr.date = clockText("%Y%m%d");
      lr.time = clockText("%H:%M:%S");
      std::optional<MeterSample> cur = meter.latest(static_cast<int>(k));
      if (layout.counters && prev[k] && cur) {
        lr.rxpci = rate(meter, static_cast<int>(k), *prev[k], *cur, MeterCounter::kPcieRx);
        lr.txpci = rate(meter, static_cast<int>(k), *prev[k], *cur, MeterCounter::kPcieTx);
        lr.nvlrx = rate(meter, static_cast<int>(k), *prev[k], *cur, MeterCounter::kNvlinkRx);
        lr.nvltx = rate(meter, static_cast<int>(k), *prev[k], *cur, MeterCounter::kNvlinkTx);
      }
      if (cur) prev[k] = cur;
      if (o.runs("dmon")) {
        auto rx = meter.latestDmon(static_cast<int>(k), MeterCounter::kPcieRx);
        auto tx = meter.latestDmon(static_cast<int>(k), MeterCounter::kPcieTx);
        std::optional<double> rxd = rx ? rx->mbps : std::nullopt, txd = tx ? tx->mbps : std::nullopt;
        if (layout.counters) {
          lr.rxdmn = rxd;
          lr.txdmn = txd;
        } else {
          lr.rxpci = rxd;
          lr.txpci = txd;
        }
      }
      std::fputs(liveRow(layout, lr, args.format).c_str(), stdout);
    }
    std::fflush(stdout);
  }
  meter.stop();
  return kExitOk;
}

}  // namespace tpscope::cli
