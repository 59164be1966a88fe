// SPDX-License-Identifier: Apache-2.0
// sampler.h - the threads that read the counters, and the series they build.
//
// Threads and what they share:
//   sampler[k]  reads GPU k every period into ring k (SPSC, preallocated); never allocates, locks or
//               prints. One thread per GPU keeps each GPU's cadence independent of the others'
//               call cost (~1.4 ms per H200 read with NVLink fields).
//   dmon        (method dmon/both) calls the blocking ~20 ms throughput function per GPU and
//               direction every dmon_period_ms, into the dmon ring.
//   collector   every 5 ms drains the rings under mu_, unwraps the counters and appends to the
//               series. Allocation happens here, off the sampling path.
// Readers (Meter) see the data through withData(), which drains first, under the same lock.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "meter/ring.h"
#include "meter/source.h"
#include "meter/unwrap.h"
#include "meter/window.h"

namespace tpscope::detail {

class Sampler {
 public:
  Sampler(const MeterOptions& options, SourceSet sources);
  ~Sampler() { stop(); }
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Starts the threads and returns once every GPU has been read (at most 5 s), so that anything
  // marked after start() is bracketed by reads. tpsSystemError when a thread cannot start.
  tpsResult_t start(std::string* reason);
  // Each sampler takes one last read after this call began, then every thread is joined.
  void stop();

  const std::vector<MeterGpu>& gpus() const { return src_.gpus; }
  bool hasCounters() const { return !rings_.empty(); }
  // PIDs on GPU position k; nullopt when the platform cannot say.
  std::optional<std::vector<unsigned>> processes(int k) const {
    return src_.processes ? src_.processes(k) : std::nullopt;
  }

  // Calls f(series, dmon) with the lock held, after moving everything read so far into them.
  template <typename F>
  auto withData(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    drainLocked();
    return f(static_cast<const std::vector<Series>&>(series_), static_cast<const std::vector<MeterDmonSample>&>(dmon_));
  }
  std::vector<MeterCadence> cadence() const;

 private:
  void sample(size_t k);
  void sampleDmon();
  void collect();
  void drainLocked() const;

  MeterOptions options_;
  SourceSet src_;
  std::vector<std::unique_ptr<SpscRing<Reading>>> rings_;
  std::unique_ptr<SpscRing<MeterDmonSample>> dmon_ring_;
  std::vector<std::thread> threads_;  // samplers and dmon
  std::thread collector_;
  std::atomic<bool> stop_sampling_{false}, stop_collecting_{false};
  std::atomic<int> first_reads_{0};

  mutable std::mutex mu_;  // guards the members below; drainLocked() mutates them under it
  mutable std::vector<Series> series_;
  mutable std::vector<MeterDmonSample> dmon_;
  mutable std::vector<std::array<Unwrapper, kMeterCounters>> unwrap_;
  mutable std::vector<std::array<int64_t, kMeterCounters>> last_t_;  // last value time per GPU, counter
  mutable std::vector<int64_t> wrap_gaps_;
};

}  // namespace tpscope::detail
