// SPDX-License-Identifier: Apache-2.0
// sampler.h - the threads that read cumulative counters, and the series they build (the nvml source's
// engine: sources/nvml_source.cc).
//
// Threads and what they share:
//   sampler[k, group]  one per GPU and counter group (PCIe; NVLink when the GPU has NVLink
//               counters). Each reads its group every period into its own SPSC ring (preallocated);
//               never allocates or prints, and locks only to sleep (so that wake() can end a sleep
//               early). The period adapts (MeterOptions::idle_period_us): the busy period while the
//               link moves more than busy_mbps net of the meter's own reads, the idle period
//               otherwise. Splitting the groups keeps PCIe's cadence independent of NVLink's (one
//               field per link, a read far slower than PCIe's: docs/METHOD.md section 2), which then
//               simply runs back to back.
//   collector   every 5 ms drains the rings under mu_ and merges each GPU's two streams into its
//               series (SeriesBuilder). Allocation happens here, off the sampling path.
// Readers (Meter) see the data through withData(), which drains first, under the same lock. Beside each
// series the collector keeps its reads' midpoints indexed (ReadIndex, withReads()), so that a window's
// own reads are counted by bisection, not by a pass over the series.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "meter/ring.h"
#include "meter/source.h"
#include "meter/unwrap.h"
#include "meter/window.h"

namespace tpscope::detail {

// Merges the reads of one GPU's counter groups into its series, in the order they are collected.
// Each row keeps the values of its own group only; every counter is unwrapped on its own, and
// t_ns[c] stays non-decreasing along the series for every c (a row carries, for a counter it
// lacks, the time of that counter's latest value), which is what the window code relies on.
// Pure bookkeeping, no clocks or threads: unit-tested directly.
class SeriesBuilder {
 public:
  SeriesBuilder() = default;
  // gpu: position of the GPU; bits[c]: counter c's width before unwrapping.
  SeriesBuilder(int gpu, const MeterGpu& info, const std::array<int, kMeterCounters>& bits);
  void append(MeterGroup group, const Reading& r, Series* out);
  // PCIe gaps long enough for a 32-bit counter to wrap unseen at the link's ceiling.
  int64_t wrapGaps() const { return wrap_gaps_; }
  // Reads of `group` that returned no value for a counter this GPU supports, and the latest reason.
  int64_t failedReads(MeterGroup group) const { return failed_[static_cast<int>(group)]; }
  const char* lastError(MeterGroup group) const { return last_error_[static_cast<int>(group)]; }
  // Newest value of every counter, each with its own time; t_before/t_after/group of the newest row.
  const std::optional<MeterSample>& latest() const { return latest_; }
  // The newest row of `group` in which every supported counter of the group has a value.
  const std::optional<MeterSample>& latestRead(MeterGroup group) const { return latest_read_[static_cast<int>(group)]; }

 private:
  int gpu_ = 0;
  MeterGpu info_;
  std::array<int, kMeterCounters> bits_{};
  std::array<Unwrapper, kMeterCounters> unwrap_{};
  std::array<int64_t, kMeterCounters> last_t_{};  // time of each counter's latest value
  int64_t wrap_gaps_ = 0;
  std::array<int64_t, 2> failed_{};
  std::array<const char*, 2> last_error_{};
  std::optional<MeterSample> latest_;
  std::array<std::optional<MeterSample>, 2> latest_read_;
};

class Sampler {
 public:
  // Reads counters[k] for GPU gpus[k], counting every read in `ledger`, whose calibration (once
  // measured) judges a link busy net of the meter's own calls.
  Sampler(const MeterOptions& options, const std::vector<MeterGpu>& gpus,
          std::vector<std::unique_ptr<CounterReader>> counters, CallLedger& ledger);
  ~Sampler() { stop(); }
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Starts the threads and returns once every stream has read once (at most 5 s), so that anything
  // marked after start() is bracketed by reads. tpsSystemError when a thread cannot start.
  tpsResult_t start(std::string* reason);
  // With a period that adapts: every sampler reads at once (a window edge was just marked).
  void wake();
  // Each sampler takes one last read after this call began, then every thread is joined.
  void stop();

  const std::vector<MeterGpu>& gpus() const { return gpus_; }
  // The readers, for a calibration before start().
  std::vector<std::unique_ptr<CounterReader>>& readers() { return counters_; }
  const MeterCalibration& calibration() const { return ledger_.calibration; }

  // Calls f(series) with the lock held, after moving everything read so far into them.
  template <typename F>
  auto withData(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    drainLocked();
    return f(static_cast<const std::vector<Series>&>(series_));
  }
  // Calls f(reads) the same way: reads[k] indexes the reads of series k (ReadIndex).
  template <typename F>
  auto withReads(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    drainLocked();
    return f(static_cast<const std::vector<ReadIndex>&>(reads_));
  }
  std::optional<MeterSample> latest(int gpu) const;
  std::optional<MeterSample> latestRead(int gpu, MeterGroup group) const;
  std::vector<MeterCadence> cadence() const;  // per stream: GPU, then group

 private:
  struct Stream {
    size_t gpu;
    MeterGroup group;
    std::unique_ptr<SpscRing<Reading>> ring;
  };
  void sample(size_t i);
  void collect();
  void drainLocked() const;
  void trimLocked() const;  // MeterOptions::history_s

  // Whether the link moved more than busy_mbps since the previous read, net of the meter's own reads
  // meanwhile (every kind, from the read counters), for the period of the next read.
  bool busySince(const Stream& st, const Reading& prev, const Reading& now,
                 const std::array<int64_t, kMeterReadKinds>& own_reads) const;
  void sleepOrWake(int64_t until_ns, uint64_t* seen);

  MeterOptions options_;
  std::vector<MeterGpu> gpus_;
  std::vector<std::unique_ptr<CounterReader>> counters_;
  CallLedger& ledger_;
  std::unique_ptr<std::atomic<int64_t>[]> edge_reads_;  // [stream]
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  uint64_t wake_seq_ = 0;  // guarded by wake_mu_
  std::vector<Stream> streams_;
  std::vector<std::thread> threads_;  // one per stream
  std::thread collector_;
  std::atomic<bool> stop_sampling_{false}, stop_collecting_{false};
  std::atomic<int> first_reads_{0};

  mutable std::mutex mu_;  // guards the members below; drainLocked() mutates them under it
  mutable std::vector<Series> series_;
  mutable std::vector<ReadIndex> reads_;         // per GPU: series_[k]'s reads, indexed as they are appended
  mutable std::vector<SeriesBuilder> builders_;  // per GPU
};

}  // namespace tpscope::detail
