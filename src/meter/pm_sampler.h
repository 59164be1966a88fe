// SPDX-License-Identifier: Apache-2.0
// pm_sampler.h - the PM-sampling threads: one per GPU, decoding its records every decode period.
//
// start() maps each GPU's clock once, starts every session, then measures the sampler's own traffic
// over MeterOptions::pm_calibrate_ms of quiet (pmQuietRate); a link busier than kPmQuietLimitBps
// meanwhile leaves it unmeasured (windows are then gross, and the note says so). The series are
// guarded by one lock; readers see them through withData().
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "meter/pm.h"
#include "meter/source.h"

namespace tpscope::detail {

// Above this rate (bytes/s, either direction) the start is not quiet enough to measure the sampler.
constexpr double kPmQuietLimitBps = 50e6;

class PmSampler {
 public:
  PmSampler(const MeterOptions& options, std::vector<std::unique_ptr<PmReader>> readers,
            const std::vector<MeterGpu>& gpus);
  ~PmSampler() { stop(); }
  PmSampler(const PmSampler&) = delete;
  PmSampler& operator=(const PmSampler&) = delete;

  tpsResult_t start(std::string* reason);
  // Stops every session and decodes what is left.
  void stop();

  template <typename F>
  auto withData(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    return f(static_cast<const std::vector<PmSeries>&>(series_));
  }
  const std::vector<std::array<std::optional<double>, 2>>& ownBps() const { return own_bps_; }
  const std::string& note() const { return note_; }
  // Records kept and dropped (the session's first), holes, and why PM ended early ("" when it did not).
  struct Status {
    int64_t records = 0, dropped = 0, holes = 0;
    std::string ended;
  };
  Status status() const;

 private:
  void decodeOnce(size_t k);
  void loop(size_t k);

  MeterOptions options_;
  std::vector<std::unique_ptr<PmReader>> readers_;
  std::vector<MeterGpu> gpus_;
  std::vector<PmSeriesBuilder> builders_;
  std::vector<PmBatch> scratch_;  // per GPU, reused by its thread
  std::vector<std::array<std::optional<double>, 2>> own_bps_;
  std::string note_;
  std::vector<std::thread> threads_;
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool stopping_ = false;  // guarded by wake_mu_
  bool started_ = false, stopped_ = false;
  mutable std::mutex mu_;  // guards series_
  std::vector<PmSeries> series_;
};

}  // namespace tpscope::detail
