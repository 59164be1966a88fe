// SPDX-License-Identifier: Apache-2.0
// sources/dmon_source.cc - the dmon source: what `nvidia-smi dmon -s t` prints, the PCIe throughput NVML
// measures over ~20 ms per call (nvmlDeviceGetPcieThroughput), one GPU and direction after the other
// every MeterOptions::dmon_period_ms, on a thread of its own (each call blocks). A window's figure is
// the mean of the readings whose midpoint lies in it, as read: it is there to be compared, so it is not
// made net. Its calls cross the link like NVML's reads: the nvml source's calibration measures one,
// and the other sources' figures are net of them.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "meter/window.h"

namespace tpscope::detail {

namespace {

class DmonSource : public Source {
 public:
  DmonSource(const MeterOptions& options, std::vector<std::unique_ptr<DmonReader>> readers, CallLedger& ledger)
      : options_(options), readers_(std::move(readers)), ledger_(ledger) {}
  ~DmonSource() override { stop(); }

  const char* name() const override { return "dmon"; }

  tpsResult_t start(std::string* reason) override {
    try {
      thread_ = std::thread([this] { loop(); });
    } catch (const std::system_error& e) {
      *reason = std::string("cannot start the dmon thread: ") + e.what();
      return tpsSystemError;
    }
    return tpsSuccess;
  }
  void stop() override {
    stopping_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

  bool measures(size_t k, MeterCounter c) const override { return k < readers_.size() && isPcie(c); }
  bool net() const override { return false; }
  // readings_ are in time order (one thread makes them, one call after the other), so a window's are
  // found by bisection: it costs the readings around it, not a pass over them all.
  SourceFigure figure(size_t k, MeterCounter c, int64_t start, int64_t end, double) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return dmonFigure(dmonReadingsIn(readings_, start, end), static_cast<int>(k), c);
  }
  std::optional<OwnBytes> own(size_t k, MeterCounter c, int64_t start, int64_t end) const override {
    const MeterCalibration& cal = ledger_.calibration;
    if (!cal.calibrated || k >= cal.gpus.size()) return std::nullopt;
    std::array<int64_t, kMeterReadKinds> calls{};
    std::lock_guard<std::mutex> lock(mu_);
    calls[static_cast<int>(MeterReadKind::kDmon)] =
        dmonCalls(dmonReadingsIn(readings_, start, end), static_cast<int>(k));
    return ownOfReads(cal.gpus[k], static_cast<int>(c), calls);
  }
  bool readAfter(int64_t) const override { return true; }  // a reading is a rate: no edge to bracket
  bool canMiss() const override { return false; }
  std::vector<MeterDmonSample> readings() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return readings_;
  }

 private:
  void loop() {
    pthread_setname_np(pthread_self(), "tps-meter-dmon");
    int64_t next = monotonicNs();
    while (!stopping_.load(std::memory_order_acquire)) {
      for (size_t k = 0; k < readers_.size(); ++k) {
        for (MeterCounter dir : {MeterCounter::kPcieRx, MeterCounter::kPcieTx}) {
          MeterDmonSample d;
          readers_[k]->read(dir, &d);
          ledger_.count(k, MeterReadKind::kDmon);
          d.gpu = static_cast<int>(k);
          std::lock_guard<std::mutex> lock(mu_);
          readings_.push_back(d);
          trimLocked();
        }
      }
      next = std::max(next + options_.dmon_period_ms * 1000000, monotonicNs());
      // Sleep in short steps so that stop() does not wait a whole dmon period.
      while (!stopping_.load(std::memory_order_acquire) && monotonicNs() < next)
        std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<int64_t>(next - monotonicNs(), 20000000)));
    }
  }
  // MeterOptions::history_s: drops what is older than it before the newest reading, once the oldest is
  // twice that old (each reading is erased once, in batches).
  void trimLocked() {
    if (options_.history_s <= 0 || readings_.size() < 2) return;
    const int64_t keep_ns = static_cast<int64_t>(options_.history_s * 1e9);
    if (readings_.back().t_after_ns - readings_.front().t_after_ns < 2 * keep_ns) return;
    const int64_t cut = readings_.back().t_after_ns - keep_ns;
    readings_.erase(readings_.begin(), std::find_if(readings_.begin(), readings_.end(),
                                                    [cut](const MeterDmonSample& d) { return d.t_after_ns >= cut; }));
  }

  MeterOptions options_;
  std::vector<std::unique_ptr<DmonReader>> readers_;
  CallLedger& ledger_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;  // guards readings_
  std::vector<MeterDmonSample> readings_;
};

tpsResult_t openDmon(SourceContext& ctx, std::unique_ptr<Source>* out, std::string* reason) {
  std::vector<std::unique_ptr<DmonReader>> readers;
  for (size_t k = 0; k < ctx.gpus.size(); ++k) {
    std::unique_ptr<DmonReader> r = ctx.platform.dmonReader(k, reason);
    if (!r) return tpsUnavailable;
    readers.push_back(std::move(r));
    for (MeterCounter c : {MeterCounter::kPcieTx, MeterCounter::kPcieRx})
      ctx.gpus[k].supported[static_cast<int>(c)] = true;
  }
  *out = std::make_unique<DmonSource>(ctx.options, std::move(readers), ctx.ledger);
  return tpsSuccess;
}

}  // namespace

extern const SourceEntry kDmonSource{
    "dmon", "the ~20 ms PCIe throughput snapshot nvidia-smi dmon -s t prints, every --dmon-period ms", openDmon};

}  // namespace tpscope::detail
