// SPDX-License-Identifier: Apache-2.0
// pm_sampler.cc - PM-sampling threads, the sampler's own traffic at start.
#include "meter/pm_sampler.h"

#include <pthread.h>

#include <chrono>

namespace tpscope::detail {

PmSampler::PmSampler(const MeterOptions& options, std::vector<std::unique_ptr<PmReader>> readers,
                     const std::vector<MeterGpu>& gpus)
    : options_(options), readers_(std::move(readers)), gpus_(gpus) {
  series_.resize(readers_.size());
  scratch_.resize(readers_.size());
  own_bps_.resize(readers_.size());
}

tpsResult_t PmSampler::start(std::string* reason) {
  const int64_t gap_ns = pmGapNs(options_.pm_interval_us);
  for (size_t k = 0; k < readers_.size(); ++k) {
    PmReader* r = readers_[k].get();
    builders_.emplace_back(static_cast<int>(k), ClockMap::measure([r] { return r->sourceNow(); }, monotonicNs), gap_ns);
    std::string why;
    if (!r->start(&why)) {
      for (size_t j = 0; j < k; ++j) readers_[j]->stop();
      *reason = "PM sampling on GPU " + std::to_string(gpus_[k].index) + ": " + why;
      return tpsUnavailable;
    }
  }
  started_ = true;
  for (size_t k = 0; k < readers_.size(); ++k) {
    try {
      threads_.emplace_back([this, k] { loop(k); });
    } catch (const std::system_error& e) {
      *reason = std::string("cannot start a PM-sampling thread: ") + e.what();
      stop();
      return tpsSystemError;
    }
  }
  if (options_.pm_calibrate_ms <= 0) {
    note_ = "the PM sampler's own traffic was not measured (not asked for): PM figures include it";
    return tpsSuccess;
  }
  // The sampler's own traffic: its records and decodes at the chosen interval and decode period,
  // over a quiet interval after the first decode (a gap or busy link leaves it unmeasured).
  std::this_thread::sleep_for(std::chrono::milliseconds(options_.pm_decode_ms + 5));
  const int64_t from = monotonicNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(options_.pm_calibrate_ms));
  const int64_t to = monotonicNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * options_.pm_decode_ms + 5));  // decoded past `to`
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k = 0; k < readers_.size(); ++k) {
    auto r = pmQuietRate(series_[k], from, to);
    const bool quiet = r[0] && r[1] && *r[0] < kPmQuietLimitBps && *r[1] < kPmQuietLimitBps;
    if (quiet) {
      own_bps_[k] = r;
    } else if (note_.empty()) {
      note_ = "GPU " + std::to_string(gpus_[k].index) +
              (r[0] && r[1] ? ": PCIe was busy at the start" : ": PM records did not cover the start") +
              ", so the PM sampler's own traffic was not measured: PM figures include it";
    }
  }
  return tpsSuccess;
}

void PmSampler::decodeOnce(size_t k) {
  PmBatch& b = scratch_[k];
  b.records.clear();
  b.overflow = false;
  b.error.clear();
  readers_[k]->decode(&b);
  std::lock_guard<std::mutex> lock(mu_);
  builders_[k].append(b, &series_[k]);
}

void PmSampler::loop(size_t k) {
  pthread_setname_np(pthread_self(), "tps-pm");
  std::unique_lock<std::mutex> lock(wake_mu_);
  while (!stopping_) {
    wake_cv_.wait_for(lock, std::chrono::milliseconds(options_.pm_decode_ms), [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    decodeOnce(k);
    lock.lock();
  }
}

void PmSampler::stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for (size_t k = 0; k < readers_.size(); ++k) {
    readers_[k]->stop();
    decodeOnce(k);  // what completed before the stop
  }
}

PmSampler::Status PmSampler::status() const {
  Status s;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k = 0; k < series_.size(); ++k) {
    s.records += static_cast<int64_t>(series_[k].samples.size());
    s.dropped += k < builders_.size() ? builders_[k].dropped() : 0;
    s.holes += static_cast<int64_t>(series_[k].holes.size());
    if (series_[k].ended && s.ended.empty())
      s.ended = "GPU " + std::to_string(gpus_[k].index) + ": " + series_[k].holes.back().why;
  }
  return s;
}

}  // namespace tpscope::detail
